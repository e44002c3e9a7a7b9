/**
 * BpfMap: one BPF map, reached through its fd with libbpf's low-level API.
 * Keys and values are raw Buffers laid out as in bpf/include/kpr_types.h;
 * encoding is the caller's job (agent/maps/layout.ts).
 *
 * Per-CPU maps: every value buffer holds one slot per possible CPU, each slot
 * being valueSize rounded up to 8 bytes (`valueStride` is the total).
 *
 * Batch operations pass whole concatenated buffers in one native call.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import { libbpf } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import type { BatchWriter } from './batch-writer.js';

const E = constants.errno;
const ENOTSUPP = 524; // kernel-internal, leaks from the bpf() syscall

/** Entries lookupBatch() makes room for at first (it doubles as needed). */
export const LOOKUP_BATCH_INITIAL = 4096;

/** Update flags (BPF_ANY etc. in linux/bpf.h). */
export const BPF_ANY = 0;
export const BPF_NOEXIST = 1;
export const BPF_EXIST = 2;
export const BPF_F_LOCK = 4;

/** enum bpf_map_type values kpr cares about. */
export const BPF_MAP_TYPE = {
  HASH: 1,
  ARRAY: 2,
  PERCPU_HASH: 5,
  PERCPU_ARRAY: 6,
  LRU_HASH: 9,
  LRU_PERCPU_HASH: 10,
  RINGBUF: 27,
} as const;

const PER_CPU_TYPES = new Set<number>([5, 6, 10, 21 /* PERCPU_CGROUP_STORAGE */]);

/** sizeof(struct bpf_map_info) in the uapi header kpr is built against. */
const MAP_INFO_SIZE = 88;
/** sizeof(struct bpf_map_batch_opts) in libbpf 1.x: { size_t sz; __u64 elem_flags; __u64 flags; }. */
const BATCH_OPTS_SIZE = 24;

let cpuCount = 0;

/** libbpf_num_possible_cpus(), cached. */
export function possibleCpus(): number {
  if (cpuCount > 0) return cpuCount;
  const n = libbpf().libbpf_num_possible_cpus();
  if (n <= 0) throw new KprBpfError({ op: 'num possible cpus', errno: -n || E.EINVAL });
  cpuCount = n;
  return n;
}

export function isPerCpuMapType(type: number): boolean {
  return PER_CPU_TYPES.has(type);
}

/** Bytes per value in user-space buffers for a map of this type / value size. */
export function valueStrideFor(type: number, valueSize: number): number {
  return isPerCpuMapType(type) ? Math.ceil(valueSize / 8) * 8 * possibleCpus() : valueSize;
}

/**
 * Sums a u64 counter across the CPU slots of a per-CPU value buffer.
 * `slotSize` is the per-CPU slot size (valueSize rounded up to 8), `offset`
 * the counter's offset inside each slot.
 */
export function sumPerCpuU64(values: Buffer, slotSize = 8, offset = 0): bigint {
  let sum = 0n;
  for (let off = offset; off + 8 <= values.length; off += slotSize) sum += values.readBigUInt64LE(off);
  return sum;
}

/** Splits a per-CPU value buffer into its CPU slots (views, no copy). */
export function perCpuSlots(values: Buffer, slotSize: number): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off + slotSize <= values.length; off += slotSize) out.push(values.subarray(off, off + slotSize));
  return out;
}

export function mapTypeName(type: number): string {
  return libbpf().libbpf_bpf_map_type_str(type) ?? `unknown(${type})`;
}

export interface BpfMapInfo {
  id: number;
  type: number;
  /** libbpf's name for the type, e.g. "hash", "lru_hash", "percpu_array". */
  typeName: string;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  /** Kernel name (truncated to 15 characters by the kernel). */
  name: string;
}

