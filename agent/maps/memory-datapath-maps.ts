/**
 * DatapathMaps in memory, every method of it: `kpr plan`'s dry run
 * (reconcile/dry-run.ts) and the reconciler's unit tests, which so run the
 * reconciler's one write and read-back path (column writes, raw dumps and
 * cursors, flush) as it runs over the BPF maps. Behaves like the kernel's
 * batch operations: entries are applied in array order and a failure stops
 * the batch part-way (what was applied stays applied). Every applied entry
 * is recorded in `ops`, so a test can replay the exact sequence a live BPF
 * reader would have seen. A column write is logged as the updateServices or
 * updateBackends call it stands for (same entries, same order).
 */
import {
  TableDatapathMaps,
  backendColumnEntries,
  serviceColumnEntries,
  type BackendColumns,
  type DatapathMaps,
  type DatapathTables,
  type MapTable,
  type RawCursor,
  type RawDump,
  type SvcKeyBase,
  type TableName,
} from './datapath-maps.js';
import {
  mapCodecs,
  type AffinityMatchKey,
  type Backend,
  type MaglevChunk,
  type MaglevKey,
  type MaglevRef,
  type MaglevRefKey,
  type SrcRangeKey,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from './layout.js';
import { MAPS, MAP_NAMES } from './registry.js';
import type { MapCapacities } from './capacities.js';
import { bucketCursor, rawDump } from './memory-raw-cursor.js';
import { parseIP } from '../net/ip.js';

export type MapMethod = `update${TableName}` | `delete${TableName}`;

/** One entry applied to a map, in the order it was applied. */
export type MapOp =
  | { call: number; kind: 'svc-update'; key: SvcKey; val: SvcVal }
  | { call: number; kind: 'svc-delete'; key: SvcKey }
  | { call: number; kind: 'backend-update'; id: number; val: Backend }
  | { call: number; kind: 'backend-delete'; id: number }
  | { call: number; kind: 'vip-update'; addr: string; flags: number }
  | { call: number; kind: 'vip-delete'; addr: string }
  | { call: number; kind: 'aff-update'; key: AffinityMatchKey }
  | { call: number; kind: 'aff-delete'; key: AffinityMatchKey }
  | { call: number; kind: 'meta-update'; id: number; meta: SvcMeta }
  | { call: number; kind: 'meta-delete'; id: number }
  | { call: number; kind: 'range-update'; key: SrcRangeKey }
  | { call: number; kind: 'range-delete'; key: SrcRangeKey }
  | { call: number; kind: 'maglev-update'; key: MaglevKey; chunk: MaglevChunk }
  | { call: number; kind: 'maglev-delete'; key: MaglevKey }
  | { call: number; kind: 'maglev-ref-update'; key: MaglevRefKey; ref: MaglevRef }
  | { call: number; kind: 'maglev-ref-delete'; key: MaglevRefKey };

export interface MapCall {
  /** 1-based count of mutating calls. */
  call: number;
  method: MapMethod;
  entries: number;
  /** Set when the call threw. */
  error?: string;
}

export interface MemoryDatapathMapsOptions {
  /** Capacity of the service map (like max_entries); inserting beyond it fails with E2BIG. */
  maxServices?: number;
  /** Capacity of the backend map. */
  maxBackends?: number;
  /** Capacity of kpr_aff_match. */
  maxAffinityMatches?: number;
  /** Capacity of kpr_src_range. */
  maxSrcRanges?: number;
  /** Capacity of kpr_maglev (chunks). */
  maxMaglev?: number;
}

export interface FailureSpec {
  /** Which mutating call fails (1-based, counted over the life of the object). */
  call: number;
  /** How many entries of that call are applied before it fails (default 0). */
  afterEntries?: number;
  message?: string;
}

/** Identity of an affinity-match key. */
export function affKeyId(k: AffinityMatchKey): string {
  return `${k.backendId}|${k.frontendId}`;
}

/** Identity of a source-range key. */
export function rangeKeyId(k: SrcRangeKey): string {
  return `${k.frontendId}|${k.cidr}`;
}

/** Identity of a service-map key: equal keys in the kernel (byte for byte) are equal strings here. */
export function svcKeyId(k: SvcKey): string {
  return `${k.addr}|${k.port}|${k.slot}|${k.proto}|${k.scope}`;
}

/** How one in-memory table keeps its entries: `E` the entry, `K` its key, `S` what the store holds under the key's identity `I`. */
interface MemoryTableSpec<E, K, I, S> {
  name: TableName;
  store: Map<I, S>;
  keyOf(e: E): K;
  idOf(k: K): I;
  /** Throws what the real codec would, before the capacity check. */
  check?(e: E): void;
  /** Capacity (read at each call), the errno and message a full map fails with, and the map's name it carries. */
  capacity?: { max(): number; code: string; message: string; map: string };
  /** The copy stored for an entry (may throw, after the capacity check). */
  stored(e: E): S;
  /** A copy of a stored entry, for dumps. */
  entry(id: I, s: S): E;
  updated(call: number, s: S, id: I): MapOp;
  deleted(call: number, k: K): MapOp;
  /** The ENOENT message of a missing key. */
  missing(k: K): string;
}

/** One map in memory, batches applied in order through the owner's call log and failure schedule. */
class MemoryTable<E, K, I, S> implements MapTable<E, K> {
  constructor(
    private readonly run: <T>(method: MapMethod, entries: T[], apply: (e: T, call: number) => void) => void,
    private readonly ops: MapOp[],
    private readonly spec: MemoryTableSpec<E, K, I, S>,
  ) {}

  dump(): E[] {
    const out: E[] = [];
    for (const [id, s] of this.spec.store) out.push(this.spec.entry(id, s));
    return out;
  }

  update(entries: E[]): void {
    const t = this.spec;
    this.run(`update${t.name}`, entries, (e, call) => {
      t.check?.(e);
      const id = t.idOf(t.keyOf(e));
      if (t.capacity && !t.store.has(id) && t.store.size >= t.capacity.max()) throw mapError(t.capacity.code, t.capacity.message, t.capacity.map);
      const s = t.stored(e);
      t.store.set(id, s); // the log shares the copy: neither is ever mutated
      this.ops.push(t.updated(call, s, id));
    });
  }

  delete(keys: K[]): void {
    const t = this.spec;
    this.run(`delete${t.name}`, keys, (k, call) => {
      if (!t.store.delete(t.idOf(k))) throw mapError('ENOENT', t.missing(k));
      this.ops.push(t.deleted(call, k));
    });
  }
}

const same = <T>(x: T): T => x;

export class MemoryDatapathMaps extends TableDatapathMaps implements DatapathMaps {
  readonly services = new Map<string, [SvcKey, SvcVal]>();
  readonly backends = new Map<number, Backend>();
  readonly vips = new Map<string, number>();
  readonly affinityMatches = new Map<string, AffinityMatchKey>();
  readonly svcMeta = new Map<number, SvcMeta>();
  readonly srcRanges = new Map<string, SrcRangeKey>();
  /** kpr_maglev by "tableId/chunk". */
  readonly maglev = new Map<string, [MaglevKey, MaglevChunk]>();
  /** kpr_maglev_ref by "frontendId/scope". */
  readonly maglevRefs = new Map<string, [MaglevRefKey, MaglevRef]>();
  /** Every applied entry, in order. */
  readonly ops: MapOp[] = [];
  /** Every mutating call, in order. */
  readonly calls: MapCall[] = [];
  maxServices: number;
  maxBackends: number;
  maxAffinityMatches: number;
  maxSrcRanges: number;
  maxMaglev: number;
  /** Scheduled failures; see failOnCall(). */
  private failures: FailureSpec[] = [];
  private callCount = 0;
  protected readonly tables: DatapathTables;

  constructor(opts: MemoryDatapathMapsOptions = {}) {
    super();
    this.maxServices = opts.maxServices ?? Infinity;
    this.maxBackends = opts.maxBackends ?? Infinity;
    this.maxAffinityMatches = opts.maxAffinityMatches ?? Infinity;
    this.maxSrcRanges = opts.maxSrcRanges ?? Infinity;
    this.maxMaglev = opts.maxMaglev ?? Infinity;
    const run = <T>(method: MapMethod, entries: T[], apply: (e: T, call: number) => void) => this.run(method, entries, apply);
    const ops = this.ops;
    this.tables = {
      Services: new MemoryTable(run, ops, {
        name: 'Services',
        store: this.services,
        keyOf: (e: [SvcKey, SvcVal]) => e[0],
        idOf: svcKeyId,
        check: ([k]) => checkSvcKey(k),
        capacity: { max: () => this.maxServices, code: 'E2BIG', message: 'service map full', map: MAP_NAMES.svc },
        stored: ([k, v]): [SvcKey, SvcVal] => [
          { addr: k.addr, port: k.port, slot: k.slot, proto: k.proto, scope: k.scope },
          { backendId: v.backendId, count: v.count, frontendId: v.frontendId, flags: v.flags },
        ],
        entry: (_id, [k, v]) => [{ ...k }, { ...v }],
        updated: (call, [key, val]) => ({ call, kind: 'svc-update', key, val }),
        deleted: (call, k) => ({ call, kind: 'svc-delete', key: { ...k } }),
        missing: (k) => `no service entry ${JSON.stringify(k)}`,
      }),
      Backends: new MemoryTable(run, ops, {
        name: 'Backends',
        store: this.backends,
        keyOf: (e: [number, Backend]) => e[0],
        idOf: same,
        capacity: { max: () => this.maxBackends, code: 'E2BIG', message: 'backend map full', map: MAP_NAMES.backend },
        stored: ([id, b]) => {
          if (!parseIP(b.addr) || !(id >= 0 && id <= 0xffffffff)) throw new RangeError(`invalid backend ${id} ${JSON.stringify(b)}`);
          return { addr: b.addr, port: b.port, proto: b.proto, flags: b.flags }; // the value only, as the kernel stores it
        },
        entry: (id, b) => [id, { ...b }],
        updated: (call, val, id) => ({ call, kind: 'backend-update', id, val }),
        deleted: (call, id) => ({ call, kind: 'backend-delete', id }),
        missing: (id) => `no backend ${id}`,
      }),
      Vips: new MemoryTable(run, ops, {
        name: 'Vips',
        store: this.vips,
        keyOf: (e: [string, number]) => e[0],
        idOf: same,
        check: ([addr]) => {
          if (!parseIP(addr)) throw new RangeError(`invalid vip ${addr}`);
        },
        stored: ([, flags]) => flags,
        entry: (addr, flags) => [addr, flags],
        updated: (call, flags, addr) => ({ call, kind: 'vip-update', addr, flags }),
        deleted: (call, addr) => ({ call, kind: 'vip-delete', addr }),
        missing: (addr) => `no vip ${addr}`,
      }),
      AffinityMatches: new MemoryTable(run, ops, {
        name: 'AffinityMatches',
        store: this.affinityMatches,
        keyOf: same<AffinityMatchKey>,
        idOf: affKeyId,
        capacity: { max: () => this.maxAffinityMatches, code: 'E2BIG', message: 'affinity match map full', map: MAP_NAMES.affinityMatch },
        stored: (k) => ({ ...k }),
        entry: (_id, k) => ({ ...k }),
        updated: (call, key) => ({ call, kind: 'aff-update', key }),
        deleted: (call, k) => ({ call, kind: 'aff-delete', key: { ...k } }),
        missing: (k) => `no affinity match ${affKeyId(k)}`,
      }),
      SvcMeta: new MemoryTable(run, ops, {
        name: 'SvcMeta',
        store: this.svcMeta,
        keyOf: (e: [number, SvcMeta]) => e[0],
        idOf: same,
        stored: ([, m]) => ({ ...m }),
        entry: (id, m) => [id, { ...m }],
        updated: (call, meta, id) => ({ call, kind: 'meta-update', id, meta }),
        deleted: (call, id) => ({ call, kind: 'meta-delete', id }),
        missing: (id) => `no meta ${id}`,
      }),
      SrcRanges: new MemoryTable(run, ops, {
        name: 'SrcRanges',
        store: this.srcRanges,
        keyOf: same<SrcRangeKey>,
        idOf: rangeKeyId,
        capacity: { max: () => this.maxSrcRanges, code: 'ENOSPC', message: 'source range map full', map: MAP_NAMES.srcRange },
        stored: (k) => ({ ...k }),
        entry: (_id, k) => ({ ...k }),
        updated: (call, key) => ({ call, kind: 'range-update', key }),
        deleted: (call, k) => ({ call, kind: 'range-delete', key: { ...k } }),
        missing: (k) => `no source range ${rangeKeyId(k)}`,
      }),
      Maglev: new MemoryTable(run, ops, {
        name: 'Maglev',
        store: this.maglev,
        keyOf: (e: [MaglevKey, MaglevChunk]) => e[0],
        idOf: maglevKeyId,
        capacity: { max: () => this.maxMaglev, code: 'E2BIG', message: 'Maglev map full', map: MAP_NAMES.maglev },
        stored: ([k, c]): [MaglevKey, MaglevChunk] => [{ ...k }, c.slice()],
        entry: (_id, [k, c]): [MaglevKey, MaglevChunk] => [{ ...k }, c.slice()],
        updated: (call, [key, chunk]) => ({ call, kind: 'maglev-update', key, chunk }),
        deleted: (call, k) => ({ call, kind: 'maglev-delete', key: { ...k } }),
        missing: (k) => `no Maglev chunk ${maglevKeyId(k)}`,
      }),
      MaglevRefs: new MemoryTable(run, ops, {
        name: 'MaglevRefs',
        store: this.maglevRefs,
        keyOf: (e: [MaglevRefKey, MaglevRef]) => e[0],
        idOf: maglevRefKeyId,
        stored: ([k, r]): [MaglevRefKey, MaglevRef] => [{ ...k }, { ...r }],
        entry: (_id, [k, r]): [MaglevRefKey, MaglevRef] => [{ ...k }, { ...r }],
        updated: (call, [key, ref]) => ({ call, kind: 'maglev-ref-update', key, ref }),
        deleted: (call, k) => ({ call, kind: 'maglev-ref-delete', key: { ...k } }),
        missing: (k) => `no Maglev table reference ${maglevRefKeyId(k)}`,
      }),
    };
  }

  /** The capacities as the kernel's max_entries (Infinity: unlimited). */
  capacities(): MapCapacities {
    return { svc: this.maxServices, backend: this.maxBackends, affinityMatch: this.maxAffinityMatches, srcRange: this.maxSrcRanges };
  }

  /** kpr_maglev's capacity (chunks). */
  maglevCapacity(): number {
    return this.maxMaglev;
  }

  /** Number of mutating calls made so far. */
  get mutationCalls(): number {
    return this.callCount;
  }

  /** Makes the Nth mutating call (1-based, absolute) fail after applying `afterEntries` entries. */
  failOnCall(spec: FailureSpec): void {
    this.failures.push(spec);
  }

  /** Makes the next mutating call fail. */
  failNextCall(afterEntries = 0, message?: string): void {
    this.failures.push({ call: this.callCount + 1, afterEntries, message });
  }

  /** Forgets the recorded ops and calls (the maps keep their contents). */
  clearLog(): void {
    this.ops.length = 0;
    this.calls.length = 0;
  }

  /** Pre-fills the maps without recording ops (a previous agent run's state). */
  prefill(
    services: Array<[SvcKey, SvcVal]>,
    backends: Array<[number, Backend]>,
    extra: { vips?: Array<[string, number]>; affinityMatches?: AffinityMatchKey[]; svcMeta?: Array<[number, SvcMeta]> } = {},
  ): void {
    for (const [k, v] of services) this.services.set(svcKeyId(k), [{ ...k }, { ...v }]);
    for (const [id, b] of backends) this.backends.set(id, { ...b });
    for (const [a, f] of extra.vips ?? []) this.vips.set(a, f);
    for (const k of extra.affinityMatches ?? []) this.affinityMatches.set(affKeyId(k), { ...k });
    for (const [id, m] of extra.svcMeta ?? []) this.svcMeta.set(id, { ...m });
  }

  /** updateServices of the columns' entries (DatapathMaps.updateServiceColumns). */
  updateServiceColumns(bases: readonly SvcKeyBase[], scopeSlots: readonly number[], vals: ReadonlyArray<SvcVal | number>, count?: number): void {
    const entries = serviceColumnEntries(bases, scopeSlots, vals, count);
    if (entries.length > 0) this.updateServices(entries);
  }

  /** updateBackends of the rows' entries (DatapathMaps.updateBackendColumns). */
  updateBackendColumns(ids: readonly number[], rows: BackendColumns, count?: number): void {
    const entries = backendColumnEntries(ids, rows, count);
    if (entries.length > 0) this.updateBackends(entries);
  }

  /** Nothing is queued: every call has applied its entries when it returns. */
  flush(): void {}

  /** kpr_svc's records, raw, in one batch (encoded by the registry's codecs). */
  dumpServicesRaw(): RawDump {
    return rawDump(this.services.values(), SVC, (e) => e);
  }

  /** kpr_backend's records, raw, in one batch. */
  dumpBackendsRaw(): RawDump {
    return rawDump(this.backends.entries(), BACKEND, (e) => e);
  }

  /** kpr_svc's records, raw, in resumable batches as the kernel's hash-map batch lookup returns them (memory-raw-cursor.ts). */
  servicesRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.services.entries(),
      SVC,
      ([k, v]) => [k, v],
    );
  }

  /** kpr_backend's records, raw, in resumable batches (as servicesRawCursor). */
  backendsRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.backends].map(([id, b]): [string, [number, Backend]] => [String(id), [id, b]]).values(),
      BACKEND,
      (e) => e,
    );
  }

  /** kpr_vip's records, raw, in resumable batches (as servicesRawCursor). */
  vipsRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.vips].map(([addr, flags]): [string, [string, number]] => [addr, [addr, flags]]).values(),
      VIP,
      (e) => e,
    );
  }

  /** kpr_svc_meta's records, raw, in resumable batches (as servicesRawCursor). */
  svcMetaRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.svcMeta].map(([id, m]): [string, [number, SvcMeta]] => [String(id), [id, m]]).values(),
      META,
      (e) => e,
    );
  }

  /** kpr_aff_match's records, raw, in resumable batches (as servicesRawCursor). */
  affinityMatchesRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.affinityMatches.entries(),
      AFF,
      (k): [AffinityMatchKey, number] => [k, 1],
    );
  }

  /** kpr_src_range's records, raw, in resumable batches (as servicesRawCursor: a walk in a fixed order of keys, as the kernel's trie walk). */
  srcRangesRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.srcRanges.entries(),
      RANGE,
      (k): [SrcRangeKey, number] => [k, 1],
    );
  }

  /** kpr_maglev's records, raw, in resumable batches (as servicesRawCursor). */
  maglevRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.maglev.entries(),
      MAGLEV,
      (e) => e,
    );
  }

  /** kpr_maglev_ref's records, raw, in resumable batches (as servicesRawCursor). */
  maglevRefsRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.maglevRefs.entries(),
      MAGLEV_REF,
      (e) => e,
    );
  }

  private run<T>(method: MapMethod, entries: T[], apply: (e: T, call: number) => void): void {
    const call = ++this.callCount;
    const rec: MapCall = { call, method, entries: entries.length };
    this.calls.push(rec);
    const failure = this.failures.find((f) => f.call === call);
    const limit = failure ? Math.min(failure.afterEntries ?? 0, entries.length) : entries.length;
    try {
      for (let i = 0; i < limit; i++) apply(entries[i], call);
      if (failure) throw mapError('EIO', failure.message ?? `injected failure of call ${call} (${method})`);
    } catch (err) {
      rec.error = (err as Error).message;
      throw err;
    }
  }
}

