/**
 * TypeScript mirror of bpf/include/kpr_types.h: the constants, the value
 * types (map-types.ts, re-exported here), and one codec per C struct,
 * derived from the struct's layout in registry.ts (test/bpf/layout.test.ts
 * compares the layouts with the BTF of the compiled objects, so a change on
 * either side that is not made on the other fails the tests).
 *
 * Addresses are strings in TypeScript ("198.19.0.10", "2001:db8::1") and 16
 * bytes in the maps, IPv4 stored IPv4-mapped (::ffff:a.b.c.d).
 */
import { formatIPv4, formatIPv6, ipv4Canonical, ipv6Groups, isCanonicalIPv4 } from '../net/ip.js';
import * as R from './registry.js';
import type { MapSpec } from './registry.js';
import { structCodec, type AddrCodec, type Codec, type StructLayout } from './struct-codec.js';
import type { SrcRangeKey, SvcCidrKey } from './map-types.js';

export type { FieldLayout, StructLayout } from './struct-codec.js';
export type {
  AffinityKey,
  AffinityMatchKey,
  AffinityVal,
  Backend,
  CtKey,
  CtVal,
  KprConfig,
  KprEvent,
  KprMonitor,
  MaglevChunk,
  MaglevKey,
  MaglevRef,
  MaglevRefKey,
  RevNatKey,
  RevNatVal,
  SrcRangeKey,
  SvcCidrKey,
  SvcKey,
  SvcMeta,
  SvcStat,
  SvcVal,
  TermKey,
} from './map-types.js';
export {
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
  SVC_STAT,
  CT_KEY,
  CT_VAL,
  SRC_RANGE_KEY,
  SVC_CIDR_KEY,
  CONFIG,
  MONITOR,
  EVENT,
  ALL_LAYOUTS,
} from './registry.js';

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
  LOCAL_BACKEND: 1 << 7,
} as const;
/**
 * Mirrors enum kpr_svc_alg: how a new connection picks a backend when
 * affinity does not (bpf/include/kpr_lb_select.h). It lives in bits 12-15
 * of slot 0's flags (KPR_SVC_ALG_SHIFT, KPR_SVC_ALG_MASK), spare bits, so
 * kpr_svc_val keeps its layout; svcAlgFlags() puts it there.
 */
export const SVC_ALG = { RANDOM: 0, MAGLEV: 1 } as const;
export const SVC_ALG_SHIFT = 12;
export const SVC_ALG_MASK = 0xf;
/** The flags bits that carry algorithm `alg` (an SVC_ALG value). */
export const svcAlgFlags = (alg: number): number => (alg & SVC_ALG_MASK) << SVC_ALG_SHIFT;
/** The SVC_ALG value of slot 0's flags. */
export const svcAlgOf = (flags: number): number => (flags >> SVC_ALG_SHIFT) & SVC_ALG_MASK;
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
  TC_CT_LOST: 16,
  MONITOR_LOST: 17,
  TC_CT_REPLY_RESTORED: 18,
  UNALLOCATED_REFUSED: 19,
  TC_DROP_UNALLOCATED: 20,
  TC_SNAT_SKIP_NODE_SOCKET: 21,
  TC_SNAT_SKIP_CONNTRACK: 22,
  TC_SNAT_EXHAUSTED: 23,
  SOCK_MASQ_DIVERT: 24,
  TC_MASQ_SNAT: 25,
  TC_DROP_SCTP: 26,
  MAGLEV_FALLBACK: 27,
  MAGLEV_SOCK_UNBOUND: 28,
  TC_SYN_RETRY_KEPT: 29,
} as const;
/** Mirrors enum kpr_ct_dir. */
export const CT_DIR = { ORIGINAL: 0, REPLY: 1 } as const;
/** Mirrors enum kpr_ct_flags. */
export const CT_FLAG = { SNAT: 1 << 0, CLOSING: 1 << 1, ANSWERED: 1 << 2 } as const;
/** Mirrors enum kpr_config_flags. */
export const CFG_FLAG = { SOCK_HOST_ONLY: 1 << 0, NO_SVC_STATS: 1 << 1, MIGRATING: 1 << 2, MASQ_POD: 1 << 3, SNAT_PORTS_RESERVED: 1 << 4 } as const;
export const STAT_MAX = 32;
/** Mirrors enum kpr_snat_ports: the source ports the tc path SNATs to (docs/semantics.md, rule 37). */
export const SNAT_PORT_RANGE = { min: 61000, max: 65535 } as const;
/** Mirrors enum kpr_event_type (kpr_event.h). */
export const EVENT_TYPE = {
  TRANSLATED: 1,
  NO_ENDPOINT: 2,
  NO_LOCAL_ENDPOINT: 3,
  UNKNOWN_PORT: 4,
  SOURCE_RANGE: 5,
  BACKEND_MISSING: 6,
  NO_SNAT_PORT: 7,
  UNALLOCATED: 8,
  MASQ_DIVERT: 10,
  SCTP_UNSUPPORTED: 11,
} as const;
/** Mirrors enum kpr_event_hook. */
export const EVENT_HOOK = { CONNECT4: 1, CONNECT6: 2, SENDMSG4: 3, SENDMSG6: 4, TC_EXT: 5, TC_POD: 6 } as const;
/** Mirrors enum kpr_event_flags. */
export const EVENT_FLAG = { AFFINITY: 1 << 0, SNAT: 1 << 1, CT_LOST: 1 << 2 } as const;

