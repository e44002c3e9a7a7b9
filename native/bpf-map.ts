/**
 * BpfMap: one BPF map, reached through its fd with libbpf's low-level API.
 * Keys and values are raw Buffers laid out as in bpf/include/kpr_types.h;
 * encoding is the caller's job (agent/maps/layout.ts).
 *
 * Per-CPU maps: every value buffer holds one slot per possible CPU, each slot
 * being valueSize rounded up to 8 bytes (`valueStride` is the total).
 *
 * Batch operations pass whole concatenated buffers in one native call; the
 * batch reads are native/map-batch-read.ts, per-CPU buffers native/per-cpu.ts,
 * the kernel's map info native/map-info.ts.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import { libbpf } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import type { BatchWriter } from './batch-writer.js';
import { ENOTSUPP, NO_FLAGS_OPTS, batchOpts } from './map-batch-opts.js';
import { forEachBatch, keyWalkCursor, lookupBatchAll, lookupBatchCursor, type BatchEntries, type BatchReadAccess } from './map-batch-read.js';
import { mapInfoByFd, type BpfMapInfo } from './map-info.js';
import { isPerCpuMapType, possibleCpus, valueStrideFor } from './per-cpu.js';

const E = constants.errno;

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
  DEVMAP: 14,
  RINGBUF: 27,
} as const;

export interface DeleteBatchOptions {
  /** Skip keys that are not in the map instead of failing (ENOENT). */
  ignoreMissing?: boolean;
}

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
  /** What the batch reads (native/map-batch-read.ts) need of this handle. */
  readonly #access: BatchReadAccess = {
    live: (op) => this.#live(op),
    err: (op, ret, processed) => this.#err(op, ret, processed),
    countBuf: this.#countBuf,
  };

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
   * Takes the key's value out in one call (BPF_MAP_LOOKUP_AND_DELETE_ELEM):
   * null when the key was not there; 'unsupported' where the kernel cannot
   * for this map type (hash maps: before 5.14).
   */
  lookupAndDelete(key: Buffer): Buffer | null | 'unsupported' {
    const fd = this.#live('map lookup and delete');
    this.#checkKey('map lookup and delete', key);
    const value = Buffer.alloc(this.valueStride);
    const ret = libbpf().bpf_map_lookup_and_delete_elem(fd, key, value);
    if (ret === -E.ENOENT) return null;
    if (ret === -ENOTSUPP || ret === -E.EOPNOTSUPP) return 'unsupported';
    if (ret < 0) throw this.#err('map lookup and delete', ret);
    return value;
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
   * when the map type has no batch support). `room`: entries to make room
   * for at first (more are read all the same): a reader that expects the
   * map full passes maxEntries (native/map-batch-read.ts).
   */
  lookupBatch(room?: number): BatchEntries {
    return lookupBatchAll(this, this.#access, room);
  }

  /**
   * Reads every entry in calls of up to `chunk` entries into two buffers
   * reused from call to call, handing each call's entries to `onBatch`
   * (views, valid until it returns). For a scan of a large map that keeps
   * none of it (counting entries).
   */
  forEachBatch(chunk: number, onBatch: (count: number, keys: Buffer, values: Buffer) => void): void {
    forEachBatch(this, this.#access, chunk, onBatch);
  }

  /**
   * A resumable walk of the map with bpf_map_lookup_batch, one call of at
   * most `batchEntries` records (more when one hash bucket holds more) per
   * next(); null once every bucket was visited. Which entries a walk sees
   * while the map changes: native/map-batch-read.ts.
   */
  lookupBatchCursor(batchEntries: number): { next(): BatchEntries | null } {
    return lookupBatchCursor(this, this.#access, batchEntries);
  }

  /**
   * A resumable walk of the map by key, `batchEntries` records per next(),
   * for map types with no batch lookup (the LPM trie); `restart` when the
   * key it would resume from was deleted: native/map-batch-read.ts.
   */
  keyWalkCursor(batchEntries: number): { next(): (BatchEntries & { restart?: boolean }) | null } {
    return keyWalkCursor(this, this.#access, batchEntries);
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
      throw new KprBpfError({
        op,
        map: this.name,
        errno: E.EINVAL,
        detail: `values buffer is ${values.length} bytes, ${count} values need ${count * this.valueStride}`,
      });
    }
  }
}
