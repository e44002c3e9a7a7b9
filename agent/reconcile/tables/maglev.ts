/**
 * kpr_maglev and kpr_maglev_ref, the Maglev tables of the frontends whose
 * Service selects by Maglev (rule 40 of docs/semantics.md): each entry set
 * (frontendId, scope) of such a frontend has a table of M slot numbers
 * (agent/lb/maglev.ts, in chunks: agent/lb/maglev-chunks.ts) and a
 * reference naming it.
 *
 * Sharing. Entry sets whose tables are identical (the same M, the same
 * backends in the same slot order: DesiredMaglev's key) share one table:
 * it is computed and written once, and every reference names its id. Its
 * part of the mirror (MaglevMirror) keeps who holds which table (`tables`,
 * agent/lb/table-shares.ts) and allocates the ids (`tableIds`). A table held by one entry set only
 * is rewritten in place when its backends change, only the chunks that
 * differ; one that others still hold is never rewritten: the entry set
 * moves to the table of its new key (written first, if no entry set holds
 * it yet, under a new id), its reference switches, and the old table's
 * chunks are deleted once its last holder is gone. A freed id is reusable
 * only after the sync is applied (the chunk deletes run at its end).
 *
 * Order: chunks and references are written at step 3 (with the slots,
 * chunks first), so a reader finds the table once the master carries
 * MAGLEV; references are deleted at step 7 (with the masters), chunks at
 * step 8. A reader that meets a table ahead of or behind the count it read
 * (a slot past count, a chunk not there) selects at random
 * (bpf/include/kpr_lb_select.h), so no order can make it use a slot that
 * does not exist.
 *
 * Adoption. A load of the maps (a restart, a failed write, drift) holds each
 * table for the references that name it, its key unknown: the first diff of
 * an entry set naming it computes its table and, when the chunks match,
 * claims it under its key (writing nothing); the next entry set with that
 * key is then recognised without computing. A table whose chunks differ is
 * repaired in place when the entry set is its only holder, else the entry set
 * moves to a table of its own key. Chunks of a table no reference names
 * (MaglevMirror's `suspects`) are deleted by the sweep; identical tables of a previous run that did not
 * share (one per entry set) merge as their entry sets are diffed.
 */
