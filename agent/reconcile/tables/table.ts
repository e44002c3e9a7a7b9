/**
 * What the reconciler knows about one map it owns, in one place: a
 * ReconcilerTable. Each map (tables/<map>.ts) gives its steps in the apply
 * order, its records as the read-back hashes the mirror's side (the bytes
 * a write puts in the kernel, from the fast packers BpfDatapathMaps writes
 * with: maps/fast-pack.ts), how its sliced read-back reads the kernel's
 * side, how its decoded compare counts drift, and which capacity limits
 * it. The phases of a sync iterate the table list (tables/index.ts); none of
 * them names a map. Each table module also owns its part of the mirror
 * (a state class, e.g. SrcRangesMirror) and the queries the other phases
 * ask of it; KernelMirror (kernel-mirror.ts) composes them. A table is typed
 * by the part of the mirror it reads (`M`: e.g. `{ srcRanges:
 * SrcRangesMirror }`), so no table module imports kernel-mirror.ts. What a
 * new map needs: docs/contributing.md, *Adding a map the reconciler writes*.
 */
import type { DatapathMaps, RawCursor, RawDump } from '../../maps/datapath-maps.js';
import { encodeBackendId } from '../../maps/layout.js';
import { U32 } from '../../maps/registry.js';
import type { MapCapacities } from '../limits.js';
import { EMPTY_STATE, type RecordHashes, type TouchedKeys, type UntouchedSum } from '../read-back/fingerprint.js';
import type { KernelContents } from '../kernel-contents.js';
import type { SyncResult } from '../sync-types.js';
import type { ApplyTarget, Writes } from '../write-batch.js';

type Counter = keyof Pick<SyncResult, 'servicesWritten' | 'servicesDeleted' | 'backendsWritten' | 'backendsDeleted' | 'auxWritten' | 'auxDeleted'>;

