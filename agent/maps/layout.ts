/**
 * TypeScript mirror of bpf/include/kpr_types.h: one codec per C struct.
 * Each layout lists its C fields with offsets and sizes; test/bpf/layout.test.ts
 * compares these lists with the BTF of the compiled objects, so a change on
 * either side that is not made on the other fails the tests.
 *
 * Addresses are strings in TypeScript ("198.19.0.10", "2001:db8::1") and 16
 * bytes in the maps, IPv4 stored IPv4-mapped (::ffff:a.b.c.d).
 */
import { formatIPv4, formatIPv6, ipv4Canonical, ipv6Groups, isCanonicalIPv4 } from '../net/ip.js';

export interface FieldLayout {
  /** Member name in the C struct. */
  c: string;
  offset: number;
  size: number;
}

export interface StructLayout {
  /** The C struct's name, as it appears in BTF. */
  cName: string;
  size: number;
  fields: FieldLayout[];
}

export const IPPROTO = { TCP: 6, UDP: 17, SCTP: 132 } as const;

/** Mirrors enum kpr_scope. */
export const SCOPE = { EXTERNAL: 0, INTERNAL: 1 } as const;
/** Mirrors enum kpr_svc_flags. */
export const SVC_FLAG = {
  CLUSTER_IP: 1 << 0,
  NODE_PORT: 1 << 1,
  EXTERNAL_IP: 1 << 2,
  LOAD_BALANCER: 1 << 3,
  AFFINITY: 1 << 4,
  LOCAL_ONLY: 1 << 5,
  SOURCE_RANGES: 1 << 6,
} as const;
/** Mirrors enum kpr_backend_flags. */
export const BE_FLAG = { LOCAL: 1 << 0 } as const;
/** Mirrors enum kpr_vip_flags. */
export const VIP_FLAG = { REFUSE_UNKNOWN_PORT: 1 << 0 } as const;

/** Mirrors enum kpr_stat. */
export const STAT = {
  CONNECT_XLATE: 0,
  SENDMSG_XLATE: 1,
  RECVMSG_XLATE: 2,
  GETPEERNAME_XLATE: 3,
  NO_BACKEND: 4,
  BACKEND_MISSING: 5,
  UNKNOWN_PORT: 6,
  AFFINITY_HIT: 7,
  SOCK_DESTROYED: 8,
  TC_DNAT: 9,
  TC_FWD: 10,
  TC_REVNAT: 11,
  TC_DROP_NO_BACKEND: 12,
  TC_DROP_SOURCE_RANGE: 13,
  TC_DROP_NO_SNAT_PORT: 14,
  TC_PASS_MALFORMED: 15,
} as const;
/** Mirrors enum kpr_ct_dir. */
export const CT_DIR = { ORIGINAL: 0, REPLY: 1 } as const;
/** Mirrors enum kpr_ct_flags. */
export const CT_FLAG = { SNAT: 1 << 0, CLOSING: 1 << 1 } as const;
/** Mirrors enum kpr_config_flags. */
export const CFG_FLAG = { SOCK_HOST_ONLY: 1 << 0 } as const;
export const STAT_MAX = 32;

export const MAP_NAMES = {
  svc: 'kpr_svc',
  backend: 'kpr_backend',
  vip: 'kpr_vip',
  revnat: 'kpr_revnat',
  affinity: 'kpr_affinity',
  affinityMatch: 'kpr_aff_match',
  term: 'kpr_term',
  svcMeta: 'kpr_svc_meta',
  ct: 'kpr_ct',
  srcRange: 'kpr_src_range',
  config: 'kpr_config',
  stats: 'kpr_stats',
} as const;

// ---------------------------------------------------------------- addresses

export const ADDR_SIZE = 16;

/** Writes an address as 16 bytes (IPv4 as ::ffff:a.b.c.d). Throws RangeError on anything else. */
export function encodeAddr(addr: string, buf: Buffer, off: number): void {
  const v4 = ipv4Canonical(addr);
  if (v4 >= 0) return encodeIPv4Num(v4, buf, off);
  const groups = ipv6Groups(addr);
  if (!groups) throw new RangeError(`not an IP address: ${addr}`);
  for (let i = 0; i < 8; i++) buf.writeUInt16BE(groups[i], off + i * 2);
}

