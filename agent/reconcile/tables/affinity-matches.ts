/**
 * kpr_aff_match, the (backend, frontendId) pairs of the frontends with
 * session affinity: a backend an affinity entry names is used again only
 * while it is paired here. Written at step 2 (before any slot of an
 * AFFINITY master names the backend), deleted at step 8 (once no master
 * with AFFINITY names it). The mirror keeps it as frontendId → backend ids.
 */
import { MAP_NAMES, encodeAffinityMatchKey, type AffinityMatchKey } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { KernelMirror } from '../kernel-mirror.js';
import type { Writes } from '../write-batch.js';
import { compareKeySets, hashMembers, noDrift, phase, type DriftSink, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.affinityMatch;
const KEY_SIZE = MAPS.affinityMatch.key.size;
const VAL_SIZE = MAPS.affinityMatch.value.size;
const rec = Buffer.alloc(KEY_SIZE + VAL_SIZE);

/** A record (the pair of a frontend's frontendId and a backend id; the value 1, as the writer puts it), in a reused buffer. */
export function affinityMatchRecord(frontendId: number, backendId: number): Buffer {
  encodeAffinityMatchKey({ frontendId, backendId }, rec, 0);
  rec[KEY_SIZE] = 1;
  return rec;
}

function touch(t: TouchedKeys, pairs: readonly AffinityMatchKey[], k: Buffer): void {
  for (const p of pairs) {
    encodeAffinityMatchKey(p, k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

/**
 * The diff: makes the pairs of `frontendId` exactly `ids` in the mirror,
 * queueing the additions (written before the slots) and the removals
 * (deleted after them).
 */
export function diffAffinityMatches(m: KernelMirror, frontendId: number, ids: readonly number[], w: Writes): void {
  const have = m.affinityMatches.get(frontendId);
  if (ids.length === 0 && !have) return;
  const want = new Set(ids);
  for (const id of want) if (!have?.has(id)) w.affWrites.push({ backendId: id, frontendId });
  if (have) for (const id of have) if (!want.has(id)) w.affDeletes.push({ backendId: id, frontendId });
  m.affPairs += want.size - (have?.size ?? 0);
  if (want.size) m.affinityMatches.set(frontendId, want);
  else m.affinityMatches.delete(frontendId);
}

const compare = (mirror: KernelMirror, kernel: readonly AffinityMatchKey[], add: DriftSink) =>
  compareKeySets(
    MAP,
    mirror.affinityMatches,
    kernel.map((a): [number, number] => [a.frontendId, a.backendId]),
    add,
  );

export const affinityMatchesTable: ReconcilerTable = {
  map: MAP,
  capacity: 'affinityMatch',
  phases: [
    phase(
      2,
      MAP,
      'write',
      'auxWritten',
      (w) => w.affWrites,
      (t, q) => t.maps.updateAffinityMatches(q),
      touch,
    ),
    phase(
      8,
      MAP,
      'delete',
      'auxDeleted',
      (w) => w.affDeletes,
      (t, q) => t.maps.deleteAffinityMatches(q),
      touch,
    ),
  ],
  sliced: {
    keySize: KEY_SIZE,
    valSize: VAL_SIZE,
    cursor: (m, b) => m.affinityMatchesRawCursor(b),
    hashMirror: hashMembers((m) => m.affinityMatches, KEY_SIZE, VAL_SIZE, affinityMatchRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpAffinityMatches(), add)),
  compare: (mirror, k, add) => compare(mirror, k.affs, add),
};
