/**
 * BatchWriter: bpf_map_update_batch calls run in order on a thread of their
 * own (native/batch_writer.c, built into build/libkpr_batch_writer.so), so
 * the kernel's share of a large sync overlaps the JavaScript that encodes
 * the next batch. submit() copies the buffers and returns at once; wait()
 * blocks until everything submitted has run and throws the first failure as
 * the KprBpfError a synchronous call would have thrown. A failed batch
 * discards every later one unrun, so the kernel always holds a prefix of
 * what was submitted.
 */
import koffi from 'koffi';
import { existsSync } from 'node:fs';
import { KprBpfError } from './errors.js';
import type { NativePtr } from './libbpf.js';

/** The library's file name; it is built next to the BPF objects. */
export const BATCH_WRITER_LIBRARY = 'libkpr_batch_writer.so';

interface WriterFns {
  kpr_writer_new(): NativePtr | null;
  kpr_writer_submit(
    w: NativePtr,
    seq: number,
    fd: number,
    keys: Buffer,
    keyBytes: number,
    values: Buffer,
    valueBytes: number,
    count: number,
    flags: number,
  ): number;
  kpr_writer_wait(w: NativePtr, out: Uint32Array): number;
  kpr_writer_free(w: NativePtr): void;
  kpr_ct_delete_still_expired(fd: number, keys: Buffer, keySize: number, count: number, valueSize: number, expiresOffset: number, now: bigint): number | bigint;
}

const loaded = new Map<string, WriterFns>();

function load(libPath: string): WriterFns {
  const have = loaded.get(libPath);
  if (have) return have;
  const lib = koffi.load(libPath);
  koffi.opaque('kpr_writer');
  const fns: WriterFns = {
    kpr_writer_new: lib.func('kpr_writer *kpr_writer_new(void)'),
    kpr_writer_submit: lib.func(
      'int kpr_writer_submit(kpr_writer *w, uint32_t seq, int fd, const void *keys, uint32_t key_bytes, const void *values, uint32_t value_bytes, uint32_t count, uint64_t elem_flags)',
    ),
    kpr_writer_wait: lib.func('int kpr_writer_wait(kpr_writer *w, _Out_ uint32_t *out)'),
    kpr_writer_free: lib.func('void kpr_writer_free(kpr_writer *w)'),
    kpr_ct_delete_still_expired: lib.func(
      'int64_t kpr_ct_delete_still_expired(int fd, const void *keys, uint32_t key_size, uint32_t count, uint32_t value_size, uint32_t expires_off, uint64_t now)',
    ),
  };
  loaded.set(libPath, fns);
  return fns;
}

/**
 * Builds the error of a failed batch as its map's synchronous call would
 * (ret: -errno; processed: elements written; note: what else to say), or,
 * with processed undefined, of a batch that could not be queued.
 */
export type BatchErrorFactory = (ret: number, processed: number | undefined, note: string) => Error;

/** One submitted batch, kept until wait() so a failure is described by its map. */
interface Pending {
  describe: BatchErrorFactory;
}

export class BatchWriter {
  readonly #fns: WriterFns;
  #handle: NativePtr | null;
  #pending: Pending[] = [];
  readonly #out = new Uint32Array(2);

  private constructor(fns: WriterFns, handle: NativePtr) {
    this.#fns = fns;
    this.#handle = handle;
  }

  /** Loads the library at `libPath` and starts the thread. Throws if either fails. */
  static open(libPath: string): BatchWriter {
    if (!existsSync(libPath)) throw new Error(`${libPath} not found (make build compiles it)`);
    const fns = load(libPath);
    const handle = fns.kpr_writer_new();
    if (!handle) throw new KprBpfError({ op: 'batch writer start', errno: 12, path: libPath, detail: 'cannot start the writer thread' });
    return new BatchWriter(fns, handle);
  }

  /** Batches submitted and not yet waited for. */
  get pending(): number {
    return this.#pending.length;
  }

  /**
   * Queues bpf_map_update_batch(fd, keys, values, count, elem_flags) over the
   * first keyBytes and valueBytes of the buffers (copied: they may be reused
   * on return).
   */
  submit(fd: number, keys: Buffer, keyBytes: number, values: Buffer, valueBytes: number, count: number, flags: number, describe: BatchErrorFactory): void {
    const h = this.#live();
    if (keyBytes > keys.length || valueBytes > values.length) throw new RangeError(`batch of ${keyBytes}/${valueBytes} bytes exceeds its buffers`);
    const seq = this.#pending.length;
    const ret = this.#fns.kpr_writer_submit(h, seq, fd, keys, keyBytes, values, valueBytes, count, flags);
    if (ret < 0) {
      // Nothing of this batch is queued; what is already queued must still run first.
      this.wait();
      throw describe(ret, undefined, 'cannot queue the batch');
    }
    this.#pending.push({ describe });
  }

  /** Blocks until every submitted batch has run; throws the first failure (later batches were not run). */
  wait(): void {
    if (this.#pending.length === 0) return;
    const h = this.#live();
    const ret = this.#fns.kpr_writer_wait(h, this.#out);
    const pending = this.#pending;
    this.#pending = [];
    if (ret < 0) {
      const skipped = pending.length - this.#out[0] - 1;
      throw pending[this.#out[0]].describe(ret, this.#out[1], skipped > 0 ? `${skipped} later batch(es) not written` : '');
    }
  }

  /**
   * Of the `count` keys packed in `keys` (found expired by a batch read of
   * `map`), deletes those still expired at `now` when looked up again (the
   * conntrack sweep, agent/datapath/ct-sweeper.ts); on this thread, not the
   * writer's. Returns how many were deleted.
   */
  deleteStillExpired(
    map: { fd: number; keySize: number; valueStride: number; name?: string },
    keys: Buffer,
    count: number,
    expiresOffset: number,
    now: bigint,
  ): number {
    if (count * map.keySize > keys.length) throw new RangeError(`${count} keys exceed their buffer`);
    const ret = Number(this.#fns.kpr_ct_delete_still_expired(map.fd, keys, map.keySize, count, map.valueStride, expiresOffset, now));
    if (ret < 0) throw new KprBpfError({ op: 'map delete', errno: -ret, ...(map.name ? { map: map.name } : {}), detail: 'conntrack sweep' });
    return ret;
  }

  /** Runs what is queued (its outcome is lost: wait() first to see it) and ends the thread. */
  close(): void {
    if (!this.#handle) return;
    this.#fns.kpr_writer_free(this.#handle);
    this.#handle = null;
    this.#pending = [];
  }

  #live(): NativePtr {
    if (!this.#handle) throw new KprBpfError({ op: 'batch writer', errno: 9, detail: 'the writer is closed' });
    return this.#handle;
  }
}
