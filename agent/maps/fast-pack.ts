/**
 * The fast packers of the large maps' records: the registry codecs' bytes
 * (test/maps/bpf-datapath-maps.test.ts checks them against the codecs), by
 * hand at the registry's offsets, with no bounds-checked call per member.
 * BpfDatapathMaps writes its batches with them; the reconciler's read-back
 * encodes its mirror with them (reconcile/tables/), so what it
 * hashes is byte for byte what a write would have put in the kernel.
 */
import type { BackendColumns } from './datapath-maps.js';
import { MAPS } from './registry.js';
import { encodeAddr, encodeIPv4Num, mapCodecs, type Backend, type SvcKey, type SvcMeta, type SvcVal } from './layout.js';
import { ipv4Canonical } from '../net/ip.js';

/** encodeAddr's IPv4 path alone: false (bytes untouched) when `addr` is not a canonical dotted quad. */
function tryWriteIPv4(addr: string, buf: Buffer, off: number): boolean {
  const a = ipv4Canonical(addr);
  if (a < 0) return false;
  encodeIPv4Num(a, buf, off);
  return true;
}

/**
 * Service-map keys repeat their address: a full sync writes every frontend
 * address once per slot (10 slots per frontend is typical), consecutively.
 * The last address's bytes are copied; other IPv4 is parsed in place (as
 * cheap as a lookup); anything else (IPv6, which encodeAddr parses slowly)
 * is cached.
 */
export class AddrCache {
  private readonly bytes = new Map<string, Buffer>();
  private lastAddr: string | null = null;
  private readonly lastBytes = Buffer.alloc(16);

  write(addr: string, buf: Buffer, off: number): void {
    const last = this.lastBytes;
    if (addr !== this.lastAddr) {
      if (!tryWriteIPv4(addr, buf, off)) {
        let b = this.bytes.get(addr);
        if (b === undefined) {
          if (this.bytes.size >= 65536) this.bytes.clear(); // bounded: addresses churn slowly
          b = Buffer.alloc(16);
          encodeAddr(addr, b, 0); // throws for an invalid address
          this.bytes.set(addr, b);
        }
        for (let i = 0; i < 16; i++) buf[off + i] = b[i];
      }
      for (let i = 0; i < 16; i++) last[i] = buf[off + i];
      this.lastAddr = addr;
      return;
    }
    for (let i = 0; i < 16; i++) buf[off + i] = last[i];
  }
}

// The fast packers' offsets, from the registry.
const { addr: K_ADDR, port: K_PORT, slot: K_SLOT, proto: K_PROTO, scope: K_SCOPE, pad: K_PAD } = MAPS.svc.key.at;
const { backend_id: V_ID, count: V_COUNT, frontend_id: V_FRONTEND_ID, flags: V_FLAGS } = MAPS.svc.value.at;
const { addr: B_ADDR, port: B_PORT, proto: B_PROTO, flags: B_FLAGS } = MAPS.backend.value.at;
const META = MAPS.svcMeta.value;
const M_NAME = META.at.name;
const M_NAME_SIZE = META.sizes.name;
const M_PORT_NAME = META.at.port_name;
const M_PORT_NAME_SIZE = META.sizes.port_name;
const M_TYPE = META.at.type;
const M_PROTO = META.at.proto;

const svcCodecs = mapCodecs(MAPS.svc);
const backendCodecs = mapCodecs(MAPS.backend);
const metaCodecs = mapCodecs(MAPS.svcMeta);

/** A backend value's members after the address. */
function packBackendTail(port: number, proto: number, flags: number, b: Buffer, o: number): void {
  b.writeUInt16BE(port, o + B_PORT);
  b[o + B_PROTO] = proto;
  b[o + B_FLAGS] = flags;
}

/** The backend codec's bytes for row `id` of `rows`, with the fast address paths: an IPv4 address from its u32, else encodeAddr. */
export function packBackendRow(rows: BackendColumns, id: number, b: Buffer, o: number): void {
  const ip4 = rows.ipv4(id);
  if (ip4 >= 0) encodeIPv4Num(ip4, b, o + B_ADDR);
  else encodeAddr(rows.addr(id), b, o + B_ADDR);
  packBackendTail(rows.port(id), rows.proto(id), rows.flags(id), b, o);
}

/** The backend codec's bytes, by hand. */
export function packBackend(v: Backend, b: Buffer, o: number): void {
  encodeAddr(v.addr, b, o + B_ADDR);
  packBackendTail(v.port, v.proto, v.flags, b, o);
}