import {
  MAP_NAMES,
  encodeMaglevChunk,
  encodeMaglevKey,
  encodeMaglevRef,
  encodeMaglevRefKey,
  type MaglevChunk,
  type MaglevKey,
  type MaglevRef,
  type MaglevRefKey,
} from '../../maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES, MAPS } from '../../maps/registry.js';
import { TableShares } from '../../lb/table-shares.js';
import { IdAllocator } from '../id-allocator.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { Writes } from '../write-batch.js';
import { compareKeyValues, hashFromMap, noDrift, phase, type DriftSink, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.maglev;
const REF_MAP = MAP_NAMES.maglevRef;
const KEY_SIZE = MAPS.maglev.key.size;
const VAL_SIZE = MAPS.maglev.value.size;
const REF_KEY_SIZE = MAPS.maglevRef.key.size;
const REF_VAL_SIZE = MAPS.maglevRef.value.size;
const rec = Buffer.alloc(KEY_SIZE + VAL_SIZE);
const refRec = Buffer.alloc(REF_KEY_SIZE + REF_VAL_SIZE);

/** A Maglev entry set's table as the diff wants it: its key, and how to compute it (only when the key changed). */
export interface DesiredMaglev {
  key: string;
  build(): { m: number; chunks: readonly MaglevChunk[] };
}

/** The mirror's key of a Maglev entry set (frontendId, scope). */
export function maglevSetId(frontendId: number, scope: number): number {
  return frontendId * 2 + scope;
}

/** The largest Maglev table id (a u32 in the table's key). */
export const MAX_MAGLEV_TABLE_ID = 0xffffffff;

/** Chunks a Maglev table has at most: ⌈65521 / 1024⌉. */
export const MAGLEV_MAX_CHUNKS = 64;

/** The mirror's key of a Maglev table chunk. */
export function maglevChunkId(tableId: number, chunk: number): number {
  return tableId * MAGLEV_MAX_CHUNKS + chunk;
}

/** What kpr_maglev and kpr_maglev_ref hold, as last written or read, with who holds which table and the ids in use. */
export class MaglevMirror {
  /** The chunks: maglevChunkId(tableId, chunk) → slot numbers. */
  readonly chunks = new Map<number, MaglevChunk>();
  /** The references: maglevSetId(frontendId, scope) → table id and M. */
  readonly refs = new Map<number, MaglevRef>();
  /**
   * Who holds which table: table id → the key it was written from (null
   * after a load: not read from the kernel), its M and the entry sets whose
   * references name it; one table per key.
   */
  readonly tables = new TableShares<number>();
  /** Table ids in use (in a reference or a chunk); one freed by a sync is reusable only once it is applied. */
  readonly tableIds = new IdAllocator(MAX_MAGLEV_TABLE_ID);
  /** Found by the last read of the maps: tables with chunks that no reference names. */
  readonly suspects = new Set<number>();

  clear(): void {
    this.chunks.clear();
    this.refs.clear();
    this.tables.clear();
    this.tableIds.clear();
    this.suspects.clear();
  }

  /**
   * Adds what a dump of both maps holds: each table held for the references
   * that name it, its key unknown until one of them is diffed; a reference
   * of a frontendId no frontend owns (`owners`) is noted in `suspectIds`, a
   * table no reference names in `suspects`. Returns the entries of either.
   */
  load(
    refs: ReadonlyArray<[MaglevRefKey, MaglevRef]>,
    chunks: ReadonlyArray<[MaglevKey, MaglevChunk]>,
    owners: ReadonlyMap<number, string>,
    suspectIds: Set<number>,
  ): number {
    let orphans = 0;
    for (const [k, ref] of refs) {
      this.refs.set(maglevSetId(k.frontendId, k.scope), ref);
      this.tableIds.reserve(ref.tableId);
      this.tables.hold(ref.tableId, ref.m);
      if (!owners.has(k.frontendId)) {
        orphans++;
        suspectIds.add(k.frontendId);
      }
    }
    for (const [k, chunk] of chunks) {
      this.chunks.set(maglevChunkId(k.tableId, k.chunk), chunk);
      this.tableIds.reserve(k.tableId);
      if (this.tables.holders(k.tableId) === 0) {
        orphans++;
        this.suspects.add(k.tableId);
      }
    }
    return orphans;
  }
}

/** The part of the mirror this table reads. */
interface Mirror {
  readonly maglev: MaglevMirror;
}

/** Table ids a sync freed, reusable once it is applied. */
export function releaseMaglevTableIds(m: Mirror, ids: readonly number[]): void {
  for (const id of ids) m.maglev.tableIds.release(id);
}

const chunkKeyOf = (id: number): MaglevKey => ({ tableId: Math.floor(id / MAGLEV_MAX_CHUNKS), chunk: id % MAGLEV_MAX_CHUNKS });
const refKeyOf = (id: number): MaglevRefKey => ({ frontendId: Math.floor(id / 2), scope: id % 2 });

/** A chunk's record (key then value: the bytes a write puts in the kernel), in a reused buffer. */
export function maglevRecord(id: number, chunk: MaglevChunk): Buffer {
  encodeMaglevKey(chunkKeyOf(id), rec, 0);
  encodeMaglevChunk(chunk, rec, KEY_SIZE);
  return rec;
}

/** A table reference's record, in a reused buffer. */
export function maglevRefRecord(id: number, ref: MaglevRef): Buffer {
  encodeMaglevRefKey(refKeyOf(id), refRec, 0);
  encodeMaglevRef(ref, refRec, REF_KEY_SIZE);
  return refRec;
}

function sameChunk(a: MaglevChunk, b: MaglevChunk): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Chunks of table `tableId` in the mirror from chunk `from` on: queued for deletion and dropped. */
function dropChunks(m: MaglevMirror, tableId: number, from: number, w: Writes): void {
  for (let c = from; c < MAGLEV_MAX_CHUNKS; c++) {
    const id = maglevChunkId(tableId, c);
    if (m.chunks.delete(id)) w.maglevDeletes.push({ tableId, chunk: c });
  }
}

/** One holder less of table `tableId`; with its last, its chunks are deleted and its id freed (once the sync is applied). */
function releaseTable(m: MaglevMirror, tableId: number, w: Writes): void {
  if (m.tables.release(tableId) > 0) return;
  dropChunks(m, tableId, 0, w);
  w.releaseMaglevTableIds.push(tableId);
}

/** Whether table `tableId`'s chunks in the mirror are exactly `chunks`. */
function holdsTable(m: MaglevMirror, tableId: number, chunks: readonly MaglevChunk[]): boolean {
  for (let c = 0; c < MAGLEV_MAX_CHUNKS; c++) {
    const have = m.chunks.get(maglevChunkId(tableId, c));
    if (c >= chunks.length) {
      if (have) return false;
    } else if (!have || !sameChunk(have, chunks[c])) return false;
  }
  return true;
}

/**
 * Makes entry set `sid`'s reference (`ref`: the mirror's, if any) name table
 * `tableId` of size `size` (held under `key`: a table no entry set held
 * before starts under it), holding it and letting go of the one it named.
 */
function pointRef(
  m: MaglevMirror,
  sid: number,
  frontendId: number,
  scope: number,
  ref: MaglevRef | undefined,
  tableId: number,
  size: number,
  key: string,
  w: Writes,
): void {
  if (!ref || ref.tableId !== tableId || ref.m !== size) {
    const v = { tableId, m: size };
    w.maglevRefWrites.push([{ frontendId, scope }, v]);
    m.refs.set(sid, v);
  }
  if (ref && ref.tableId === tableId) return;
  m.tables.hold(tableId, size, key);
  if (ref) releaseTable(m, ref.tableId, w);
}

/** Deletes entry set `sid`'s reference, letting go of its table. */
function dropRef(m: MaglevMirror, sid: number, frontendId: number, scope: number, ref: MaglevRef, w: Writes): void {
  m.refs.delete(sid);
  w.maglevRefDeletes.push({ frontendId, scope });
  releaseTable(m, ref.tableId, w);
}

/**
 * The diff of one entry set: makes its table and reference in the mirror
 * what `want` asks (null: none), queueing the writes and deletes. Returns
 * false when the table's new chunks do not fit in `capacity` chunks (the
 * kernel's, counting those whose deletes are still queued) or no table id is
 * free: the entry set's reference is then deleted (the caller reports it;
 * the datapath balances the frontend at random).
 */
export function diffMaglev(mirror: Mirror, frontendId: number, scope: number, want: DesiredMaglev | null, w: Writes, capacity = Infinity): boolean {
  const m = mirror.maglev;
  const sid = maglevSetId(frontendId, scope);
  const ref = m.refs.get(sid);
  if (!want) {
    if (ref) dropRef(m, sid, frontendId, scope, ref, w);
    return true;
  }
  const tables = m.tables;
  if (ref && tables.keyOf(ref.tableId) === want.key) return true;
  // Another entry set's table with the same key: shared, nothing computed.
  const shared = tables.idOf(want.key);
  if (shared !== undefined) {
    pointRef(m, sid, frontendId, scope, ref, shared, tables.value(shared)!, want.key, w);
    return true;
  }
  const built = want.build();
  // In place: a table no other entry set holds, or an adopted one that already is this table.
  const inPlace = ref !== undefined && (tables.holders(ref.tableId) === 1 || (tables.keyOf(ref.tableId) === null && holdsTable(m, ref.tableId, built.chunks)));
  const tableId = inPlace ? ref.tableId : m.tableIds.allocate();
  let added = 0;
  if (tableId !== undefined) for (let c = 0; c < built.chunks.length; c++) if (!m.chunks.has(maglevChunkId(tableId, c))) added++;
  if (tableId === undefined || (added > 0 && m.chunks.size + w.maglevDeletes.length + added > capacity)) {
    if (tableId !== undefined && !inPlace) m.tableIds.release(tableId); // never written
    if (ref) dropRef(m, sid, frontendId, scope, ref, w);
    return false;
  }
  for (let c = 0; c < built.chunks.length; c++) {
    const id = maglevChunkId(tableId, c);
    const have = m.chunks.get(id);
    if (have && sameChunk(have, built.chunks[c])) continue;
    w.maglevWrites.push([{ tableId, chunk: c }, built.chunks[c]]);
    m.chunks.set(id, built.chunks[c]);
  }
  if (inPlace) {
    dropChunks(m, tableId, built.chunks.length, w);
    tables.rekey(tableId, want.key, built.m);
  }
  pointRef(m, sid, frontendId, scope, ref, tableId, built.m, want.key, w);
  return true;
}

const NO_IDS: ReadonlySet<number> = new Set();

/** The frontendIds the mirror's Maglev references name (the full sweep's orphan candidates). */
export function maglevFrontendIds(mirror: Mirror): ReadonlySet<number> {
  const refs = mirror.maglev.refs;
  if (refs.size === 0) return NO_IDS;
  const out = new Set<number>();
  for (const id of refs.keys()) out.add(Math.floor(id / 2));
  return out;
}

/**
 * Deletes the chunks of tables no reference names: those a load found
 * (MaglevMirror's `suspects`), or (full) every table in the mirror. A
 * correct run never leaves one (a table goes with its last holder).
 */
export function dropUnheldMaglevTables(mirror: Mirror, w: Writes, full: boolean): void {
  const m = mirror.maglev;
  if (full ? m.chunks.size === 0 : m.suspects.size === 0) return;
  const candidates = full ? new Set(Array.from(m.chunks.keys(), (id) => Math.floor(id / MAGLEV_MAX_CHUNKS))) : m.suspects;
  for (const tableId of candidates) {
    if (m.tables.holders(tableId) > 0) continue;
    dropChunks(m, tableId, 0, w);
    w.releaseMaglevTableIds.push(tableId);
  }
  if (m.suspects.size > 0) m.suspects.clear();
}

function touchChunks(t: TouchedKeys, keys: ReadonlyArray<MaglevKey | [MaglevKey, unknown]>, k: Buffer): void {
  for (const e of keys) {
    encodeMaglevKey(Array.isArray(e) ? e[0] : (e as MaglevKey), k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

function touchRefs(t: TouchedKeys, keys: ReadonlyArray<MaglevRefKey | [MaglevRefKey, unknown]>, k: Buffer): void {
  for (const e of keys) {
    k.fill(0, 0, REF_KEY_SIZE);
    encodeMaglevRefKey(Array.isArray(e) ? e[0] : (e as MaglevRefKey), k, 0);
    t.add(k, 0, REF_KEY_SIZE);
  }
}

const compareChunks = (mirror: Mirror, kernel: ReadonlyArray<[MaglevKey, MaglevChunk]>, add: DriftSink) =>
  compareKeyValues(
    MAP,
    mirror.maglev.chunks,
    kernel.map(([k, v]): [number, MaglevChunk] => [maglevChunkId(k.tableId, k.chunk), v]),
    sameChunk,
    add,
  );

const compareRefs = (mirror: Mirror, kernel: ReadonlyArray<[MaglevRefKey, MaglevRef]>, add: DriftSink) =>
  compareKeyValues(
    REF_MAP,
    mirror.maglev.refs,
    kernel.map(([k, v]): [number, MaglevRef] => [maglevSetId(k.frontendId, k.scope), v]),
    (a, b) => a.tableId === b.tableId && a.m === b.m,
    add,
  );

export const maglevTable: ReconcilerTable<Mirror> = {
  map: MAP,
  phases: [
    phase(
      3,
      MAP,
      'write',
      'auxWritten',
      (w) => w.maglevWrites,
      (t, q) => t.maps.updateMaglev(q),
      touchChunks,
    ),
    phase(
      8,
      MAP,
      'delete',
      'auxDeleted',
      (w) => w.maglevDeletes,
      (t, q) => t.maps.deleteMaglev(q),
      touchChunks,
    ),
  ],
  sliced: {
    keySize: KEY_SIZE,
    valSize: VAL_SIZE,
    cursor: (m, b) => m.maglevRawCursor(b),
    hashMirror: hashFromMap((m: Mirror) => m.maglev.chunks, KEY_SIZE, VAL_SIZE, maglevRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compareChunks(mirror, maps.dumpMaglev(), add)),
  compare: (mirror, k, add) => compareChunks(mirror, k.maglev, add),
};

export const maglevRefsTable: ReconcilerTable<Mirror> = {
  map: REF_MAP,
  phases: [
    phase(
      3,
      REF_MAP,
      'write',
      'auxWritten',
      (w) => w.maglevRefWrites,
      (t, q) => t.maps.updateMaglevRefs(q),
      touchRefs,
    ),
    phase(
      7,
      REF_MAP,
      'delete',
      'auxDeleted',
      (w) => w.maglevRefDeletes,
      (t, q) => t.maps.deleteMaglevRefs(q),
      touchRefs,
    ),
  ],
  sliced: {
    keySize: REF_KEY_SIZE,
    valSize: REF_VAL_SIZE,
    cursor: (m, b) => m.maglevRefsRawCursor(b),
    hashMirror: hashFromMap((m: Mirror) => m.maglev.refs, REF_KEY_SIZE, REF_VAL_SIZE, maglevRefRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compareRefs(mirror, maps.dumpMaglevRefs(), add)),
  compare: (mirror, k, add) => compareRefs(mirror, k.maglevRefs, add),
};

/** Entries of one chunk (the registry's KPR_MAGLEV_CHUNK), for the callers that cut tables. */
export const CHUNK_ENTRIES = MAGLEV_CHUNK_ENTRIES;
