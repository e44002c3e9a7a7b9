/**
 * The JSON type checks every validator walks with, and how a problem ends the
 * walk: the first failed check throws a Problem (field path and reason), which
 * validateObject (agent/k8s/validate.ts) turns into its answer. Values are
 * quoted in reasons by show(), at most 64 characters.
 */

export class Problem {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {}
}

export function fail(field: string, reason: string): never {
  throw new Problem(field, reason);
}

const MAX_SHOWN = 64;

export function truncate(s: string): string {
  return s.length <= MAX_SHOWN ? s : `${s.slice(0, MAX_SHOWN - 1)}…`;
}

/** The value as JSON, at most 64 characters; arrays and objects by their size only. */
export function show(v: unknown): string {
  if (Array.isArray(v)) return `an array of ${v.length}`;
  if (v !== null && typeof v === 'object') return 'an object';
  if (typeof v === 'string') {
    // Whole code points (no half of a surrogate pair), then quoted; "…" inside the quotes when cut.
    const head =
      v.length > MAX_SHOWN
        ? Array.from(v.slice(0, MAX_SHOWN + 1))
            .slice(0, MAX_SHOWN)
            .join('')
        : v;
    const q = JSON.stringify(head);
    return q.length <= MAX_SHOWN && head === v ? q : `${q.slice(0, Math.min(q.length - 1, MAX_SHOWN - 2))}…"`;
  }
  if (v === undefined) return 'nothing';
  return truncate(String(v));
}

export function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

export type Obj = Record<string, unknown>;

export function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A JSON object; null and absence are "not set" (Go's zero value) unless `required`. */
export function object(v: unknown, field: string, required = false): Obj | undefined {
  if (v === undefined || v === null) {
    if (required) fail(field, 'required');
    return undefined;
  }
  if (!isObj(v)) fail(field, `must be an object, not ${typeOf(v)} (${show(v)})`);
  return v;
}

export function array(v: unknown, field: string, max?: number): unknown[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail(field, `must be an array, not ${typeOf(v)} (${show(v)})`);
  if (max !== undefined && v.length > max) fail(field, `must have at most ${max} entries, not ${v.length}`);
  return v;
}

export function string(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') fail(field, `must be a string, not ${typeOf(v)} (${show(v)})`);
  return v;
}

export function boolean(v: unknown, field: string): void {
  if (v !== undefined && v !== null && typeof v !== 'boolean') fail(field, `must be a boolean, not ${typeOf(v)} (${show(v)})`);
}

export const INT32_MIN = -2147483648;
export const INT32_MAX = 2147483647;

/** An int32 (what the API server's decoder accepts), within [min, max]. */
export function integer(v: unknown, field: string, min: number, max: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < INT32_MIN || v > INT32_MAX) {
    fail(field, `must be an integer, not ${typeOf(v)} (${show(v)})`);
  }
  if (v < min || v > max) fail(field, `must be between ${min} and ${max}, not ${v}`);
  return v;
}

export function oneOf(v: unknown, field: string, allowed: readonly string[]): string | undefined {
  const s = string(v, field);
  if (s !== undefined && s !== '' && !allowed.includes(s)) fail(field, `must be one of ${allowed.join(', ')}, not ${show(s)}`);
  return s;
}

/** A map of strings (labels, annotations). */
export function stringMap(v: unknown, field: string): Obj | undefined {
  const m = object(v, field);
  if (m) for (const k in m) string(m[k], `${field}[${k}]`);
  return m;
}
