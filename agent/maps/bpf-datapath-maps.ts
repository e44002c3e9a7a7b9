/**
 * DatapathMaps over the real pinned BPF maps: encodes with the layout codecs
 * and hands whole batches to the kernel in one call each.
 */
import type { BpfMap } from '../../native/index.js';
import type { DatapathMaps } from './datapath-maps.js';
import {
  encodeAddr,
  SRC_RANGE_KEY,
  decodeSrcRangeKey,
  encodeSrcRangeKey,
  type SrcRangeKey,
  AFFINITY_MATCH_KEY,
  SVC_META,
  VIP_KEY,
  VIP_VAL,
  decodeAffinityMatchKey,
  decodeSvcMeta,
  decodeVipKey,
  decodeVipVal,
  encodeAffinityMatchKey,
  encodeSvcMeta,
  encodeVipKey,
  encodeVipVal,
  type AffinityMatchKey,
  type SvcMeta,
  BACKEND,
  BACKEND_ID_SIZE,
  SVC_KEY,
  SVC_VAL,
  decodeBackend,
  decodeBackendId,
  decodeSvcKey,
  decodeSvcVal,
  encodeBackendId,
  encodeSvcVal,
  type Backend,
  type SvcKey,
  type SvcVal,
} from './layout.js';

/** Encodes items into one contiguous buffer of fixed-size records. */
function packed<T>(items: readonly T[], size: number, encode: (item: T, buf: Buffer, off: number) => void): Buffer {
  const buf = Buffer.alloc(items.length * size);
  for (let i = 0; i < items.length; i++) encode(items[i], buf, i * size);
  return buf;
}

/**
 * encodeAddr with a fast path for dotted-quad IPv4 (parsed from char codes,
 * no intermediate strings): the agent writes ~10^5 of them in a full sync.
 * Anything else goes through encodeAddr, which validates and throws.
 */
function writeAddr(addr: string, buf: Buffer, off: number): void {
  const n = addr.length;
  if (n >= 7 && n <= 15) {
    let part = 0;
    let digits = 0;
    let octet = 0;
    let ok = true;
    for (let i = 0; i <= n && ok; i++) {
      const c = i < n ? addr.charCodeAt(i) : 46;
      if (c >= 48 && c <= 57 && digits < 3) {
        part = part * 10 + (c - 48);
        digits++;
      } else if (c === 46 && digits > 0 && part <= 255 && octet < 4 && !(digits > 1 && addr.charCodeAt(i - digits) === 48)) {
        buf[off + 12 + octet++] = part;
        part = 0;
        digits = 0;
      } else ok = false;
    }
    if (ok && octet === 4) {
      buf.fill(0, off, off + 10);
      buf[off + 10] = 0xff;
      buf[off + 11] = 0xff;
      return;
    }
  }
  encodeAddr(addr, buf, off);
}

/**
 * 16-byte encodings of recently written addresses. A full sync writes every
 * frontend address once per slot (10 slots per frontend is typical), and
 * encodeAddr parses the text each time; copying cached bytes is far cheaper.
 */
class AddrCache {
  private readonly bytes = new Map<string, Buffer>();

  write(addr: string, buf: Buffer, off: number): void {
    let b = this.bytes.get(addr);
    if (b === undefined) {
      if (this.bytes.size >= 65536) this.bytes.clear(); // bounded: addresses churn slowly
      b = Buffer.alloc(16);
      writeAddr(addr, b, 0);
      this.bytes.set(addr, b);
    }
    b.copy(buf, off);
  }
}

function unpacked<K, V>(
  count: number,
  keys: Buffer,
  values: Buffer,
  keySize: number,
  valueSize: number,
  decodeKey: (b: Buffer, off: number) => K,
  decodeValue: (b: Buffer, off: number) => V,
): Array<[K, V]> {
  const out: Array<[K, V]> = new Array(count);
  for (let i = 0; i < count; i++) out[i] = [decodeKey(keys, i * keySize), decodeValue(values, i * valueSize)];
  return out;
}

/** The pinned maps the reconciler writes. */
export interface DatapathMapSet {
  svc: BpfMap;
  backend: BpfMap;
  vip: BpfMap;
  affinityMatch: BpfMap;
  svcMeta: BpfMap;
  srcRange: BpfMap;
}

