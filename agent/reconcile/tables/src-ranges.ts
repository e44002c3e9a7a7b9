/**
 * kpr_src_range, the (frontendId, client CIDR) pairs loadBalancerSourceRanges
 * allows: an LPM trie, walked by key in the read-back (a walk that loses its
 * place starts again). Written at step 2 (before a master with
 * SOURCE_RANGES publishes), deleted at step 8 (once no master allows them).
 * Its part of the mirror is a SrcRangesMirror (frontendId → CIDRs).
 */
import { MAP_NAMES, encodeSrcRangeKey, type SrcRangeKey } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { Writes } from '../write-batch.js';
import { compareKeySets, hashMembers, noDrift, phase, type ByFrontendId, type DriftSink, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.srcRange;
const KEY_SIZE = MAPS.srcRange.key.size;
const VAL_SIZE = MAPS.srcRange.value.size;
const rec = Buffer.alloc(KEY_SIZE + VAL_SIZE);

/** A record (a frontend's frontendId and an allowed CIDR; the value 1, as the writer puts it), in a reused buffer. */
export function srcRangeRecord(frontendId: number, cidr: string): Buffer {
  encodeSrcRangeKey({ frontendId, cidr }, rec, 0);
  rec[KEY_SIZE] = 1;
  return rec;
}

function touch(t: TouchedKeys, ranges: readonly SrcRangeKey[], k: Buffer): void {
  for (const r of ranges) {
    encodeSrcRangeKey(r, k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

/** What the kernel's map holds, as last written or read: frontendId → the CIDRs it allows. */
export class SrcRangesMirror implements ByFrontendId {
  readonly byFrontendId = new Map<number, Set<string>>();
  /** The map's entries (the CIDRs summed over frontendIds): what its capacity is measured by. */
  keys = 0;

  clear(): void {
    this.byFrontendId.clear();
    this.keys = 0;
  }

  /**
   * Adds what a dump of the map holds; a frontendId no frontend owns
   * (`owners`) is noted in `suspects`. Returns the entries of such frontendIds.
   */
  load(ranges: readonly SrcRangeKey[], owners: ReadonlyMap<number, string>, suspects: Set<number>): number {
    let orphans = 0;
    for (const k of ranges) {
      let s = this.byFrontendId.get(k.frontendId);
      if (!s) this.byFrontendId.set(k.frontendId, (s = new Set()));
      s.add(k.cidr);
      if (!owners.has(k.frontendId)) {
        orphans++;
        suspects.add(k.frontendId);
      }
    }
    this.keys = 0;
    for (const s of this.byFrontendId.values()) this.keys += s.size;
    return orphans;
  }

  frontendIds(): IterableIterator<number> {
    return this.byFrontendId.keys();
  }
}

/** The part of the mirror this table reads. */
interface Mirror {
  readonly srcRanges: SrcRangesMirror;
}

/** The CIDRs frontendId `frontendId` allows in the mirror, if any (admission's exact count). */
export function srcRangesOf(m: Mirror, frontendId: number): ReadonlySet<string> | undefined {
  return m.srcRanges.byFrontendId.get(frontendId);
}

/** Entries the mirror counts in the map. */
export function srcRangesHeld(m: Mirror): number {
  return m.srcRanges.keys;
}

/**
 * The diff: makes the ranges of `frontendId` exactly `cidrs` in the mirror,
 * queueing the additions (written before the masters) and the removals
 * (deleted after them).
 */
export function diffSrcRanges(m: Mirror, frontendId: number, cidrs: readonly string[], w: Writes): void {
  const r = m.srcRanges;
  const have = r.byFrontendId.get(frontendId);
  if (cidrs.length === 0 && !have) return;
  const want = new Set(cidrs);
  for (const cidr of want) if (!have?.has(cidr)) w.rangeWrites.push({ frontendId, cidr });
  if (have) for (const cidr of have) if (!want.has(cidr)) w.rangeDeletes.push({ frontendId, cidr });
  r.keys += want.size - (have?.size ?? 0);
  if (want.size) r.byFrontendId.set(frontendId, want);
  else r.byFrontendId.delete(frontendId);
}

const compare = (mirror: Mirror, kernel: readonly SrcRangeKey[], add: DriftSink) =>
  compareKeySets(
    MAP,
    mirror.srcRanges.byFrontendId,
    kernel.map((r): [number, string] => [r.frontendId, r.cidr]),
    add,
  );

export const srcRangesTable: ReconcilerTable<Mirror> = {
  map: MAP,
  capacity: 'srcRange',
  phases: [
    phase(
      2,
      MAP,
      'write',
      'auxWritten',
      (w) => w.rangeWrites,
      (t, q) => t.maps.updateSrcRanges(q),
      touch,
    ),
    phase(
      8,
      MAP,
      'delete',
      'auxDeleted',
      (w) => w.rangeDeletes,
      (t, q) => t.maps.deleteSrcRanges(q),
      touch,
    ),
  ],
  sliced: {
    keySize: KEY_SIZE,
    valSize: VAL_SIZE,
    cursor: (m, b) => m.srcRangesRawCursor(b),
    hashMirror: hashMembers((m: Mirror) => m.srcRanges.byFrontendId, KEY_SIZE, VAL_SIZE, srcRangeRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpSrcRanges(), add)),
  compare: (mirror, k, add) => compare(mirror, k.ranges, add),
};
