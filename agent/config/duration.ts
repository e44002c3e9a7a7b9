/**
 * Durations as kube-proxy reads them: Go's time.ParseDuration ("1m30s",
 * "24h0m0s", "300ms", ".5s", "1h2m3s4ms5us6ns"), which is also how a
 * KubeProxyConfiguration's metav1.Duration fields are written. One parser
 * for every duration kpr reads (flags, --config files, kube-proxy configs).
 *
 * parseGoDuration follows Go's algorithm step by step (src/time/format.go),
 * on exact integers of nanoseconds: the same values, the same overflow
 * limits (±2^63 ns) and the same fraction rounding (Go multiplies the
 * fraction in float64, so "0.830103483285477580700h" is 372539827 ns past
 * 49m48s, not …828).
 *
 * parseDuration (what kpr's flags use) adds one kpr convenience kept from
 * before: a bare number is seconds ("30" = 30s; Go would say "missing
 * unit"). Negative durations are refused there: no kpr setting means anything
 * with one.
 */

const NS_PER_MS = 1_000_000n;

const UNITS: ReadonlyMap<string, bigint> = new Map([
  ['ns', 1n],
  ['us', 1_000n],
  ['\u00b5s', 1_000n], // µ, MICRO SIGN
  ['\u03bcs', 1_000n], // μ, GREEK SMALL LETTER MU
  ['ms', NS_PER_MS],
  ['s', 1_000_000_000n],
  ['m', 60_000_000_000n],
  ['h', 3_600_000_000_000n],
]);

const TWO_63 = 1n << 63n;

export class DurationError extends Error {}

const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';

/** Go's leadingInt: the leading digits; undefined on overflow (beyond 2^63). */
function leadingInt(s: string): { x: bigint; rest: string } | undefined {
  let i = 0;
  let x = 0n;
  for (; i < s.length && isDigit(s[i]); i++) {
    if (x > TWO_63 / 10n) return undefined;
    x = x * 10n + BigInt(s.charCodeAt(i) - 48);
    if (x > TWO_63) return undefined;
  }
  return { x, rest: s.slice(i) };
}

/** Go's leadingFraction: digits after the point; stops gaining precision (not an error) on overflow. */
function leadingFraction(s: string): { f: bigint; scale: number; rest: string } {
  let i = 0;
  let f = 0n;
  let scale = 1;
  let overflow = false;
  for (; i < s.length && isDigit(s[i]); i++) {
    if (overflow) continue;
    if (f > (TWO_63 - 1n) / 10n) {
      overflow = true;
      continue;
    }
    const y = f * 10n + BigInt(s.charCodeAt(i) - 48);
    if (y > TWO_63) {
      overflow = true;
      continue;
    }
    f = y;
    scale *= 10;
  }
  return { f, scale, rest: s.slice(i) };
}

/**
 * Go's time.ParseDuration: nanoseconds, or a DurationError with Go's message
 * ("time: invalid duration", "time: missing unit in duration", "time:
 * unknown unit").
 */
export function parseGoDuration(orig: string): bigint {
  const invalid = () => new DurationError(`time: invalid duration ${JSON.stringify(orig)}`);
  let s = orig;
  let neg = false;
  if (s !== '' && (s[0] === '-' || s[0] === '+')) {
    neg = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') throw invalid();
  let d = 0n;
  while (s !== '') {
    if (!(s[0] === '.' || isDigit(s[0]))) throw invalid();
    const before = s.length;
    const int = leadingInt(s);
    if (!int) throw invalid();
    let v = int.x;
    s = int.rest;
    const pre = before !== s.length;
    let post = false;
    let f = 0n;
    let scale = 1;
    if (s[0] === '.') {
      s = s.slice(1);
      const len = s.length;
      ({ f, scale, rest: s } = leadingFraction(s));
      post = len !== s.length;
    }
    if (!pre && !post) throw invalid();
    let i = 0;
    while (i < s.length && s[i] !== '.' && !isDigit(s[i])) i++;
    if (i === 0) throw new DurationError(`time: missing unit in duration ${JSON.stringify(orig)}`);
    const u = s.slice(0, i);
    s = s.slice(i);
    const unit = UNITS.get(u);
    if (unit === undefined) throw new DurationError(`time: unknown unit ${JSON.stringify(u)} in duration ${JSON.stringify(orig)}`);
    if (v > TWO_63 / unit) throw invalid();
    v *= unit;
    if (f > 0n) {
      // float64, as Go: nanosecond-accurate for fractions of an hour.
      v += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
      if (v > TWO_63) throw invalid();
    }
    d += v;
    if (d > TWO_63) throw invalid();
  }
  if (neg) return -d;
  if (d > TWO_63 - 1n) throw invalid();
  return d;
}

/**
 * A kpr duration setting in milliseconds (fractions below 1 ms kept): a Go
 * duration, or a bare non-negative number of seconds. `what` names the
 * setting in the error ("--sync-period").
 */
export function parseDuration(text: string, what = 'duration'): number {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) * 1000;
  let ns: bigint;
  try {
    ns = parseGoDuration(t);
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    throw new Error(`invalid ${what} "${text}" (a Go duration such as 300ms, 30s, 1m30s or 24h0m0s: ${err.message})`);
  }
  if (ns < 0n) throw new Error(`invalid ${what} "${text}" (must not be negative)`);
  return Number(ns / NS_PER_MS) + Number(ns % NS_PER_MS) / 1e6;
}
