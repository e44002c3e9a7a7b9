/**
 * Address parsing for the plan. Both families are planned; each address is
 * normalised like Go's ParseIPSloppy(…).String() (IPv4 leading zeros read as
 * decimal, IPv6 in RFC 5952 form, IPv4-mapped IPv6 printed dotted) so the
 * same endpoint always has one spelling, and gets a sort key that orders
 * numerically within a family.
 */
import { isIPv6 } from 'node:net';
import { canonicalAddr } from '../maps/layout.js';

export type IPFamily = 'IPv4' | 'IPv6';

export interface ParsedIPv4 {
  /** Canonical dotted quad. */
  text: string;
  /** The address as an unsigned 32-bit number, for sorting. */
  num: number;
}

export interface ParsedIP {
  family: IPFamily;
  /** Canonical text form. */
  text: string;
  /** Numeric order within the family: the u32 for IPv4, 32 hex digits for IPv6. */
  key: number | string;
}

/** IPV4_INVALID: not a dotted quad; IPV4_NONCANONICAL: one with leading zeros (use parseIPv4 for its text). */
export const IPV4_INVALID = -1;
export const IPV4_NONCANONICAL = -2;

/**
 * The u32 of a canonical dotted-quad IPv4 address (whose canonical text is
 * `s` itself), without allocating; IPV4_INVALID or IPV4_NONCANONICAL otherwise.
 */
export function ipv4Canonical(s: string | undefined | null): number {
  if (typeof s !== 'string' || s.length < 7 || s.length > 15) return IPV4_INVALID;
  let num = 0;
  let part = 0;
  let digits = 0;
  let dots = 0;
  let canonical = true;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits === 3) return IPV4_INVALID;
      if (digits > 0 && part === 0) canonical = false; // leading zero
      part = part * 10 + (c - 48);
      digits++;
    } else if (c === 46) {
      if (digits === 0 || part > 255 || dots === 3) return IPV4_INVALID;
      num = num * 256 + part;
      part = 0;
      digits = 0;
      dots++;
    } else {
      return IPV4_INVALID;
    }
  }
  if (dots !== 3 || digits === 0 || part > 255) return IPV4_INVALID;
  return canonical ? num * 256 + part : IPV4_NONCANONICAL;
}

/** Parses a dotted-quad IPv4 address; null when `s` is not one. Pure and allocation-light. */
export function parseIPv4(s: string | undefined | null): ParsedIPv4 | null {
  const num = ipv4Canonical(s);
  if (num >= 0) return { text: s!, num };
  if (num === IPV4_INVALID) return null;
  // Leading zeros ("010.0.0.1") are accepted and read as decimal, then normalised.
  const n = s!.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
  return { text: `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`, num: n };
}

/**
 * True for a syntactically valid IPv6 address (including IPv4-mapped forms).
 * A zone ("fe80::1%eth0") is not an address: Go's net.ParseIP, which the API
 * server and kube-proxy use, rejects it, and node:net's isIPv6 does not.
 */
export function looksLikeIPv6(s: unknown): boolean {
  return typeof s === 'string' && s.includes(':') && !s.includes('%') && isIPv6(s);
}

/** 32 hex digits of an IPv6 address in canonical form, for ordering. */
function ipv6SortKey(text: string): string {
  const [head, tail] = text.split('::');
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const all = tail === undefined ? h : [...h, ...new Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return all.map((g) => g.padStart(4, '0')).join('');
}

/** Parses an address of either family; null when it is neither. */
export function parseIP(s: string | undefined | null): ParsedIP | null {
  const v4 = parseIPv4(s);
  if (v4) return { family: 'IPv4', text: v4.text, key: v4.num };
  if (!looksLikeIPv6(s)) return null;
  const text = canonicalAddr(s as string);
  // An IPv4-mapped IPv6 address is an IPv4 address to Go's String(), and so here.
  const mapped = parseIPv4(text);
  if (mapped) return { family: 'IPv4', text: mapped.text, key: mapped.num };
  return { family: 'IPv6', text, key: ipv6SortKey(text) };
}

/** Order of two sort keys of one family (numbers for IPv4, hex strings for IPv6; IPv4 first). */
export function compareAddrKeys(a: number | string, b: number | string): number {
  if (typeof a === 'number') return typeof b === 'number' ? a - b : -1;
  if (typeof b === 'number') return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A CIDR, parsed: its family, network bits as a bigint and prefix length. */
export interface ParsedCIDR {
  family: IPFamily;
  /** Canonical "address/prefix" (host bits as given, like Go's ParseCIDR input trimmed). */
  text: string;
  bits: bigint;
  prefix: number;
}

function addrBits(ip: ParsedIP): bigint {
  if (typeof ip.key === 'number') return BigInt(ip.key);
  return BigInt(`0x${ip.key}`);
}

/** Parses "a.b.c.d/n" or "x::/n"; null when invalid. Surrounding whitespace is trimmed (rule 8 of docs/semantics.md). */
export function parseCIDR(s: unknown): ParsedCIDR | null {
  if (typeof s !== 'string') return null;
  const t = s.trim();
  const slash = t.indexOf('/');
  if (slash < 0) return null;
  const ip = parseIP(t.slice(0, slash));
  const p = t.slice(slash + 1);
  if (!ip || !/^\d{1,3}$/.test(p)) return null;
  const prefix = Number(p);
  const width = ip.family === 'IPv4' ? 32 : 128;
  if (prefix > width) return null;
  return { family: ip.family, text: `${ip.text}/${prefix}`, bits: addrBits(ip), prefix };
}

/** Whether `ip` lies inside `cidr` (same family only). */
export function cidrContains(cidr: ParsedCIDR, ip: ParsedIP): boolean {
  if (cidr.family !== ip.family) return false;
  const width = BigInt(cidr.family === 'IPv4' ? 32 : 128);
  const shift = width - BigInt(cidr.prefix);
  return addrBits(ip) >> shift === cidr.bits >> shift;
}
