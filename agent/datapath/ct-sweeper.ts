/**
 * Removes expired conntrack entries. The datapath ignores an expired entry
 * already; the sweep only frees the space and keeps `kpr map dump kpr_ct`
 * honest. Deadlines are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns),
 * the clock process.hrtime uses.
 *
 * The agent sweeps in slices (sweepExpiredConntrackSliced): a batch read of
 * SWEEP_SLICE_ENTRIES, the expired ones of it deleted, then the event loop
 * runs (a change's sync, a probe) before the next slice. One read of a whole
 * 262,144-entry map is ~0.2–0.5 s of kernel time on 2 CPUs (bench/ct-sweep.ts),
 * which would otherwise hold every sync back that long each --ct-sweep-interval.
 * Deleting behind the cursor is safe: the batch cursor is a bucket index.
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { BpfMap } from '../../native/index.js';
import { CT_KEY, CT_VAL_EXPIRES_OFFSET } from '../maps/layout.js';

export const SWEEP_SLICE_ENTRIES = 4096;

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

/** The whole map in one read and one delete (tests, and the benchmark's reference). */
export function sweepExpiredConntrack(ct: BpfMap, now: bigint = process.hrtime.bigint()): number {
  const { count, keys, values } = ct.lookupBatch();
  const d = expiredKeys(count, keys, values, ct.valueStride, now);
  return d.count === 0 ? 0 : ct.deleteBatch(d.keys, d.count, { ignoreMissing: true });
}

export interface SlicedSweep {
  removed: number;
  slices: number;
  /** The longest slice: the longest the event loop waited for the sweep. */
  longestSliceMs: number;
}

/** Slice by slice, yielding to the event loop between slices. */
export async function sweepExpiredConntrackSliced(ct: BpfMap, now: bigint = process.hrtime.bigint(), sliceEntries = SWEEP_SLICE_ENTRIES): Promise<SlicedSweep> {
  const cursor = ct.lookupBatchCursor(sliceEntries);
  const out: SlicedSweep = { removed: 0, slices: 0, longestSliceMs: 0 };
  for (;;) {
    const t0 = performance.now();
    const b = cursor.next();
    if (b === null) break;
    const d = expiredKeys(b.count, b.keys, b.values, ct.valueStride, now);
    if (d.count > 0) out.removed += ct.deleteBatch(d.keys, d.count, { ignoreMissing: true });
    out.slices++;
    out.longestSliceMs = Math.max(out.longestSliceMs, performance.now() - t0);
    await yieldToEventLoop();
  }
  return out;
}