export { MAP_NAMES } from './registry.js';

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

// ---------------------------------------------------------------- codecs (one per layout in registry.ts)

const ADDR: AddrCodec = { encode: encodeAddr, decode: decodeAddr };
const codecs = new Map<StructLayout, Codec<unknown>>();

/** The codec of a layout of registry.ts (derived once; kpr_src_range_key's is the CIDR one below). */
export function codecOf<T>(layout: StructLayout<T>): Codec<T> {
  let c = codecs.get(layout);
  if (!c) codecs.set(layout, (c = structCodec(layout, ADDR) as Codec<unknown>));
  return c as Codec<T>;
}

/** A registry map's key and value codecs. */
export function mapCodecs<K, V>(spec: MapSpec<K, V>): { key: Codec<K>; value: Codec<V> } {
  return { key: codecOf(spec.key), value: codecOf(spec.value) };
}

// ---------------------------------------------------------------- kpr_svc_key

export const { encode: encodeSvcKey, decode: decodeSvcKey } = codecOf(R.SVC_KEY);

// ---------------------------------------------------------------- kpr_svc_val

export const { encode: encodeSvcVal, decode: decodeSvcVal } = codecOf(R.SVC_VAL);

// ---------------------------------------------------------------- backend map

/** Key of the backend map: a bare __u32 id. */
export const BACKEND_ID_SIZE = R.U32.size;

export const { encode: encodeBackendId, decode: decodeBackendId } = codecOf(R.U32);

export const { encode: encodeBackend, decode: decodeBackend } = codecOf(R.BACKEND);

// ---------------------------------------------------------------- service addresses

export const { encode: encodeVipKey, decode: decodeVipKey } = codecOf(R.VIP_KEY);

export const { encode: encodeVipVal, decode: decodeVipVal } = codecOf(R.VIP_VAL);

// ---------------------------------------------------------------- reverse NAT

/** The key the socket hooks write for a socket they translated (UDP socket termination looks sockets up by it). */
export const { encode: encodeRevNatKey, decode: decodeRevNatKey } = codecOf(R.REVNAT_KEY);

export const { encode: encodeRevNatVal, decode: decodeRevNatVal } = codecOf(R.REVNAT_VAL);

// ---------------------------------------------------------------- affinity

export const decodeAffinityKey = codecOf(R.AFFINITY_KEY).decode;

export const decodeAffinityVal = codecOf(R.AFFINITY_VAL).decode;

export const { encode: encodeAffinityMatchKey, decode: decodeAffinityMatchKey } = codecOf(R.AFFINITY_MATCH_KEY);

// ---------------------------------------------------------------- UDP socket termination

export const { encode: encodeTermKey, decode: decodeTermKey } = codecOf(R.TERM_KEY);

// ---------------------------------------------------------------- service names

/** Mirrors enum kpr_frontend_type. */
export const FE_TYPE = { CLUSTER_IP: 0, NODE_PORT: 1, LOAD_BALANCER: 2, EXTERNAL_IP: 3 } as const;

/** Names longer than their fields are cut (never unterminated). */
export const { encode: encodeSvcMeta, decode: decodeSvcMeta } = codecOf(R.SVC_META);

// ---------------------------------------------------------------- conntrack (tc path)

export const decodeCtKey = codecOf(R.CT_KEY).decode;

export const decodeCtVal = codecOf(R.CT_VAL).decode;

/** Offset of expires_ns in kpr_ct_val, for the expiry sweep (no full decode). */
export const CT_VAL_EXPIRES_OFFSET = R.CT_VAL.at.expires_ns;

// ---------------------------------------------------------------- source ranges