/** bpf_obj_get_info_by_fd on a map fd, decoded from struct bpf_map_info. */
export function mapInfoByFd(fd: number, what = `fd ${fd}`): BpfMapInfo {
  const info = Buffer.alloc(MAP_INFO_SIZE);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(MAP_INFO_SIZE, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'map info', map: what, errno: -ret });
  const type = info.readUInt32LE(0);
  const nameRaw = info.subarray(24, 40);
  const nul = nameRaw.indexOf(0);
  return {
    type,
    id: info.readUInt32LE(4),
    keySize: info.readUInt32LE(8),
    valueSize: info.readUInt32LE(12),
    maxEntries: info.readUInt32LE(16),
    flags: info.readUInt32LE(20),
    name: nameRaw.toString('utf8', 0, nul < 0 ? 16 : nul),
    typeName: mapTypeName(type),
  };
}

export interface BatchEntries {
  count: number;
  /** count × keySize bytes. */
  keys: Buffer;
  /** count × valueStride bytes. */
  values: Buffer;
}

export interface DeleteBatchOptions {
  /** Skip keys that are not in the map instead of failing (ENOENT). */
  ignoreMissing?: boolean;
}

function batchOpts(elemFlags: number): Buffer {
  const b = Buffer.alloc(BATCH_OPTS_SIZE);
  b.writeBigUInt64LE(BigInt(BATCH_OPTS_SIZE), 0);
  b.writeBigUInt64LE(BigInt(elemFlags), 8);
  return b;
}
const NO_FLAGS_OPTS = batchOpts(0);

export class BpfMap {
  readonly name: string;
  readonly id: number;
  readonly type: number;
  readonly typeName: string;
  readonly keySize: number;
  readonly valueSize: number;
  readonly maxEntries: number;
  readonly flags: number;
  readonly perCpu: boolean;
  /** Bytes per value in user buffers: valueSize, or round8(valueSize) × possible CPUs for per-CPU maps. */
  readonly valueStride: number;
  /** Path it was opened from (openPinned), if any. */
  readonly pinnedPath?: string;

  #fd: number;
  readonly #ownsFd: boolean;
  readonly #countBuf = Buffer.alloc(4);
  /** This kernel has no batch update for this map's type: updateBatch writes one element at a time. */
  #noUpdateBatch = false;

  /** @internal Use BpfObject.map() or BpfMap.openPinned(). */
  constructor(fd: number, ownsFd: boolean, opts: { name?: string; pinnedPath?: string } = {}) {
    const info = mapInfoByFd(fd, opts.name ?? opts.pinnedPath);
    this.#fd = fd;
    this.#ownsFd = ownsFd;
    this.name = opts.name ?? info.name;
    this.id = info.id;
    this.type = info.type;
    this.typeName = info.typeName;
    this.keySize = info.keySize;
    this.valueSize = info.valueSize;
    this.maxEntries = info.maxEntries;
    this.flags = info.flags;
    this.perCpu = isPerCpuMapType(info.type);
    this.valueStride = valueStrideFor(info.type, info.valueSize);
    if (opts.pinnedPath !== undefined) this.pinnedPath = opts.pinnedPath;
  }

  /** Opens a map pinned on bpffs (bpf_obj_get). The returned map owns its fd. */
  static openPinned(pinPath: string): BpfMap {
    const fd = libbpf().bpf_obj_get(pinPath);
    if (fd < 0) {
      const errno = -fd;
      let detail = hintFor(errno);
      if (errno === E.ENOENT) detail = 'no pinned object at this path';
      throw new KprBpfError({ op: 'obj get', path: pinPath, errno, detail });
    }
    try {
      return new BpfMap(fd, true, { pinnedPath: pinPath });
    } catch (err) {
      fs.closeSync(fd);
      if (err instanceof KprBpfError && err.errno === E.EINVAL) {
        throw new KprBpfError({ op: 'obj get', path: pinPath, errno: E.EINVAL, detail: 'pinned object is not a map' });
      }
      throw err;
    }
  }

