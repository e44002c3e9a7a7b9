/**
 * Removes expired conntrack entries. The datapath ignores an expired entry
 * already; the sweep only frees the space and keeps `kpr map dump kpr_ct`
 * honest. Deadlines are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns),
 * the clock process.hrtime uses.
 *
 * The agent sweeps in slices (sweepExpiredConntrackSliced): a batch read of
 * SWEEP_SLICE_ENTRIES, the expired ones of it deleted SWEEP_DELETE_CHUNK at
 * a time, the event loop running (a change's sync, a probe) between them. One read of a whole
 * 262,144-entry map is ~0.2–0.5 s of kernel time on 2 CPUs (bench/ct-sweep.ts),
 * which would otherwise hold every sync back that long each --ct-sweep-interval.
 * Deleting behind the cursor is safe: the batch cursor is a bucket index.
 *
 * An entry read as expired is looked up once more right before it is
 * deleted, and left alone unless it is still expired: between the batch
 * read and the delete, a new flow may have taken the same key (a client
 * reusing its port, the same reply tuple given to another flow), and a
 * delete by key would remove the new flow's entry: the flow keeps one of
 * its two entries, and the node answers the packets the other would have
 * matched with a reset. Even a syscall between the check and the delete is
 * window enough under port reuse (test/bpf/ct-half-flows.test.ts saw it),
 * so the delete takes the value out in the same call
 * (BPF_MAP_LOOKUP_AND_DELETE_ELEM) and puts a live one back unless the key
 * was written again meanwhile (BPF_NOEXIST): a new flow's entry is gone for
 * two syscalls at most, never for good. Kernels before 5.14 cannot take out
 * a hash map entry with its value: there the delete by key stays.
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { constants } from 'node:os';
import { BPF_NOEXIST, KprBpfError, type BatchWriter, type BpfMap } from '../../native/index.js';
import { CT_KEY, CT_VAL_EXPIRES_OFFSET } from '../maps/layout.js';

export const SWEEP_SLICE_ENTRIES = 4096;
/** Expired keys rechecked and deleted between two turns of the event loop. */
export const SWEEP_DELETE_CHUNK = 256;

/**
 * Deletes, of `count` keys packed in `keys` (read as expired), those still
 * expired at `now` when looked up again; returns how many went. The native
 * one (BatchWriter.deleteStillExpired) makes the two syscalls per key in C.
 */
export type StillExpiredDeleter = (ct: BpfMap, keys: Buffer, count: number, now: bigint) => number;

/** The same, through a koffi call per syscall: where the native library is not built. */
export const deleteStillExpiredHere: StillExpiredDeleter = (ct, keys, count, now) => {
  let removed = 0;
  for (let i = 0; i < count; i++) {
    const key = keys.subarray(i * CT_KEY.size, (i + 1) * CT_KEY.size);
    const current = ct.lookup(key);
    if (current === null || current.readBigUInt64LE(CT_VAL_EXPIRES_OFFSET) > now) continue;
    const taken = lookupAndDeleteSupported ? ct.lookupAndDelete(key) : 'unsupported';
    if (taken === 'unsupported') {
      lookupAndDeleteSupported = false;
      if (ct.delete(key)) removed++;
    } else if (taken !== null) {
      if (taken.readBigUInt64LE(CT_VAL_EXPIRES_OFFSET) <= now) removed++;
      else putBack(ct, key, taken);
    }
  }
  return removed;
};

let lookupAndDeleteSupported = true;

/** A live entry taken out by mistake goes back, unless its key has been written again since. */
function putBack(ct: BpfMap, key: Buffer, value: Buffer): void {
  try {
    ct.update(key, value, BPF_NOEXIST);
  } catch (err) {
    if (!(err instanceof KprBpfError && err.errno === constants.errno.EEXIST)) throw err;
  }
}

/** The native deleter, through the batch writer's library (its calls run on the caller's thread). */
export function nativeStillExpiredDeleter(writer: BatchWriter): StillExpiredDeleter {
  return (ct, keys, count, now) => writer.deleteStillExpired(ct, keys, count, CT_VAL_EXPIRES_OFFSET, now);
}

/** The expired keys of one batch, in a buffer of their own. */
function expiredKeys(count: number, keys: Buffer, values: Buffer, valueStride: number, now: bigint): { keys: Buffer; count: number } {
  const expired: number[] = [];
  for (let i = 0; i < count; i++) {
    if (values.readBigUInt64LE(i * valueStride + CT_VAL_EXPIRES_OFFSET) <= now) expired.push(i);
  }
  const doomed = Buffer.alloc(expired.length * CT_KEY.size);
  expired.forEach((idx, j) => keys.copy(doomed, j * CT_KEY.size, idx * CT_KEY.size, (idx + 1) * CT_KEY.size));
  return { keys: doomed, count: expired.length };
}

/** The whole map in one read (tests, and the benchmark's reference). */
export function sweepExpiredConntrack(ct: BpfMap, now: bigint = process.hrtime.bigint(), deleter: StillExpiredDeleter = deleteStillExpiredHere): number {
  const { count, keys, values } = ct.lookupBatch();
  const d = expiredKeys(count, keys, values, ct.valueStride, now);
  return d.count === 0 ? 0 : deleter(ct, d.keys, d.count, now);
}

export interface SlicedSweep {
  removed: number;
  slices: number;
  /** The longest slice: the longest the event loop waited for the sweep. */
  longestSliceMs: number;
}

/** Slice by slice, yielding to the event loop between slices. */
export async function sweepExpiredConntrackSliced(
  ct: BpfMap,
  now: bigint = process.hrtime.bigint(),
  sliceEntries = SWEEP_SLICE_ENTRIES,
  deleter: StillExpiredDeleter = deleteStillExpiredHere,
): Promise<SlicedSweep> {
  const cursor = ct.lookupBatchCursor(sliceEntries);
  const out: SlicedSweep = { removed: 0, slices: 0, longestSliceMs: 0 };
  for (;;) {
    const t0 = performance.now();
    const b = cursor.next();
    if (b === null) break;
    const d = expiredKeys(b.count, b.keys, b.values, ct.valueStride, now);
    // Two syscalls per expired key: deleted a chunk at a time, the event loop running between chunks.
    let t = t0;
    for (let from = 0; ; from += SWEEP_DELETE_CHUNK) {
      const n = Math.min(SWEEP_DELETE_CHUNK, d.count - from);
      if (n > 0) out.removed += deleter(ct, d.keys.subarray(from * CT_KEY.size), n, now);
      out.slices++;
      out.longestSliceMs = Math.max(out.longestSliceMs, performance.now() - t);
      await yieldToEventLoop();
      t = performance.now();
      if (from + SWEEP_DELETE_CHUNK >= d.count) break;
    }
  }
  return out;
}
