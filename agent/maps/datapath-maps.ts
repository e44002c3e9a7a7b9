/**
 * The reconciler's view of the kernel maps. The real implementation
 * (bpf-datapath-maps.ts) writes pinned BPF maps through native/; tests of the
 * diff logic use an in-memory one. Every method is a batch so the real one can
 * use the kernel's batch operations.
 *
 * Each map is one table (MapTable: dump, update, delete); DatapathMaps is
 * their methods under the table's name (dumpServices, updateServices,
 * deleteServices...), which tableMethods() makes for a set of tables.
 */
import type { AffinityMatchKey, Backend, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from './layout.js';

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
  /** kpr_svc_meta: revNatId → names (read by the CLI only). */
  SvcMeta: KeyValueTable<number, SvcMeta>;
  /** kpr_src_range: (revNatId, client CIDR) pairs allowed by loadBalancerSourceRanges. */
  SrcRanges: KeySetTable<SrcRangeKey>;
}

export type TableName = keyof DatapathTables;
export const TABLE_NAMES: readonly TableName[] = ['Services', 'Backends', 'Vips', 'AffinityMatches', 'SvcMeta', 'SrcRanges'];

type Entry<N extends TableName> = DatapathTables[N] extends MapTable<infer E, unknown> ? E : never;
type Key<N extends TableName> = DatapathTables[N] extends MapTable<unknown, infer K> ? K : never;

/** The tables' methods under their names: dumpServices(), updateServices(entries), deleteServices(keys)... */
export type TableMethods = { [N in TableName as `dump${N}`]: () => Entry<N>[] } & { [N in TableName as `update${N}`]: (entries: Entry<N>[]) => void } & {
  [N in TableName as `delete${N}`]: (keys: Key<N>[]) => void;
};

export type DatapathMaps = TableMethods & {
  /**
   * Where updates may be queued (BpfDatapathMaps with a BatchWriter): waits
   * until every call so far has reached the kernel, throwing the first
   * failure. Each other method already waits for the calls before it.
   */
  flush?(): void;
};

/**
 * DatapathMaps over a set of tables: each of the 18 methods is a one-line
 * delegation to the named table (`tables`, read at each call), put on the
 * prototype once below. The BPF and in-memory implementations extend it.
 */
export interface TableDatapathMaps extends TableMethods {}
export abstract class TableDatapathMaps {
  protected abstract readonly tables: DatapathTables;
}

for (const n of TABLE_NAMES) {
  type Self = { tables: Record<TableName, MapTable<unknown, unknown>> };
  const methods = {
    [`dump${n}`](this: Self) {
      return this.tables[n].dump();
    },
    [`update${n}`](this: Self, entries: unknown[]) {
      this.tables[n].update(entries);
    },
    [`delete${n}`](this: Self, keys: unknown[]) {
      this.tables[n].delete(keys);
    },
  };
  for (const [name, fn] of Object.entries(methods)) Object.defineProperty(TableDatapathMaps.prototype, name, { value: fn, writable: true, configurable: true });
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