  /**
   * Creates a new, unpinned map (bpf_map_create). Mostly for tests and scratch
   * maps; datapath maps come from BpfObject. The returned map owns its fd.
   */
  static create(type: number, keySize: number, valueSize: number, maxEntries: number, name: string | null = null): BpfMap {
    const fd = libbpf().bpf_map_create(type, name, keySize, valueSize, maxEntries, null);
    if (fd < 0) throw new KprBpfError({ op: 'map create', map: name ?? undefined, errno: -fd, detail: hintFor(-fd) });
    try {
      return new BpfMap(fd, true, name ? { name } : {});
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
  }

  get fd(): number {
    return this.#live('fd');
  }

  get closed(): boolean {
    return this.#fd < 0;
  }

  possibleCpus(): number {
    return possibleCpus();
  }

  /** Fresh info from the kernel (bpf_obj_get_info_by_fd). */
  info(): BpfMapInfo {
    return mapInfoByFd(this.#live('map info'), this.name);
  }

  /** Pins this map at `pinPath` (bpf_obj_pin). */
  pin(pinPath: string): void {
    const ret = libbpf().bpf_obj_pin(this.#live('obj pin'), pinPath);
    if (ret < 0) throw new KprBpfError({ op: 'obj pin', map: this.name, errno: -ret, detail: pinPath });
  }

  /** Closes the fd if this handle owns it; a map of a BpfObject is only invalidated. */
  close(): void {
    if (this.#fd < 0) return;
    const fd = this.#fd;
    this.#fd = -1;
    if (this.#ownsFd) fs.closeSync(fd);
  }

  /** @internal Called by the owning BpfObject when it closes. */
  _invalidate(): void {
    this.#fd = -1;
  }

  // ------------------------------------------------------------ single elements

  lookup(key: Buffer): Buffer | null {
    const fd = this.#live('map lookup');
    this.#checkKey('map lookup', key);
    const value = Buffer.alloc(this.valueStride);
    const ret = libbpf().bpf_map_lookup_elem(fd, key, value);
    if (ret === -E.ENOENT) return null;
    if (ret < 0) throw this.#err('map lookup', ret);
    return value;
  }

  update(key: Buffer, value: Buffer, flags: number = BPF_ANY): void {
    const fd = this.#live('map update');
    this.#checkKey('map update', key);
    this.#checkValue('map update', value);
    const ret = libbpf().bpf_map_update_elem(fd, key, value, flags);
    if (ret < 0) throw this.#err('map update', ret);
  }

  /** Returns false when the key was not there. */
  delete(key: Buffer): boolean {
    const fd = this.#live('map delete');
    this.#checkKey('map delete', key);
    const ret = libbpf().bpf_map_delete_elem(fd, key);
    if (ret === -E.ENOENT) return false;
    if (ret < 0) throw this.#err('map delete', ret);
    return true;
  }

  /**
   * Iterates keys with bpf_map_get_next_key. If the map changes during the
   * walk, a hash map may restart from its first key (kernel semantics).
   */
  *keys(): Generator<Buffer> {
    const lib = libbpf();
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.alloc(this.keySize);
      const ret = lib.bpf_map_get_next_key(this.#live('map get next key'), prev, next);
      if (ret === -E.ENOENT) return;
      if (ret < 0) throw this.#err('map get next key', ret);
      yield next;
      prev = next;
    }
  }

  /** Iterates [key, value]; keys deleted between the two calls are skipped. */
  *entries(): Generator<[Buffer, Buffer]> {
    for (const key of this.keys()) {
      const value = this.lookup(key);
      if (value) yield [key, value];
    }
  }

  // ------------------------------------------------------------------- batches

  /**
   * Reads every entry with bpf_map_lookup_batch (falls back to key iteration
   * when the map type has no batch support).
   */
  lookupBatch(): BatchEntries {
    const ks = this.keySize;
    const vs = this.valueStride;
    // Sized for what the map holds, not for max_entries: growing by doubling costs
    // one extra copy of the data, while a max_entries-sized buffer (20 MB for an
    // empty 262,144-entry conntrack map, every sweep) churns the process's memory.
    let cap = Math.max(1, Math.min(this.maxEntries, LOOKUP_BATCH_INITIAL));
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
    const batched = this.#lookupBatches(
      (full) => {
        if (full) grow(); // a hash bucket holds more entries than the space left
        if (cap - total < 1024 && cap - total < this.maxEntries) grow();
        return { keys: keys.subarray(total * ks), values: values.subarray(total * vs), room: cap - total };
      },
      (n) => void (total += n),
      () => total,
    );
    if (!batched) return this.#lookupAllByIteration();
    return { count: total, keys: keys.subarray(0, total * ks), values: values.subarray(0, total * vs) };
  }

  /**
   * Reads every entry in calls of up to `chunk` entries into two buffers
   * reused from call to call (a hash bucket larger than a chunk grows them),
   * handing each call's entries to `onBatch` (views, valid until it returns).
   * A map type with no batch support is walked by key, one entry a call.
   * For a scan of a large map that keeps none of it (counting entries).
   */
  forEachBatch(chunk: number, onBatch: (count: number, keys: Buffer, values: Buffer) => void): void {
    const ks = this.keySize;
    const vs = this.valueStride;
    let cap = Math.min(chunk, Math.max(1, this.maxEntries));
    let keys = Buffer.alloc(cap * ks);
    let values = Buffer.alloc(cap * vs);
    const batched = this.#lookupBatches(
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
    if (!batched) for (const [k, v] of this.entries()) onBatch(1, k, v);
  }

  /**
   * The bpf_map_lookup_batch loop: `space(full)` says where the next call
   * writes and how many entries fit (`full`: the last call found a bucket
   * larger than that, so there must be more); `got(n)` takes each call's
   * entries. False when the map type has no batch lookup (nothing read).
   */
  #lookupBatches(space: (full: boolean) => { keys: Buffer; values: Buffer; room: number }, got: (n: number) => void, processed: () => number): boolean {
    const lib = libbpf();
    const fd = this.#live('map lookup batch');
    const tokLen = Math.max(this.keySize, 8);
    const inTok = Buffer.alloc(tokLen);
    const outTok = Buffer.alloc(tokLen);
    const count = this.#countBuf;
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
      if (first && (errno === E.EINVAL || errno === ENOTSUPP || errno === E.EOPNOTSUPP)) return false;
      throw this.#err('map lookup batch', ret, processed());
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
  lookupBatchCursor(batchEntries: number): { next(): BatchEntries | null } {
    const lib = libbpf();
    const ks = this.keySize;
    const vs = this.valueStride;
    let cap = Math.max(1, Math.min(this.maxEntries, Math.floor(batchEntries)));
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
        const fd = this.#live('map lookup batch');
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
          if (first && (errno === E.EINVAL || errno === ENOTSUPP || errno === E.EOPNOTSUPP)) {
            done = true;
            return this.#lookupAllByIteration();
          }
          throw this.#err('map lookup batch', ret);
        }
      },
    };
  }

  #lookupAllByIteration(): BatchEntries {
    const ks: Buffer[] = [];
    const vs: Buffer[] = [];
    for (const [k, v] of this.entries()) {
      ks.push(k);
      vs.push(v);
    }
    return { count: ks.length, keys: Buffer.concat(ks), values: Buffer.concat(vs) };
  }

