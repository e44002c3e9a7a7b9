/**
 * What a starting agent does with the map pins it finds (pure: the pins and
 * what the programs attached now use come in as data; pin-scan.ts reads them).
 *
 *  - refuse: a pin of a layout version newer than this release knows (a
 *    downgrade). Nothing is touched; the agent stops with the maps, versions
 *    and its own version named, and the datapath keeps serving as it is.
 *  - adopt: every map is pinned at this release's layout and configured
 *    size (or not pinned at all): libbpf reuses the pins, contents and all,
 *    as on any restart. Leftovers (other versions of a map that nothing
 *    uses, a staging directory of a migration that never swapped) go.
 *  - migrate: some map is at an older layout, another size, or not kpr's:
 *    a complete new set is built in the staging directory (reusing maps
 *    staged by an interrupted migration when they fit) and filled from the
 *    old one (agent/datapath/migration.ts). The whole set, not only the maps
 *    that changed: the previous programs keep serving on the complete old
 *    set, whose ids (backend, frontend) refer to each other, until the new
 *    programs replace them on the complete new one.
 *
 * Which pin of a map is the old set's: the one the programs attached
 * through kpr's cgroup links use (a pin of another version beside it is a
 * stale leftover, say of a rollback that recreated its maps), else the
 * newest version pinned.
 */

/** What the kernel says of a pinned map (null: the pin is not a readable map, `error` says why). */
export interface PinnedMapInfo {
  id: number;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
}

export type PinDir = 'maps' | 'staging';

export interface FoundPin {
  /** File name in its directory. */
  file: string;
  dir: PinDir;
  /** Map name and layout version, from the file name. */
  name: string;
  version: number;
  info: PinnedMapInfo | null;
  error?: string;
}

/** A map this release defines, as the loaded objects will create it. */
export interface WantedMap {
  name: string;
  version: number;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  /** Key and value sizes of each older layout version this release reads. */
  older: ReadonlyMap<number, { keySize: number; valueSize: number }>;
}

export type MigrationReason = 'layout' | 'size' | 'foreign';

/** The old set's map a new map is filled from. */
export interface MigrationSource {
  file: string;
  dir: PinDir;
  version: number;
  id: number;
}

export interface MapMigration {
  name: string;
  /** Why the set migrates because of this map (absent: it moves with the set). */
  reason?: MigrationReason;
  /** For the log: "layout v1 -> v2", "262144 -> 131072 entries", "value_size 4 != 20". */
  detail?: string;
  /** Undefined: the new map starts empty (nothing pinned, or not kpr's map). */
  source?: MigrationSource;
  /** A staged map of an interrupted migration that fits: reused (it may already be in use). */
  reuseStaged: boolean;
}

export interface NewerPin {
  map: string;
  file: string;
  dir: PinDir;
  version: number;
  /** This release's layout version of the map. */
  known: number;
}

export type PinPlan =
  | { mode: 'refuse'; newer: NewerPin[] }
  | { mode: 'adopt'; remove: Array<{ dir: PinDir; file: string }> }
  | { mode: 'migrate'; maps: MapMigration[]; remove: Array<{ dir: PinDir; file: string }> };

/** Whether a pin's shape is the layout of its version (another map pinned at kpr's name is not). */
function shapeProblem(pin: FoundPin, want: WantedMap): string | undefined {
  if (!pin.info) return pin.error ?? 'not a map';
  const sizes = pin.version === want.version ? { keySize: want.keySize, valueSize: want.valueSize } : want.older.get(pin.version);
  if (!sizes) return `layout v${pin.version} is not one this release reads`;
  const diffs: string[] = [];
  if (pin.info.type !== want.type) diffs.push(`type ${pin.info.type} != ${want.type}`);
  if (pin.info.keySize !== sizes.keySize) diffs.push(`key_size ${pin.info.keySize} != ${sizes.keySize}`);
  if (pin.info.valueSize !== sizes.valueSize) diffs.push(`value_size ${pin.info.valueSize} != ${sizes.valueSize}`);
  if (pin.version === want.version && pin.info.flags !== want.flags) diffs.push(`map_flags ${pin.info.flags} != ${want.flags}`);
  return diffs.length ? diffs.join(', ') : undefined;
}

/** A staged or pinned map exactly as this release would create it. */
function fits(pin: FoundPin, want: WantedMap): boolean {
  return pin.version === want.version && shapeProblem(pin, want) === undefined && pin.info!.maxEntries === want.maxEntries;
}

export function planPins(found: readonly FoundPin[], wanted: readonly WantedMap[], liveMapIds: ReadonlySet<number>): PinPlan {
  const byName = new Map(wanted.map((w) => [w.name, w]));
  const ours = found.filter((p) => byName.has(p.name));

  const newer: NewerPin[] = ours
    .filter((p) => p.version > byName.get(p.name)!.version)
    .map((p) => ({ map: p.name, file: p.file, dir: p.dir, version: p.version, known: byName.get(p.name)!.version }));
  if (newer.length) return { mode: 'refuse', newer };

  const isLive = (p: FoundPin) => p.info !== null && liveMapIds.has(p.info.id);
  const remove: Array<{ dir: PinDir; file: string }> = [];
  const maps: MapMigration[] = [];
  let migrate = ours.some((p) => p.dir === 'staging' && isLive(p));
  for (const want of wanted) {
    const pinned = ours.filter((p) => p.name === want.name && p.dir === 'maps');
    const old = pinned.find(isLive) ?? [...pinned].sort((a, b) => b.version - a.version)[0];
    for (const p of pinned) if (p !== old) remove.push({ dir: 'maps', file: p.file });
    const m: MapMigration = { name: want.name, reuseStaged: false };
    if (old) {
      const problem = shapeProblem(old, want);
      if (problem !== undefined) {
        Object.assign(m, { reason: 'foreign', detail: `${old.file}: ${problem}` });
      } else {
        m.source = { file: old.file, dir: 'maps', version: old.version, id: old.info!.id };
        if (old.version !== want.version) Object.assign(m, { reason: 'layout', detail: `layout v${old.version} -> v${want.version}` });
        else if (old.info!.maxEntries !== want.maxEntries)
          Object.assign(m, { reason: 'size', detail: `${old.info!.maxEntries} -> ${want.maxEntries} entries` });
      }
    }
    if (m.reason) migrate = true;
    maps.push(m);
  }

  const staged = ours.filter((p) => p.dir === 'staging');
  if (!migrate) {
    for (const p of staged) remove.push({ dir: 'staging', file: p.file });
    return { mode: 'adopt', remove };
  }
  for (const m of maps) {
    const want = byName.get(m.name)!;
    for (const p of staged.filter((s) => s.name === m.name)) {
      if (!m.reuseStaged && fits(p, want)) m.reuseStaged = true;
      else remove.push({ dir: 'staging', file: p.file });
    }
  }
  return { mode: 'migrate', maps, remove };
}

/** The refusal's message: which maps, what version was found, and what this agent knows. */
export function describeRefusal(newer: readonly NewerPin[], bpffsDir: string): string {
  const list = newer.map((n) => `${n.map} pinned at layout v${n.version} (${n.dir}/${n.file}), this agent knows up to v${n.known}`).join('; ');
  return (
    `refusing to start: maps under ${bpffsDir} were pinned by a newer kpr release (${list}). ` +
    'The datapath is left as it is and keeps serving on them. Run the newer release again, or to go back to this one, ' +
    `stop the agent and remove the pins (kpr cleanup), which costs the node its conntrack and affinity state`
  );
}
