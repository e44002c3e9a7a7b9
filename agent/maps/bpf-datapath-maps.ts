/**
 * DatapathMaps over the real pinned BPF maps: one BpfTable per map, encoding
 * with the registry's codecs (fast packers for the large maps, at the
 * registry's offsets) and handing whole batches to the kernel in one call
 * each.
 */
import type { BatchWriter, BpfMap } from '../../native/index.js';
import {
  TableDatapathMaps,
  type BackendColumns,
  type DatapathMaps,
  type DatapathTables,
  type KeyValueTable,
  type MapTable,
  type RawCursor,
  type RawDump,
  type SvcKeyBase,
} from './datapath-maps.js';
import type { MapCapacities } from './capacities.js';
import { MAPS, type MapSpec } from './registry.js';
import { mapCodecs, type SvcMeta, type SvcVal } from './layout.js';
import { AddrCache, packBackend, packBackendRow, packId, packSlotVal, packSvcKey, packSvcKeyColumns, packSvcMeta, packSvcVal } from './fast-pack.js';

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

const VIP_ADDR = MAPS.vip.key.at.addr;
const VIP_FLAGS = MAPS.vip.value.at.flags;

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
function keyValueCodec<K, V>(
  spec: MapSpec<K, V>,
  pack: { key?: (k: K, b: Buffer, o: number) => void; value?: (v: V, b: Buffer, o: number) => void } = {},
): TableCodec<[K, V], K> {
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
function restartingCounters(table: KeyValueTable<number, SvcMeta>, stats: BpfMap | undefined, w: TableWriter): KeyValueTable<number, SvcMeta> {
  if (!stats) return table;
  const key = mapCodecs(MAPS.svcStats).key;
  return {
    dump: () => table.dump(),
    delete: (ids) => table.delete(ids),
    update: (entries) => {
      table.update(entries);
      const ids = entries.map(([id]) => id).filter((id) => id < stats.maxEntries);
      if (ids.length === 0) return;
      const keys = Buffer.alloc(ids.length * key.size);
      ids.forEach((id, i) => key.encode(id, keys, i * key.size));
      // Behind the names in the writer's queue, not after waiting for it: a cold sync's names come
      // after a million slots and backends still being written, which this would wait for (~0.7 s
      // of a 100,000-Service sync).
      w.update(stats, keys, Buffer.alloc(ids.length * stats.valueStride), ids.length);
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
  maglev: BpfMap;
  maglevRef: BpfMap;
  /** kpr_svc_stats: when given, a frontend id's counters restart when it gets a (new) name. */
  svcStats?: BpfMap;
  /** Runs large update batches on a thread of its own (see QUEUE_MIN_ENTRIES); without it every call is synchronous. */
  writer?: BatchWriter;
}

export class BpfDatapathMaps extends TableDatapathMaps implements DatapathMaps {
  private readonly svcMap: BpfMap;
  private readonly backendMap: BpfMap;
  private readonly affMatchMap: BpfMap;
  private readonly srcRangeMap: BpfMap;
  private readonly vipMap: BpfMap;
  private readonly svcMetaMap: BpfMap;
  private readonly maglevMap: BpfMap;
  private readonly maglevRefMap: BpfMap;
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
    this.maglevMap = m.maglev;
    this.maglevRefMap = m.maglevRef;
    this.writer = m.writer ?? null;
    const addrs = this.addrs;
    const w: TableWriter = { flush: () => this.flush(), update: (map, keys, values, count) => this.update(map, keys, values, count) };
    this.tables = {
      Services: new BpfTable(w, this.svcMap, MAPS.svc, keyValueCodec(MAPS.svc, { key: (k, b, o) => packSvcKey(addrs, k, b, o), value: packSvcVal })),
      Backends: new BpfTable(w, this.backendMap, MAPS.backend, keyValueCodec(MAPS.backend, { key: packId, value: packBackend })),
      Vips: new BpfTable(
        w,
        m.vip,
        MAPS.vip,
        keyValueCodec(MAPS.vip, { key: (a, b, o) => addrs.write(a, b, o + VIP_ADDR), value: (f, b, o) => packId(f, b, o + VIP_FLAGS) }),
      ),
      AffinityMatches: new BpfTable(w, this.affMatchMap, MAPS.affinityMatch, keySetCodec(MAPS.affinityMatch)),
      SvcMeta: restartingCounters(new BpfTable(w, m.svcMeta, MAPS.svcMeta, keyValueCodec(MAPS.svcMeta, { key: packId, value: packSvcMeta })), m.svcStats, w),
      SrcRanges: new BpfTable(w, this.srcRangeMap, MAPS.srcRange, keySetCodec(MAPS.srcRange)),
      Maglev: new BpfTable(w, this.maglevMap, MAPS.maglev, keyValueCodec(MAPS.maglev)),
      MaglevRefs: new BpfTable(w, this.maglevRefMap, MAPS.maglevRef, keyValueCodec(MAPS.maglevRef)),
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

  /** kpr_maglev's max_entries (chunks). */
  maglevCapacity(): number {
    return this.maglevMap.maxEntries;
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
  dumpServicesRaw(): RawDump {
    this.flush();
    return { ...this.svcMap.lookupBatch(), valueStride: this.svcMap.valueStride };
  }

  /** kpr_backend's records, undecoded. */
  dumpBackendsRaw(): RawDump {
    this.flush();
    return { ...this.backendMap.lookupBatch(), valueStride: this.backendMap.valueStride };
  }

  /** kpr_svc's records in resumable batches of about `batchEntries`, undecoded (a sliced drift read-back fingerprints them). */
  servicesRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.svcMap, batchEntries);
  }

  /** kpr_backend's records in resumable batches, undecoded. */
  backendsRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.backendMap, batchEntries);
  }

  /** kpr_vip's records in resumable batches, undecoded. */
  vipsRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.vipMap, batchEntries);
  }

  /** kpr_svc_meta's records in resumable batches, undecoded. */
  svcMetaRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.svcMetaMap, batchEntries);
  }

  /** kpr_aff_match's records in resumable batches, undecoded. */
  affinityMatchesRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.affMatchMap, batchEntries);
  }

  /** kpr_src_range's records in resumable batches, undecoded: an LPM trie has no batch lookup, so walked by key (BpfMap.keyWalkCursor). */
  srcRangesRawCursor(batchEntries: number): RawCursor {
    const map = this.srcRangeMap;
    const cursor = map.keyWalkCursor(batchEntries);
    return {
      next: () => {
        this.flush();
        const b = cursor.next();
        return b && { ...b, valueStride: map.valueStride };
      },
    };
  }

  /** kpr_maglev's records in resumable batches, undecoded. */
  maglevRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.maglevMap, batchEntries);
  }

  /** kpr_maglev_ref's records in resumable batches, undecoded. */
  maglevRefsRawCursor(batchEntries: number): RawCursor {
    return this.rawCursor(this.maglevRefMap, batchEntries);
  }

  private rawCursor(map: BpfMap, batchEntries: number): RawCursor {
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
   * updateServices by column (DatapathMaps.updateServiceColumns), encoded
   * with the fast packers straight into reused buffers. Same bytes.
   */
  updateServiceColumns(bases: readonly SvcKeyBase[], scopeSlots: readonly number[], vals: ReadonlyArray<SvcVal | number>, count?: number): void {
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
  private writeInRounds(
    map: BpfMap,
    n: number,
    keySize: number,
    valueSize: number,
    pack: (i: number, keys: Buffer, keyOff: number, values: Buffer, valueOff: number) => void,
  ): void {
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
export { packers } from './fast-pack.js';
