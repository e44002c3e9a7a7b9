/**
 * DatapathMaps in memory, for tests and dry runs. Behaves like the kernel's
 * batch operations: entries are applied in array order and a failure stops
 * the batch part-way (what was applied stays applied). Every applied entry
 * is recorded in `ops`, so a test can replay the exact sequence a live BPF
 * reader would have seen.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import { BACKEND, BACKEND_ID_SIZE, SVC_KEY, SVC_META, SVC_VAL, VIP_KEY, VIP_VAL, encodeBackend, encodeBackendId, encodeSvcKey, encodeSvcMeta, encodeSvcVal, encodeVipKey, encodeVipVal } from '../maps/layout.js';
import type { AffinityMatchKey, Backend, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from '../maps/layout.js';
import type { RawCursor, RawDump } from './fingerprint.js';
import { MAP_NAMES } from '../maps/layout.js';
import type { MapCapacities } from './limits.js';
import { parseIP } from '../net/ip.js';

export type MapMethod =
  | 'updateServices'
  | 'deleteServices'
  | 'updateBackends'
  | 'deleteBackends'
  | 'updateVips'
  | 'deleteVips'
  | 'updateAffinityMatches'
  | 'deleteAffinityMatches'
  | 'updateSvcMeta'
  | 'deleteSvcMeta'
  | 'updateSrcRanges'
  | 'deleteSrcRanges';

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
  | { call: number; kind: 'range-delete'; key: SrcRangeKey };

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
  return `${k.backendId}|${k.revNatId}`;
}

/** Identity of a source-range key. */
export function rangeKeyId(k: SrcRangeKey): string {
  return `${k.revNatId}|${k.cidr}`;
}

/** Identity of a service-map key: equal keys in the kernel (byte for byte) are equal strings here. */
export function svcKeyId(k: SvcKey): string {
  return `${k.addr}|${k.port}|${k.slot}|${k.proto}|${k.scope}`;
}

export class MemoryDatapathMaps implements DatapathMaps {
  readonly services = new Map<string, [SvcKey, SvcVal]>();
  readonly backends = new Map<number, Backend>();
  readonly vips = new Map<string, number>();
  readonly affinityMatches = new Map<string, AffinityMatchKey>();
  readonly svcMeta = new Map<number, SvcMeta>();
  readonly srcRanges = new Map<string, SrcRangeKey>();
  /** Every applied entry, in order. */
  readonly ops: MapOp[] = [];
  /** Every mutating call, in order. */
  readonly calls: MapCall[] = [];
  maxServices: number;
  maxBackends: number;
  maxAffinityMatches: number;
  maxSrcRanges: number;
  /** Scheduled failures; see failOnCall(). */
  private failures: FailureSpec[] = [];
  private callCount = 0;

  constructor(opts: MemoryDatapathMapsOptions = {}) {
    this.maxServices = opts.maxServices ?? Infinity;
    this.maxBackends = opts.maxBackends ?? Infinity;
    this.maxAffinityMatches = opts.maxAffinityMatches ?? Infinity;
    this.maxSrcRanges = opts.maxSrcRanges ?? Infinity;
  }

