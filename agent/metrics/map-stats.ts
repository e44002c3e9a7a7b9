/**
 * Entries and capacity of kpr's pinned maps, for the metrics collector and
 * `kpr map list`. Counting walks the map in fixed-size batches
 * (BpfMap.forEachBatch, 4096 entries a call) into reused buffers, so a scrape
 * costs one syscall per 4096 entries and a few hundred kilobytes, whatever
 * the map's capacity.
 */
import { BpfMap, BPF_MAP_TYPE } from '../../native/index.js';
import { readdirSync } from 'node:fs';
import { pinnedMapFiles, ringPinDir } from '../datapath/pins.js';

const CHUNK = 4096;

export interface MapStats {
  name: string;
  /** libbpf's type name ("hash", "lru_hash", "percpu_array"...). */
  type: string;
  keySize: number;
  valueSize: number;
  /** Entries present; an array always holds max_entries; null for a ring buffer (records, read once, not entries). */
  entries: number | null;
  /** max_entries (a ring buffer: its size in bytes). */
  capacity: number;
}

/** Number of entries in a map (arrays: max_entries; a ring buffer: null, it has no entries to walk). */
export function countEntries(map: BpfMap): number | null {
  if (map.type === BPF_MAP_TYPE.RINGBUF) return null;
  if (map.type === BPF_MAP_TYPE.ARRAY || map.type === BPF_MAP_TYPE.PERCPU_ARRAY) return map.maxEntries;
  let total = 0;
  map.forEachBatch(CHUNK, (n) => void (total += n));
  return total;
}

export function mapStats(name: string, map: BpfMap): MapStats {
  return { name, type: map.typeName, keySize: map.keySize, valueSize: map.valueSize, entries: countEntries(map), capacity: map.maxEntries };
}

/** Names of the maps pinned under a bpffs directory (maps/, whatever their layout version), sorted; [] when none. */
export function pinnedMapNames(bpffsDir: string): string[] {
  return pinnedMapFiles(bpffsDir).map((p) => p.name);
}

/** Names of the ring buffers pinned under a bpffs directory (rings/), sorted. */
export function pinnedRingNames(bpffsDir: string): string[] {
  try {
    return readdirSync(ringPinDir(bpffsDir)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** Stats of every map pinned under `bpffsDir`, each opened and closed in turn. */
export function pinnedMapStats(bpffsDir: string, open: (pin: string, name: string) => BpfMap = (pin) => BpfMap.openPinned(pin)): MapStats[] {
  const out: MapStats[] = [];
  for (const { name, path: pin } of pinnedMapFiles(bpffsDir)) {
    const map = open(pin, name);
    try {
      out.push(mapStats(name, map));
    } finally {
      map.close();
    }
  }
  return out;
}
