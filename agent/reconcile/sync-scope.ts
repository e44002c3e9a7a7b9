/**
 * A sync's scope: which frontends it re-diffs besides those of the Services
 * it is given, by its kind (SyncOptions), and what that kind resets in the
 * claims. A full sync rebuilds the desired state from its plans and re-diffs
 * everything; a sweep keeps the desired state and re-diffs what no Service
 * claims; a scanned sweep re-diffs what sweepScan found unclaimed; any sync
 * re-diffs the frontends left dirty by an earlier failure. Until a sync has
 * the full desired state, what an adopt found stays unless a Service claims it.
 */
import type { Claims } from './claims.js';
import type { KernelMirror } from './kernel-mirror.js';
import { entrySetsOf } from './tables/services.js';
import type { SweepScan } from './sweep-scan.js';
import type { SyncOptions } from './sync-types.js';

export interface SyncKind {
  /** A full sync, or an incremental one with `sweep: true`: what nothing claims goes. */
  sweep: boolean;
  /** An incremental sync with `sweep: 'scanned'`: what sweepScan marked goes. */
  scanned: boolean;
}

export function syncKind(opts: SyncOptions): SyncKind {
  return { sweep: opts.full || opts.sweep === true, scanned: !opts.full && opts.sweep === 'scanned' };
}

export class SyncScope {
  constructor(
    private readonly mirror: KernelMirror,
    private readonly claims: Claims,
    private readonly scan: SweepScan,
  ) {}

  /** After an adopt: no desired state yet, and every frontend the kernel holds adopted and unclaimed. */
  adopted(): void {
    this.claims.clear();
    this.claims.haveFullDesired = false;
    this.claims.adoptedUnclaimed.clear();
    for (const s of entrySetsOf(this.mirror)) this.claims.adoptedUnclaimed.add(s.fk);
  }

  /**
   * The frontends concerned before the sync reads its Services: `dirty`, and
   * what its kind adds; a full sync clears the desired state it rebuilds.
   * `driftRepaired`: the sync's read-back rebuilt the mirror from the kernel.
   */
  affected(opts: SyncOptions, kind: SyncKind, dirty: ReadonlySet<string>, driftRepaired: boolean): Set<string> {
    const affected = new Set<string>(dirty);
    const claims = this.claims;
    if (opts.full) {
      for (const s of entrySetsOf(this.mirror)) affected.add(s.fk);
      for (const fk of claims.claimants.keys()) affected.add(fk);
      claims.clear();
      claims.adoptedUnclaimed.clear();
      claims.haveFullDesired = true;
    } else if (kind.sweep) {
      // The desired state stays: only what no Service claims goes, and after
      // a repaired drift (the mirror rebuilt from the kernel) everything is re-diffed.
      for (const s of entrySetsOf(this.mirror)) if (driftRepaired || !claims.claimants.has(s.fk)) affected.add(s.fk);
      if (driftRepaired) for (const fk of claims.claimants.keys()) affected.add(fk);
      claims.adoptedUnclaimed.clear();
      claims.haveFullDesired = true;
    } else if (kind.scanned) {
      // sweepScan walked every frontend: what it found unclaimed goes (winner() decides again below); the orphans are the mirror's suspects.
      for (const fk of this.scan.unclaimed) affected.add(fk);
      this.scan.reset();
      claims.adoptedUnclaimed.clear();
      claims.haveFullDesired = true;
    }
    return affected;
  }

  /**
   * After the mirror, stale from an earlier failure, was re-read: what the
   * reload marked dirty, and what a full sync or a sweep concerns in the
   * mirror as it now is.
   */
  widenAfterReload(affected: Set<string>, opts: SyncOptions, kind: SyncKind, dirty: ReadonlySet<string>): void {
    for (const fk of dirty) affected.add(fk);
    if (opts.full) for (const s of entrySetsOf(this.mirror)) affected.add(s.fk);
    else if (kind.sweep) for (const s of entrySetsOf(this.mirror)) if (!this.claims.claimants.has(s.fk)) affected.add(s.fk);
  }
}