/** encodeAddr's bytes for an IPv4 address given as its u32 (no text to parse: the agent's hot write paths). */
export function encodeIPv4Num(a: number, buf: Buffer, off: number): void {
  for (let i = 0; i < 10; i++) buf[off + i] = 0; // cheaper than fill() for 10 bytes
  buf[off + 10] = 0xff;
  buf[off + 11] = 0xff;
  buf[off + 12] = a >>> 24;
  buf[off + 13] = (a >>> 16) & 0xff;
  buf[off + 14] = (a >>> 8) & 0xff;
  buf[off + 15] = a & 0xff;
}

/** Reads 16 bytes back into a string; IPv4-mapped addresses come back dotted. */
export function decodeAddr(buf: Buffer, off: number): string {
  let mapped = buf[off + 10] === 0xff && buf[off + 11] === 0xff;
  for (let i = 0; mapped && i < 10; i++) if (buf[off + i] !== 0) mapped = false;
  if (mapped) return formatIPv4(buf.readUInt32BE(off + 12)); // the common case, without the groups
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push(buf.readUInt16BE(off + i * 2));
  return formatIPv6(groups);
}

// ---------------------------------------------------------------- kpr_svc_key

export interface SvcKey {
  addr: string;
  port: number;
  slot: number;
  proto: number;
  scope: number;
}

export const SVC_KEY: StructLayout = {
  cName: 'kpr_svc_key',
  size: 24,
  fields: [
    { c: 'addr', offset: 0, size: 16 },
    { c: 'port', offset: 16, size: 2 },
    { c: 'slot', offset: 18, size: 2 },
    { c: 'proto', offset: 20, size: 1 },
    { c: 'scope', offset: 21, size: 1 },
    { c: 'pad', offset: 22, size: 2 },
  ],
};

export function encodeSvcKey(k: SvcKey, buf: Buffer = Buffer.alloc(SVC_KEY.size), off = 0): Buffer {
  encodeAddr(k.addr, buf, off);
  buf.writeUInt16BE(k.port, off + 16); // __be16
  buf.writeUInt16LE(k.slot, off + 18); // host order (x86_64/arm64 are little endian)
  buf[off + 20] = k.proto;
  buf[off + 21] = k.scope;
  buf[off + 22] = 0;
  buf[off + 23] = 0;
  return buf;
}

export function decodeSvcKey(buf: Buffer, off = 0): SvcKey {
  return {
    addr: decodeAddr(buf, off),
    port: buf.readUInt16BE(off + 16),
    slot: buf.readUInt16LE(off + 18),
    proto: buf[off + 20],
    scope: buf[off + 21],
  };
}

// ---------------------------------------------------------------- kpr_svc_val

export interface SvcVal {
  /** Slot > 0: the backend id. Slot 0: the affinity timeout in seconds (0 without affinity). */
  backendId: number;
  count: number;
  revNatId: number;
  flags: number;
}

export const SVC_VAL: StructLayout = {
  cName: 'kpr_svc_val',
  size: 12,
  fields: [
    { c: 'backend_id', offset: 0, size: 4 },
    { c: 'count', offset: 4, size: 2 },
    { c: 'rev_nat_id', offset: 6, size: 2 },
    { c: 'flags', offset: 8, size: 2 },
    { c: 'pad', offset: 10, size: 2 },
  ],
};

export function encodeSvcVal(v: SvcVal, buf: Buffer = Buffer.alloc(SVC_VAL.size), off = 0): Buffer {
  buf.writeUInt32LE(v.backendId, off);
  buf.writeUInt16LE(v.count, off + 4);
  buf.writeUInt16LE(v.revNatId, off + 6);
  buf.writeUInt16LE(v.flags, off + 8);
  buf.writeUInt16LE(0, off + 10);
  return buf;
}

export function decodeSvcVal(buf: Buffer, off = 0): SvcVal {
  return {
    backendId: buf.readUInt32LE(off),
    count: buf.readUInt16LE(off + 4),
    revNatId: buf.readUInt16LE(off + 6),
    flags: buf.readUInt16LE(off + 8),
  };
}

// ---------------------------------------------------------------- backend map

export interface Backend {
  addr: string;
  port: number;
  proto: number;
  flags: number;
}

/** Key of the backend map: a bare __u32 id. */
export const BACKEND_ID_SIZE = 4;

