/**
 * Address parsing for the plan. The datapath is IPv4 only, so the planner
 * needs a strict IPv4 parser (that also normalises, like Go's ParseIPSloppy:
 * leading zeros are read as decimal) and a way to tell IPv6 from garbage so
 * skip reasons can say which one it was.
 */
import { isIPv6 } from 'node:net';

export interface ParsedIPv4 {
  /** Canonical dotted quad. */
  text: string;
  /** The address as an unsigned 32-bit number, for sorting. */
  num: number;
}

/** Parses a dotted-quad IPv4 address; null when `s` is not one. Pure and allocation-light. */
export function parseIPv4(s: string | undefined | null): ParsedIPv4 | null {
  if (typeof s !== 'string' || s.length < 7 || s.length > 15) return null;
  let num = 0;
  let part = 0;
  let digits = 0;
  let dots = 0;
  let canonical = true;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits === 3) return null;
      if (digits > 0 && part === 0) canonical = false; // leading zero
      part = part * 10 + (c - 48);
      digits++;
    } else if (c === 46) {
      if (digits === 0 || part > 255 || dots === 3) return null;
      num = num * 256 + part;
      part = 0;
      digits = 0;
      dots++;
    } else {
      return null;
    }
  }
  if (dots !== 3 || digits === 0 || part > 255) return null;
  num = num * 256 + part;
  const text = canonical ? s : `${num >>> 24}.${(num >>> 16) & 255}.${(num >>> 8) & 255}.${num & 255}`;
  return { text, num };
}

/** True for a syntactically valid IPv6 address (including IPv4-mapped forms). */
export function looksLikeIPv6(s: unknown): boolean {
  return typeof s === 'string' && s.includes(':') && isIPv6(s);
}