/** Writes ASCII `text` (shorter than `size`) into zeroed bytes; false (nothing written) for anything else. */
function writeAsciiZ(text: string, b: Buffer, o: number, size: number): boolean {
  const n = text.length;
  if (n >= size) return false;
  for (let i = 0; i < n; i++) if (text.charCodeAt(i) >= 0x80) return false;
  for (let i = 0; i < n; i++) b[o + i] = text.charCodeAt(i);
  return true;
}

/** The kpr_svc_meta codec into a zeroed buffer, by hand for ASCII names (the usual case: Kubernetes names are ASCII). */
export function packSvcMeta(m: SvcMeta, b: Buffer, o: number): void {
  if (
    typeof m.name === 'string' &&
    typeof m.portName === 'string' &&
    writeAsciiZ(m.name, b, o + M_NAME, M_NAME_SIZE) &&
    writeAsciiZ(m.portName, b, o + M_PORT_NAME, M_PORT_NAME_SIZE)
  ) {
    b[o + M_TYPE] = m.type;
    b[o + M_PROTO] = m.proto;
    return;
  }
  metaCodecs.value.encode(m, b, o);
}

function isU16(x: number): boolean {
  return (x & 0xffff) === x;
}

/** The kpr_svc_val codec by hand (no per-field bounds-checked calls); out-of-range values go to the codec, which throws. */
export function packSvcVal(v: SvcVal, b: Buffer, o: number): void {
  const id = v.backendId;
  const count = v.count;
  const fid = v.frontendId;
  const flags = v.flags;
  if (!(id >>> 0 === id && isU16(count) && fid >>> 0 === fid && isU16(flags))) {
    svcCodecs.value.encode(v, b, o);
    return;
  }
  packId(id, b, o + V_ID);
  b[o + V_COUNT] = count & 0xff;
  b[o + V_COUNT + 1] = count >>> 8;
  b[o + V_FLAGS] = flags & 0xff;
  b[o + V_FLAGS + 1] = flags >>> 8;
  packId(fid, b, o + V_FRONTEND_ID);
}

/** A slot's value (backend id, the rest 0) into zeroed bytes. */
export function packSlotVal(id: number, b: Buffer, o: number): void {
  if (id >>> 0 !== id)
    svcCodecs.value.encode({ backendId: id, count: 0, frontendId: 0, flags: 0 }, b, o); // throws
  else packId(id, b, o + V_ID);
}

/** A __u32 (backend id, VIP flags) by hand; an id that is not a u32 goes to the codec, which throws. */
export function packId(id: number, b: Buffer, o: number): void {
  if (id >>> 0 !== id) {
    backendCodecs.key.encode(id, b, o);
    return;
  }
  b[o] = id & 0xff;
  b[o + 1] = (id >>> 8) & 0xff;
  b[o + 2] = (id >>> 16) & 0xff;
  b[o + 3] = id >>> 24;
}

/** kpr_svc key columns (the base's address, port, protocol; scope and slot packed as scope << 16 | slot) into zeroed bytes: the codec's bytes. */
export function packSvcKeyColumns(addrs: AddrCache, base: { addr: string; port: number; proto: number }, ss: number, keys: Buffer, o: number): void {
  const port = base.port;
  addrs.write(base.addr, keys, o + K_ADDR);
  if (isU16(port)) {
    keys[o + K_PORT] = port >>> 8;
    keys[o + K_PORT + 1] = port & 0xff;
  } else keys.writeUInt16BE(port, o + K_PORT); // throws
  keys[o + K_SLOT] = ss & 0xff;
  keys[o + K_SLOT + 1] = (ss >>> 8) & 0xff;
  keys[o + K_PROTO] = base.proto;
  keys[o + K_SCOPE] = ss >>> 16;
}

/** The kpr_svc key codec with the address from the cache (same bytes, into any buffer). */
export function packSvcKey(addrs: AddrCache, k: SvcKey, b: Buffer, o: number): void {
  addrs.write(k.addr, b, o + K_ADDR);
  b.writeUInt16BE(k.port, o + K_PORT);
  b.writeUInt16LE(k.slot, o + K_SLOT);
  b[o + K_PROTO] = k.proto;
  b[o + K_SCOPE] = k.scope;
  b[o + K_PAD] = 0;
  b[o + K_PAD + 1] = 0;
}

/** The fast packers, for the test that compares their bytes with the codecs'. */
export const packers = {
  svcKey: (k: SvcKey, b: Buffer, o: number): void => packSvcKey(new AddrCache(), k, b, o),
  svcKeyColumns: (base: { addr: string; port: number; proto: number }, scopeSlot: number, b: Buffer, o: number): void =>
    packSvcKeyColumns(new AddrCache(), base, scopeSlot, b, o),
  svcVal: packSvcVal,
  slotVal: packSlotVal,
  backend: packBackend,
  backendRow: packBackendRow,
  svcMeta: packSvcMeta,
  id: packId,
};
