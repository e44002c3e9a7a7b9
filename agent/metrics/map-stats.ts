/**
 * Entries and capacity of kpr's pinned maps, for the metrics collector and
 * `kpr map list`. Counting walks the map in fixed-size batches
 * (bpf_map_lookup_batch, 4096 entries a call) into reused buffers, so a scrape
 * costs one syscall per 4096 entries and a few hundred kilobytes, whatever
 * the map's capacity.
 */
import { readdirSync } from 'node:fs';
import { constants } from 'node:os';
import { BpfMap, BPF_MAP_TYPE, KprBpfError } from '../../native/index.js';
import { libbpf } from '../../native/libbpf.js';
import { mapPinDir, mapPinPath } from '../datapath/pins.js';

const E = constants.errno;
const ENOTSUPP = 524;
const CHUNK = 4096;
/** sizeof(struct bpf_map_batch_opts) in libbpf 1.x; all flags zero. */
const BATCH_OPTS = (() => {
  const b = Buffer.alloc(24);
  b.writeBigUInt64LE(24n, 0);
  return b;
})();

export interface MapStats {
  name: string;
  /** libbpf's type name ("hash", "lru_hash", "percpu_array"...). */
  type: string;
  keySize: number;
  valueSize: number;
  /** Entries present; an array always holds max_entries. */
  entries: number;
  /** max_entries. */
  capacity: number;
}

/** Number of entries in a map (arrays: max_entries). */
export function countEntries(map: BpfMap): number {
  if (map.type === BPF_MAP_TYPE.ARRAY || map.type === BPF_MAP_TYPE.PERCPU_ARRAY) return map.maxEntries;
  const lib = libbpf();
  const ks = map.keySize;
  const vs = map.valueStride;
  let cap = Math.min(CHUNK, Math.max(1, map.maxEntries));
  let keys = Buffer.alloc(cap * ks);
  let values = Buffer.alloc(cap * vs);
  const tok = Math.max(ks, 8);
  const inTok = Buffer.alloc(tok);
  const outTok = Buffer.alloc(tok);
  const count = Buffer.alloc(4);
  let total = 0;
  let first = true;
  for (;;) {
    count.writeUInt32LE(cap, 0);
    const ret = lib.bpf_map_lookup_batch(map.fd, first ? null : inTok, outTok, keys, values, count, BATCH_OPTS);
    if (ret === 0 || ret === -E.ENOENT) total += count.readUInt32LE(0);
    if (ret === -E.ENOENT) return total;
    if (ret === 0) {
      outTok.copy(inTok);
      first = false;
      continue;
    }
    if (ret === -E.ENOSPC) {
      // One hash bucket holds more entries than the buffer: grow and retry the same position.
      cap *= 2;
      keys = Buffer.alloc(cap * ks);
      values = Buffer.alloc(cap * vs);
      continue;
    }
    if (first && (-ret === E.EINVAL || -ret === ENOTSUPP || -ret === E.EOPNOTSUPP)) {
      // No batch support for this map type (LPM trie): walk the keys.
      let n = 0;
      for (const _ of map.keys()) n++;
      return n;
    }
    throw new KprBpfError({ op: 'map lookup batch', map: map.name, errno: -ret });
  }
}

export function mapStats(name: string, map: BpfMap): MapStats {
  return { name, type: map.typeName, keySize: map.keySize, valueSize: map.valueSize, entries: countEntries(map), capacity: map.maxEntries };
}

/** Names of the maps pinned under a bpffs directory, sorted; [] when none. */
export function pinnedMapNames(bpffsDir: string): string[] {
  try {
    return readdirSync(mapPinDir(bpffsDir)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** Stats of every map pinned under `bpffsDir`, each opened and closed in turn. */
export function pinnedMapStats(bpffsDir: string, open: (pin: string, name: string) => BpfMap = (pin) => BpfMap.openPinned(pin)): MapStats[] {
  const out: MapStats[] = [];
  for (const name of pinnedMapNames(bpffsDir)) {
    const map = open(mapPinPath(bpffsDir, name), name);
    try {
      out.push(mapStats(name, map));
    } finally {
      map.close();
    }
  }
  return out;
}