export const BACKEND: StructLayout = {
  cName: 'kpr_backend',
  size: 20,
  fields: [
    { c: 'addr', offset: 0, size: 16 },
    { c: 'port', offset: 16, size: 2 },
    { c: 'proto', offset: 18, size: 1 },
    { c: 'flags', offset: 19, size: 1 },
  ],
};

export function encodeBackendId(id: number, buf: Buffer = Buffer.alloc(BACKEND_ID_SIZE), off = 0): Buffer {
  buf.writeUInt32LE(id, off);
  return buf;
}

export function decodeBackendId(buf: Buffer, off = 0): number {
  return buf.readUInt32LE(off);
}

export function encodeBackend(b: Backend, buf: Buffer = Buffer.alloc(BACKEND.size), off = 0): Buffer {
  encodeAddr(b.addr, buf, off);
  buf.writeUInt16BE(b.port, off + 16);
  buf[off + 18] = b.proto;
  buf[off + 19] = b.flags;
  return buf;
}

export function decodeBackend(buf: Buffer, off = 0): Backend {
  return {
    addr: decodeAddr(buf, off),
    port: buf.readUInt16BE(off + 16),
    proto: buf[off + 18],
    flags: buf[off + 19],
  };
}

// ---------------------------------------------------------------- service addresses

export const VIP_KEY: StructLayout = {
  cName: 'kpr_vip_key',
  size: 16,
  fields: [{ c: 'addr', offset: 0, size: 16 }],
};

export const VIP_VAL: StructLayout = {
  cName: 'kpr_vip_val',
  size: 4,
  fields: [{ c: 'flags', offset: 0, size: 4 }],
};

export function encodeVipKey(addr: string, buf: Buffer = Buffer.alloc(VIP_KEY.size), off = 0): Buffer {
  encodeAddr(addr, buf, off);
  return buf;
}

export function decodeVipKey(buf: Buffer, off = 0): string {
  return decodeAddr(buf, off);
}

export function encodeVipVal(flags: number, buf: Buffer = Buffer.alloc(VIP_VAL.size), off = 0): Buffer {
  buf.writeUInt32LE(flags, off);
  return buf;
}

export function decodeVipVal(buf: Buffer, off = 0): number {
  return buf.readUInt32LE(off);
}

// ---------------------------------------------------------------- reverse NAT

export interface RevNatKey {
  cookie: bigint;
  addr: string;
  port: number;
}

export const REVNAT_KEY: StructLayout = {
  cName: 'kpr_revnat_key',
  size: 32,
  fields: [
    { c: 'cookie', offset: 0, size: 8 },
    { c: 'addr', offset: 8, size: 16 },
    { c: 'port', offset: 24, size: 2 },
    { c: 'pad', offset: 26, size: 6 },
  ],
};

/** The key the socket hooks write for a socket they translated (UDP socket termination looks sockets up by it). */
export function encodeRevNatKey(k: RevNatKey, buf: Buffer = Buffer.alloc(REVNAT_KEY.size), off = 0): Buffer {
  buf.writeBigUInt64LE(k.cookie, off);
  encodeAddr(k.addr, buf, off + 8);
  buf.writeUInt16BE(k.port, off + 24);
  buf.fill(0, off + 26, off + 32);
  return buf;
}

export function decodeRevNatKey(buf: Buffer, off = 0): RevNatKey {
  return { cookie: buf.readBigUInt64LE(off), addr: decodeAddr(buf, off + 8), port: buf.readUInt16BE(off + 24) };
}

export interface RevNatVal {
  addr: string;
  port: number;
  revNatId: number;
}

export const REVNAT_VAL: StructLayout = {
  cName: 'kpr_revnat_val',
  size: 20,
  fields: [
    { c: 'addr', offset: 0, size: 16 },
    { c: 'port', offset: 16, size: 2 },
    { c: 'rev_nat_id', offset: 18, size: 2 },
  ],
};

export function encodeRevNatVal(v: RevNatVal, buf: Buffer = Buffer.alloc(REVNAT_VAL.size), off = 0): Buffer {
  encodeAddr(v.addr, buf, off);
  buf.writeUInt16BE(v.port, off + 16);
  buf.writeUInt16LE(v.revNatId, off + 18);
  return buf;
}

export function decodeRevNatVal(buf: Buffer, off = 0): RevNatVal {
  return { addr: decodeAddr(buf, off), port: buf.readUInt16BE(off + 16), revNatId: buf.readUInt16LE(off + 18) };
}

