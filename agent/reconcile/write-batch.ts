/**
 * The write batch of one sync: the entries it writes and deletes, queued by
 * map, and the order they are applied in (APPLY_ORDER), which keeps the live
 * datapath consistent: every prefix of that order (even a batch stopped
 * part-way) leaves each master's slots 1..count present and pointing at
 * existing backends, and every backend an AFFINITY master names paired in
 * kpr_aff_match, so no reader ever sees a partial or empty backend set.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import { MAP_NAMES, encodeAffinityMatchKey, encodeBackendId, encodeSrcRangeKey, encodeSvcKey, encodeVipKey, type AffinityMatchKey, type SrcRangeKey, type SvcKey, type SvcMeta, type SvcVal } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import type { BackendTable } from './backend-table.js';
import type { FrontendBase } from './desired-frontend.js';
import type { TouchedKeys } from './fingerprint.js';
import type { SyncResult } from './sync-types.js';

/**
 * Service-map writes kept by column (the frontend's key base, scope and
 * slot, the value), so a full sync builds no key object or pair per entry:
 * updateServiceColumns encodes them straight into its batch.
 * The first `length` elements of the columns are the queue: a write round
 * resets it and the next one overwrites in place, so a full sync's rounds
 * do not each grow (and drop) arrays of thousands of elements.
 */
export class SvcWrites {
  readonly bases: FrontendBase[] = [];
  /** scope * 0x10000 + slot. */
  readonly scopeSlots: number[] = [];
  /** The value, or for a slot just its backend id (see slotValue). */
  readonly vals: Array<SvcVal | number> = [];
  length = 0;

  push(base: FrontendBase, scope: number, slot: number, val: SvcVal | number): void {
    const i = this.length++;
    this.bases[i] = base;
    this.scopeSlots[i] = scope * 0x10000 + slot;
    this.vals[i] = val;
  }

  /** Empties the queue, keeping the columns' room. */
  reset(): void {
    this.length = 0;
  }
}

/**
 * Backend-map writes: the ids, whose values the mirror's BackendTable holds
 * (read when the batch is encoded); the first `length` are the queue, as in SvcWrites.
 */
export class BackendWrites {
  readonly ids: number[] = [];
  length = 0;

  push(id: number): void {
    this.ids[this.length++] = id;
  }

  reset(): void {
    this.length = 0;
  }
}

/** Upserts queued beyond this many service/backend entries are written before the diff goes on (see Reconciler.flushUpserts). */
export const FLUSH_ENTRIES = 16384;

/** Empty queues of the entries written (upserts: steps 1–6) and deleted. */
export function newWrites(): Writes {
  return {
    backendWrites: new BackendWrites(),
    affWrites: [],
    rangeWrites: [],
    slotWrites: new SvcWrites(),
    metaWrites: [],
    masterWrites: new SvcWrites(),
    vipWrites: [],
    masterDeletes: [],
    slotDeletes: [],
    affDeletes: [],
    rangeDeletes: [],
    vipDeletes: [],
    metaDeletes: [],
    backendDeletes: [],
    releaseRevNat: [],
    releaseBackendIds: [],
  };
}

/** The batches one sync applies, in apply order. */
export interface Writes {
  backendWrites: BackendWrites;
  affWrites: AffinityMatchKey[];
  rangeWrites: SrcRangeKey[];
  slotWrites: SvcWrites;
  metaWrites: Array<[number, SvcMeta]>;
  masterWrites: SvcWrites;
  vipWrites: Array<[string, number]>;
  masterDeletes: SvcKey[];
  slotDeletes: SvcKey[];
  affDeletes: AffinityMatchKey[];
  rangeDeletes: SrcRangeKey[];
  vipDeletes: string[];
  metaDeletes: number[];
  backendDeletes: number[];
  /** Ids freed by this sync: reusable only once it is applied. */
  releaseRevNat: number[];
  releaseBackendIds: number[];
}

/** Empties the upsert queues (after a round of writes), keeping the columns' room. */
export function resetUpserts(w: Writes): void {
  w.backendWrites.reset();
  w.slotWrites.reset();
  w.masterWrites.reset();
  w.affWrites = [];
  w.rangeWrites = [];
  w.metaWrites = [];
  w.vipWrites = [];
}

export function svcKey(base: FrontendBase, scope: number, slot: number): SvcKey {
  return { addr: base.addr, port: base.port, slot, proto: base.proto, scope };
}

