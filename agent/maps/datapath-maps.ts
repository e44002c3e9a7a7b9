/**
 * The reconciler's view of the kernel maps, written out method by method.
 * The real implementation (bpf-datapath-maps.ts) writes pinned BPF maps
 * through native/; the in-memory one (memory-datapath-maps.ts: `kpr plan`'s
 * dry run and the reconciler's unit tests) implements every method too, so
 * the reconciler has one write and one read-back path, whichever it is
 * given. Every method is a batch so the real one can use the kernel's batch
 * operations.
 *
 * Each map is one table (MapTable: dump, update, delete); the per-map
 * methods (dumpServices, updateServices, deleteServices...) delegate to the
 * table of that name in TableDatapathMaps, which both implementations extend.
 */
import type { MapCapacities } from './capacities.js';
import type { AffinityMatchKey, Backend, MaglevChunk, MaglevKey, MaglevRef, MaglevRefKey, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from './layout.js';

/** One map in batches: `E` an entry as dumped and written, `K` what deletes it (the key). */
export interface MapTable<E, K> {
  dump(): E[];
  update(entries: E[]): void;
  delete(keys: K[]): void;
}

/** A map of key → value entries. */
export type KeyValueTable<K, V> = MapTable<[K, V], K>;
/** A map whose keys are what counts (the value only marks presence). */
export type KeySetTable<K> = MapTable<K, K>;

export interface DatapathTables {
  /** kpr_svc: frontend slots. */
  Services: KeyValueTable<SvcKey, SvcVal>;
  /** kpr_backend: backend id → address. */
  Backends: KeyValueTable<number, Backend>;
  /** kpr_vip: service address → VIP_FLAG bits. */
  Vips: KeyValueTable<string, number>;
  /** kpr_aff_match: valid (backend, frontend) pairs of frontends with affinity. */
  AffinityMatches: KeySetTable<AffinityMatchKey>;
  /** kpr_svc_meta: frontendId → names (read by the CLI only). */
  SvcMeta: KeyValueTable<number, SvcMeta>;
  /** kpr_src_range: (frontendId, client CIDR) pairs allowed by loadBalancerSourceRanges. */
  SrcRanges: KeySetTable<SrcRangeKey>;
  /** kpr_maglev: Maglev table chunks, (table id, chunk) → slot numbers. */
  Maglev: KeyValueTable<MaglevKey, MaglevChunk>;
  /** kpr_maglev_ref: (frontendId, scope) → its Maglev table and M. */
  MaglevRefs: KeyValueTable<MaglevRefKey, MaglevRef>;
}

export type TableName = keyof DatapathTables;
export const TABLE_NAMES: readonly TableName[] = ['Services', 'Backends', 'Vips', 'AffinityMatches', 'SvcMeta', 'SrcRanges', 'Maglev', 'MaglevRefs'];

/** A batch dump's raw records, as the kernel returned them. */
export interface RawDump {
  count: number;
  keys: Buffer;
  values: Buffer;
  /** Bytes between two values (the value size, for every map this applies to). */
  valueStride: number;
  /** A walk by key lost its place (the key it resumes from was deleted): nothing returned; the read-back of the map starts again. */
  restart?: boolean;
}

/**
 * A resumable dump of one map in batches (BPF_MAP_LOOKUP_BATCH's in/out
 * token): each next() returns the next records, at most about the batch
 * size asked for (a hash bucket comes whole), or null once the walk is over.
 * An entry no one writes or deletes meanwhile is returned exactly once; one
 * written or deleted between two calls may or may not be. A batch's buffers
 * may be reused by the next call.
 */
export interface RawCursor {
  next(): RawDump | null;
}

/** A service-map key's address, port and protocol (what a frontend's entries share). */
export interface SvcKeyBase {
  addr: string;
  port: number;
  proto: number;
}

/**
 * Backend-map values read field by field, by backend id (the reconciler's
 * columnar mirror): what updateBackendColumns encodes, with no object per
 * backend.
 */
export interface BackendColumns {
  /** The IPv4 address as a u32, or -1 when the address is only known as text (addr). */
  ipv4(id: number): number;
  addr(id: number): string;
  port(id: number): number;
  proto(id: number): number;
  flags(id: number): number;
}

/** Everything the reconciler reads from and writes to the datapath's maps. */
export interface DatapathMaps {
  // ---- kpr_svc
  dumpServices(): Array<[SvcKey, SvcVal]>;
  updateServices(entries: Array<[SvcKey, SvcVal]>): void;
  deleteServices(keys: SvcKey[]): void;
  /**
   * updateServices by column (the reconciler's write path, no key objects):
   * entry i is key (bases[i], scope scopeSlots[i] >> 16, slot scopeSlots[i] & 0xffff)
   * → vals[i], where a number n stands for a slot value { backendId: n, count: 0,
   * frontendId: 0, flags: 0 }, for the first `count` entries (default: all, and
   * the columns must then be of one length). Same entries, same order, same
   * failure behaviour as updateServices.
   */
  updateServiceColumns(bases: readonly SvcKeyBase[], scopeSlots: readonly number[], vals: ReadonlyArray<SvcVal | number>, count?: number): void;
  /** kpr_svc's records, undecoded (a full sync's read-back fingerprints them). */
  dumpServicesRaw(): RawDump;
  /** kpr_svc's records in resumable batches of about `batchEntries`, undecoded (a sliced read-back fingerprints them). */
  servicesRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_backend
  dumpBackends(): Array<[number, Backend]>;
  updateBackends(entries: Array<[number, Backend]>): void;
  deleteBackends(ids: number[]): void;
  /** updateBackends by column: entry i is ids[i] → the row of `rows` with that id, for the first `count` ids (default: all). */
  updateBackendColumns(ids: readonly number[], rows: BackendColumns, count?: number): void;
  /** kpr_backend's records, undecoded. */
  dumpBackendsRaw(): RawDump;
  /** kpr_backend's records in resumable batches, undecoded. */
  backendsRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_vip
  dumpVips(): Array<[string, number]>;
  updateVips(entries: Array<[string, number]>): void;
  deleteVips(addrs: string[]): void;
  vipsRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_aff_match
  dumpAffinityMatches(): AffinityMatchKey[];
  updateAffinityMatches(keys: AffinityMatchKey[]): void;
  deleteAffinityMatches(keys: AffinityMatchKey[]): void;
  affinityMatchesRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_svc_meta
  dumpSvcMeta(): Array<[number, SvcMeta]>;
  updateSvcMeta(entries: Array<[number, SvcMeta]>): void;
  deleteSvcMeta(ids: number[]): void;
  svcMetaRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_src_range
  dumpSrcRanges(): SrcRangeKey[];
  updateSrcRanges(keys: SrcRangeKey[]): void;
  deleteSrcRanges(keys: SrcRangeKey[]): void;
  /** An LPM trie, walked by key: a batch may say `restart` (the key it resumes from was deleted). */
  srcRangesRawCursor(batchEntries: number): RawCursor;

  // ---- kpr_maglev, kpr_maglev_ref
  dumpMaglev(): Array<[MaglevKey, MaglevChunk]>;
  updateMaglev(entries: Array<[MaglevKey, MaglevChunk]>): void;
  deleteMaglev(keys: MaglevKey[]): void;
  maglevRawCursor(batchEntries: number): RawCursor;
  dumpMaglevRefs(): Array<[MaglevRefKey, MaglevRef]>;
  updateMaglevRefs(entries: Array<[MaglevRefKey, MaglevRef]>): void;
  deleteMaglevRefs(keys: MaglevRefKey[]): void;
  maglevRefsRawCursor(batchEntries: number): RawCursor;
  /** kpr_maglev's max_entries (chunks): a Maglev table that does not fit is not written (its frontend is balanced at random). */
  maglevCapacity(): number;

  // ---- all maps
  /** max_entries of the maps a Service's entries go to (Infinity: unlimited). */
  capacities(): MapCapacities;
  /**
   * Waits until every call so far has reached the kernel, throwing the first
   * failure (BpfDatapathMaps with a BatchWriter queues large update batches;
   * each other method already waits for the calls before it). The
   * reconciler calls it at the end of a sync.
   */
  flush(): void;
}

/**
 * The per-map methods of DatapathMaps over a set of tables: each a one-line
 * delegation to the named table (`tables`, read at each call). The BPF and
 * in-memory implementations extend it.
 */
export abstract class TableDatapathMaps {
  protected abstract readonly tables: DatapathTables;

  dumpServices(): Array<[SvcKey, SvcVal]> {
    return this.tables.Services.dump();
  }
  updateServices(entries: Array<[SvcKey, SvcVal]>): void {
    this.tables.Services.update(entries);
  }
  deleteServices(keys: SvcKey[]): void {
    this.tables.Services.delete(keys);
  }

  dumpBackends(): Array<[number, Backend]> {
    return this.tables.Backends.dump();
  }
  updateBackends(entries: Array<[number, Backend]>): void {
    this.tables.Backends.update(entries);
  }
  deleteBackends(ids: number[]): void {
    this.tables.Backends.delete(ids);
  }

  dumpVips(): Array<[string, number]> {
    return this.tables.Vips.dump();
  }
  updateVips(entries: Array<[string, number]>): void {
    this.tables.Vips.update(entries);
  }
  deleteVips(addrs: string[]): void {
    this.tables.Vips.delete(addrs);
  }

  dumpAffinityMatches(): AffinityMatchKey[] {
    return this.tables.AffinityMatches.dump();
  }
  updateAffinityMatches(keys: AffinityMatchKey[]): void {
    this.tables.AffinityMatches.update(keys);
  }
  deleteAffinityMatches(keys: AffinityMatchKey[]): void {
    this.tables.AffinityMatches.delete(keys);
  }

  dumpSvcMeta(): Array<[number, SvcMeta]> {
    return this.tables.SvcMeta.dump();
  }
  updateSvcMeta(entries: Array<[number, SvcMeta]>): void {
    this.tables.SvcMeta.update(entries);
  }
  deleteSvcMeta(ids: number[]): void {
    this.tables.SvcMeta.delete(ids);
  }

  dumpSrcRanges(): SrcRangeKey[] {
    return this.tables.SrcRanges.dump();
  }
  updateSrcRanges(keys: SrcRangeKey[]): void {
    this.tables.SrcRanges.update(keys);
  }
  deleteSrcRanges(keys: SrcRangeKey[]): void {
    this.tables.SrcRanges.delete(keys);
  }

  dumpMaglev(): Array<[MaglevKey, MaglevChunk]> {
    return this.tables.Maglev.dump();
  }
  updateMaglev(entries: Array<[MaglevKey, MaglevChunk]>): void {
    this.tables.Maglev.update(entries);
  }
  deleteMaglev(keys: MaglevKey[]): void {
    this.tables.Maglev.delete(keys);
  }

  dumpMaglevRefs(): Array<[MaglevRefKey, MaglevRef]> {
    return this.tables.MaglevRefs.dump();
  }
  updateMaglevRefs(entries: Array<[MaglevRefKey, MaglevRef]>): void {
    this.tables.MaglevRefs.update(entries);
  }
  deleteMaglevRefs(keys: MaglevRefKey[]): void {
    this.tables.MaglevRefs.delete(keys);
  }
}

/** The service-map value of a slot naming backend `id` (what a number stands for in updateServiceColumns). */
export function slotValue(id: number): SvcVal {
  return { backendId: id, count: 0, frontendId: 0, flags: 0 };
}

/** updateServiceColumns' entries as updateServices takes them (the in-memory maps write columns this way). */
export function serviceColumnEntries(
  bases: readonly SvcKeyBase[],
  scopeSlots: readonly number[],
  vals: ReadonlyArray<SvcVal | number>,
  count?: number,
): Array<[SvcKey, SvcVal]> {
  const n = count ?? vals.length;
  if (n === 0) return [];
  if (count === undefined ? bases.length !== n || scopeSlots.length !== n : bases.length < n || scopeSlots.length < n || vals.length < n) {
    throw new Error('updateServiceColumns: columns of different lengths');
  }
  const out = new Array<[SvcKey, SvcVal]>(n);
  for (let i = 0; i < n; i++) {
    const b = bases[i];
    const ss = scopeSlots[i];
    const v = vals[i];
    out[i] = [{ addr: b.addr, port: b.port, slot: ss % 0x10000, proto: b.proto, scope: Math.floor(ss / 0x10000) }, typeof v === 'number' ? slotValue(v) : v];
  }
  return out;
}

/** updateBackendColumns' entries as updateBackends takes them. */
export function backendColumnEntries(ids: readonly number[], rows: BackendColumns, count?: number): Array<[number, Backend]> {
  const n = count ?? ids.length;
  if (n === 0) return [];
  if (ids.length < n) throw new Error('updateBackendColumns: fewer ids than count');
  const out = new Array<[number, Backend]>(n);
  for (let i = 0; i < n; i++) {
    const id = ids[i];
    out[i] = [id, { addr: rows.addr(id), port: rows.port(id), proto: rows.proto(id), flags: rows.flags(id) }];
  }
  return out;
}