// ---------------------------------------------------------------- affinity

export interface AffinityKey {
  netnsCookie: bigint;
  /** The client address on the tc path; "::" on the socket path. */
  client: string;
  revNatId: number;
}

export const AFFINITY_KEY: StructLayout = {
  cName: 'kpr_affinity_key',
  size: 32,
  fields: [
    { c: 'netns_cookie', offset: 0, size: 8 },
    { c: 'client', offset: 8, size: 16 },
    { c: 'rev_nat_id', offset: 24, size: 2 },
    { c: 'pad', offset: 26, size: 6 },
  ],
};

export function decodeAffinityKey(buf: Buffer, off = 0): AffinityKey {
  return { netnsCookie: buf.readBigUInt64LE(off), client: decodeAddr(buf, off + 8), revNatId: buf.readUInt16LE(off + 24) };
}

export interface AffinityVal {
  lastUsedNs: bigint;
  backendId: number;
}

export const AFFINITY_VAL: StructLayout = {
  cName: 'kpr_affinity_val',
  size: 16,
  fields: [
    { c: 'last_used_ns', offset: 0, size: 8 },
    { c: 'backend_id', offset: 8, size: 4 },
    { c: 'pad', offset: 12, size: 4 },
  ],
};

export function decodeAffinityVal(buf: Buffer, off = 0): AffinityVal {
  return { lastUsedNs: buf.readBigUInt64LE(off), backendId: buf.readUInt32LE(off + 8) };
}

export interface AffinityMatchKey {
  backendId: number;
  revNatId: number;
}

export const AFFINITY_MATCH_KEY: StructLayout = {
  cName: 'kpr_affinity_match_key',
  size: 8,
  fields: [
    { c: 'backend_id', offset: 0, size: 4 },
    { c: 'rev_nat_id', offset: 4, size: 2 },
    { c: 'pad', offset: 6, size: 2 },
  ],
};

export function encodeAffinityMatchKey(k: AffinityMatchKey, buf: Buffer = Buffer.alloc(AFFINITY_MATCH_KEY.size), off = 0): Buffer {
  buf.writeUInt32LE(k.backendId, off);
  buf.writeUInt16LE(k.revNatId, off + 4);
  buf.writeUInt16LE(0, off + 6);
  return buf;
}

export function decodeAffinityMatchKey(buf: Buffer, off = 0): AffinityMatchKey {
  return { backendId: buf.readUInt32LE(off), revNatId: buf.readUInt16LE(off + 4) };
}

// ---------------------------------------------------------------- UDP socket termination

export interface TermKey {
  addr: string;
  port: number;
  /** The frontend the backend left. */
  revNatId: number;
  proto: number;
}

export const TERM_KEY: StructLayout = {
  cName: 'kpr_term_key',
  size: 24,
  fields: [
    { c: 'addr', offset: 0, size: 16 },
    { c: 'port', offset: 16, size: 2 },
    { c: 'rev_nat_id', offset: 18, size: 2 },
    { c: 'proto', offset: 20, size: 1 },
    { c: 'pad', offset: 21, size: 3 },
  ],
};

export function encodeTermKey(k: TermKey, buf: Buffer = Buffer.alloc(TERM_KEY.size), off = 0): Buffer {
  encodeAddr(k.addr, buf, off);
  buf.writeUInt16BE(k.port, off + 16);
  buf.writeUInt16LE(k.revNatId, off + 18);
  buf[off + 20] = k.proto;
  buf.fill(0, off + 21, off + 24);
  return buf;
}

export function decodeTermKey(buf: Buffer, off = 0): TermKey {
  return { addr: decodeAddr(buf, off), port: buf.readUInt16BE(off + 16), revNatId: buf.readUInt16LE(off + 18), proto: buf[off + 20] };
}

// ---------------------------------------------------------------- service names

/** Mirrors enum kpr_frontend_type. */
export const FE_TYPE = { CLUSTER_IP: 0, NODE_PORT: 1, LOAD_BALANCER: 2, EXTERNAL_IP: 3 } as const;

export interface SvcMeta {
  /** "namespace/name". */
  name: string;
  portName: string;
  type: number;
}

