/**
 * Opens kpr's pinned maps for the CLI, with errors that say what to do:
 * nothing pinned (agent never ran, or another --bpffs), or no permission.
 */
import { existsSync } from 'node:fs';
import { BpfMap, KprBpfError } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';

export class CliError extends Error {}

export function openPinnedMap(bpffsDir: string, mapName: string): BpfMap {
  const pin = mapPinPath(bpffsDir, mapName);
  if (!existsSync(pin)) {
    throw new CliError(`no pinned map at ${pin}: is the kpr agent running on this node with --bpffs ${bpffsDir}?`);
  }
  try {
    return BpfMap.openPinned(pin);
  } catch (err) {
    if (err instanceof KprBpfError && (err.code === 'EPERM' || err.code === 'EACCES')) {
      throw new CliError(`cannot open ${pin}: ${err.code}; reading BPF maps needs root (CAP_BPF and CAP_SYS_ADMIN)`);
    }
    throw err;
  }
}
