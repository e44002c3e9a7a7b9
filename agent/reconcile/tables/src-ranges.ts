/**
 * kpr_src_range, the (frontendId, client CIDR) pairs loadBalancerSourceRanges
 * allows: an LPM trie, walked by key in the read-back (a walk that loses its
 * place starts again). Written at step 2 (before a master with
 * SOURCE_RANGES publishes), deleted at step 8 (once no master allows them).
 * The mirror keeps it as frontendId → CIDRs.
 */
import { MAP_NAMES, encodeSrcRangeKey, type SrcRangeKey } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { KernelMirror } from '../kernel-mirror.js';
import type { Writes } from '../write-batch.js';
import { compareKeySets, hashMembers, noDrift, phase, type DriftSink, type ReconcilerTable } from './table.js';

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

/**
 * The diff: makes the ranges of `frontendId` exactly `cidrs` in the mirror,
 * queueing the additions (written before the masters) and the removals
 * (deleted after them).
 */
export function diffSrcRanges(m: KernelMirror, frontendId: number, cidrs: readonly string[], w: Writes): void {
  const have = m.srcRanges.get(frontendId);
  if (cidrs.length === 0 && !have) return;
  const want = new Set(cidrs);
  for (const cidr of want) if (!have?.has(cidr)) w.rangeWrites.push({ frontendId, cidr });
  if (have) for (const cidr of have) if (!want.has(cidr)) w.rangeDeletes.push({ frontendId, cidr });
  m.rangeKeys += want.size - (have?.size ?? 0);
  if (want.size) m.srcRanges.set(frontendId, want);
  else m.srcRanges.delete(frontendId);
}

const compare = (mirror: KernelMirror, kernel: readonly SrcRangeKey[], add: DriftSink) =>
  compareKeySets(
    MAP,
    mirror.srcRanges,
    kernel.map((r): [number, string] => [r.frontendId, r.cidr]),
    add,
  );

export const srcRangesTable: ReconcilerTable = {
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
    hashMirror: hashMembers((m) => m.srcRanges, KEY_SIZE, VAL_SIZE, srcRangeRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpSrcRanges(), add)),
  compare: (mirror, k, add) => compare(mirror, k.ranges, add),
};
