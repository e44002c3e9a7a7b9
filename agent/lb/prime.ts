/**
 * The size M of a Maglev table (agent/lb/maglev.ts): a prime, so every
 * skip 1..M-1 is coprime with M and each backend's permutation visits every
 * slot. Pure.
 *
 * Two ways to set it:
 * - **fixed**: one prime for every table (Cilium's model: its
 *   `--bpf-lb-maglev-table-size`, default 16381);
 * - **auto** (kpr's default): per table, the smallest of
 *   MAGLEV_TABLE_SIZES that is ≥ max(minM, 300·N, 3·N²), N the backends
 *   with a weight above 0, within [minM, maxM] (default 1021..65521) and
 *   within 64 KiB of entries (M ≤ 32749 once entries take two bytes, over
 *   256 backends); the largest size allowed when none is that large. At
 *   the defaults: N 1–3 → 1021, 4–6 → 2039, 7–13 → 4093, 14–27 → 8191,
 *   28–54 → 16381, 55–104 → 32749, 105–256 → 65521, 257 and more → 32749.
 *
 * Why 300·N and 3·N², not the 100·N Cilium recommends: a backend's removal
 * moves its own flows (1/N) and, through the permutations' cascade, some
 * flows of the others; that share falls as M/N grows and rises with N at a
 * fixed M/N (measured: N=100 at M=16381 moves 2.6% of the other flows, at
 * 32749 0.9%). The two terms keep it within 0.2/N up to ~150 backends
 * (test/lb/maglev.test.ts); beyond, no M of 16 bits does.
 *
 * M depends on nothing but N, so every node picks the same M from the
 * same EndpointSlices. The price: a change of N across a step (3↔4, 6↔7,
 * 13↔14, … at the defaults) rebuilds the table at another M, which moves
 * most flows' backends for a new lookup (established flows keep theirs
 * through conntrack); within a step a change moves ~1/N. Fixed mode never
 * changes M.
 */

/**
 * The sizes auto mode picks from: the largest prime below each power of
 * two from 2^8 to 2^16 (Cilium accepts the same ladder, up to 131071). A
 * slot number is a u16 in kpr's tables, hence the top at 65521.
 */
export const MAGLEV_TABLE_SIZES: readonly number[] = [251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521];

/** The largest M: the largest prime below 2^16. */
export const MAGLEV_MAX_M = 65521;
/** Auto mode's largest M once entries take two bytes (over 256 backends): 64 KiB of entries. */
export const MAGLEV_MAX_M_WIDE = 32749;
/** Cilium's default M, and kpr's in fixed mode. */
export const MAGLEV_DEFAULT_M = 16381;
/** Auto mode's default minM: 1 KiB of one-byte entries, enough for up to 3 backends. */
export const MAGLEV_DEFAULT_MIN_M = 1021;
/** Auto mode's slots per backend (see the module comment; Cilium recommends 100, the least for ~1% balance). */
export const MAGLEV_SLOTS_PER_BACKEND = 300;
/** Below 100·N slots, backends' shares may differ by more than ~1% (the Maglev paper; Cilium's docs). */
export const MAGLEV_RECOMMENDED_SLOTS_PER_BACKEND = 100;

/** True for a prime (trial division: n ≤ 65521 here, at most 128 divisions). */
export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

/** Throws a RangeError naming `what` unless `m` is a prime in 3..MAGLEV_MAX_M (M - 1 ≥ 2 skips to choose from). */
export function checkPrimeSize(m: number, what: string): void {
  if (!Number.isInteger(m) || m < 3 || m > MAGLEV_MAX_M || !isPrime(m)) {
    throw new RangeError(`${what} must be a prime from 3 to ${MAGLEV_MAX_M} (e.g. ${MAGLEV_TABLE_SIZES.join(', ')}), not ${m}`);
  }
}

/**
 * Checks a table size `m` for `n` backends: an error (RangeError) when it is
 * not a prime in range or smaller than n (some backend would get no slot);
 * a warning, returned, when it is below 100·n (shares drift more than ~1%
 * from equal).
 */
export function validateTableSize(m: number, n: number): string[] {
  checkPrimeSize(m, 'the Maglev table size M');
  if (m < n) throw new RangeError(`the Maglev table size M=${m} is smaller than its ${n} backends: each backend needs at least one slot`);
  if (m < MAGLEV_RECOMMENDED_SLOTS_PER_BACKEND * n)
    return [
      `the Maglev table size M=${m} is below ${MAGLEV_RECOMMENDED_SLOTS_PER_BACKEND}×${n} backends: backends' shares may differ by more than 1% (one slot in ${Math.floor(m / n)})`,
    ];
  return [];
}

/** Auto mode's M for `n` backends within [minM, maxM] (both primes, minM ≤ maxM): see the module comment. */
export function autoTableSize(n: number, minM = MAGLEV_DEFAULT_MIN_M, maxM = MAGLEV_MAX_M): number {
  checkPrimeSize(minM, 'the Maglev minimum table size');
  checkPrimeSize(maxM, 'the Maglev maximum table size');
  if (minM > maxM) throw new RangeError(`the Maglev minimum table size ${minM} is above the maximum ${maxM}`);
  const want = Math.max(minM, MAGLEV_SLOTS_PER_BACKEND * n, 3 * n * n);
  const limit = Math.max(minM, Math.min(maxM, n > 256 ? MAGLEV_MAX_M_WIDE : MAGLEV_MAX_M));
  if (want <= minM) return minM;
  for (const p of MAGLEV_TABLE_SIZES) if (p >= want && p > minM && p <= limit) return p;
  return limit;
}
