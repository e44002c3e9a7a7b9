/**
 * DatapathMaps over the real pinned BPF maps: encodes with the layout codecs
 * and hands whole batches to the kernel in one call each.
 */
import type { BatchWriter, BpfMap } from '../../native/index.js';
import type { BackendColumns, DatapathMaps } from './datapath-maps.js';
import type { MapCapacities } from '../reconcile/limits.js';
import {
  encodeAddr,
  encodeIPv4Num,
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
import { ipv4Canonical } from '../net/ip.js';

/**
 * Entries per kernel batch call on the column (full-sync) paths. The records
 * are encoded into buffers reused from call to call, so a 200,000-entry sync
 * allocates no 5 MB buffers that would stay in the RSS until a GC frees them;
 * 26 syscalls instead of one cost nothing measurable.
 */
export const BATCH_CHUNK = 8192;

/**
 * With a BatchWriter, an update batch of at least this many entries goes to
 * the writer's thread; so does every update batch while earlier ones are
 * still queued there (order is the datapath's safety). A smaller batch with
 * nothing queued (an event sync's handful of entries) is written at once:
 * handing it to a thread and waiting would only add latency.
 */
export const QUEUE_MIN_ENTRIES = 1024;

/** Two zeroed byte regions (keys, values) reused across batch calls. */
class BatchScratch {
  private keyBuf = Buffer.alloc(0);
  private valBuf = Buffer.alloc(0);

  /** Zeroed views of keyBytes and valBytes bytes. */
  take(keyBytes: number, valBytes: number): { keys: Buffer; values: Buffer } {
    if (this.keyBuf.length < keyBytes) this.keyBuf = Buffer.alloc(keyBytes);
    if (this.valBuf.length < valBytes) this.valBuf = Buffer.alloc(valBytes);
    const keys = this.keyBuf.subarray(0, keyBytes).fill(0);
    const values = this.valBuf.subarray(0, valBytes).fill(0);
    return { keys, values };
  }
}

/** Encodes items into one contiguous buffer of fixed-size records. */
function packed<T>(items: readonly T[], size: number, encode: (item: T, buf: Buffer, off: number) => void): Buffer {
  const buf = Buffer.alloc(items.length * size);
  for (let i = 0; i < items.length; i++) encode(items[i], buf, i * size);
  return buf;
}

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
class AddrCache {
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

/** encodeBackend's layout for row `id` of `rows`, with the fast address paths: an IPv4 address from its u32, else encodeAddr. */
function packBackendRow(rows: BackendColumns, id: number, b: Buffer, o: number): void {
  const ip4 = rows.ipv4(id);
  if (ip4 >= 0) encodeIPv4Num(ip4, b, o);
  else encodeAddr(rows.addr(id), b, o);
  b.writeUInt16BE(rows.port(id), o + 16);
  b[o + 18] = rows.proto(id);
  b[o + 19] = rows.flags(id);
}

/** encodeBackend's bytes, by hand. */
function packBackend(v: Backend, b: Buffer, o: number): void {
  encodeAddr(v.addr, b, o);
  b.writeUInt16BE(v.port, o + 16);
  b[o + 18] = v.proto;
  b[o + 19] = v.flags;
}

/** Writes ASCII `text` (shorter than `size`) into zeroed bytes; false (nothing written) for anything else. */
function writeAsciiZ(text: string, b: Buffer, o: number, size: number): boolean {
  const n = text.length;
  if (n >= size) return false;
  for (let i = 0; i < n; i++) if (text.charCodeAt(i) >= 0x80) return false;
  for (let i = 0; i < n; i++) b[o + i] = text.charCodeAt(i);
  return true;
}

/** encodeSvcMeta into a zeroed buffer, by hand for ASCII names (the usual case: Kubernetes names are ASCII). */
function packSvcMeta(m: SvcMeta, b: Buffer, o: number): void {
  if (typeof m.name === 'string' && typeof m.portName === 'string' && writeAsciiZ(m.name, b, o, 96) && writeAsciiZ(m.portName, b, o + 96, 32)) {
    b[o + 128] = m.type;
    return;
  }
  encodeSvcMeta(m, b, o);
}

function isU16(x: number): boolean {
  return (x & 0xffff) === x;
}

/** encodeSvcVal by hand (no per-field bounds-checked calls); out-of-range values go to encodeSvcVal, which throws. */
function packSvcVal(v: SvcVal, b: Buffer, o: number): void {
  const id = v.backendId;
  const count = v.count;
  const rn = v.revNatId;
  const flags = v.flags;
  if (!(id >>> 0 === id && isU16(count) && isU16(rn) && isU16(flags))) {
    encodeSvcVal(v, b, o);
    return;
  }
  b[o] = id & 0xff;
  b[o + 1] = (id >>> 8) & 0xff;
  b[o + 2] = (id >>> 16) & 0xff;
  b[o + 3] = id >>> 24;
  b[o + 4] = count & 0xff;
  b[o + 5] = count >>> 8;
  b[o + 6] = rn & 0xff;
  b[o + 7] = rn >>> 8;
  b[o + 8] = flags & 0xff;
  b[o + 9] = flags >>> 8;
  b[o + 10] = 0;
  b[o + 11] = 0;
}

/** A slot's value (backend id, the rest 0) into zeroed bytes. */
function packSlotVal(id: number, b: Buffer, o: number): void {
  if (id >>> 0 !== id) encodeSvcVal({ backendId: id, count: 0, revNatId: 0, flags: 0 }, b, o); // throws
  else packId(id, b, o);
}

/** encodeBackendId by hand; an id that is not a u32 goes to encodeBackendId, which throws. */
function packId(id: number, b: Buffer, o: number): void {
  if (id >>> 0 !== id) {
    encodeBackendId(id, b, o);
    return;
  }
  b[o] = id & 0xff;
  b[o + 1] = (id >>> 8) & 0xff;
  b[o + 2] = (id >>> 16) & 0xff;
  b[o + 3] = id >>> 24;
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
  /** Runs large update batches on a thread of its own (see QUEUE_MIN_ENTRIES); without it every call is synchronous. */
  writer?: BatchWriter;
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
  private readonly writer: BatchWriter | null;
  private readonly addrs = new AddrCache();
  private readonly scratch = new BatchScratch();
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

  constructor(m: DatapathMapSet) {
    this.svcMap = m.svc;
    this.backendMap = m.backend;
    this.vipMap = m.vip;
    this.affMatchMap = m.affinityMatch;
    this.svcMetaMap = m.svcMeta;
    this.srcRangeMap = m.srcRange;
    this.writer = m.writer ?? null;
  }

  /** max_entries of the maps the reconciler fills (Infinity for a map this object was not given). */
  capacities(): MapCapacities {
    return {
      svc: this.svcMap.maxEntries,
      backend: this.backendMap.maxEntries,
      affinityMatch: this.affMatchMap?.maxEntries ?? Infinity,
      srcRange: this.srcRangeMap?.maxEntries ?? Infinity,
    };
  }

  /**
   * Waits for every queued update batch; throws the first failure (later
   * batches were not written). Every operation that is not a queued update
   * calls it first, so the maps change in call order; the reconciler calls
   * it at the end of a sync.
   */
  flush(): void {
    this.writer?.wait();
  }

  /** updateBatch, on the writer's thread when the batch is large or others are queued (see QUEUE_MIN_ENTRIES). */
  private update(map: BpfMap, keys: Buffer, values: Buffer, count: number): void {
    const w = this.writer;
    if (w && (count >= QUEUE_MIN_ENTRIES || w.pending > 0)) map.queueUpdateBatch(w, keys, values, count);
    else map.updateBatch(keys, values, count);
  }

  dumpServices(): Array<[SvcKey, SvcVal]> {
    this.flush();
    const { count, keys, values } = this.svcMap.lookupBatch();
    return unpacked(count, keys, values, SVC_KEY.size, SVC_VAL.size, decodeSvcKey, decodeSvcVal);
  }

  dumpBackends(): Array<[number, Backend]> {
    this.flush();
    const { count, keys, values } = this.backendMap.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, BACKEND.size, decodeBackendId, decodeBackend);
  }

  /** kpr_svc's records as the kernel returned them, undecoded (drift read-back fingerprints them). */
  dumpServicesRaw(): { count: number; keys: Buffer; values: Buffer; valueStride: number } {
    this.flush();
    return { ...this.svcMap.lookupBatch(), valueStride: this.svcMap.valueStride };
  }

  /** kpr_backend's records, undecoded. */
  dumpBackendsRaw(): { count: number; keys: Buffer; values: Buffer; valueStride: number } {
    this.flush();
    return { ...this.backendMap.lookupBatch(), valueStride: this.backendMap.valueStride };
  }

  /** kpr_svc's records in resumable batches of about `batchEntries`, undecoded (a sliced drift read-back fingerprints them). */
  servicesRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.rawCursor(this.svcMap, batchEntries);
  }

  /** kpr_backend's records in resumable batches, undecoded. */
  backendsRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.rawCursor(this.backendMap, batchEntries);
  }

  /** kpr_vip's records in resumable batches, undecoded (none without the map). */
  vipsRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.vipMap ? this.rawCursor(this.vipMap, batchEntries) : { next: () => null };
  }

  /** kpr_svc_meta's records in resumable batches, undecoded (none without the map). */
  svcMetaRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.svcMetaMap ? this.rawCursor(this.svcMetaMap, batchEntries) : { next: () => null };
  }

  private rawCursor(map: BpfMap, batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    const cursor = map.lookupBatchCursor(batchEntries);
    return {
      next: () => {
        this.flush(); // writes queued since the last batch reach the kernel first
        const b = cursor.next();
        return b && { ...b, valueStride: map.valueStride };
      },
    };
  }

  updateServices(entries: Array<[SvcKey, SvcVal]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, SVC_KEY.size, (e, b, o) => this.packSvcKey(e[0], b, o));
    const values = packed(entries, SVC_VAL.size, (e, b, o) => encodeSvcVal(e[1], b, o));
    this.update(this.svcMap, keys, values, entries.length);
  }

  /**
   * updateServices by column (the reconciler's fast path, no key objects):
   * entry i is key (bases[i], scope scopeSlots[i] >> 16, slot scopeSlots[i] & 0xffff)
   * → vals[i], where a number n stands for a slot value { backendId: n, count: 0,
   * revNatId: 0, flags: 0 }, for the first `count` entries (default: all). Same bytes.
   */
  updateServiceColumns(bases: readonly { addr: string; port: number; proto: number }[], scopeSlots: readonly number[], vals: ReadonlyArray<SvcVal | number>, count?: number): void {
    const n = count ?? vals.length;
    if (n === 0) return;
    if (count === undefined ? bases.length !== n || scopeSlots.length !== n : bases.length < n || scopeSlots.length < n || vals.length < n) {
      throw new Error('updateServiceColumns: columns of different lengths');
    }
    this.writeInRounds(this.svcMap, n, SVC_KEY.size, SVC_VAL.size, (i, keys, o, values, vo) => {
      const base = bases[i];
      const ss = scopeSlots[i];
      const port = base.port;
      this.addrs.write(base.addr, keys, o);
      if (isU16(port)) {
        keys[o + 16] = port >>> 8;
        keys[o + 17] = port & 0xff;
      } else keys.writeUInt16BE(port, o + 16); // throws
      keys[o + 18] = ss & 0xff;
      keys[o + 19] = (ss >>> 8) & 0xff;
      keys[o + 20] = base.proto;
      keys[o + 21] = ss >>> 16;
      const v = vals[i];
      if (typeof v === 'number') packSlotVal(v, values, vo);
      else packSvcVal(v, values, vo);
    });
  }

  /** Writes n entries in rounds of BATCH_CHUNK from the reused buffers; pack() encodes entry i at the offsets given. */
  private writeInRounds(map: BpfMap, n: number, keySize: number, valueSize: number, pack: (i: number, keys: Buffer, keyOff: number, values: Buffer, valueOff: number) => void): void {
    for (let start = 0; start < n; start += BATCH_CHUNK) {
      const m = Math.min(BATCH_CHUNK, n - start);
      const { keys, values } = this.scratch.take(m * keySize, m * valueSize);
      for (let j = 0; j < m; j++) pack(start + j, keys, j * keySize, values, j * valueSize);
      this.update(map, keys, values, m);
    }
  }

  deleteServices(keys: SvcKey[]): void {
    this.flush();
    if (keys.length === 0) return;
    this.svcMap.deleteBatch(packed(keys, SVC_KEY.size, this.packSvcKey), keys.length, { ignoreMissing: true });
  }

  updateBackends(entries: Array<[number, Backend]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, BACKEND.size, (e, b, o) => packBackend(e[1], b, o));
    this.update(this.backendMap, keys, values, entries.length);
  }

  /**
   * updateBackends by column: entry i is ids[i] → the row of `rows` with
   * that id, for the first `count` ids (default: all). Same bytes.
   */
  updateBackendColumns(ids: readonly number[], rows: BackendColumns, count?: number): void {
    const n = count ?? ids.length;
    if (n === 0) return;
    if (ids.length < n) throw new Error('updateBackendColumns: fewer ids than count');
    this.writeInRounds(this.backendMap, n, BACKEND_ID_SIZE, BACKEND.size, (i, keys, ko, values, vo) => {
      const id = ids[i];
      packId(id, keys, ko);
      packBackendRow(rows, id, values, vo);
    });
  }

  deleteBackends(ids: number[]): void {
    this.flush();
    if (ids.length === 0) return;
    this.backendMap.deleteBatch(packed(ids, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), ids.length, { ignoreMissing: true });
  }

  dumpVips(): Array<[string, number]> {
    this.flush();
    if (!this.vipMap) return [];
    const { count, keys, values } = this.vipMap.lookupBatch();
    return unpacked(count, keys, values, VIP_KEY.size, VIP_VAL.size, decodeVipKey, decodeVipVal);
  }

  updateVips(entries: Array<[string, number]>): void {
    if (entries.length === 0 || !this.vipMap) return;
    const keys = packed(entries, VIP_KEY.size, ([a], b, o) => this.addrs.write(a, b, o)); // encodeVipKey's bytes
    const values = packed(entries, VIP_VAL.size, ([, f], b, o) => encodeVipVal(f, b, o));
    this.update(this.vipMap, keys, values, entries.length);
  }

  deleteVips(addrs: string[]): void {
    this.flush();
    if (addrs.length === 0 || !this.vipMap) return;
    this.vipMap.deleteBatch(packed(addrs, VIP_KEY.size, (a, b, o) => encodeVipKey(a, b, o)), addrs.length, { ignoreMissing: true });
  }

  dumpAffinityMatches(): AffinityMatchKey[] {
    this.flush();
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
    this.update(this.affMatchMap, k, v, keys.length);
  }

  deleteAffinityMatches(keys: AffinityMatchKey[]): void {
    this.flush();
    if (keys.length === 0 || !this.affMatchMap) return;
    this.affMatchMap.deleteBatch(packed(keys, AFFINITY_MATCH_KEY.size, (m, b, o) => encodeAffinityMatchKey(m, b, o)), keys.length, { ignoreMissing: true });
  }

  dumpSvcMeta(): Array<[number, SvcMeta]> {
    this.flush();
    if (!this.svcMetaMap) return [];
    const { count, keys, values } = this.svcMetaMap.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, SVC_META.size, decodeBackendId, decodeSvcMeta);
  }

  updateSvcMeta(entries: Array<[number, SvcMeta]>): void {
    if (entries.length === 0 || !this.svcMetaMap) return;
    // The key is a bare __u32 revNatId, encoded like a backend id.
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, SVC_META.size, ([, m], b, o) => packSvcMeta(m, b, o));
    this.update(this.svcMetaMap, keys, values, entries.length);
  }

  deleteSvcMeta(revNatIds: number[]): void {
    this.flush();
    if (revNatIds.length === 0 || !this.svcMetaMap) return;
    this.svcMetaMap.deleteBatch(packed(revNatIds, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), revNatIds.length, { ignoreMissing: true });
  }

  dumpSrcRanges(): SrcRangeKey[] {
    this.flush();
    if (!this.srcRangeMap) return [];
    // An LPM trie has no batch lookup: lookupBatch falls back to key iteration.
    const { count, keys } = this.srcRangeMap.lookupBatch();
    const out: SrcRangeKey[] = new Array(count);
    for (let i = 0; i < count; i++) out[i] = decodeSrcRangeKey(keys, i * SRC_RANGE_KEY.size);
    return out;
  }

  updateSrcRanges(keys: SrcRangeKey[]): void {
    this.flush();
    if (keys.length === 0 || !this.srcRangeMap) return;
    const k = packed(keys, SRC_RANGE_KEY.size, (r, b, o) => encodeSrcRangeKey(r, b, o));
    // LPM tries take no batch update: one call per range (ranges are few).
    for (let i = 0; i < keys.length; i++) this.srcRangeMap.update(k.subarray(i * SRC_RANGE_KEY.size, (i + 1) * SRC_RANGE_KEY.size), AFF_MATCH_PRESENT);
  }

  deleteSrcRanges(keys: SrcRangeKey[]): void {
    this.flush();
    if (keys.length === 0 || !this.srcRangeMap) return;
    const k = packed(keys, SRC_RANGE_KEY.size, (r, b, o) => encodeSrcRangeKey(r, b, o));
    for (let i = 0; i < keys.length; i++) this.srcRangeMap.delete(k.subarray(i * SRC_RANGE_KEY.size, (i + 1) * SRC_RANGE_KEY.size));
  }
}