export const SVC_META: StructLayout = {
  cName: 'kpr_svc_meta',
  size: 132,
  fields: [
    { c: 'name', offset: 0, size: 96 },
    { c: 'port_name', offset: 96, size: 32 },
    { c: 'type', offset: 128, size: 1 },
    { c: 'pad', offset: 129, size: 3 },
  ],
};

/** NUL-padded C string; text longer than the field is cut (never unterminated). */
function writeCString(text: string, buf: Buffer, off: number, size: number): void {
  buf.fill(0, off, off + size);
  buf.write(text, off, size - 1, 'utf8');
}

function readCString(buf: Buffer, off: number, size: number): string {
  const end = buf.indexOf(0, off);
  return buf.toString('utf8', off, end < 0 || end > off + size ? off + size : end);
}

export function encodeSvcMeta(m: SvcMeta, buf: Buffer = Buffer.alloc(SVC_META.size), off = 0): Buffer {
  writeCString(m.name, buf, off, 96);
  writeCString(m.portName, buf, off + 96, 32);
  buf[off + 128] = m.type;
  buf.fill(0, off + 129, off + 132);
  return buf;
}

export function decodeSvcMeta(buf: Buffer, off = 0): SvcMeta {
  return { name: readCString(buf, off, 96), portName: readCString(buf, off + 96, 32), type: buf[off + 128] };
}

// ---------------------------------------------------------------- conntrack (tc path)

export interface CtKey {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
  dir: number;
}

export const CT_KEY: StructLayout = {
  cName: 'kpr_ct_key',
  size: 40,
  fields: [
    { c: 'saddr', offset: 0, size: 16 },
    { c: 'daddr', offset: 16, size: 16 },
    { c: 'sport', offset: 32, size: 2 },
    { c: 'dport', offset: 34, size: 2 },
    { c: 'proto', offset: 36, size: 1 },
    { c: 'dir', offset: 37, size: 1 },
    { c: 'pad', offset: 38, size: 2 },
  ],
};

export function decodeCtKey(buf: Buffer, off = 0): CtKey {
  return {
    saddr: decodeAddr(buf, off),
    daddr: decodeAddr(buf, off + 16),
    sport: buf.readUInt16BE(off + 32),
    dport: buf.readUInt16BE(off + 34),
    proto: buf[off + 36],
    dir: buf[off + 37],
  };
}

export interface CtVal {
  natSaddr: string;
  natDaddr: string;
  natSport: number;
  natDport: number;
  backendId: number;
  expiresNs: bigint;
  revNatId: number;
  flags: number;
}

export const CT_VAL: StructLayout = {
  cName: 'kpr_ct_val',
  size: 56,
  fields: [
    { c: 'nat_saddr', offset: 0, size: 16 },
    { c: 'nat_daddr', offset: 16, size: 16 },
    { c: 'nat_sport', offset: 32, size: 2 },
    { c: 'nat_dport', offset: 34, size: 2 },
    { c: 'backend_id', offset: 36, size: 4 },
    { c: 'expires_ns', offset: 40, size: 8 },
    { c: 'rev_nat_id', offset: 48, size: 2 },
    { c: 'flags', offset: 50, size: 1 },
    { c: 'pad', offset: 51, size: 5 },
  ],
};

export function decodeCtVal(buf: Buffer, off = 0): CtVal {
  return {
    natSaddr: decodeAddr(buf, off),
    natDaddr: decodeAddr(buf, off + 16),
    natSport: buf.readUInt16BE(off + 32),
    natDport: buf.readUInt16BE(off + 34),
    backendId: buf.readUInt32LE(off + 36),
    expiresNs: buf.readBigUInt64LE(off + 40),
    revNatId: buf.readUInt16LE(off + 48),
    flags: buf[off + 50],
  };
}

/** Offset of expires_ns in kpr_ct_val, for the expiry sweep (no full decode). */
export const CT_VAL_EXPIRES_OFFSET = 40;

// ---------------------------------------------------------------- source ranges

export interface SrcRangeKey {
  revNatId: number;
  /** "198.18.0.0/15" or "2001:db8::/32". */
  cidr: string;
}

export const SRC_RANGE_KEY: StructLayout = {
  cName: 'kpr_src_range_key',
  size: 24,
  fields: [
    { c: 'prefixlen', offset: 0, size: 4 },
    { c: 'rev_nat_id', offset: 4, size: 2 },
    { c: 'pad', offset: 6, size: 2 },
    { c: 'addr', offset: 8, size: 16 },
  ],
};

