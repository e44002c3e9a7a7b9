/**
 * DatapathMaps over the real pinned BPF maps: one BpfTable per map, encoding
 * with the registry's codecs (fast packers for the large maps, at the
 * registry's offsets) and handing whole batches to the kernel in one call
 * each.
 */
import type { BatchWriter, BpfMap } from '../../native/index.js';
import { TableDatapathMaps, type BackendColumns, type DatapathTables, type KeyValueTable, type MapTable } from './datapath-maps.js';
import type { MapCapacities } from '../reconcile/limits.js';
import { MAPS, type MapSpec } from './registry.js';
import { encodeAddr, encodeIPv4Num, mapCodecs, type Backend, type SvcKey, type SvcMeta, type SvcVal } from './layout.js';
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

// The fast packers' offsets, from the registry (test/unit/bpf-datapath-maps.test.ts checks their bytes against the codecs').
const { addr: K_ADDR, port: K_PORT, slot: K_SLOT, proto: K_PROTO, scope: K_SCOPE, pad: K_PAD } = MAPS.svc.key.at;
const { backend_id: V_ID, count: V_COUNT, rev_nat_id: V_REVNAT, flags: V_FLAGS, pad: V_PAD } = MAPS.svc.value.at;
const { addr: B_ADDR, port: B_PORT, proto: B_PROTO, flags: B_FLAGS } = MAPS.backend.value.at;
const VIP_ADDR = MAPS.vip.key.at.addr;
const VIP_FLAGS = MAPS.vip.value.at.flags;
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
function packBackendRow(rows: BackendColumns, id: number, b: Buffer, o: number): void {
  const ip4 = rows.ipv4(id);
  if (ip4 >= 0) encodeIPv4Num(ip4, b, o + B_ADDR);
  else encodeAddr(rows.addr(id), b, o + B_ADDR);
  packBackendTail(rows.port(id), rows.proto(id), rows.flags(id), b, o);
}

