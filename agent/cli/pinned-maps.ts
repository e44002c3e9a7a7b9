/**
 * Opens kpr's pinned maps for the CLI, with errors that say what to do:
 * nothing pinned (agent never ran, or another --bpffs), or no permission.
 */
import { statSync } from 'node:fs';
import { BpfMap, KprBpfError } from '../../native/index.js';
import { MAP_BY_NAME } from '../maps/registry.js';
import { mapPinPath, pinnedMapFiles } from '../datapath/pins.js';
import { CliError } from './errors.js';
import { foreignMapError, layoutMismatch, type LayoutMismatch } from './map-layout.js';

/** The CLI's errors, where most commands import them from. */
export { CliError, UsageError } from './errors.js';

const NEEDS_ROOT = 'reading BPF maps needs root (CAP_BPF and CAP_SYS_ADMIN)';

/** Turns EACCES/EPERM on a pin (or its directory) into the error users need. */
export function permissionError(pin: string, code: string | undefined): CliError | undefined {
  return code === 'EACCES' || code === 'EPERM' ? new CliError(`cannot open ${pin}: ${code}; ${NEEDS_ROOT}`) : undefined;
}

/**
 * Opens map `mapName` at this CLI's layout version. With `anyVersion` a pin
 * of another version is opened too (its version is returned: the caller
 * converts what it reads); without it such a pin is an error that says so.
 * A map whose type, key or value size is not kpr's (a foreign map pinned
 * under kpr's name) is an error naming both layouts, unless `foreign:
 * 'report'` asks for it to be returned (`foreign`), as `kpr map list` does.
 */
export function openPinnedMap(bpffsDir: string, mapName: string): BpfMap;
export function openPinnedMap(
  bpffsDir: string,
  mapName: string,
  opts: { anyVersion: true; foreign?: 'error' | 'report' },
): { map: BpfMap; version: number; foreign?: LayoutMismatch };
export function openPinnedMap(
  bpffsDir: string,
  mapName: string,
  opts?: { anyVersion: true; foreign?: 'error' | 'report' },
): BpfMap | { map: BpfMap; version: number; foreign?: LayoutMismatch } {
  const current = MAP_BY_NAME.get(mapName)?.version ?? 1;
  let pin = mapPinPath(bpffsDir, mapName);
  let version = current;
  const other = safeExists(pin) ? undefined : otherVersion(bpffsDir, mapName, current);
  if (other) {
    if (!opts?.anyVersion)
      throw new CliError(
        `${mapName} is pinned at layout v${other.version} (${other.path}), this kpr reads v${current}: the agent on this node is another release (kpr map dump ${mapName} converts it)`,
      );
    pin = other.path;
    version = other.version;
  }
  const map = openPin(bpffsDir, pin);
  const foreign = layoutMismatch(mapName, map, version);
  if (foreign && opts?.foreign !== 'report') {
    map.close();
    throw foreignMapError(mapName, pin, foreign);
  }
  return opts?.anyVersion ? { map, version, ...(foreign ? { foreign } : {}) } : map;
}

/** A pin of map `name` at another version than `current` (an unreadable directory: none; opening says why). */
function otherVersion(bpffsDir: string, name: string, current: number): { version: number; path: string } | undefined {
  try {
    return pinnedMapFiles(bpffsDir).find((p) => p.name === name && p.version !== current);
  } catch {
    return undefined;
  }
}

function safeExists(pin: string): boolean {
  try {
    statSync(pin);
    return true;
  } catch {
    return false;
  }
}

function openPin(bpffsDir: string, pin: string): BpfMap {
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
