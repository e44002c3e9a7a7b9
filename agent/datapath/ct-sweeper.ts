/**
 * Removes expired conntrack entries. The datapath ignores an expired entry
 * already; the sweep only frees the space and keeps `kpr map dump kpr_ct`
 * honest. Deadlines are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns),
 * the clock process.hrtime uses.
 */
import type { BpfMap } from '../../native/index.js';
import { CT_KEY, CT_VAL, CT_VAL_EXPIRES_OFFSET } from '../maps/layout.js';

export function sweepExpiredConntrack(ct: BpfMap, now: bigint = process.hrtime.bigint()): number {
  const { count, keys, values } = ct.lookupBatch();
  const expired: number[] = [];
  for (let i = 0; i < count; i++) {
    if (values.readBigUInt64LE(i * CT_VAL.size + CT_VAL_EXPIRES_OFFSET) <= now) expired.push(i);
  }
  if (expired.length === 0) return 0;
  const doomed = Buffer.alloc(expired.length * CT_KEY.size);
  expired.forEach((idx, j) => keys.copy(doomed, j * CT_KEY.size, idx * CT_KEY.size, (idx + 1) * CT_KEY.size));
  return ct.deleteBatch(doomed, expired.length, { ignoreMissing: true });
}