/** What applying a batch writes to and reads from. */
export interface ApplyTarget {
  maps: DatapathMaps;
  /** The backend rows the queued backend ids are written from. */
  rows: BackendTable;
  /** The keys of `map` to record as touched (an open read-back window on it), or undefined. */
  touched(map: string): TouchedKeys | undefined;
  result: SyncResult;
}

type Counter = 'servicesWritten' | 'servicesDeleted' | 'backendsWritten' | 'backendsDeleted' | 'auxWritten' | 'auxDeleted';

/** One phase of a batch: one kind of entry, written or deleted, with one call. */
interface Phase {
  /** The step in APPLY_ORDER's comment. */
  step: number;
  map: string;
  op: 'write' | 'delete';
  /** Entries queued for it. */
  size(w: Writes): number;
  apply(t: ApplyTarget, w: Writes): void;
  /** Records its keys as touched (their bytes encoded in `scratch`). */
  touch?(keys: TouchedKeys, w: Writes, scratch: Buffer): void;
  counter: Counter;
}

/** A phase whose entries are one queue of `w`. */
function phase<Q extends { length: number }>(
  step: number,
  map: string,
  op: 'write' | 'delete',
  counter: Counter,
  queue: (w: Writes) => Q,
  apply: (t: ApplyTarget, q: Q) => void,
  touch?: (keys: TouchedKeys, q: Q, scratch: Buffer) => void,
): Phase {
  return { step, map, op, counter, size: (w) => queue(w).length, apply: (t, w) => apply(t, queue(w)), touch: touch && ((k, w, s) => touch(k, queue(w), s)) };
}

const SVC_KEY_SIZE = MAPS.svc.key.size;
const U32_SIZE = MAPS.backend.key.size;
const VIP_KEY_SIZE = MAPS.vip.key.size;
const AFF_KEY_SIZE = MAPS.affinityMatch.key.size;
const RANGE_KEY_SIZE = MAPS.srcRange.key.size;

function touchSvcColumns(t: TouchedKeys, sw: SvcWrites, k: Buffer): void {
  for (let i = 0; i < sw.length; i++) {
    const ss = sw.scopeSlots[i];
    encodeSvcKey(svcKey(sw.bases[i], Math.floor(ss / 0x10000), ss % 0x10000), k, 0);
    t.add(k, 0, SVC_KEY_SIZE);
  }
}

function touchSvcKeys(t: TouchedKeys, keys: readonly SvcKey[], k: Buffer): void {
  for (const key of keys) {
    encodeSvcKey(key, k, 0);
    t.add(k, 0, SVC_KEY_SIZE);
  }
}

/** u32 keys: backend ids, revNatIds (kpr_svc_meta), of the first `count` of `ids` (default: all). */
function touchIds(t: TouchedKeys, ids: ReadonlyArray<number | readonly [number, unknown]>, k: Buffer, count = ids.length): void {
  for (let i = 0; i < count; i++) {
    const id = ids[i];
    encodeBackendId(typeof id === 'number' ? id : id[0], k, 0);
    t.add(k, 0, U32_SIZE);
  }
}

function touchPairs(t: TouchedKeys, pairs: readonly AffinityMatchKey[], k: Buffer): void {
  for (const p of pairs) {
    encodeAffinityMatchKey(p, k, 0);
    t.add(k, 0, AFF_KEY_SIZE);
  }
}

function touchRanges(t: TouchedKeys, ranges: readonly SrcRangeKey[], k: Buffer): void {
  for (const r of ranges) {
    encodeSrcRangeKey(r, k, 0);
    t.add(k, 0, RANGE_KEY_SIZE);
  }
}

function touchVips(t: TouchedKeys, addrs: ReadonlyArray<string | readonly [string, number]>, k: Buffer): void {
  for (const a of addrs) {
    encodeVipKey(typeof a === 'string' ? a : a[0], k, 0);
    t.add(k, 0, VIP_KEY_SIZE);
  }
}

/** One batch of service-map entries (slots or masters), by column. */
function writeServices(t: ApplyTarget, sw: SvcWrites): void {
  t.maps.updateServiceColumns(sw.bases, sw.scopeSlots, sw.vals, sw.length);
}

function writeBackends(t: ApplyTarget, bw: BackendWrites): void {
  t.maps.updateBackendColumns(bw.ids, t.rows, bw.length);
}