/** The LPM key of a range: prefixlen counts rev_nat_id + pad (32 bits) and the address prefix, IPv4 as a /96+n. */
export function encodeSrcRangeKey(k: SrcRangeKey, buf: Buffer = Buffer.alloc(SRC_RANGE_KEY.size), off = 0): Buffer {
  const [addr, lenText] = k.cidr.split('/');
  const v4 = isCanonicalIPv4(addr);
  const max = v4 ? 32 : 128;
  const len = lenText === undefined ? max : Number(lenText);
  if (!Number.isInteger(len) || len < 0 || len > max) throw new RangeError(`invalid CIDR ${k.cidr}`);
  buf.writeUInt32LE(32 + (v4 ? 96 : 0) + len, off);
  buf.writeUInt16LE(k.revNatId, off + 4);
  buf.writeUInt16LE(0, off + 6);
  encodeAddr(addr, buf, off + 8);
  return buf;
}

export function decodeSrcRangeKey(buf: Buffer, off = 0): SrcRangeKey {
  const bits = buf.readUInt32LE(off) - 32;
  const addr = decodeAddr(buf, off + 8);
  return { revNatId: buf.readUInt16LE(off + 4), cidr: `${addr}/${isCanonicalIPv4(addr) ? bits - 96 : bits}` };
}

// ---------------------------------------------------------------- node configuration

export interface KprConfig {
  hostNetnsCookie: bigint;
  /** Node address for SNAT of IPv4 flows ("" when the node has none). */
  snatV4: string;
  snatV6: string;
  tcpTimeoutS: number;
  tcpClosingTimeoutS: number;
  udpTimeoutS: number;
  flags: number;
}

export const CONFIG: StructLayout = {
  cName: 'kpr_config',
  size: 56,
  fields: [
    { c: 'host_netns_cookie', offset: 0, size: 8 },
    { c: 'snat_v4', offset: 8, size: 16 },
    { c: 'snat_v6', offset: 24, size: 16 },
    { c: 'tcp_timeout_s', offset: 40, size: 4 },
    { c: 'tcp_closing_timeout_s', offset: 44, size: 4 },
    { c: 'udp_timeout_s', offset: 48, size: 4 },
    { c: 'flags', offset: 52, size: 4 },
  ],
};

export function encodeConfig(c: KprConfig, buf: Buffer = Buffer.alloc(CONFIG.size), off = 0): Buffer {
  buf.fill(0, off, off + CONFIG.size);
  buf.writeBigUInt64LE(c.hostNetnsCookie, off);
  if (c.snatV4) encodeAddr(c.snatV4, buf, off + 8);
  if (c.snatV6) encodeAddr(c.snatV6, buf, off + 24);
  buf.writeUInt32LE(c.tcpTimeoutS, off + 40);
  buf.writeUInt32LE(c.tcpClosingTimeoutS, off + 44);
  buf.writeUInt32LE(c.udpTimeoutS, off + 48);
  buf.writeUInt32LE(c.flags, off + 52);
  return buf;
}

export function decodeConfig(buf: Buffer, off = 0): KprConfig {
  const zero = (o: number) => buf.subarray(off + o, off + o + 16).every((b) => b === 0);
  return {
    hostNetnsCookie: buf.readBigUInt64LE(off),
    snatV4: zero(8) ? '' : decodeAddr(buf, off + 8),
    snatV6: zero(24) ? '' : decodeAddr(buf, off + 24),
    tcpTimeoutS: buf.readUInt32LE(off + 40),
    tcpClosingTimeoutS: buf.readUInt32LE(off + 44),
    udpTimeoutS: buf.readUInt32LE(off + 48),
    flags: buf.readUInt32LE(off + 52),
  };
}

/** Every layout the BTF check covers. */
export const ALL_LAYOUTS: StructLayout[] = [
  SVC_KEY,
  SVC_VAL,
  BACKEND,
  VIP_KEY,
  VIP_VAL,
  REVNAT_KEY,
  REVNAT_VAL,
  AFFINITY_KEY,
  AFFINITY_VAL,
  AFFINITY_MATCH_KEY,
  TERM_KEY,
  SVC_META,
  CT_KEY,
  CT_VAL,
  SRC_RANGE_KEY,
  CONFIG,
];
