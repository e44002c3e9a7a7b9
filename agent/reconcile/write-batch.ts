/**
 * The write batch of one sync: the entries it writes and deletes, queued by
 * kind. The tables (tables/) apply them in APPLY_ORDER (tables/index.ts),
 * which keeps the live datapath consistent: every prefix of that order
 * (even a batch stopped part-way) leaves each master's slots 1..count
 * present and pointing at existing backends, and every backend an AFFINITY
 * master names paired with it, so no reader ever sees a partial or empty
 * backend set.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import type { AffinityMatchKey, MaglevChunk, MaglevKey, MaglevRef, MaglevRefKey, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from '../maps/layout.js';
import type { BackendTable } from './backend-table.js';
import type { FrontendBase } from './desired-frontend.js';
import type { TouchedKeys } from './read-back/fingerprint.js';
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
    maglevWrites: [],
    maglevRefWrites: [],
    slotWrites: new SvcWrites(),
    metaWrites: [],
    masterWrites: new SvcWrites(),
    vipWrites: [],
    masterDeletes: [],
    slotDeletes: [],
    affDeletes: [],
    rangeDeletes: [],
    maglevRefDeletes: [],
    maglevDeletes: [],
    vipDeletes: [],
    metaDeletes: [],
    backendDeletes: [],
    releaseFrontendId: [],
    releaseBackendIds: [],
    releaseMaglevTableIds: [],
  };
}

/** The batches one sync applies, in apply order. */
export interface Writes {
  backendWrites: BackendWrites;
  affWrites: AffinityMatchKey[];
  rangeWrites: SrcRangeKey[];
  /** Maglev table chunks and table references (tables/maglev.ts). */
  maglevWrites: Array<[MaglevKey, MaglevChunk]>;
  maglevRefWrites: Array<[MaglevRefKey, MaglevRef]>;
  slotWrites: SvcWrites;
  metaWrites: Array<[number, SvcMeta]>;
  masterWrites: SvcWrites;
  vipWrites: Array<[string, number]>;
  masterDeletes: SvcKey[];
  slotDeletes: SvcKey[];
  affDeletes: AffinityMatchKey[];
  rangeDeletes: SrcRangeKey[];
  maglevRefDeletes: MaglevRefKey[];
  maglevDeletes: MaglevKey[];
  vipDeletes: string[];
  metaDeletes: number[];
  backendDeletes: number[];
  /** Ids freed by this sync: reusable only once it is applied. */
  releaseFrontendId: number[];
  releaseBackendIds: number[];
  releaseMaglevTableIds: number[];
}

/** Empties the upsert queues (after a round of writes), keeping the columns' room. */
export function resetUpserts(w: Writes): void {
  w.backendWrites.reset();
  w.slotWrites.reset();
  w.masterWrites.reset();
  w.affWrites = [];
  w.rangeWrites = [];
  w.maglevWrites = [];
  w.maglevRefWrites = [];
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