/** The registry's codecs of the maps the raw cursors encode. */
const SVC = mapCodecs(MAPS.svc);
const BACKEND = mapCodecs(MAPS.backend);
const VIP = mapCodecs(MAPS.vip);
const META = mapCodecs(MAPS.svcMeta);
const AFF = mapCodecs(MAPS.affinityMatch);
const RANGE = mapCodecs(MAPS.srcRange);
const MAGLEV = mapCodecs(MAPS.maglev);
const MAGLEV_REF = mapCodecs(MAPS.maglevRef);

/** Identity of a kpr_maglev key. */
export function maglevKeyId(k: MaglevKey): string {
  return `${k.tableId}/${k.chunk}`;
}

/** Identity of a kpr_maglev_ref key. */
export function maglevRefKeyId(k: MaglevRefKey): string {
  return `${k.frontendId}/${k.scope}`;
}

/** Rejects what the real codec could not encode, so a bad key fails here as it would for real. */
function checkSvcKey(k: SvcKey): void {
  if (
    !parseIP(k.addr) ||
    !(k.port >= 0 && k.port <= 0xffff && k.slot >= 0 && k.slot <= 0xffff && k.proto >= 0 && k.proto <= 0xff && k.scope >= 0 && k.scope <= 0xff)
  ) {
    throw new RangeError(`invalid service key ${JSON.stringify(k)}`);
  }
}

/** A map failure as KprBpfError carries it: the errno name and, for a full map, the map's name. */
function mapError(code: string, message: string, map?: string): Error & { code: string; map?: string } {
  return Object.assign(new Error(`${code}: ${message}`), { code }, map === undefined ? {} : { map });
}