  /** The capacities as the kernel's max_entries (Infinity: unlimited). */
  capacities(): MapCapacities {
    return { svc: this.maxServices, backend: this.maxBackends, affinityMatch: this.maxAffinityMatches, srcRange: this.maxSrcRanges };
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

  dumpServices(): Array<[SvcKey, SvcVal]> {
    return [...this.services.values()].map(([k, v]) => [{ ...k }, { ...v }]);
  }

  dumpBackends(): Array<[number, Backend]> {
    return [...this.backends.entries()].map(([id, b]) => [id, { ...b }]);
  }

  updateServices(entries: Array<[SvcKey, SvcVal]>): void {
    this.run('updateServices', entries, ([k, v], call) => {
      checkSvcKey(k);
      const id = svcKeyId(k);
      if (!this.services.has(id) && this.services.size >= this.maxServices) throw mapError('E2BIG', 'service map full', MAP_NAMES.svc);
      const key: SvcKey = { addr: k.addr, port: k.port, slot: k.slot, proto: k.proto, scope: k.scope };
      const val: SvcVal = { backendId: v.backendId, count: v.count, revNatId: v.revNatId, flags: v.flags };
      this.services.set(id, [key, val]); // the log shares the copies: neither is ever mutated
      this.ops.push({ call, kind: 'svc-update', key, val });
    });
  }

  deleteServices(keys: SvcKey[]): void {
    this.run('deleteServices', keys, (k, call) => {
      if (!this.services.delete(svcKeyId(k))) throw mapError('ENOENT', `no service entry ${JSON.stringify(k)}`);
      this.ops.push({ call, kind: 'svc-delete', key: { ...k } });
    });
  }

  updateBackends(entries: Array<[number, Backend]>): void {
    this.run('updateBackends', entries, ([id, b], call) => {
      if (!this.backends.has(id) && this.backends.size >= this.maxBackends) throw mapError('E2BIG', 'backend map full', MAP_NAMES.backend);
      if (!parseIP(b.addr) || !(id >= 0 && id <= 0xffffffff)) throw new RangeError(`invalid backend ${id} ${JSON.stringify(b)}`);
      const val: Backend = { addr: b.addr, port: b.port, proto: b.proto, flags: b.flags }; // the value only, as the kernel stores it
      this.backends.set(id, val);
      this.ops.push({ call, kind: 'backend-update', id, val });
    });
  }

  deleteBackends(ids: number[]): void {
    this.run('deleteBackends', ids, (id, call) => {
      if (!this.backends.delete(id)) throw mapError('ENOENT', `no backend ${id}`);
      this.ops.push({ call, kind: 'backend-delete', id });
    });
  }

  dumpVips(): Array<[string, number]> {
    return [...this.vips.entries()];
  }

  updateVips(entries: Array<[string, number]>): void {
    this.run('updateVips', entries, ([addr, flags], call) => {
      if (!parseIP(addr)) throw new RangeError(`invalid vip ${addr}`);
      this.vips.set(addr, flags);
      this.ops.push({ call, kind: 'vip-update', addr, flags });
    });
  }

  deleteVips(addrs: string[]): void {
    this.run('deleteVips', addrs, (addr, call) => {
      if (!this.vips.delete(addr)) throw mapError('ENOENT', `no vip ${addr}`);
      this.ops.push({ call, kind: 'vip-delete', addr });
    });
  }

  dumpAffinityMatches(): AffinityMatchKey[] {
    return [...this.affinityMatches.values()].map((k) => ({ ...k }));
  }

  updateAffinityMatches(keys: AffinityMatchKey[]): void {
    this.run('updateAffinityMatches', keys, (k, call) => {
      const key = { ...k };
      const id = affKeyId(k);
      if (!this.affinityMatches.has(id) && this.affinityMatches.size >= this.maxAffinityMatches) throw mapError('E2BIG', 'affinity match map full', MAP_NAMES.affinityMatch);
      this.affinityMatches.set(id, key);
      this.ops.push({ call, kind: 'aff-update', key });
    });
  }

  deleteAffinityMatches(keys: AffinityMatchKey[]): void {
    this.run('deleteAffinityMatches', keys, (k, call) => {
      if (!this.affinityMatches.delete(affKeyId(k))) throw mapError('ENOENT', `no affinity match ${affKeyId(k)}`);
      this.ops.push({ call, kind: 'aff-delete', key: { ...k } });
    });
  }

  dumpSvcMeta(): Array<[number, SvcMeta]> {
    return [...this.svcMeta.entries()].map(([id, m]) => [id, { ...m }]);
  }

  updateSvcMeta(entries: Array<[number, SvcMeta]>): void {
    this.run('updateSvcMeta', entries, ([id, m], call) => {
      const meta = { ...m };
      this.svcMeta.set(id, meta);
      this.ops.push({ call, kind: 'meta-update', id, meta });
    });
  }

  deleteSvcMeta(revNatIds: number[]): void {
    this.run('deleteSvcMeta', revNatIds, (id, call) => {
      if (!this.svcMeta.delete(id)) throw mapError('ENOENT', `no meta ${id}`);
      this.ops.push({ call, kind: 'meta-delete', id });
    });
  }

  dumpSrcRanges(): SrcRangeKey[] {
    return [...this.srcRanges.values()].map((k) => ({ ...k }));
  }

  updateSrcRanges(keys: SrcRangeKey[]): void {
    this.run('updateSrcRanges', keys, (k, call) => {
      const key = { ...k };
      const id = rangeKeyId(k);
      if (!this.srcRanges.has(id) && this.srcRanges.size >= this.maxSrcRanges) throw mapError('ENOSPC', 'source range map full', MAP_NAMES.srcRange);
      this.srcRanges.set(id, key);
      this.ops.push({ call, kind: 'range-update', key });
    });
  }

  deleteSrcRanges(keys: SrcRangeKey[]): void {
    this.run('deleteSrcRanges', keys, (k, call) => {
      if (!this.srcRanges.delete(rangeKeyId(k))) throw mapError('ENOENT', `no source range ${rangeKeyId(k)}`);
      this.ops.push({ call, kind: 'range-delete', key: { ...k } });
    });
  }

  /**
   * kpr_svc's records, raw, in resumable batches as the kernel's hash-map
   * batch lookup returns them: entries sit in RAW_BUCKETS buckets by a hash
   * of their key; each batch copies whole buckets from where the last one
   * stopped (at least one bucket, however large), so an entry no one touches
   * during the walk is returned exactly once, and one inserted or deleted
   * between batches is seen or not depending on whether its bucket was
   * already visited.
   */
  servicesRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => this.services.entries(),
      SVC_KEY.size,
      SVC_VAL.size,
      ([k, v], keys, vals, i) => {
        encodeSvcKey(k, keys, i * SVC_KEY.size);
        encodeSvcVal(v, vals, i * SVC_VAL.size);
      },
    );
  }

  /** kpr_backend's records, raw, in resumable batches (as servicesRawCursor). */
  backendsRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.backends].map(([id, b]): [string, [number, Backend]] => [String(id), [id, b]]).values(),
      BACKEND_ID_SIZE,
      BACKEND.size,
      ([id, b], keys, vals, i) => {
        encodeBackendId(id, keys, i * BACKEND_ID_SIZE);
        encodeBackend(b, vals, i * BACKEND.size);
      },
    );
  }

  /** kpr_vip's records, raw, in resumable batches (as servicesRawCursor). */
  vipsRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.vips].map(([addr, flags]): [string, [string, number]] => [addr, [addr, flags]]).values(),
      VIP_KEY.size,
      VIP_VAL.size,
      ([addr, flags], keys, vals, i) => {
        encodeVipKey(addr, keys, i * VIP_KEY.size);
        encodeVipVal(flags, vals, i * VIP_VAL.size);
      },
    );
  }

  /** kpr_svc_meta's records, raw, in resumable batches (as servicesRawCursor). */
  svcMetaRawCursor(batchEntries: number): RawCursor {
    return bucketCursor(
      batchEntries,
      () => [...this.svcMeta].map(([id, m]): [string, [number, SvcMeta]] => [String(id), [id, m]]).values(),
      BACKEND_ID_SIZE,
      SVC_META.size,
      ([id, m], keys, vals, i) => {
        encodeBackendId(id, keys, i * BACKEND_ID_SIZE);
        encodeSvcMeta(m, vals, i * SVC_META.size);
      },
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

/** Buckets of the raw cursors' hash-table model (a BPF hash map's n_buckets, fixed). */
export const RAW_BUCKETS = 1024;

function bucketOf(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return (h >>> 0) % RAW_BUCKETS;
}

/** A batch cursor over entries identified by string, bucketed by bucketOf (see servicesRawCursor). */
function bucketCursor<T>(
  batchEntries: number,
  entries: () => Iterable<[string, T]>,
  keySize: number,
  valSize: number,
  encode: (e: T, keys: Buffer, vals: Buffer, i: number) => void,
): RawCursor {
  let bucket = 0;
  return {
    next(): RawDump | null {
      if (bucket >= RAW_BUCKETS) return null;
      const byBucket = new Map<number, T[]>();
      for (const [id, e] of entries()) {
        const b = bucketOf(id);
        if (b < bucket) continue;
        const list = byBucket.get(b);
        if (list) list.push(e);
        else byBucket.set(b, [e]);
      }
      const taken: T[] = [];
      for (; bucket < RAW_BUCKETS; bucket++) {
        const list = byBucket.get(bucket) ?? [];
        if (taken.length > 0 && taken.length + list.length > batchEntries) break;
        taken.push(...list);
      }
      const keys = Buffer.alloc(taken.length * keySize);
      const values = Buffer.alloc(taken.length * valSize);
      for (let i = 0; i < taken.length; i++) encode(taken[i], keys, values, i);
      return { count: taken.length, keys, values, valueStride: valSize };
    },
  };
}

/** Rejects what the real codec could not encode, so a bad key fails here as it would for real. */
function checkSvcKey(k: SvcKey): void {
  if (!parseIP(k.addr) || !(k.port >= 0 && k.port <= 0xffff && k.slot >= 0 && k.slot <= 0xffff && k.proto >= 0 && k.proto <= 0xff && k.scope >= 0 && k.scope <= 0xff)) {
    throw new RangeError(`invalid service key ${JSON.stringify(k)}`);
  }
}

/** A map failure as KprBpfError carries it: the errno name and, for a full map, the map's name. */
function mapError(code: string, message: string, map?: string): Error & { code: string; map?: string } {
  return Object.assign(new Error(`${code}: ${message}`), { code }, map === undefined ? {} : { map });
}
