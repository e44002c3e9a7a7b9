/**
 * The maps the reconciler owns, as a list of tables (table.ts), in the
 * order a sliced resync reads them back; the apply order, the read-back and
 * the drift compare iterate it. Adding a map: a table module and its line
 * here (docs/contributing.md, *Adding a map the reconciler writes*).
 */
import type { KernelMirror } from '../kernel-mirror.js';
import type { MapCapacities } from '../limits.js';
import type { ApplyTarget, Writes } from '../write-batch.js';
import { affinityMatchesTable } from './affinity-matches.js';
import { backendsTable } from './backends.js';
import { maglevRefsTable, maglevTable } from './maglev.js';
import { servicesTable } from './services.js';
import { srcRangesTable } from './src-ranges.js';
import { svcMetaTable } from './svc-meta.js';
import type { Phase, ReconcilerTable } from './table.js';
import { vipsTable } from './vips.js';

/** Each table reads its part of the mirror: KernelMirror composes them all. */
export const TABLES: readonly ReconcilerTable<KernelMirror>[] = [
  servicesTable,
  backendsTable,
  vipsTable,
  svcMetaTable,
  affinityMatchesTable,
  srcRangesTable,
  maglevTable,
  maglevRefsTable,
];

/** The maps a sliced resync reads back, one at a time, in this order (Reconciler.readBackMatches). */
export const READ_BACK_MAPS: readonly string[] = TABLES.map((t) => t.map);

/** The table of map `map`, if the reconciler owns it. */
export function tableOf(map: string): ReconcilerTable<KernelMirror> | undefined {
  return TABLES.find((t) => t.map === map);
}

/** The capacity each map with a limit on its entries gives, by map name. */
export const CAPACITY_KEYS: ReadonlyMap<string, keyof MapCapacities> = new Map(TABLES.flatMap((t) => (t.capacity ? [[t.map, t.capacity] as const] : [])));

/**
 * The apply order, as one table: each kind before what names it, and
 * nothing deleted before what named it is gone.
 *
 *   1. backends (and LOCAL flag changes), before any slot names them;
 *   2. affinity-match pairs, before any slot of an AFFINITY master names them;
 *      source ranges, before a master with SOURCE_RANGES publishes;
 *   3. slots 1..n, before any count covers them; Maglev table chunks, then
 *      the table references naming them (a reader checks a table's slot
 *      against the count it read, so either order is safe);
 *   4. names of new frontendIds, before a master carries them;
 *   5. masters (count, frontendId, flags, affinity timeout);
 *   6. service addresses, once a frontend answers on them;
 *   7. masters of removed entry sets first, then slots beyond the new count
 *      and slots of removed sets (one call); Maglev table references of
 *      removed tables;
 *   8. pairs no master with AFFINITY names any more; ranges no master allows any more;
 *      Maglev chunks no reference names any more;
 *   9. addresses whose last ClusterIP frontend went;
 *  10. names of released frontendIds;
 *  11. backends no slot names any more.
 *
 * Each table gives its phases at their steps; phases of one step go in
 * TABLES' order. The writes (1–6) may go in rounds while the diff runs; the
 * deletes (7–11) all wait for the end of the sync.
 */
export const APPLY_ORDER: readonly Phase[] = TABLES.flatMap((t) => t.phases).sort((a, b) => a.step - b.step);

/** A key's bytes, encoded to record it as touched. */
const keyScratch = Buffer.alloc(Math.max(...TABLES.map((t) => t.sliced.keySize)));

/** Applies the phases of `op` in APPLY_ORDER: the upserts (a round, or the last) or the deletes (once, at the end). */
export function applyPhases(op: 'write' | 'delete', t: ApplyTarget, w: Writes): void {
  for (const p of APPLY_ORDER) {
    if (p.op !== op) continue;
    const n = p.size(w);
    if (n === 0) continue;
    if (p.touch) {
      const keys = t.touched(p.map);
      if (keys) p.touch(keys, w, keyScratch);
    }
    p.apply(t, w);
    t.result[p.counter] += n;
  }
}
