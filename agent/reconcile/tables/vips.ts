/**
 * kpr_vip, service address → VIP_FLAG bits: an address is present while a
 * ClusterIP frontend is programmed there (its unknown ports refused).
 * Written at step 6, once a frontend answers on the address; deleted at
 * step 9, once its last ClusterIP frontend went. Its part of the mirror is
 * a VipsMirror: the map's entries, and the ClusterIP frontends counted per
 * address that decide them.
 */
import { MAP_NAMES, VIP_FLAG, encodeVipKey, encodeVipVal } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { TouchedKeys } from '../read-back/fingerprint.js';
import type { Writes } from '../write-batch.js';
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

/** What the kernel's map holds, as last written or read, and the ClusterIP frontends programmed per address that decide it. */
export class VipsMirror {
  /** The map: address → flags. */
  readonly entries = new Map<string, number>();
  /** ClusterIP frontends programmed, per address: the entry's refcount. */
  readonly refs = new Map<string, number>();
  /** frontend key → the address it counts in `refs`. */
  readonly of = new Map<string, string>();
  /** Found by the last read of the maps (or the sweep scan): addresses whose entry disagrees with `refs`. */
  readonly suspects = new Set<string>();

  clear(): void {
    this.entries.clear();
    this.refs.clear();
    this.of.clear();
    this.suspects.clear();
  }

  /** Counts ClusterIP frontend `fk` (read from the service map) on address `addr`. */
  count(fk: string, addr: string): void {
    this.of.set(fk, addr);
    this.refs.set(addr, (this.refs.get(addr) ?? 0) + 1);
  }

  /**
   * Adds what a dump of the map holds (after the frontends were counted);
   * entries that disagree with the frontends are noted as suspects. Returns
   * the entries of addresses no ClusterIP frontend is programmed on.
   */
  load(vips: ReadonlyArray<[string, number]>): number {
    let orphans = 0;
    for (const [addr, flags] of vips) {
      this.entries.set(addr, flags);
      if (!this.refs.has(addr)) {
        orphans++;
        this.suspects.add(addr);
      }
    }
    // A ClusterIP frontend whose address entry is missing (a write that failed part-way).
    for (const addr of this.refs.keys()) if (this.entries.get(addr) !== VIP_FLAG.REFUSE_UNKNOWN_PORT) this.suspects.add(addr);
    return orphans;
  }
}

/** The part of the mirror this table reads. */
interface Mirror {
  readonly vips: VipsMirror;
}

/** The address frontend `fk` is counted on as a ClusterIP frontend, if it is. */
export function vipCountedFor(m: Mirror, fk: string): string | undefined {
  return m.vips.of.get(fk);
}

/** Counts ClusterIP frontend `fk` on address `addr` (its entry settled at the end of the pass: settleVips). */
export function vipRef(m: Mirror, fk: string, addr: string, touched: Set<string>): void {
  m.vips.count(fk, addr);
  touched.add(addr);
}

/** Stops counting frontend `fk` on its address, if it is counted. */
export function vipUnref(m: Mirror, fk: string, touched: Set<string>): void {
  const v = m.vips;
  const addr = v.of.get(fk);
  if (addr === undefined) return;
  v.of.delete(fk);
  const r = (v.refs.get(addr) ?? 0) - 1;
  if (r > 0) v.refs.set(addr, r);
  else v.refs.delete(addr);
  touched.add(addr);
}

/** The sweep: the suspect addresses, or (full) every address with an entry or a frontend, are settled again; the suspects are forgotten. */
export function touchSuspectVips(m: Mirror, touched: Set<string>, full: boolean): void {
  const v = m.vips;
  for (const addr of v.suspects) touched.add(addr);
  if (full) {
    for (const addr of v.entries.keys()) touched.add(addr);
    for (const addr of v.refs.keys()) touched.add(addr);
  }
  if (v.suspects.size > 0) v.suspects.clear();
}

/** Entries of the addresses touched: present while a ClusterIP frontend is programmed there, absent otherwise. */
export function settleVips(m: Mirror, touched: ReadonlySet<string>, w: Writes): void {
  const v = m.vips;
  for (const addr of touched) {
    const wanted = (v.refs.get(addr) ?? 0) > 0;
    const have = v.entries.get(addr);
    if (wanted && have !== VIP_FLAG.REFUSE_UNKNOWN_PORT) {
      w.vipWrites.push([addr, VIP_FLAG.REFUSE_UNKNOWN_PORT]);
      v.entries.set(addr, VIP_FLAG.REFUSE_UNKNOWN_PORT);
    } else if (!wanted && have !== undefined) {
      w.vipDeletes.push(addr);
      v.entries.delete(addr);
    }
  }
}

/** The sweep scan's walks (sweep-scan.ts): over the entries (`entries`), or the addresses with a ClusterIP frontend (`refs`). */
export function vipScanIterator(m: Mirror, part: 'entries' | 'refs'): Iterator<string> {
  return part === 'entries' ? m.vips.entries.keys() : m.vips.refs.keys();
}

/**
 * Walks at most `budget` addresses of `it` (vipScanIterator's of `part`),
 * noting as suspects an entry without a ClusterIP frontend or with other
 * flags than the agent writes, and an address with a ClusterIP frontend
 * but no such entry. What is left of the budget (0: not done).
 */
export function scanVips(m: Mirror, it: Iterator<string>, part: 'entries' | 'refs', budget: number): number {
  const v = m.vips;
  for (; budget > 0; budget--) {
    const n = it.next();
    if (n.done) return budget;
    const addr = n.value;
    if (v.entries.get(addr) !== VIP_FLAG.REFUSE_UNKNOWN_PORT || (part === 'entries' && !((v.refs.get(addr) ?? 0) > 0))) v.suspects.add(addr);
  }
  return 0;
}

const compare = (mirror: Mirror, kernel: Iterable<[string, number]>, add: DriftSink) =>
  compareKeyValues(MAP, mirror.vips.entries, kernel, (a, b) => a === b, add);

export const vipsTable: ReconcilerTable<Mirror> = {
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
    hashMirror: hashFromMap((m: Mirror) => m.vips.entries, KEY_SIZE, VAL_SIZE, vipRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpVips(), add)),
  compare: (mirror, k, add) => compare(mirror, k.vips, add),
};