/** The backend codec's bytes, by hand. */
function packBackend(v: Backend, b: Buffer, o: number): void {
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
function packSvcMeta(m: SvcMeta, b: Buffer, o: number): void {
  if (typeof m.name === 'string' && typeof m.portName === 'string' && writeAsciiZ(m.name, b, o + M_NAME, M_NAME_SIZE) && writeAsciiZ(m.portName, b, o + M_PORT_NAME, M_PORT_NAME_SIZE)) {
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
function packSvcVal(v: SvcVal, b: Buffer, o: number): void {
  const id = v.backendId;
  const count = v.count;
  const rn = v.revNatId;
  const flags = v.flags;
  if (!(id >>> 0 === id && isU16(count) && isU16(rn) && isU16(flags))) {
    svcCodecs.value.encode(v, b, o);
    return;
  }
  packId(id, b, o + V_ID);
  b[o + V_COUNT] = count & 0xff;
  b[o + V_COUNT + 1] = count >>> 8;
  b[o + V_REVNAT] = rn & 0xff;
  b[o + V_REVNAT + 1] = rn >>> 8;
  b[o + V_FLAGS] = flags & 0xff;
  b[o + V_FLAGS + 1] = flags >>> 8;
  b[o + V_PAD] = 0;
  b[o + V_PAD + 1] = 0;
}

/** A slot's value (backend id, the rest 0) into zeroed bytes. */
function packSlotVal(id: number, b: Buffer, o: number): void {
  if (id >>> 0 !== id) svcCodecs.value.encode({ backendId: id, count: 0, revNatId: 0, flags: 0 }, b, o); // throws
  else packId(id, b, o + V_ID);
}

/** A __u32 (backend id, VIP flags) by hand; an id that is not a u32 goes to the codec, which throws. */
function packId(id: number, b: Buffer, o: number): void {
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
function packSvcKeyColumns(addrs: AddrCache, base: { addr: string; port: number; proto: number }, ss: number, keys: Buffer, o: number): void {
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
function packSvcKey(addrs: AddrCache, k: SvcKey, b: Buffer, o: number): void {
  addrs.write(k.addr, b, o + K_ADDR);
  b.writeUInt16BE(k.port, o + K_PORT);
  b.writeUInt16LE(k.slot, o + K_SLOT);
  b[o + K_PROTO] = k.proto;
  b[o + K_SCOPE] = k.scope;
  b[o + K_PAD] = 0;
  b[o + K_PAD + 1] = 0;
}

/** What the tables share: the writer's queue and the order it keeps. */
interface TableWriter {
  flush(): void;
  update(map: BpfMap, keys: Buffer, values: Buffer, count: number): void;
}

/** How one map's entries become records and back; the codecs' by default. */
interface TableCodec<E, K> {
  packEntry(e: E, keys: Buffer, keyOff: number, values: Buffer, valueOff: number): void;
  packKey(k: K, keys: Buffer, off: number): void;
  unpack(keys: Buffer, keyOff: number, values: Buffer, valueOff: number): E;
}

/**
 * One pinned map as a MapTable. An LPM trie has no batch update or delete:
 * one call per entry (its entries are few).
 */
class BpfTable<E, K> implements MapTable<E, K> {
  private readonly keySize: number;
  private readonly valueSize: number;
  private readonly batched: boolean;

  constructor(
    private readonly writer: TableWriter,
    private readonly map: BpfMap,
    spec: MapSpec,
    private readonly codec: TableCodec<E, K>,
  ) {
    this.keySize = spec.key.size;
    this.valueSize = spec.value.size;
    this.batched = spec.type !== 'lpm_trie';
  }

  dump(): E[] {
    this.writer.flush();
    // An LPM trie has no batch lookup: lookupBatch falls back to key iteration.
    const { count, keys, values } = this.map.lookupBatch();
    const out: E[] = new Array(count);
    for (let i = 0; i < count; i++) out[i] = this.codec.unpack(keys, i * this.keySize, values, i * this.valueSize);
    return out;
  }

  update(entries: E[]): void {
    if (!this.batched) this.writer.flush();
    const map = this.map;
    const n = entries.length;
    if (n === 0) return;
    const ks = this.keySize;
    const vs = this.valueSize;
    const keys = Buffer.alloc(n * ks);
    const values = Buffer.alloc(n * vs);
    for (let i = 0; i < n; i++) this.codec.packEntry(entries[i], keys, i * ks, values, i * vs);
    if (this.batched) this.writer.update(map, keys, values, n);
    else for (let i = 0; i < n; i++) map.update(keys.subarray(i * ks, (i + 1) * ks), values.subarray(i * vs, (i + 1) * vs));
  }

  delete(keys: K[]): void {
    this.writer.flush();
    const map = this.map;
    const n = keys.length;
    if (n === 0) return;
    const ks = this.keySize;
    const k = Buffer.alloc(n * ks);
    for (let i = 0; i < n; i++) this.codec.packKey(keys[i], k, i * ks);
    if (this.batched) map.deleteBatch(k, n, { ignoreMissing: true });
    else for (let i = 0; i < n; i++) map.delete(k.subarray(i * ks, (i + 1) * ks));
  }
}

/** A key → value map's TableCodec: the registry's codecs, with faster packers where given. */
function keyValueCodec<K, V>(spec: MapSpec<K, V>, pack: { key?: (k: K, b: Buffer, o: number) => void; value?: (v: V, b: Buffer, o: number) => void } = {}): TableCodec<[K, V], K> {
  const c = mapCodecs(spec);
  const packKey = pack.key ?? ((k: K, b: Buffer, o: number) => void c.key.encode(k, b, o));
  const packValue = pack.value ?? ((v: V, b: Buffer, o: number) => void c.value.encode(v, b, o));
  return {
    packEntry: (e, kb, ko, vb, vo) => {
      packKey(e[0], kb, ko);
      packValue(e[1], vb, vo);
    },
    packKey,
    unpack: (kb, ko, vb, vo) => [c.key.decode(kb, ko), c.value.decode(vb, vo)],
  };
}

/** A map whose keys are what counts: each written with the value 1. */
function keySetCodec<K>(spec: MapSpec<K, number>): TableCodec<K, K> {
  const c = mapCodecs(spec);
  const packKey = (k: K, b: Buffer, o: number) => void c.key.encode(k, b, o);
  return {
    packEntry: (k, kb, ko, vb, vo) => {
      packKey(k, kb, ko);
      c.value.encode(1, vb, vo);
    },
    packKey,
    unpack: (kb, ko) => c.key.decode(kb, ko),
  };
}

/**
 * A name is written for a frontend id when the id gets a new owner (or its
 * name was repaired): the id's per-frontend counters restart then, so an id
 * reused after its Service left never carries the old Service's counts
 * (Prometheus sees a counter reset of a new series). Array slots cannot be
 * deleted, so they are zeroed, in one batch.
 */
function restartingCounters(table: KeyValueTable<number, SvcMeta>, stats: BpfMap | undefined, flush: () => void): KeyValueTable<number, SvcMeta> {
  if (!stats) return table;
  const key = mapCodecs(MAPS.svcStats).key;
  return {
    dump: () => table.dump(),
    delete: (ids) => table.delete(ids),
    update: (entries) => {
      table.update(entries);
      const ids = entries.map(([id]) => id).filter((id) => id < stats.maxEntries);
      if (ids.length === 0) return;
      flush();
      const keys = Buffer.alloc(ids.length * key.size);
      ids.forEach((id, i) => key.encode(id, keys, i * key.size));
      stats.updateBatch(keys, Buffer.alloc(ids.length * stats.valueStride), ids.length);
    },
  };
}

/** The pinned maps the reconciler writes. */
export interface DatapathMapSet {
  svc: BpfMap;
  backend: BpfMap;
  vip: BpfMap;
  affinityMatch: BpfMap;
  svcMeta: BpfMap;
  srcRange: BpfMap;
  /** kpr_svc_stats: when given, a frontend id's counters restart when it gets a (new) name. */
  svcStats?: BpfMap;
  /** Runs large update batches on a thread of its own (see QUEUE_MIN_ENTRIES); without it every call is synchronous. */
  writer?: BatchWriter;
}

export class BpfDatapathMaps extends TableDatapathMaps {
  private readonly svcMap: BpfMap;
  private readonly backendMap: BpfMap;
  private readonly affMatchMap: BpfMap;
  private readonly srcRangeMap: BpfMap;
  private readonly vipMap: BpfMap;
  private readonly svcMetaMap: BpfMap;
  private readonly writer: BatchWriter | null;
  private readonly addrs = new AddrCache();
  private readonly scratch = new BatchScratch();
  protected readonly tables: DatapathTables;

  constructor(m: DatapathMapSet) {
    super();
    this.svcMap = m.svc;
    this.backendMap = m.backend;
    this.affMatchMap = m.affinityMatch;
    this.srcRangeMap = m.srcRange;
    this.vipMap = m.vip;
    this.svcMetaMap = m.svcMeta;
    this.writer = m.writer ?? null;
    const addrs = this.addrs;
    const w: TableWriter = { flush: () => this.flush(), update: (map, keys, values, count) => this.update(map, keys, values, count) };
    this.tables = {
      Services: new BpfTable(w, this.svcMap, MAPS.svc, keyValueCodec(MAPS.svc, { key: (k, b, o) => packSvcKey(addrs, k, b, o), value: packSvcVal })),
      Backends: new BpfTable(w, this.backendMap, MAPS.backend, keyValueCodec(MAPS.backend, { key: packId, value: packBackend })),
      Vips: new BpfTable(w, m.vip, MAPS.vip, keyValueCodec(MAPS.vip, { key: (a, b, o) => addrs.write(a, b, o + VIP_ADDR), value: (f, b, o) => packId(f, b, o + VIP_FLAGS) })),
      AffinityMatches: new BpfTable(w, this.affMatchMap, MAPS.affinityMatch, keySetCodec(MAPS.affinityMatch)),
      SvcMeta: restartingCounters(new BpfTable(w, m.svcMeta, MAPS.svcMeta, keyValueCodec(MAPS.svcMeta, { key: packId, value: packSvcMeta })), m.svcStats, () => this.flush()),
      SrcRanges: new BpfTable(w, this.srcRangeMap, MAPS.srcRange, keySetCodec(MAPS.srcRange)),
    };
  }

  /** max_entries of the maps the reconciler fills. */
  capacities(): MapCapacities {
    return {
      svc: this.svcMap.maxEntries,
      backend: this.backendMap.maxEntries,
      affinityMatch: this.affMatchMap.maxEntries,
      srcRange: this.srcRangeMap.maxEntries,
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

  /** kpr_vip's records in resumable batches, undecoded. */
  vipsRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.rawCursor(this.vipMap, batchEntries);
  }

  /** kpr_svc_meta's records in resumable batches, undecoded. */
  svcMetaRawCursor(batchEntries: number): { next(): { count: number; keys: Buffer; values: Buffer; valueStride: number } | null } {
    return this.rawCursor(this.svcMetaMap, batchEntries);
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
    const addrs = this.addrs;
    this.writeInRounds(this.svcMap, n, MAPS.svc.key.size, MAPS.svc.value.size, (i, keys, o, values, vo) => {
      packSvcKeyColumns(addrs, bases[i], scopeSlots[i], keys, o);
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

  /**
   * updateBackends by column: entry i is ids[i] → the row of `rows` with
   * that id, for the first `count` ids (default: all). Same bytes.
   */
  updateBackendColumns(ids: readonly number[], rows: BackendColumns, count?: number): void {
    const n = count ?? ids.length;
    if (n === 0) return;
    if (ids.length < n) throw new Error('updateBackendColumns: fewer ids than count');
    this.writeInRounds(this.backendMap, n, MAPS.backend.key.size, MAPS.backend.value.size, (i, keys, ko, values, vo) => {
      const id = ids[i];
      packId(id, keys, ko);
      packBackendRow(rows, id, values, vo);
    });
  }
}

/** The fast packers, for the test that compares their bytes with the codecs'. */
export const packers = {
  svcKey: (k: SvcKey, b: Buffer, o: number): void => packSvcKey(new AddrCache(), k, b, o),
  svcKeyColumns: (base: { addr: string; port: number; proto: number }, scopeSlot: number, b: Buffer, o: number): void => packSvcKeyColumns(new AddrCache(), base, scopeSlot, b, o),
  svcVal: packSvcVal,
  slotVal: packSlotVal,
  backend: packBackend,
  backendRow: packBackendRow,
  svcMeta: packSvcMeta,
  id: packId,
};
