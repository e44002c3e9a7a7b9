/**
 * kpr_aff_match, the (backend, frontendId) pairs of the frontends with
 * session affinity: a backend an affinity entry names is used again only
 * while it is paired here. Written at step 2 (before any slot of an
 * AFFINITY master names the backend), deleted at step 8 (once no master
 * with AFFINITY names it). Its part of the mirror is an
 * AffinityMatchesMirror (frontendId → backend ids).
 */
import { MAP_NAMES, encodeAffinityMatchKey, type AffinityMatchKey } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { Writes } from '../write-batch.js';
import { compareKeySets, hashMembers, noDrift, phase, type ByFrontendId, type DriftSink, type ReconcilerTable } from './table.js';

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

/** What the kernel's map holds, as last written or read: frontendId → the backend ids paired with it. */
export class AffinityMatchesMirror implements ByFrontendId {
  readonly byFrontendId = new Map<number, Set<number>>();
  /** The map's entries (the pairs summed over frontendIds): what its capacity is measured by. */
  pairs = 0;

  clear(): void {
    this.byFrontendId.clear();
    this.pairs = 0;
  }

  /**
   * Adds what a dump of the map holds; a frontendId no frontend owns
   * (`owners`) is noted in `suspects`. Returns the entries of such frontendIds.
   */
  load(affs: readonly AffinityMatchKey[], owners: ReadonlyMap<number, string>, suspects: Set<number>): number {
    let orphans = 0;
    for (const k of affs) {
      let s = this.byFrontendId.get(k.frontendId);
      if (!s) this.byFrontendId.set(k.frontendId, (s = new Set()));
      s.add(k.backendId);
      if (!owners.has(k.frontendId)) {
        orphans++;
        suspects.add(k.frontendId);
      }
    }
    this.pairs = 0;
    for (const s of this.byFrontendId.values()) this.pairs += s.size;
    return orphans;
  }

  frontendIds(): IterableIterator<number> {
    return this.byFrontendId.keys();
  }
}

/** The part of the mirror this table reads. */
interface Mirror {
  readonly affinityMatches: AffinityMatchesMirror;
}

/** The backend ids paired with frontendId `frontendId` in the mirror, if any (admission's exact count). */
export function affinityPairsOf(m: Mirror, frontendId: number): ReadonlySet<number> | undefined {
  return m.affinityMatches.byFrontendId.get(frontendId);
}

/** Entries the mirror counts in the map. */
export function affinityPairsHeld(m: Mirror): number {
  return m.affinityMatches.pairs;
}

/**
 * The diff: makes the pairs of `frontendId` exactly `ids` in the mirror,
 * queueing the additions (written before the slots) and the removals
 * (deleted after them).
 */
export function diffAffinityMatches(m: Mirror, frontendId: number, ids: readonly number[], w: Writes): void {
  const a = m.affinityMatches;
  const have = a.byFrontendId.get(frontendId);
  if (ids.length === 0 && !have) return;
  const want = new Set(ids);
  for (const id of want) if (!have?.has(id)) w.affWrites.push({ backendId: id, frontendId });
  if (have) for (const id of have) if (!want.has(id)) w.affDeletes.push({ backendId: id, frontendId });
  a.pairs += want.size - (have?.size ?? 0);
  if (want.size) a.byFrontendId.set(frontendId, want);
  else a.byFrontendId.delete(frontendId);
}

const compare = (mirror: Mirror, kernel: readonly AffinityMatchKey[], add: DriftSink) =>
  compareKeySets(
    MAP,
    mirror.affinityMatches.byFrontendId,
    kernel.map((a): [number, number] => [a.frontendId, a.backendId]),
    add,
  );

export const affinityMatchesTable: ReconcilerTable<Mirror> = {
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
    hashMirror: hashMembers((m: Mirror) => m.affinityMatches.byFrontendId, KEY_SIZE, VAL_SIZE, affinityMatchRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpAffinityMatches(), add)),
  compare: (mirror, k, add) => compare(mirror, k.affs, add),
};