  /**
   * Writes `count` entries in one bpf_map_update_batch call: `keys` holds
   * count × keySize bytes, `values` count × valueStride bytes.
   */
  updateBatch(keys: Buffer, values: Buffer, count: number, flags: number = BPF_ANY): void {
    const fd = this.#live('map update batch');
    this.#checkBatch('map update batch', keys, count, values);
    if (count === 0) return;
    if (!this.#noUpdateBatch) {
      this.#countBuf.writeUInt32LE(count, 0);
      const opts = flags === 0 ? NO_FLAGS_OPTS : batchOpts(flags);
      const ret = libbpf().bpf_map_update_batch(fd, keys, values, this.#countBuf, opts);
      if (ret === 0) return;
      // Not every kernel batch-updates every map type (5.10: per-CPU arrays answer ENOTSUPP before any element).
      if (ret !== -ENOTSUPP && ret !== -E.EOPNOTSUPP) throw this.#err('map update batch', ret, this.#countBuf.readUInt32LE(0));
      this.#noUpdateBatch = true;
    }
    const ks = this.keySize;
    const vs = this.valueStride;
    for (let i = 0; i < count; i++) {
      const ret = libbpf().bpf_map_update_elem(fd, keys.subarray(i * ks, (i + 1) * ks), values.subarray(i * vs, (i + 1) * vs), flags);
      if (ret < 0) throw this.#err('map update', ret, i);
    }
  }

  /**
   * updateBatch through `writer`: queued to run in order on the writer's
   * thread. Its outcome is known at writer.wait(), which throws this
   * batch's failure as updateBatch would have.
   */
  queueUpdateBatch(writer: BatchWriter, keys: Buffer, values: Buffer, count: number, flags: number = BPF_ANY): void {
    const fd = this.#live('map update batch');
    this.#checkBatch('map update batch', keys, count, values);
    if (count === 0) return;
    writer.submit(fd, keys, count * this.keySize, values, count * this.valueStride, count, flags, (ret, processed, note) =>
      this.#err('map update batch', ret, processed, note),
    );
  }

  /**
   * Deletes `count` keys (count × keySize bytes) with bpf_map_delete_batch.
   * Returns how many were deleted. Without `ignoreMissing` a missing key
   * fails with ENOENT (keys before it are already deleted: see err.processed).
   */
  deleteBatch(keys: Buffer, count: number, opts: DeleteBatchOptions = {}): number {
    const fd = this.#live('map delete batch');
    this.#checkBatch('map delete batch', keys, count);
    const lib = libbpf();
    const ks = this.keySize;
    let done = 0;
    let deleted = 0;
    while (done < count) {
      this.#countBuf.writeUInt32LE(count - done, 0);
      const ret = lib.bpf_map_delete_batch(fd, keys.subarray(done * ks), this.#countBuf, NO_FLAGS_OPTS);
      const n = this.#countBuf.readUInt32LE(0);
      deleted += n;
      done += n;
      if (ret === 0) break;
      if (ret === -E.ENOENT && opts.ignoreMissing) {
        done += 1; // skip the missing key
        continue;
      }
      throw this.#err('map delete batch', ret, done);
    }
    return deleted;
  }

  // ------------------------------------------------------------------ helpers

  #live(op: string): number {
    if (this.#fd < 0) throw new KprBpfError({ op, map: this.name, errno: E.EBADF, detail: 'map handle is closed' });
    return this.#fd;
  }

  #err(op: string, ret: number, processed?: number, note?: string): KprBpfError {
    const errno = -ret;
    let detail = hintFor(errno);
    if (errno === E.E2BIG) detail = `map is full (max_entries ${this.maxEntries})`;
    if (processed !== undefined) detail = `${detail ? detail + '; ' : ''}${processed} element(s) processed`;
    if (note) detail = `${detail ? detail + '; ' : ''}${note}`;
    return new KprBpfError({ op, map: this.name, errno, detail, processed });
  }

  #checkKey(op: string, key: Buffer): void {
    if (key.length !== this.keySize) {
      throw new KprBpfError({ op, map: this.name, errno: E.EINVAL, detail: `key is ${key.length} bytes, map needs ${this.keySize}` });
    }
  }

  #checkValue(op: string, value: Buffer): void {
    if (value.length !== this.valueStride) {
      const per = this.perCpu ? ` (${this.valueStride / possibleCpus()} × ${possibleCpus()} possible CPUs)` : '';
      throw new KprBpfError({ op, map: this.name, errno: E.EINVAL, detail: `value is ${value.length} bytes, map needs ${this.valueStride}${per}` });
    }
  }

  #checkBatch(op: string, keys: Buffer, count: number, values?: Buffer): void {
    if (!Number.isInteger(count) || count < 0 || count > 0xffffffff) {
      throw new KprBpfError({ op, map: this.name, errno: E.EINVAL, detail: `bad count ${count}` });
    }
    if (keys.length < count * this.keySize) {
      throw new KprBpfError({ op, map: this.name, errno: E.EINVAL, detail: `keys buffer is ${keys.length} bytes, ${count} keys need ${count * this.keySize}` });
    }
    if (values && values.length < count * this.valueStride) {
      throw new KprBpfError({ op, map: this.name, errno: E.EINVAL, detail: `values buffer is ${values.length} bytes, ${count} values need ${count * this.valueStride}` });
    }
  }
}
