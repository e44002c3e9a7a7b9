/**
 * IP addresses and CIDRs: the one place kpr parses, classifies and prints
 * them. Both families; each address is normalised like Go's
 * ParseIPSloppy(…).String() (IPv4 leading zeros read as decimal, IPv6 in
 * RFC 5952 form, IPv4-mapped IPv6 printed dotted) so the same endpoint
 * always has one spelling, and gets a sort key that orders numerically
 * within a family. A zone ("fe80::1%eth0") is not an address: Go's
 * net.ParseIP, which the API server and kube-proxy use, rejects it.
 *
 * Pure; no other kpr module imported. Byte encodings (map keys) are the
 * layouts' (maps/layout.ts), built on ipv4Canonical and ipv6Groups.
 */
import { isIPv6 } from 'node:net';

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
 * The fast path of every address read and map write (a full sync parses
 * ~10^5 of them).
 */
export function ipv4Canonical(s: unknown): number {
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

/** True for a dotted quad in canonical form (no leading zeros), as node:net's isIPv4. */
export function isCanonicalIPv4(s: unknown): boolean {
  return ipv4Canonical(s) >= 0;
}

/** The dotted quad of a u32. */
export function formatIPv4(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** Parses a dotted-quad IPv4 address; null when `s` is not one. Pure and allocation-light. */
export function parseIPv4(s: unknown): ParsedIPv4 | null {
  const num = ipv4Canonical(s);
  if (num >= 0) return { text: s as string, num };
  if (num === IPV4_INVALID) return null;
  // Leading zeros ("010.0.0.1") are accepted and read as decimal, then normalised.
  const n = (s as string).split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
  return { text: formatIPv4(n), num: n };
}

/**
 * True for a syntactically valid IPv6 address (including IPv4-mapped forms).
 * A zone ("fe80::1%eth0") is not an address: Go's net.ParseIP, which the API
 * server and kube-proxy use, rejects it, and node:net's isIPv6 does not.
 */
export function looksLikeIPv6(s: unknown): boolean {
  return typeof s === 'string' && s.includes(':') && !s.includes('%') && isIPv6(s);
}

/**
 * The 8 16-bit groups of an IPv6 address (any valid form, dotted tail
 * included); null when `s` is not one (a zone included). The URL parser
 * first brings the text to hex groups.
 */
export function ipv6Groups(s: unknown): number[] | null {
  if (!looksLikeIPv6(s)) return null;
  const canonical = new URL(`http://[${s as string}]/`).hostname.slice(1, -1);
  const [head, rest] = canonical.split('::');
  const parse = (g: string | undefined) => (g ? g.split(':').map((x) => parseInt(x, 16)) : []);
  const h = parse(head);
  if (rest === undefined) return h;
  const r = parse(rest);
  return [...h, ...new Array<number>(8 - h.length - r.length).fill(0), ...r];
}

/** The u32 of the IPv4 address that 8 groups map (::ffff:a.b.c.d); -1 when they are not IPv4-mapped. */
export function mappedIPv4(groups: readonly number[]): number {
  for (let i = 0; i < 5; i++) if (groups[i] !== 0) return -1;
  return groups[5] === 0xffff ? groups[6] * 65536 + groups[7] : -1;
}

/** RFC 5952 text of 8 groups (longest run of ≥ 2 zero groups as "::"); IPv4-mapped ones dotted, as Go prints them. */
export function formatIPv6(groups: readonly number[]): string {
  const mapped = mappedIPv4(groups);
  if (mapped >= 0) return formatIPv4(mapped);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Parses an address of either family; null when it is neither. */
export function parseIP(s: unknown): ParsedIP | null {
  const v4 = parseIPv4(s);
  if (v4) return { family: 'IPv4', text: v4.text, key: v4.num };
  const groups = ipv6Groups(s);
  if (!groups) return null;
  // An IPv4-mapped IPv6 address is an IPv4 address to Go's String(), and so here.
  const mapped = mappedIPv4(groups);
  if (mapped >= 0) return { family: 'IPv4', text: formatIPv4(mapped), key: mapped };
  return { family: 'IPv6', text: formatIPv6(groups), key: groups.map((g) => g.toString(16).padStart(4, '0')).join('') };
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

/**
 * Parses "a.b.c.d/n" or "x::/n" as the API server's IsValidCIDR
 * (ParseCIDRSloppy); null when invalid. Surrounding whitespace is trimmed (rule 8 of docs/semantics.md).
 */
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

/** The network of a CIDR, host bits cleared, in canonical text ("198.18.7.9/16" → "198.18.0.0/16"), as an LPM map key holds it. */
export function networkText(cidr: ParsedCIDR): string {
  const width = cidr.family === 'IPv4' ? 32 : 128;
  const shift = BigInt(width - cidr.prefix);
  const net = (cidr.bits >> shift) << shift;
  if (cidr.family === 'IPv4') return `${formatIPv4(Number(net))}/${cidr.prefix}`;
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((net >> BigInt(i * 16)) & 0xffffn));
  return `${formatIPv6(groups)}/${cidr.prefix}`;
}