/** kpr_aff_match's value: presence is what counts. */
const AFF_MATCH_PRESENT = Buffer.from([1]);

export class BpfDatapathMaps implements DatapathMaps {
  private readonly svcMap: BpfMap;
  private readonly backendMap: BpfMap;
  private readonly vipMap: BpfMap | null;
  private readonly affMatchMap: BpfMap | null;
  private readonly svcMetaMap: BpfMap | null;
  private readonly srcRangeMap: BpfMap | null;
  private readonly addrs = new AddrCache();
  /** encodeSvcKey with the address from the cache (same bytes, see layout.ts). */
  private readonly packSvcKey = (k: SvcKey, b: Buffer, o: number): void => {
    this.addrs.write(k.addr, b, o);
    b.writeUInt16BE(k.port, o + 16);
    b.writeUInt16LE(k.slot, o + 18);
    b[o + 20] = k.proto;
    b[o + 21] = k.scope;
    b[o + 22] = 0;
    b[o + 23] = 0;
  };

  /**
   * `maps`: the object form. The positional (svc, backend) form is
   * transitional, for callers not yet wired to the new maps (agent.ts, the
   * e2e test): with it the vip/affinity-match/meta maps read as empty and
   * writes to them are skipped.
   */
  constructor(maps: DatapathMapSet);
  /** @deprecated pass a DatapathMapSet. */
  constructor(svc: BpfMap, backend: BpfMap);
  constructor(a: DatapathMapSet | BpfMap, b?: BpfMap) {
    if (b !== undefined) {
      this.svcMap = a as BpfMap;
      this.backendMap = b;
      this.vipMap = this.affMatchMap = this.svcMetaMap = this.srcRangeMap = null;
    } else {
      const m = a as DatapathMapSet;
      this.svcMap = m.svc;
      this.backendMap = m.backend;
      this.vipMap = m.vip;
      this.affMatchMap = m.affinityMatch;
      this.svcMetaMap = m.svcMeta;
      this.srcRangeMap = m.srcRange;
    }
  }

  dumpServices(): Array<[SvcKey, SvcVal]> {
    const { count, keys, values } = this.svcMap.lookupBatch();
    return unpacked(count, keys, values, SVC_KEY.size, SVC_VAL.size, decodeSvcKey, decodeSvcVal);
  }

