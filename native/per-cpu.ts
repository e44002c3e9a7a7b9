/**
 * Per-CPU map values in user space: every value buffer holds one slot per
 * possible CPU, each slot being valueSize rounded up to 8 bytes.
 */
import { constants } from 'node:os';
import { libbpf } from './libbpf.js';
import { KprBpfError } from './errors.js';

const E = constants.errno;

const PER_CPU_TYPES = new Set<number>([5, 6, 10, 21 /* PERCPU_CGROUP_STORAGE */]);

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
