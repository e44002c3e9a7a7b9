/**
 * The sweep of a sliced resync, found in slices: what a full sync removes
 * besides what its Services no longer want — frontends no Service claims,
 * pairs, ranges and names of frontendIds no frontend owns, service addresses
 * whose service-address entry disagrees with the frontends on them, backends no slot
 * names. At 10,000 Services × 10 that is a walk of ~130,000 mirror entries
 * (9–16 ms in one step under load); here it is done a batch of entries per
 * call, with event syncs between the calls, and what it finds is only
 * marked: the orphans as the mirror's suspects (which any sync sweeps), the
 * unclaimed frontends in `unclaimed` (for the `sweep: 'scanned'` sync that
 * ends the resync to remove).
 *
 * Why a walk with syncs between its batches finds everything a one-step
 * sweep would: the mirror's Maps are walked by live iterators, so an entry
 * present throughout is visited once; an entry that appears meanwhile was
 * put there by a sync, which removed or left out what it made orphan itself
 * (its frontends' diffs unreference backends, release frontendIds and settle
 * the addresses they touch). What is marked and no longer applies when the
 * last sync runs is decided again there (a frontend claimed meanwhile is
 * diffed, not removed; a suspect that is owned again is left alone).
 */
import type { Claims } from './claims.js';
import type { KernelMirror } from './kernel-mirror.js';
import { entrySetsOf } from './tables/services.js';
import type { ByFrontendId } from './tables/table.js';
import { scanVips, vipScanIterator } from './tables/vips.js';

/** Mirror entries looked at per call of step(). */
export const SWEEP_SCAN_BATCH = 2048;

/** The parts of the walk, in order. */
const PARTS = ['frontends', 'frontendIds', 'vips', 'vipRefs', 'backends'] as const;

export class SweepScan {
  /** Frontends (frontend ids) no Service claimed when the walk passed them. */
  readonly unclaimed = new Set<string>();
  private part = 0;
  private iter: Iterator<unknown> | null = null;
  /** The parts of the mirror kept by frontendId the 'frontendIds' part still walks (the affinity pairs, the source ranges, the names). */
  private frontendIdMaps: ByFrontendId[] = [];
  private nextId = 0;
  private farDone = false;
  private generation = -1;

  constructor(
    private readonly mirror: KernelMirror,
    private readonly claims: Claims,
    private readonly batch: number = SWEEP_SCAN_BATCH,
  ) {}

  /** Forgets a walk under way (the next step() starts a new one). */
  reset(): void {
    this.generation = -1;
  }

  /** Walks about `batch` more entries; true once the whole mirror was walked (since the first call, or a rebuild of the mirror). */
  step(): boolean {
    const m = this.mirror;
    if (this.generation !== m.generation) {
      // New, or the mirror was rebuilt from the kernel meanwhile (a failed write): walk the new one from the start.
      this.generation = m.generation;
      this.unclaimed.clear();
      this.part = 0;
      this.iter = null;
      this.frontendIdMaps = [...m.byFrontendId];
      this.nextId = 0;
      this.farDone = false;
    }
    let budget = Math.max(1, this.batch);
    while (this.part < PARTS.length) {
      budget = this.walk(PARTS[this.part], budget);
      if (budget > 0) {
        this.part++;
        this.iter = null;
      } else return false;
    }
    return true;
  }

  /** Walks part `part` for at most `budget` entries; what is left of the budget (0: the part is not done). */
  private walk(part: (typeof PARTS)[number], budget: number): number {
    const m = this.mirror;
    switch (part) {
      case 'frontends': {
        const sets = (this.iter ??= entrySetsOf(m)) as Iterator<{ fk: string }>;
        const claimants = this.claims.claimants;
        for (; budget > 0; budget--) {
          const n = sets.next();
          if (n.done) return budget;
          if (!claimants.has(n.value.fk)) this.unclaimed.add(n.value.fk);
        }
        return 0;
      }
      case 'frontendIds': {
        while (this.frontendIdMaps.length > 0) {
          const ids = (this.iter ??= this.frontendIdMaps[0].frontendIds()) as Iterator<number>;
          for (; budget > 0; budget--) {
            const n = ids.next();
            if (n.done) break;
            if (!m.frontendIdOwner.has(n.value)) m.suspectFrontendIds.add(n.value);
          }
          if (budget === 0) return 0;
          this.frontendIdMaps.shift();
          this.iter = null;
        }
        return budget;
      }
      case 'vips':
        // An address with an entry: it must have a ClusterIP frontend, and the flags the agent writes.
        return scanVips(m, (this.iter ??= vipScanIterator(m, 'entries')) as Iterator<string>, 'entries', budget);
      case 'vipRefs':
        // An address with a ClusterIP frontend: it must have its entry.
        return scanVips(m, (this.iter ??= vipScanIterator(m, 'refs')) as Iterator<string>, 'refs', budget);
      case 'backends': {
        const rows = m.backends;
        const mark = (id: number) => {
          if (rows.refs(id) === 0) m.unreferenced.add(id);
        };
        // Dense ids by range (a row added meanwhile was added by a sync that references it), then the few far ones at once.
        const end = Math.min(rows.denseEnd, this.nextId + budget);
        rows.forEachDenseId(this.nextId, end, mark);
        budget -= end - this.nextId;
        this.nextId = end;
        if (end < rows.denseEnd) return 0;
        if (!this.farDone) {
          rows.forEachFarId(mark);
          this.farDone = true;
        }
        return Math.max(1, budget);
      }
    }
  }
}
