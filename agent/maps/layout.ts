/**
 * TypeScript mirror of bpf/include/kpr_types.h: one codec per C struct.
 * Each layout lists its C fields with offsets and sizes; test/bpf/layout.test.ts
 * compares these lists with the BTF of the compiled object, so a change on
 * either side that is not made on the other fails the build's tests.
 */

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
export type IpProto = (typeof IPPROTO)[keyof typeof IPPROTO];

export const SCOPE = { EXTERNAL: 0, INTERNAL: 1 } as const;
export const SVC_FLAG = { CLUSTER_IP: 1 << 0 } as const;

/** Mirrors enum kpr_stat. */
export const STAT = {
  CONNECT4_XLATE: 0,
  SENDMSG4_XLATE: 1,
  RECVMSG4_XLATE: 2,
  GETPEERNAME4_XLATE: 3,
  NO_BACKEND: 4,
  BACKEND_MISSING: 5,
} as const;
export const STAT_MAX = 32;

export const MAP_NAMES = {
  svc4: 'kpr_svc4',
  backend4: 'kpr_backend4',
  revnat4: 'kpr_revnat4',
  stats: 'kpr_stats',
} as const;

// ---------------------------------------------------------------- addresses

export function ipv4ToBytes(addr: string, buf: Buffer, off: number): void {
  const parts = addr.split('.');
  if (parts.length !== 4) throw new RangeError(`not an IPv4 address: ${addr}`);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    const n = Number(p);
    if (!/^\d{1,3}$/.test(p) || n > 255) throw new RangeError(`not an IPv4 address: ${addr}`);
    buf[off + i] = n;
  }
}

export function ipv4FromBytes(buf: Buffer, off: number): string {
  return `${buf[off]}.${buf[off + 1]}.${buf[off + 2]}.${buf[off + 3]}`;
}

// ---------------------------------------------------------------- kpr_svc4_key

export interface Svc4Key {
  addr: string;
  port: number;
  slot: number;
  proto: number;
  scope: number;
}

export const SVC4_KEY: StructLayout = {
  cName: 'kpr_svc4_key',
  size: 12,
  fields: [
    { c: 'addr', offset: 0, size: 4 },
    { c: 'port', offset: 4, size: 2 },
    { c: 'slot', offset: 6, size: 2 },
    { c: 'proto', offset: 8, size: 1 },
    { c: 'scope', offset: 9, size: 1 },
    { c: 'pad', offset: 10, size: 2 },
  ],
};

export function encodeSvc4Key(k: Svc4Key, buf: Buffer = Buffer.alloc(SVC4_KEY.size), off = 0): Buffer {
  buf.fill(0, off, off + SVC4_KEY.size);
  ipv4ToBytes(k.addr, buf, off);
  buf.writeUInt16BE(k.port, off + 4); // __be16
  buf.writeUInt16LE(k.slot, off + 6); // host order (x86_64/arm64 are little endian)
  buf.writeUInt8(k.proto, off + 8);
  buf.writeUInt8(k.scope, off + 9);
  return buf;
}

export function decodeSvc4Key(buf: Buffer, off = 0): Svc4Key {
  return {
    addr: ipv4FromBytes(buf, off),
    port: buf.readUInt16BE(off + 4),
    slot: buf.readUInt16LE(off + 6),
    proto: buf.readUInt8(off + 8),
    scope: buf.readUInt8(off + 9),
  };
}

// ---------------------------------------------------------------- kpr_svc4_val

export interface Svc4Val {
  backendId: number;
  count: number;
  revNatId: number;
  flags: number;
}

export const SVC4_VAL: StructLayout = {
  cName: 'kpr_svc4_val',
  size: 12,
  fields: [
    { c: 'backend_id', offset: 0, size: 4 },
    { c: 'count', offset: 4, size: 2 },
    { c: 'rev_nat_id', offset: 6, size: 2 },
    { c: 'flags', offset: 8, size: 1 },
    { c: 'pad', offset: 9, size: 3 },
  ],
};

