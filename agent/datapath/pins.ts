import fs from 'node:fs';
import path from 'node:path';
import { MAP_BY_NAME, RINGS } from '../maps/registry.js';

/**
 * Where kpr pins things under its bpffs directory. One place, shared by agent and CLI.
 *
 * A map's pin carries its layout version (agent/maps/registry.ts): version
 * 1 is the bare map name (what every release before versioned pins left:
 * `maps/kpr_ct`), a later version adds `@v<N>` (`maps/kpr_ct@v2`; bpffs
 * refuses '.' in names). Pins of two versions of one map can then sit side
 * by side while an agent migrates from one to the other, and an agent
 * tells a layout it does not know (a newer release's) from its own by name.
 */
export function mapPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'maps');
}

/**
 * The ring buffers' pins: not in maps/, whose every pin versions before
 * them read as a map with entries (their `kpr map list`, `kpr status` and
 * map metrics would fail on a ring after a rollback). A ring carries no
 * state worth keeping: a migration leaves it where it is, old and new
 * programs writing to it alike.
 */
export function ringPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'rings');
}

const RING_NAMES: ReadonlySet<string> = new Set(Object.values(RINGS).map((r) => r.name));

/** Whether `name` is a ring buffer's (pinned in rings/, never migrated). */
export function isRing(name: string): boolean {
  return RING_NAMES.has(name);
}

/**
 * The new map set of a live migration, pinned here while it is filled and
 * the programs are swapped to it, then moved into maps/ (agent/datapath/migration.ts).
 */
export function mapStagingDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'staging');
}

/** A map's pin file name at a layout version. */
export function mapPinName(mapName: string, version: number): string {
  return version === 1 ? mapName : `${mapName}@v${version}`;
}

/** The map name and layout version a pin file name stands for; null for anything else. */
export function parseMapPinName(file: string): { name: string; version: number } | null {
  const m = /^([A-Za-z0-9_]+)(?:@v([1-9][0-9]{0,5}))?$/.exec(file);
  if (!m) return null;
  const version = m[2] === undefined ? 1 : Number(m[2]);
  // "@v1" is not a name any release pins: version 1 is the bare name.
  if (m[2] !== undefined && version === 1) return null;
  return { name: m[1]!, version };
}

/** The pin of map `mapName`: maps/ at this release's layout version (a name outside the registry: the bare name), rings/NAME for a ring buffer. */
export function mapPinPath(bpffsDir: string, mapName: string): string {
  if (isRing(mapName)) return path.join(ringPinDir(bpffsDir), mapName);
  return path.join(mapPinDir(bpffsDir), mapPinName(mapName, MAP_BY_NAME.get(mapName)?.version ?? 1));
}

/** Where the objects pin their maps, as the agent does (BpfObject.open's pinPaths): every registry map and ring; others (the *_prev placeholders) not pinned. */
export function objectPins(bpffsDir: string): { pinPaths: Record<string, string> } {
  const pinPaths = mapPinPathsIn(mapPinDir(bpffsDir));
  for (const name of RING_NAMES) pinPaths[name] = mapPinPath(bpffsDir, name);
  return { pinPaths };
}

/** The keyed maps' pin paths at this release's layout versions in any directory (a staging set, a test's). */
export function mapPinPathsIn(dir: string): Record<string, string> {
  return Object.fromEntries([...MAP_BY_NAME.values()].map((m) => [m.name, path.join(dir, mapPinName(m.name, m.version))]));
}

/** The map pins under maps/, one per map name: this release's version when pinned, else the newest pinned; sorted by name. */
export function pinnedMapFiles(bpffsDir: string): Array<{ name: string; version: number; path: string }> {
  let files: string[];
  try {
    files = fs.readdirSync(mapPinDir(bpffsDir));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const best = new Map<string, { name: string; version: number; path: string }>();
  for (const file of files) {
    const p = parseMapPinName(file);
    if (!p) continue;
    const have = best.get(p.name);
    const current = MAP_BY_NAME.get(p.name)?.version;
    if (!have || (have.version !== current && (p.version === current || p.version > have.version)))
      best.set(p.name, { ...p, path: path.join(mapPinDir(bpffsDir), file) });
  }
  return [...best.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
}

export function linkPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'links');
}

export function linkPinPath(bpffsDir: string, programName: string): string {
  return path.join(linkPinDir(bpffsDir), programName);
}

/** The tcx links of the tc programs, one per interface (tcx mode only; clsact filters are not pinned). */
export function tcLinkPinDir(bpffsDir: string): string {
  return path.join(linkPinDir(bpffsDir), 'tc');
}
