/**
 * kpr_vip, service address → VIP_FLAG bits: an address is present while a
 * ClusterIP frontend is programmed there (its unknown ports refused).
 * Written at step 6, once a frontend answers on the address; deleted at
 * step 9, once its last ClusterIP frontend went.
 */
import { MAP_NAMES, encodeVipKey, encodeVipVal } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { KernelMirror } from '../kernel-mirror.js';
import { compareKeyValues, hashFromMap, noDrift, phase, type DriftSink, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.vip;
const KEY_SIZE = MAPS.vip.key.size;
const VAL_SIZE = MAPS.vip.value.size;
const rec = Buffer.alloc(KEY_SIZE + VAL_SIZE);

/** A record (address → flags), in a reused buffer. */
export function vipRecord(addr: string, flags: number): Buffer {
  encodeVipKey(addr, rec, 0);
  encodeVipVal(flags >>> 0, rec, KEY_SIZE);
  return rec;
}

function touch(t: TouchedKeys, addrs: ReadonlyArray<string | readonly [string, number]>, k: Buffer): void {
  for (const a of addrs) {
    encodeVipKey(typeof a === 'string' ? a : a[0], k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

const compare = (mirror: KernelMirror, kernel: Iterable<[string, number]>, add: DriftSink) =>
  compareKeyValues(MAP, mirror.vips, kernel, (a, b) => a === b, add);

export const vipsTable: ReconcilerTable = {
  map: MAP,
  phases: [
    phase(
      6,
      MAP,
      'write',
      'auxWritten',
      (w) => w.vipWrites,
      (t, q) => t.maps.updateVips(q),
      touch,
    ),
    phase(
      9,
      MAP,
      'delete',
      'auxDeleted',
      (w) => w.vipDeletes,
      (t, q) => t.maps.deleteVips(q),
      touch,
    ),
  ],
  sliced: {
    keySize: KEY_SIZE,
    valSize: VAL_SIZE,
    cursor: (m, b) => m.vipsRawCursor(b),
    hashMirror: hashFromMap((m) => m.vips, KEY_SIZE, VAL_SIZE, vipRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpVips(), add)),
  compare: (mirror, k, add) => compare(mirror, k.vips, add),
};
