/**
 * How much slower than this machine the tests run: 1 here, more inside the
 * kernel-matrix VMs (software-emulated CPUs, test/kernels), set through
 * KPR_TEST_TIME_SCALE. Every wait of the sandbox and every suite timeout is
 * multiplied by it, so a slow CPU waits longer instead of failing; what the
 * tests assert (who answered, what the maps hold) does not change.
 */
export const TIME_SCALE = Math.max(1, Number(process.env.KPR_TEST_TIME_SCALE) || 1);

export function scaled(ms: number): number {
  return ms * TIME_SCALE;
}
