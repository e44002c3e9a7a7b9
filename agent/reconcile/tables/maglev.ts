/**
 * kpr_maglev and kpr_maglev_ref, the Maglev tables of the frontends whose
 * Service selects by Maglev (rule 40 of docs/semantics.md): each entry set
 * (frontendId, scope) of such a frontend has a table of M slot numbers
 * (agent/lb/maglev.ts, in chunks: agent/lb/maglev-chunks.ts) and a
 * reference naming it. The table id is the entry set's own
 * (maglevSetId: frontendId·2 + scope), so tables are not shared between
 * entry sets yet (the datapath allows it); a table's chunks are rewritten
 * in place when its backends change, only the chunks that differ.
 *
 * Order: chunks and references are written at step 3 (with the slots,
 * chunks first), so a reader finds the table once the master carries
 * MAGLEV; references are deleted at step 7 (with the masters), chunks at
 * step 8. A reader that meets a table ahead of or behind the count it read
 * (a slot past count, a chunk not there) selects at random
 * (bpf/include/kpr_lb_select.h), so no order can make it use a slot that
 * does not exist.
 *
 * The mirror keeps both maps (maglevChunks, maglevRefs) and what each table
 * was last written from (maglevTableKeys): an unchanged frontend computes its
 * table's key, not its table. After a restart the keys are unknown: the
 * first sync computes every table and writes only the chunks that differ.
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
import type { TouchedKeys } from '../read-back/fingerprint.js';
import { MAGLEV_MAX_CHUNKS, maglevChunkId, maglevSetId, type KernelMirror } from '../kernel-mirror.js';
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
function dropChunks(m: KernelMirror, tableId: number, from: number, w: Writes): void {
  for (let c = from; c < MAGLEV_MAX_CHUNKS; c++) {
    const id = maglevChunkId(tableId, c);
    if (m.maglevChunks.delete(id)) w.maglevDeletes.push({ tableId, chunk: c });
  }
}

/**
 * The diff of one entry set: makes its table and reference in the mirror
 * what `want` asks (null: none), queueing the writes and deletes. Returns
 * false, changing nothing, when the table's new chunks do not fit in
 * `capacity` chunks (the caller reports it; the frontend is then balanced
 * at random by the datapath).
 */
export function diffMaglev(m: KernelMirror, frontendId: number, scope: number, want: DesiredMaglev | null, w: Writes, capacity = Infinity): boolean {
  const sid = maglevSetId(frontendId, scope);
  const tableId = sid;
  if (!want) {
    const hadRef = m.maglevRefs.delete(sid);
    if (hadRef) w.maglevRefDeletes.push({ frontendId, scope });
    // Chunks are looked for only where a table was: most entry sets never had one.
    if (hadRef || m.maglevTableKeys.delete(sid)) dropChunks(m, tableId, 0, w);
    return true;
  }
  if (m.maglevTableKeys.get(sid) === want.key && m.maglevRefs.has(sid)) return true;
  const built = want.build();
  let added = 0;
  for (let c = 0; c < built.chunks.length; c++) if (!m.maglevChunks.has(maglevChunkId(tableId, c))) added++;
  if (added > 0 && m.maglevChunks.size + added > capacity) return false;
  for (let c = 0; c < built.chunks.length; c++) {
    const id = maglevChunkId(tableId, c);
    const have = m.maglevChunks.get(id);
    if (have && sameChunk(have, built.chunks[c])) continue;
    w.maglevWrites.push([{ tableId, chunk: c }, built.chunks[c]]);
    m.maglevChunks.set(id, built.chunks[c]);
  }
  dropChunks(m, tableId, built.chunks.length, w);
  const ref = m.maglevRefs.get(sid);
  if (!ref || ref.tableId !== tableId || ref.m !== built.m) {
    const v = { tableId, m: built.m };
    w.maglevRefWrites.push([{ frontendId, scope }, v]);
    m.maglevRefs.set(sid, v);
  }
  m.maglevTableKeys.set(sid, want.key);
  return true;
}

/** The frontendIds the mirror's Maglev entries name (the full sweep's orphan candidates). */
export function maglevFrontendIds(m: KernelMirror): Set<number> {
  const out = new Set<number>();
  for (const id of m.maglevRefs.keys()) out.add(Math.floor(id / 2));
  for (const id of m.maglevChunks.keys()) out.add(Math.floor(id / MAGLEV_MAX_CHUNKS / 2));
  return out;
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

const compareChunks = (mirror: KernelMirror, kernel: ReadonlyArray<[MaglevKey, MaglevChunk]>, add: DriftSink) =>
  compareKeyValues(
    MAP,
    mirror.maglevChunks,
    kernel.map(([k, v]): [number, MaglevChunk] => [maglevChunkId(k.tableId, k.chunk), v]),
    sameChunk,
    add,
  );

const compareRefs = (mirror: KernelMirror, kernel: ReadonlyArray<[MaglevRefKey, MaglevRef]>, add: DriftSink) =>
  compareKeyValues(
    REF_MAP,
    mirror.maglevRefs,
    kernel.map(([k, v]): [number, MaglevRef] => [maglevSetId(k.frontendId, k.scope), v]),
    (a, b) => a.tableId === b.tableId && a.m === b.m,
    add,
  );

export const maglevTable: ReconcilerTable = {
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
    hashMirror: hashFromMap((m) => m.maglevChunks, KEY_SIZE, VAL_SIZE, maglevRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compareChunks(mirror, maps.dumpMaglev(), add)),
  compare: (mirror, k, add) => compareChunks(mirror, k.maglev, add),
};

export const maglevRefsTable: ReconcilerTable = {
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
    hashMirror: hashFromMap((m) => m.maglevRefs, REF_KEY_SIZE, REF_VAL_SIZE, maglevRefRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compareRefs(mirror, maps.dumpMaglevRefs(), add)),
  compare: (mirror, k, add) => compareRefs(mirror, k.maglevRefs, add),
};

/** Entries of one chunk (the registry's KPR_MAGLEV_CHUNK), for the callers that cut tables. */
export const CHUNK_ENTRIES = MAGLEV_CHUNK_ENTRIES;
