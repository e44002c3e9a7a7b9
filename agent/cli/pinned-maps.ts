/**
 * Opens kpr's pinned maps for the CLI, with errors that say what to do:
 * nothing pinned (agent never ran, or another --bpffs), or no permission.
 */
import { statSync } from 'node:fs';
import { BpfMap, KprBpfError } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';

export class CliError extends Error {}

const NEEDS_ROOT = 'reading BPF maps needs root (CAP_BPF and CAP_SYS_ADMIN)';

/** Turns EACCES/EPERM on a pin (or its directory) into the error users need. */
export function permissionError(pin: string, code: string | undefined): CliError | undefined {
  return code === 'EACCES' || code === 'EPERM' ? new CliError(`cannot open ${pin}: ${code}; ${NEEDS_ROOT}`) : undefined;
}

export function openPinnedMap(bpffsDir: string, mapName: string): BpfMap {
  const pin = mapPinPath(bpffsDir, mapName);
  try {
    statSync(pin);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw permissionError(pin, code) ?? new CliError(`no pinned map at ${pin}: is the kpr agent running on this node with --bpffs ${bpffsDir}?`);
  }
  try {
    return BpfMap.openPinned(pin);
  } catch (err) {
    throw (err instanceof KprBpfError && permissionError(pin, err.code)) || err;
  }
}