/** One phase of a batch: one kind of entry of one map, written or deleted, with one call. */
export interface Phase {
  /** The step in APPLY_ORDER's comment (tables/index.ts). */
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
export function phase<Q extends { length: number }>(
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

/**
 * The sliced read-back of one map under way: from its first
 * slice to its last, every key of `map` a sync writes or deletes is in
 * `touched`, and both sides leave those keys out at the end.
 */
export interface ReadBackWindow {
  map: string;
  /** The mirror's generation it began in: a mirror rebuilt from the kernel meanwhile restarts it. */
  generation: number;
  /** The kernel's batches not yet all read (null once they are). */
  cursor: RawCursor | null;
  kernel: RecordHashes;
  mirror: RecordHashes;
  touched: TouchedKeys;
  /**
   * Maps walked from a mirror Map: its entries still to hash (a live Map
   * iterator: an entry present throughout is visited exactly once).
   */
  iter: Iterator<unknown> | null;
  /** Maps kept as frontendId → a set of members: the frontendId whose members `members` walks (a live Set iterator). */
  membersOf: number;
  members: Iterator<number | string> | null;
  /** Maps walked by dense id: the next id to hash. */
  nextId: number;
  mirrorDone: boolean;
  /**
   * Once both sides are complete: their sums, the touched keys' records
   * being taken out a range at a time (`side` 0 the kernel's, 1 the mirror's; `at` the next record).
   */
  sums: { kernel: UntouchedSum; mirror: UntouchedSum; side: number; at: number } | null;
}

/**
 * How a map is read back in slices: its record sizes, its kernel cursor,
 * and how the mirror's side is hashed, resumably.
 */
export interface SlicedMap<M> {
  keySize: number;
  valSize: number;
  cursor(m: DatapathMaps, batch: number): RawCursor;
  /** Hashes about `budget` more of the mirror's records into w.mirror (at least one); whether all are. */
  hashMirror(mirror: M, w: ReadBackWindow, budget: number): boolean;
  /** Bytes the decoded compare ignores, zeroed in a kernel batch before it is hashed (so raw and decoded agree). */
  normalise?(d: RawDump): void;
}

/** Adds one drift count of a map (nothing when all are 0). */
export type DriftSink = (map: string, missing: number, changed: number, extra: number) => void;

export interface ReconcilerTable<M> {
  /** The pinned map's name (the registry's). */
  map: string;
  /** Its writes and deletes, each at its step of the apply order. */
  phases: readonly Phase[];
  /** Its sliced read-back. */
  sliced: SlicedMap<M>;
  /** A full sync's read-back: whether the map holds exactly the mirror's entries (a dump; throws if it fails). */
  matches(maps: DatapathMaps, mirror: M): boolean;
  /** The decoded compare: what `k` (a dump) holds of this map differently from the mirror. */
  compare(mirror: M, k: KernelContents, add: DriftSink): void;
  /** The capacity (max_entries) that limits its entries, for those a Service can fill. */
  capacity?: keyof MapCapacities;
}

/** A mirror kept by frontendId (pairs, ranges, names): the sweep looks for frontendIds no frontend owns among its keys. */
export interface ByFrontendId {
  /** Its frontendIds (a live iterator over the mirror's keys). */
  frontendIds(): IterableIterator<number>;
}

/** A read-back's hashMirror over a mirror Map, `record` giving each entry's bytes (key then value). */
export function hashFromMap<M, K, V>(entries: (m: M) => ReadonlyMap<K, V>, keySize: number, valSize: number, record: (k: K, v: V) => Buffer) {
  return (mirror: M, w: ReadBackWindow, budget: number): boolean => {
    const it = (w.iter ??= entries(mirror).entries()) as Iterator<[K, V]>;
    let work = 0;
    do {
      const next = it.next();
      if (next.done) return true;
      w.mirror.addFrom(EMPTY_STATE, record(next.value[0], next.value[1]), 0, keySize, valSize);
    } while (++work < budget);
    return false;
  };
}

/** A read-back's hashMirror over a mirror kept as frontendId → a set of members (pairs, ranges). */
export function hashMembers<M, T extends number | string>(
  sets: (m: M) => ReadonlyMap<number, ReadonlySet<T>>,
  keySize: number,
  valSize: number,
  record: (fid: number, member: T) => Buffer,
) {
  return (mirror: M, w: ReadBackWindow, budget: number): boolean => {
    const byFrontendId = (w.iter ??= sets(mirror).entries()) as Iterator<[number, ReadonlySet<T>]>;
    let work = 0;
    for (;;) {
      if (!w.members) {
        const next = byFrontendId.next();
        if (next.done) return true;
        w.membersOf = next.value[0];
        w.members = next.value[1].values();
      }
      const members = w.members as Iterator<T>;
      for (let m = members.next(); !m.done; m = members.next()) {
        w.mirror.addFrom(EMPTY_STATE, record(w.membersOf, m.value), 0, keySize, valSize);
        if (++work >= budget) return false;
      }
      w.members = null;
    }
  };
}

/** The decoded compare of a key → value map: entries missing, changed (per `same`) and extra. */
export function compareKeyValues<K, V>(map: string, mirror: ReadonlyMap<K, V>, kernel: Iterable<[K, V]>, same: (a: V, b: V) => boolean, add: DriftSink): void {
  let present = 0;
  let changed = 0;
  let extra = 0;
  for (const [k, v] of kernel) {
    const have = mirror.get(k);
    if (have === undefined) extra++;
    else {
      present++;
      if (!same(have, v)) changed++;
    }
  }
  add(map, mirror.size - present, changed, extra);
}

/** The decoded compare of a map of key sets per frontendId: members missing and extra. */
export function compareKeySets<T>(map: string, mirror: ReadonlyMap<number, ReadonlySet<T>>, kernel: Iterable<[number, T]>, add: DriftSink): void {
  let total = 0;
  for (const s of mirror.values()) total += s.size;
  let found = 0;
  let stray = 0;
  for (const [fid, x] of kernel) {
    if (mirror.get(fid)?.has(x)) found++;
    else stray++;
  }
  add(map, total - found, 0, stray);
}

/** Records u32 keys (ids, frontendIds) as touched: the first `count` of `ids` (default: all). */
export function touchU32(t: TouchedKeys, ids: ReadonlyArray<number | readonly [number, unknown]>, k: Buffer, count = ids.length): void {
  for (let i = 0; i < count; i++) {
    const id = ids[i];
    encodeBackendId(typeof id === 'number' ? id : id[0], k, 0);
    t.add(k, 0, U32.size);
  }
}

/** Whether a compare (reporting to its sink) finds nothing different: a small map's full read-back, decoded. */
export function noDrift(compare: (add: DriftSink) => void): boolean {
  let drift = false;
  compare((_map, missing, changed, extra) => {
    if (missing + changed + extra > 0) drift = true;
  });
  return !drift;
}
