/**
 * kpr_backend, backend id → address: written by column at step 1 (before
 * any slot names them), deleted at step 11 (once no slot names them); read
 * back by fingerprint of the raw records, the mirror's rows walked by dense id.
 * Its part of the mirror is a BackendTable (backend-table.ts: the rows by id,
 * their references, the canonical id per tuple), shared with the write path.
 */
import type { DatapathMaps } from '../../maps/datapath-maps.js';
import { packBackendRow, packId } from '../../maps/fast-pack.js';
import { MAP_NAMES } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { BackendTable } from '../backend-table.js';
import { EMPTY_STATE, Fingerprint } from '../read-back/fingerprint.js';
import type { ApplyTarget, BackendWrites } from '../write-batch.js';
import { phase, touchU32, type ReadBackWindow, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.backend;
const KEY_SIZE = MAPS.backend.key.size;
const VAL_SIZE = MAPS.backend.value.size;

/** A record: the u32 id, then the value. */
export const BACKEND_RECORD = KEY_SIZE + VAL_SIZE;
const rec = Buffer.alloc(BACKEND_RECORD);

/** The part of the mirror this table reads. */
interface Mirror {
  readonly backends: BackendTable;
}

/** Backend `id`'s record (BACKEND_RECORD bytes of a reused buffer). */
export function backendRecord(rows: BackendTable, id: number): Buffer {
  packId(id, rec, 0);
  packBackendRow(rows, id, rec, KEY_SIZE);
  return rec;
}

function write(t: ApplyTarget, bw: BackendWrites): void {
  t.maps.updateBackendColumns(bw.ids, t.rows, bw.length);
}

/** Hashes the mirror's rows into w.mirror, by id, about `budget` ids of them; whether all are. */
function hashMirror(mirror: Mirror, w: ReadBackWindow, budget: number): boolean {
  const rows = mirror.backends;
  const add = (id: number) => w.mirror.addFrom(EMPTY_STATE, backendRecord(rows, id), 0, KEY_SIZE, VAL_SIZE);
  // Dense ids by range (a row added meanwhile has a touched key, so where the range ends does not matter), then the few far ones at once.
  const end = Math.min(rows.denseEnd, w.nextId + Math.max(1, budget));
  rows.forEachDenseId(w.nextId, end, add);
  w.nextId = end;
  if (end < rows.denseEnd) return false;
  rows.forEachFarId(add);
  return true;
}

export const backendsTable: ReconcilerTable<Mirror> = {
  map: MAP,
  capacity: 'backend',
  phases: [
    phase(
      1,
      MAP,
      'write',
      'backendsWritten',
      (w) => w.backendWrites,
      write,
      (k, q, s) => touchU32(k, q.ids, s, q.length),
    ),
    phase(
      11,
      MAP,
      'delete',
      'backendsDeleted',
      (w) => w.backendDeletes,
      (t, q) => t.maps.deleteBackends(q),
      touchU32,
    ),
  ],
  sliced: { keySize: KEY_SIZE, valSize: VAL_SIZE, cursor: (m, b) => m.backendsRawCursor(b), hashMirror },
  matches(maps: DatapathMaps, m: Mirror): boolean {
    const be = maps.dumpBackendsRaw();
    const kernel = new Fingerprint();
    kernel.addBatch(be.count, be.keys, KEY_SIZE, be.values, VAL_SIZE, be.valueStride);
    const mirror = new Fingerprint();
    const rows = m.backends;
    rows.forEachId((id) => mirror.addFrom(EMPTY_STATE, backendRecord(rows, id), 0, KEY_SIZE, VAL_SIZE));
    return kernel.equals(mirror);
  },
  compare(mirror, k, add) {
    // Rows by id.
    const rows = mirror.backends;
    let present = 0;
    let changed = 0;
    let extra = 0;
    for (const [id, b] of k.backends) {
      if (!rows.has(id)) extra++;
      else {
        present++;
        if (rows.addr(id) !== b.addr || rows.port(id) !== b.port || rows.proto(id) !== b.proto || rows.flags(id) !== b.flags) changed++;
      }
    }
    add(MAP, rows.size - present, changed, extra);
  },
};