  dumpBackends(): Array<[number, Backend]> {
    const { count, keys, values } = this.backendMap.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, BACKEND.size, decodeBackendId, decodeBackend);
  }

  updateServices(entries: Array<[SvcKey, SvcVal]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, SVC_KEY.size, (e, b, o) => this.packSvcKey(e[0], b, o));
    const values = packed(entries, SVC_VAL.size, (e, b, o) => encodeSvcVal(e[1], b, o));
    this.svcMap.updateBatch(keys, values, entries.length);
  }

  deleteServices(keys: SvcKey[]): void {
    if (keys.length === 0) return;
    this.svcMap.deleteBatch(packed(keys, SVC_KEY.size, this.packSvcKey), keys.length, { ignoreMissing: true });
  }

  updateBackends(entries: Array<[number, Backend]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, BACKEND.size, (e, b, o) => {
      const v = e[1];
      writeAddr(v.addr, b, o); // encodeBackend's layout, with the fast address path
      b.writeUInt16BE(v.port, o + 16);
      b[o + 18] = v.proto;
      b[o + 19] = v.flags;
    });
    this.backendMap.updateBatch(keys, values, entries.length);
  }

  deleteBackends(ids: number[]): void {
    if (ids.length === 0) return;
    this.backendMap.deleteBatch(packed(ids, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), ids.length, { ignoreMissing: true });
  }

  dumpVips(): Array<[string, number]> {
    if (!this.vipMap) return [];
    const { count, keys, values } = this.vipMap.lookupBatch();
    return unpacked(count, keys, values, VIP_KEY.size, VIP_VAL.size, decodeVipKey, decodeVipVal);
  }

  updateVips(entries: Array<[string, number]>): void {
    if (entries.length === 0 || !this.vipMap) return;
    const keys = packed(entries, VIP_KEY.size, ([a], b, o) => encodeVipKey(a, b, o));
    const values = packed(entries, VIP_VAL.size, ([, f], b, o) => encodeVipVal(f, b, o));
    this.vipMap.updateBatch(keys, values, entries.length);
  }

  deleteVips(addrs: string[]): void {
    if (addrs.length === 0 || !this.vipMap) return;
    this.vipMap.deleteBatch(packed(addrs, VIP_KEY.size, (a, b, o) => encodeVipKey(a, b, o)), addrs.length, { ignoreMissing: true });
  }

  dumpAffinityMatches(): AffinityMatchKey[] {
    if (!this.affMatchMap) return [];
    const { count, keys } = this.affMatchMap.lookupBatch();
    const out: AffinityMatchKey[] = new Array(count);
    for (let i = 0; i < count; i++) out[i] = decodeAffinityMatchKey(keys, i * AFFINITY_MATCH_KEY.size);
    return out;
  }

  updateAffinityMatches(keys: AffinityMatchKey[]): void {
    if (keys.length === 0 || !this.affMatchMap) return;
    const k = packed(keys, AFFINITY_MATCH_KEY.size, (m, b, o) => encodeAffinityMatchKey(m, b, o));
    const v = Buffer.alloc(keys.length, AFF_MATCH_PRESENT[0]);
    this.affMatchMap.updateBatch(k, v, keys.length);
  }

  deleteAffinityMatches(keys: AffinityMatchKey[]): void {
    if (keys.length === 0 || !this.affMatchMap) return;
    this.affMatchMap.deleteBatch(packed(keys, AFFINITY_MATCH_KEY.size, (m, b, o) => encodeAffinityMatchKey(m, b, o)), keys.length, { ignoreMissing: true });
  }

  dumpSvcMeta(): Array<[number, SvcMeta]> {
    if (!this.svcMetaMap) return [];
    const { count, keys, values } = this.svcMetaMap.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, SVC_META.size, decodeBackendId, decodeSvcMeta);
  }

  updateSvcMeta(entries: Array<[number, SvcMeta]>): void {
    if (entries.length === 0 || !this.svcMetaMap) return;
    // The key is a bare __u32 revNatId, encoded like a backend id.
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, SVC_META.size, ([, m], b, o) => encodeSvcMeta(m, b, o));
    this.svcMetaMap.updateBatch(keys, values, entries.length);
  }

  deleteSvcMeta(revNatIds: number[]): void {
    if (revNatIds.length === 0 || !this.svcMetaMap) return;
    this.svcMetaMap.deleteBatch(packed(revNatIds, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), revNatIds.length, { ignoreMissing: true });
  }

  dumpSrcRanges(): SrcRangeKey[] {
    if (!this.srcRangeMap) return [];
    // An LPM trie has no batch lookup: lookupBatch falls back to key iteration.
    const { count, keys } = this.srcRangeMap.lookupBatch();
    const out: SrcRangeKey[] = new Array(count);
    for (let i = 0; i < count; i++) out[i] = decodeSrcRangeKey(keys, i * SRC_RANGE_KEY.size);
    return out;
  }

  updateSrcRanges(keys: SrcRangeKey[]): void {
    if (keys.length === 0 || !this.srcRangeMap) return;
    const k = packed(keys, SRC_RANGE_KEY.size, (r, b, o) => encodeSrcRangeKey(r, b, o));
    // LPM tries take no batch update: one call per range (ranges are few).
    for (let i = 0; i < keys.length; i++) this.srcRangeMap.update(k.subarray(i * SRC_RANGE_KEY.size, (i + 1) * SRC_RANGE_KEY.size), AFF_MATCH_PRESENT);
  }

  deleteSrcRanges(keys: SrcRangeKey[]): void {
    if (keys.length === 0 || !this.srcRangeMap) return;
    const k = packed(keys, SRC_RANGE_KEY.size, (r, b, o) => encodeSrcRangeKey(r, b, o));
    for (let i = 0; i < keys.length; i++) this.srcRangeMap.delete(k.subarray(i * SRC_RANGE_KEY.size, (i + 1) * SRC_RANGE_KEY.size));
  }
}