export function encodeSvc4Val(v: Svc4Val, buf: Buffer = Buffer.alloc(SVC4_VAL.size), off = 0): Buffer {
  buf.fill(0, off, off + SVC4_VAL.size);
  buf.writeUInt32LE(v.backendId, off);
  buf.writeUInt16LE(v.count, off + 4);
  buf.writeUInt16LE(v.revNatId, off + 6);
  buf.writeUInt8(v.flags, off + 8);
  return buf;
}

export function decodeSvc4Val(buf: Buffer, off = 0): Svc4Val {
  return {
    backendId: buf.readUInt32LE(off),
    count: buf.readUInt16LE(off + 4),
    revNatId: buf.readUInt16LE(off + 6),
    flags: buf.readUInt8(off + 8),
  };
}

// ---------------------------------------------------------------- backend map

export interface Backend4 {
  addr: string;
  port: number;
  proto: number;
  flags: number;
}

/** Key of the backend map: a bare __u32 id. */
export const BACKEND_ID_SIZE = 4;

export const BACKEND4: StructLayout = {
  cName: 'kpr_backend4',
  size: 8,
  fields: [
    { c: 'addr', offset: 0, size: 4 },
    { c: 'port', offset: 4, size: 2 },
    { c: 'proto', offset: 6, size: 1 },
    { c: 'flags', offset: 7, size: 1 },
  ],
};

export function encodeBackendId(id: number, buf: Buffer = Buffer.alloc(BACKEND_ID_SIZE), off = 0): Buffer {
  buf.writeUInt32LE(id, off);
  return buf;
}

export function decodeBackendId(buf: Buffer, off = 0): number {
  return buf.readUInt32LE(off);
}

export function encodeBackend4(b: Backend4, buf: Buffer = Buffer.alloc(BACKEND4.size), off = 0): Buffer {
  buf.fill(0, off, off + BACKEND4.size);
  ipv4ToBytes(b.addr, buf, off);
  buf.writeUInt16BE(b.port, off + 4);
  buf.writeUInt8(b.proto, off + 6);
  buf.writeUInt8(b.flags, off + 7);
  return buf;
}

export function decodeBackend4(buf: Buffer, off = 0): Backend4 {
  return {
    addr: ipv4FromBytes(buf, off),
    port: buf.readUInt16BE(off + 4),
    proto: buf.readUInt8(off + 6),
    flags: buf.readUInt8(off + 7),
  };
}

// ---------------------------------------------------------------- reverse NAT

export interface RevNat4Key {
  cookie: bigint;
  addr: string;
  port: number;
}

export const REVNAT4_KEY: StructLayout = {
  cName: 'kpr_revnat4_key',
  size: 16,
  fields: [
    { c: 'cookie', offset: 0, size: 8 },
    { c: 'addr', offset: 8, size: 4 },
    { c: 'port', offset: 12, size: 2 },
    { c: 'pad', offset: 14, size: 2 },
  ],
};

export function decodeRevNat4Key(buf: Buffer, off = 0): RevNat4Key {
  return {
    cookie: buf.readBigUInt64LE(off),
    addr: ipv4FromBytes(buf, off + 8),
    port: buf.readUInt16BE(off + 12),
  };
}

export interface RevNat4Val {
  addr: string;
  port: number;
  revNatId: number;
}

export const REVNAT4_VAL: StructLayout = {
  cName: 'kpr_revnat4_val',
  size: 8,
  fields: [
    { c: 'addr', offset: 0, size: 4 },
    { c: 'port', offset: 4, size: 2 },
    { c: 'rev_nat_id', offset: 6, size: 2 },
  ],
};

export function decodeRevNat4Val(buf: Buffer, off = 0): RevNat4Val {
  return {
    addr: ipv4FromBytes(buf, off),
    port: buf.readUInt16BE(off + 4),
    revNatId: buf.readUInt16LE(off + 6),
  };
}

/** Every layout the BTF check covers. */
export const ALL_LAYOUTS: StructLayout[] = [SVC4_KEY, SVC4_VAL, BACKEND4, REVNAT4_KEY, REVNAT4_VAL];
