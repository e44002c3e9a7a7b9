/**
 * Reading a whole BPF map with bpf_map_lookup_batch: into one pair of
 * buffers (lookupBatchAll), in chunks through reused buffers (forEachBatch),
 * or resumably, one call at a time (lookupBatchCursor). A map type without
 * batch lookup is walked by key instead, resumably too (keyWalkCursor). BpfMap's lookupBatch, forEachBatch
 * and lookupBatchCursor are these (native/bpf-map.ts).
 */
import { constants } from 'node:os';
import { libbpf } from './libbpf.js';
import type { KprBpfError } from './errors.js';
import { ENOTSUPP, NO_FLAGS_OPTS } from './map-batch-opts.js';

const E = constants.errno;

/** The first batch call's answer when the map type has no batch lookup: the map is walked by key. */
function noBatchLookup(errno: number): boolean {
  return errno === E.EINVAL || errno === ENOTSUPP || errno === E.EOPNOTSUPP;
}

/** Entries lookupBatch() makes room for at first (it doubles as needed). */
export const LOOKUP_BATCH_INITIAL = 4096;

export interface BatchEntries {
  count: number;
  /** count × keySize bytes. */
  keys: Buffer;
  /** count × valueStride bytes. */
  values: Buffer;
}

/** The map a batch read walks. */
export interface BatchReadMap {
  readonly keySize: number;
  /** Bytes per value in user buffers (per-CPU maps: a slot per possible CPU). */
  readonly valueStride: number;
  readonly maxEntries: number;
  /** Key iteration (bpf_map_get_next_key), for a map type without batch lookup. */
  entries(): Iterable<[Buffer, Buffer]>;
}

/** What only the map's handle holds: its live fd, its errors, its reused count buffer. */
export interface BatchReadAccess {
  /** The fd, or throws when the handle was closed. */
  live(op: string): number;
  err(op: string, ret: number, processed?: number): KprBpfError;
  countBuf: Buffer;
}

/**
 * Reads every entry with bpf_map_lookup_batch (falls back to key iteration
 * when the map type has no batch support), with room for `room` entries at
 * first (LOOKUP_BATCH_INITIAL unless told).
 */
export function lookupBatchAll(m: BatchReadMap, a: BatchReadAccess, room = LOOKUP_BATCH_INITIAL): BatchEntries {
  const ks = m.keySize;
  const vs = m.valueStride;
  // By default sized for what the map holds, not for max_entries: growing by
  // doubling costs one extra copy of the data, while a max_entries-sized
  // buffer (20 MB for an empty 262,144-entry conntrack map, every sweep)
  // churns a long-lived process's memory. A one-shot reader of a map it
  // expects large (the CLI's kpr service list: 1.1 M entries, ten doublings
  // whose copies were 0.8 s of its CPU) asks for max_entries: the buffers
  // come from allocUnsafe, whose pages the kernel never writes are never
  // touched, so the room costs address space, not memory.
  let cap = Math.max(1, Math.min(m.maxEntries, Math.floor(room)));
  let keys = Buffer.allocUnsafe(cap * ks);
  let values = Buffer.allocUnsafe(cap * vs);
  let total = 0;
  const grow = () => {
    cap *= 2;
    const k = Buffer.allocUnsafe(cap * ks);
    keys.copy(k, 0, 0, total * ks);
    const v = Buffer.allocUnsafe(cap * vs);
    values.copy(v, 0, 0, total * vs);
    keys = k;
    values = v;
  };
  const batched = lookupBatches(
    m,
    a,
    (full) => {
      if (full) grow(); // a hash bucket holds more entries than the space left
      if (cap - total < 1024 && cap - total < m.maxEntries) grow();
      return { keys: keys.subarray(total * ks), values: values.subarray(total * vs), room: cap - total };
    },
    (n) => void (total += n),
    () => total,
  );
  if (!batched) return lookupAllByIteration(m);
  return { count: total, keys: keys.subarray(0, total * ks), values: values.subarray(0, total * vs) };
}