/**
 * The apply order, as one table: each kind before what names it, and
 * nothing deleted before what named it is gone.
 *
 *   1. backends (and LOCAL flag changes), before any slot names them;
 *   2. affinity-match pairs, before any slot of an AFFINITY master names them;
 *      source ranges, before a master with SOURCE_RANGES publishes;
 *   3. slots 1..n, before any count covers them;
 *   4. names of new revNatIds, before a master carries them;
 *   5. masters (count, revNatId, flags, affinity timeout);
 *   6. service addresses, once a frontend answers on them;
 *   7. masters of removed entry sets first, then slots beyond the new count
 *      and slots of removed sets (one call);
 *   8. pairs no master with AFFINITY names any more; ranges no master allows any more;
 *   9. addresses whose last ClusterIP frontend went;
 *  10. names of released revNatIds;
 *  11. backends no slot names any more.
 *
 * The writes (1–6) may go in rounds while the diff runs; the deletes (7–11)
 * all wait for the end of the sync.
 */
export const APPLY_ORDER: readonly Phase[] = [
  phase(1, MAP_NAMES.backend, 'write', 'backendsWritten', (w) => w.backendWrites, writeBackends, (k, q, s) => touchIds(k, q.ids, s, q.length)),
  phase(2, MAP_NAMES.affinityMatch, 'write', 'auxWritten', (w) => w.affWrites, (t, q) => t.maps.updateAffinityMatches(q), touchPairs),
  phase(2, MAP_NAMES.srcRange, 'write', 'auxWritten', (w) => w.rangeWrites, (t, q) => t.maps.updateSrcRanges(q), touchRanges),
  phase(3, MAP_NAMES.svc, 'write', 'servicesWritten', (w) => w.slotWrites, writeServices, touchSvcColumns),
  phase(4, MAP_NAMES.svcMeta, 'write', 'auxWritten', (w) => w.metaWrites, (t, q) => t.maps.updateSvcMeta(q), touchIds),
  phase(5, MAP_NAMES.svc, 'write', 'servicesWritten', (w) => w.masterWrites, writeServices, touchSvcColumns),
  phase(6, MAP_NAMES.vip, 'write', 'auxWritten', (w) => w.vipWrites, (t, q) => t.maps.updateVips(q), touchVips),
  {
    step: 7,
    map: MAP_NAMES.svc,
    op: 'delete',
    counter: 'servicesDeleted',
    size: (w) => w.masterDeletes.length + w.slotDeletes.length,
    touch: (k, w, s) => (touchSvcKeys(k, w.masterDeletes, s), touchSvcKeys(k, w.slotDeletes, s)),
    apply: (t, w) => t.maps.deleteServices(w.masterDeletes.length ? w.masterDeletes.concat(w.slotDeletes) : w.slotDeletes),
  },
  phase(8, MAP_NAMES.affinityMatch, 'delete', 'auxDeleted', (w) => w.affDeletes, (t, q) => t.maps.deleteAffinityMatches(q), touchPairs),
  phase(8, MAP_NAMES.srcRange, 'delete', 'auxDeleted', (w) => w.rangeDeletes, (t, q) => t.maps.deleteSrcRanges(q), touchRanges),
  phase(9, MAP_NAMES.vip, 'delete', 'auxDeleted', (w) => w.vipDeletes, (t, q) => t.maps.deleteVips(q), touchVips),
  phase(10, MAP_NAMES.svcMeta, 'delete', 'auxDeleted', (w) => w.metaDeletes, (t, q) => t.maps.deleteSvcMeta(q), touchIds),
  phase(11, MAP_NAMES.backend, 'delete', 'backendsDeleted', (w) => w.backendDeletes, (t, q) => t.maps.deleteBackends(q), touchIds),
];

/** A key's bytes, encoded to record it as touched. */
const keyScratch = Buffer.alloc(Math.max(SVC_KEY_SIZE, U32_SIZE, VIP_KEY_SIZE, AFF_KEY_SIZE, RANGE_KEY_SIZE));

/** Applies the phases of `op` in APPLY_ORDER: the upserts (a round, or the last) or the deletes (once, at the end). */
export function applyPhases(op: 'write' | 'delete', t: ApplyTarget, w: Writes): void {
  for (const p of APPLY_ORDER) {
    if (p.op !== op) continue;
    const n = p.size(w);
    if (n === 0) continue;
    if (p.touch) {
      const keys = t.touched(p.map);
      if (keys) p.touch(keys, w, keyScratch);
    }
    p.apply(t, w);
    t.result[p.counter] += n;
  }
}