/**
 * A CIDR's address and its prefix length over the 128-bit address field of
 * kpr's LPM keys, where IPv4 is stored IPv4-mapped: a /n of IPv4 is a /96+n.
 */
function lpmPrefix(cidr: string): { addr: string; mappedLen: number } {
  const [addr, lenText] = cidr.split('/');
  const v4 = isCanonicalIPv4(addr);
  const max = v4 ? 32 : 128;
  const len = lenText === undefined ? max : Number(lenText);
  if (!Number.isInteger(len) || len < 0 || len > max) throw new RangeError(`invalid CIDR ${cidr}`);
  return { addr, mappedLen: (v4 ? 96 : 0) + len };
}

/** kpr_src_range_key's members as stored. */
interface SrcRangeKeyBytes {
  prefixlen: number;
  frontendId: number;
  addr: string;
}

const srcRangeKeyBytes = structCodec(R.SRC_RANGE_KEY as StructLayout as StructLayout<SrcRangeKeyBytes>, ADDR);

/** The LPM key of a range: prefixlen counts frontend_id + pad (32 bits) and the address prefix, IPv4 as a /96+n. */
export function encodeSrcRangeKey(k: SrcRangeKey, buf: Buffer = Buffer.alloc(R.SRC_RANGE_KEY.size), off = 0): Buffer {
  const { addr, mappedLen } = lpmPrefix(k.cidr);
  return srcRangeKeyBytes.encode({ prefixlen: 32 + mappedLen, frontendId: k.frontendId, addr }, buf, off);
}

export function decodeSrcRangeKey(buf: Buffer, off = 0): SrcRangeKey {
  const { prefixlen, frontendId, addr }: SrcRangeKeyBytes = srcRangeKeyBytes.decode(buf, off);
  const bits = prefixlen - 32;
  return { frontendId, cidr: `${addr}/${isCanonicalIPv4(addr) ? bits - 96 : bits}` };
}

codecs.set(R.SRC_RANGE_KEY, { size: R.SRC_RANGE_KEY.size, encode: encodeSrcRangeKey, decode: decodeSrcRangeKey } as Codec<unknown>);

// ---------------------------------------------------------------- service ranges

/** kpr_svc_cidr_key's members as stored. */
interface SvcCidrKeyBytes {
  prefixlen: number;
  addr: string;
}

const svcCidrKeyBytes = structCodec(R.SVC_CIDR_KEY as StructLayout as StructLayout<SvcCidrKeyBytes>, ADDR);

/** The LPM key of a service range: IPv4 as a /96+n of its IPv4-mapped form. */
export function encodeSvcCidrKey(k: SvcCidrKey, buf: Buffer = Buffer.alloc(R.SVC_CIDR_KEY.size), off = 0): Buffer {
  const { addr, mappedLen } = lpmPrefix(k.cidr);
  return svcCidrKeyBytes.encode({ prefixlen: mappedLen, addr }, buf, off);
}

export function decodeSvcCidrKey(buf: Buffer, off = 0): SvcCidrKey {
  const { prefixlen, addr }: SvcCidrKeyBytes = svcCidrKeyBytes.decode(buf, off);
  return { cidr: `${addr}/${isCanonicalIPv4(addr) ? prefixlen - 96 : prefixlen}` };
}

codecs.set(R.SVC_CIDR_KEY, { size: R.SVC_CIDR_KEY.size, encode: encodeSvcCidrKey, decode: decodeSvcCidrKey } as Codec<unknown>);

// ---------------------------------------------------------------- node configuration

export const { encode: encodeConfig, decode: decodeConfig } = codecOf(R.CONFIG);
/** kpr_maglev: (table id, chunk) -> KPR_MAGLEV_CHUNK slot numbers. */
export const { encode: encodeMaglevKey, decode: decodeMaglevKey } = codecOf(R.MAGLEV_KEY);
export const { encode: encodeMaglevChunk, decode: decodeMaglevChunk } = codecOf(R.MAGLEV_CHUNK);
/** kpr_maglev_ref: (frontend id, scope) -> table id, M. */
export const { encode: encodeMaglevRefKey, decode: decodeMaglevRefKey } = codecOf(R.MAGLEV_REF_KEY);
export const { encode: encodeMaglevRef, decode: decodeMaglevRef } = codecOf(R.MAGLEV_REF);

// ---------------------------------------------------------------- kpr monitor

export const { encode: encodeMonitor, decode: decodeMonitor } = codecOf(R.MONITOR);

export const { encode: encodeEvent, decode: decodeEvent } = codecOf(R.EVENT);