/**
 * Reads every entry in calls of up to `chunk` entries into two buffers
 * reused from call to call (a hash bucket larger than a chunk grows them),
 * handing each call's entries to `onBatch` (views, valid until it returns).
 * A map type with no batch support is walked by key, one entry a call.
 * For a scan of a large map that keeps none of it (counting entries).
 */
export function forEachBatch(m: BatchReadMap, a: BatchReadAccess, chunk: number, onBatch: (count: number, keys: Buffer, values: Buffer) => void): void {
  const ks = m.keySize;
  const vs = m.valueStride;
  let cap = Math.min(chunk, Math.max(1, m.maxEntries));
  let keys = Buffer.alloc(cap * ks);
  let values = Buffer.alloc(cap * vs);
  const batched = lookupBatches(
    m,
    a,
    (full) => {
      if (full) {
        cap *= 2;
        keys = Buffer.alloc(cap * ks);
        values = Buffer.alloc(cap * vs);
      }
      return { keys, values, room: cap };
    },
    (n) => onBatch(n, keys, values),
    () => 0,
  );
  if (!batched) for (const [k, v] of m.entries()) onBatch(1, k, v);
}

/**
 * The bpf_map_lookup_batch loop: `space(full)` says where the next call
 * writes and how many entries fit (`full`: the last call found a bucket
 * larger than that, so there must be more); `got(n)` takes each call's
 * entries. False when the map type has no batch lookup (nothing read).
 */
function lookupBatches(
  m: BatchReadMap,
  a: BatchReadAccess,
  space: (full: boolean) => { keys: Buffer; values: Buffer; room: number },
  got: (n: number) => void,
  processed: () => number,
): boolean {
  const lib = libbpf();
  const fd = a.live('map lookup batch');
  const tokLen = Math.max(m.keySize, 8);
  const inTok = Buffer.alloc(tokLen);
  const outTok = Buffer.alloc(tokLen);
  const count = a.countBuf;
  let first = true;
  let full = false;
  for (;;) {
    const at = space(full);
    full = false;
    count.writeUInt32LE(at.room, 0);
    const ret = lib.bpf_map_lookup_batch(fd, first ? null : inTok, outTok, at.keys, at.values, count, NO_FLAGS_OPTS);
    if (ret === 0 || ret === -E.ENOENT) got(count.readUInt32LE(0));
    if (ret === -E.ENOENT) return true;
    if (ret === 0) {
      outTok.copy(inTok);
      first = false;
      continue;
    }
    if (ret === -E.ENOSPC) {
      full = true;
      continue;
    }
    const errno = -ret;
    if (first && noBatchLookup(errno)) return false;
    throw a.err('map lookup batch', ret, processed());
  }
}

/**
 * A resumable walk of the map with bpf_map_lookup_batch: each next() is one
 * call of at most `batchEntries` records (more only when one hash bucket
 * holds more: the kernel copies buckets whole), resuming at the kernel's
 * out_batch token; null once every bucket was visited. The returned
 * buffers are reused by the next call. Between two calls the map may
 * change: for BPF_MAP_TYPE_HASH the token is a bucket index, an entry's
 * bucket is fixed by its key's hash (n_buckets never changes), and each
 * call copies whole buckets under the bucket's lock, so an entry no one
 * writes or deletes during the walk is returned exactly once (see
 * __htab_map_lookup_and_delete_batch in the kernel's kernel/bpf/hashtab.c).
 * A map type without batch lookup is read whole, by key iteration, at the first call.
 */
export function lookupBatchCursor(m: BatchReadMap, a: BatchReadAccess, batchEntries: number): { next(): BatchEntries | null } {
  const lib = libbpf();
  const ks = m.keySize;
  const vs = m.valueStride;
  let cap = Math.max(1, Math.min(m.maxEntries, Math.floor(batchEntries)));
  let keys = Buffer.allocUnsafe(cap * ks);
  let values = Buffer.allocUnsafe(cap * vs);
  const tokLen = Math.max(ks, 8);
  const inTok = Buffer.alloc(tokLen);
  const outTok = Buffer.alloc(tokLen);
  const count = Buffer.alloc(4);
  let first = true;
  let done = false;
  return {
    next: (): BatchEntries | null => {
      if (done) return null;
      const fd = a.live('map lookup batch');
      for (;;) {
        count.writeUInt32LE(cap, 0);
        const ret = lib.bpf_map_lookup_batch(fd, first ? null : inTok, outTok, keys, values, count, NO_FLAGS_OPTS);
        const n = count.readUInt32LE(0);
        if (ret === 0 || ret === -E.ENOENT) {
          outTok.copy(inTok);
          first = false;
          if (ret === -E.ENOENT) done = true;
          return { count: n, keys: keys.subarray(0, n * ks), values: values.subarray(0, n * vs) };
        }
        if (ret === -E.ENOSPC) {
          // One bucket holds more entries than the batch: nothing was copied, retry it with room.
          cap *= 2;
          keys = Buffer.allocUnsafe(cap * ks);
          values = Buffer.allocUnsafe(cap * vs);
          continue;
        }
        const errno = -ret;
        if (first && noBatchLookup(errno)) {
          done = true;
          return lookupAllByIteration(m);
        }
        throw a.err('map lookup batch', ret);
      }
    },
  };
}

function lookupAllByIteration(m: BatchReadMap): BatchEntries {
  const ks: Buffer[] = [];
  const vs: Buffer[] = [];
  for (const [k, v] of m.entries()) {
    ks.push(k);
    vs.push(v);
  }
  return { count: ks.length, keys: Buffer.concat(ks), values: Buffer.concat(vs) };
}

/**
 * A resumable walk of the map by key, for map types with no batch lookup
 * (the LPM trie): each next() returns up to `batchEntries` records
 * (bpf_map_get_next_key from the last key returned, a lookup of each),
 * null once the walk is over. An LPM trie is walked in post-order of its
 * keys' bit strings (trie_get_next_key in the kernel's
 * kernel/bpf/lpm_trie.c), an order that inserting or deleting other keys
 * does not change, so a key present throughout is returned exactly once,
 * as long as the key the walk resumes from is still there. When it is not
 * (deleted between two calls), the kernel would start again from the
 * first key: next() returns { restart: true } instead, and the caller
 * walks again from the start. The returned buffers are reused by the next call.
 */
export function keyWalkCursor(m: BatchReadMap, a: BatchReadAccess, batchEntries: number): { next(): (BatchEntries & { restart?: boolean }) | null } {
  const lib = libbpf();
  const ks = m.keySize;
  const vs = m.valueStride;
  const cap = Math.max(1, Math.floor(batchEntries));
  const keys = Buffer.alloc(cap * ks);
  const values = Buffer.alloc(cap * vs);
  const value = Buffer.alloc(vs);
  const lost = () => ({ count: 0, keys: keys.subarray(0, 0), values: values.subarray(0, 0), restart: true });
  let prev: Buffer | null = null;
  let done = false;
  return {
    next: () => {
      if (done) return null;
      const fd = a.live('map get next key');
      if (prev) {
        const ret = lib.bpf_map_lookup_elem(fd, prev, value);
        if (ret === -E.ENOENT) return lost();
        if (ret < 0) throw a.err('map lookup', ret);
      }
      let n = 0;
      while (n < cap) {
        const at = keys.subarray(n * ks, (n + 1) * ks);
        const ret = lib.bpf_map_get_next_key(fd, prev, at);
        if (ret === -E.ENOENT) {
          done = true;
          break;
        }
        if (ret < 0) throw a.err('map get next key', ret, n);
        const got = lib.bpf_map_lookup_elem(fd, at, values.subarray(n * vs, (n + 1) * vs));
        // Deleted between the two calls: the walk cannot resume from it.
        if (got === -E.ENOENT) return lost();
        if (got < 0) throw a.err('map lookup', got, n);
        prev = at;
        n++;
      }
      if (prev) prev = Buffer.from(prev); // the next call's keys overwrite the buffer it points into
      return { count: n, keys: keys.subarray(0, n * ks), values: values.subarray(0, n * vs) };
    },
  };
}
