/**
 * The Reconciler: makes the kernel's maps hold the planned frontends,
 * writing only the difference, in an order that is safe while the BPF
 * programs read the maps. It orchestrates, over one module each:
 *
 *   kernel-mirror.ts  what the kernel holds (the mirror: each map's part
 *                     owned by its table module), rebuilt from the pinned
 *                     maps at start (adopt) and after a failed write;
 *   claims.ts         the desired state: which Service claims which
 *                     frontend, and which claim wins;
 *   admission.ts      whether a Service fits the datapath's limits;
 *   diff.ts           desired against the mirror → the write batch
 *                     (which backend each slot names: agent/lb/);
 *   write-batch.ts    the batch's queues;
 *   tables/           one module per map: its part of the mirror, its
 *                     diff, its steps in the apply order
 *                     (APPLY_ORDER, tables/index.ts), its read-back, its
 *                     drift compare, its capacity;
 *   read-back/        whether the kernel still holds what the mirror says
 *                     (read-back.ts; read-back-window.ts: a map in steps;
 *                     drift-compare.ts; the fingerprints, fingerprint.ts);
 *   sweep-scan.ts     what a full sync would remove, found in steps;
 *   sync-scope.ts     which frontends a sync re-diffs, by its kind.
 *
 * A frontend (address, port, protocol) owns one frontendId, shared by its
 * EXTERNAL and (optional) INTERNAL entry sets. A sync diffs desired against
 * the mirror for the frontends concerned and applies the batch in
 * APPLY_ORDER: new backends, affinity pairs and ranges, slots, names,
 * masters, addresses; then the deletes, masters first, backends last. A
 * large sync writes the upserts in rounds while it diffs (every 16,384
 * queued entries), each round in that order; the deletes all wait for the end.
 *
 * Every prefix of that sequence (even a batch stopped part-way) leaves each
 * master's slots 1..count present and pointing at existing backends, and
 * every backend an AFFINITY master names paired with it. If a call
 * throws, the mirror is rebuilt from a dump of the maps, so it matches what
 * the kernel really holds, and the frontends concerned are re-diffed on the
 * next sync.
 *
 * Drift (entries changed behind the agent's back): a full sync with
 * `readBack` first compares the maps with the mirror and, on a difference,
 * rebuilds the mirror from them, so the same sync repairs it.
 *
 * A sliced resync (the sync loop's periodic one) never clears the desired
 * state: it checks the maps one at a time (readBackMatches), on a
 * difference repairs in one step (repairDrift), re-plans the Services in
 * chunks as incremental syncs, walks the mirror for what no Service claims
 * and what nothing references (sweepScan, a batch at a time), and ends with
 * a `sweep: 'scanned'` sync that removes it: what only a full sync did
 * otherwise (sweep-scan.ts).
 * * How the read-back compares 210,000 entries while event syncs write
 * between its steps, and why that is exact: read-back/read-back.ts.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import type { PlanFrontend, SkippedObject } from '../plan/types.js';
import type { DesiredFrontend } from './desired-frontend.js';
import { Admission } from './admission.js';
import { Claims } from './claims.js';
import { MirrorDiff } from './diff.js';
import { KernelMirror, type AdoptResult } from './kernel-mirror.js';
import { isAssertedClaim, type ConflictCount } from './ownership.js';
import { ReadBack } from './read-back/read-back.js';
import { SweepScan } from './sweep-scan.js';
import { SyncScope, syncKind } from './sync-scope.js';
import { clearIfAny } from './collections.js';
import {
  addSyncResult,
  emptySyncResult,
  type PlanSource,
  type ReadBackVerdict,
  type ReconcileLogger,
  type ReconcilerOptions,
  type SyncOptions,
  type SyncResult,
} from './sync-types.js';
import { applyPhases } from './tables/index.js';
import { FLUSH_ENTRIES, newWrites, resetUpserts, type ApplyTarget, type Writes } from './write-batch.js';

export * from './sync-types.js';
export { READ_BACK_MAPS } from './tables/index.js';
export type { AdoptInconsistencies, AdoptResult } from './kernel-mirror.js';

/** A PlanSource with nothing in it: the retry pass re-diffs refused Services from the desired state. */
const NO_PLANS: PlanSource = { keys: () => [], get: () => undefined };

const MAX_REVNAT_ID = 0xffff;
/** A sync of this many Services or more sizes its backend index ahead (reserveBackends). */
const RESERVE_MIN_SERVICES = 4096;

export class Reconciler {
  private readonly mirror: KernelMirror;
  private readonly claims: Claims;
  private readonly admission: Admission;
  private readonly differ: MirrorDiff;
  private readonly readBackState: ReadBack;
  private readonly scan: SweepScan;
  private readonly scope: SyncScope;
  /** Frontends to re-diff on the next sync (after a failure or an inconsistent adopt). */
  private readonly dirty = new Set<string>();
  /** The mirror could not be rebuilt after a failure; the next sync must reload first. */
  private stale = false;

  constructor(
    private readonly maps: DatapathMaps,
    private readonly logger: ReconcileLogger,
    options: ReconcilerOptions = {},
  ) {
    this.mirror = new KernelMirror(options.maxFrontendId ?? MAX_REVNAT_ID);
    this.claims = new Claims(logger);
    this.admission = new Admission(this.mirror, this.claims, logger, options.capacities);
    this.differ = new MirrorDiff(this.mirror, this.admission);
    this.differ.maglevCapacity = maps.maglevCapacity();
    this.readBackState = new ReadBack(maps, this.mirror, logger, options.readBackBatch);
    this.scan = new SweepScan(this.mirror, this.claims, options.sweepScanBatch);
    this.scope = new SyncScope(this.mirror, this.claims, this.scan);
  }

  /** Number of master entries (frontends × scopes) the kernel holds, as far as the reconciler knows. */
  get frontendCount(): number {
    return this.mirror.masters;
  }

  get backendCount(): number {
    return this.mirror.backends.size;
  }

  /** The frontendId programmed for a frontend, if any. */
  frontendIdOf(address: string, port: number, protocol: 'TCP' | 'UDP' | 'SCTP'): number | undefined {
    return this.mirror.frontendIdOf(address, port, protocol);
  }

  /** The Services the desired state holds frontends for (a sliced resync re-plans them with the cluster's). */
  desiredServices(): IterableIterator<string> {
    return this.claims.desired.keys();
  }

  /** kpr_frontend_conflicts' values: lost claims now in force, by class and rule. */
  conflictCounts(): ConflictCount[] {
    return this.claims.conflictCounts();
  }

  /**
   * One step of a sliced read-back: whether kernel map `map` (one of
   * READ_BACK_MAPS) holds exactly what the mirror says; 'pending' until its
   * last step, syncs running between them (read-back/read-back.ts). 'unreadable': the
   * dump failed (logged; the next period reads again). With a stale mirror
   * (re-read by the next sync anyway): 'match'.
   */
  readBackMatches(map: string): ReadBackVerdict {
    if (this.stale) {
      this.readBackState.end();
      return 'match';
    }
    return this.readBackState.step(map);
  }

  /** Ends a sliced read-back left unfinished (its resync ended early): keys are no longer recorded. */
  endReadBack(): void {
    this.readBackState.end();
  }

  /**
   * One step of a sliced resync's sweep: walks a batch of the mirror,
   * marking what a full sync would remove (sweep-scan.ts); true once all of
   * it was walked: then a sync with `sweep: 'scanned'` removes it.
   */
  sweepScan(): boolean {
    return this.scan.step();
  }

  /**
   * Whether re-planning `service` in a resync can change nothing: it is
   * refused for want of room and no room of that kind was made since (a
   * sync that makes room retries it at once; Admission.retryable).
   */
  refusedWithoutRoom(service: string): boolean {
    return this.admission.refusedWithoutRoom(service);
  }

  /**
   * The rare path of a sliced read-back (readBackMatches found a map
   * differing), in one step: every map dumped, decoded and compared with the
   * mirror (result.drift); on drift the mirror is rebuilt from the dumps and
   * every frontend re-diffed from the desired state (not re-planned), with
   * the sweep of a `sweep` sync, writing the difference in the usual safe order.
   */
  repairDrift(): SyncResult {
    return this.sync(NO_PLANS, { full: false, sweep: true, readBack: 'decoded' });
  }

  /**
   * Rebuilds the in-memory state from the maps (pinned by a previous run),
   * without writing anything. The next full sync then diffs against what the
   * kernel really holds and repairs the inconsistencies counted here.
   * Throws if the maps cannot be read.
   */
  adopt(): AdoptResult {
    const result = this.mirror.load(KernelMirror.read(this.maps), this.dirty);
    this.scope.adopted();
    this.logger.info('adopted datapath maps', {
      frontends: result.frontends,
      backends: result.backends,
      inconsistencies: result.inconsistencies,
      ...(result.inconsistencies > 0 ? result.details : {}),
    });
    return result;
  }

  /**
   * Makes the maps hold `plans` (Service "ns/name" → its frontends).
   * full: `plans` is everything; any other frontend is removed.
   * incremental: only the listed Services change; one mapped to [] loses its frontends.
   * Never throws for a failed map write: returns ok=false and stays consistent.
   *
   * A Service that does not fit a limit (limits.ts) is refused whole and the
   * others programmed; when the sync frees room of the kind a refused Service
   * lacked, a second pass, after the first is applied, retries it.
   */
  sync(plans: PlanSource, opts: SyncOptions): SyncResult {
    this.admission.begin(this.maps);
    this.claims.ages = plans; // both passes decide same-class conflicts by the same creationTimestamps
    try {
      return this.syncPasses(plans, opts);
    } finally {
      this.claims.ages = undefined;
      clearIfAny(this.claims.createdCache);
    }
  }

  private syncPasses(plans: PlanSource, opts: SyncOptions): SyncResult {
    const result = this.syncPass(plans, opts);
    if (result.ok && this.admission.refused.size > 0) {
      const retry = this.admission.retryable();
      if (retry.length > 0) {
        for (const service of retry) for (const d of this.claims.desired.get(service) ?? []) this.dirty.add(d.fk);
        addSyncResult(result, this.syncPass(NO_PLANS, { full: false }));
      }
    }
    result.skipped.push(...this.admission.refusedSkips());
    const maglevFull = this.differ.takeMaglevNotWritten();
    if (maglevFull.length > 0) {
      this.logger.warn('Maglev tables not written: kpr_maglev is full (raise --map-size-maglev); their frontends are balanced at random', {
        frontends: maglevFull.length,
        first: maglevFull.slice(0, 5),
        capacity: this.differ.maglevCapacity,
      });
    }
    result.limits = this.admission.limits();
    result.fill = this.admission.fill();
    if (result.ok) {
      const left = this.differ.takeUdpLeft();
      if (left.length > 0) result.udpBackendsLeft = left;
    }
    return result;
  }

  /** One pass of sync(): the diff of `plans` (and of the frontends marked dirty), applied. */
  private syncPass(plans: PlanSource, opts: SyncOptions): SyncResult {
    this.admission.beginPass();
    const result = emptySyncResult();
    const skipped = result.skipped;
    // ---- 0. drift: what the kernel holds against what this agent last wrote
    const kind = syncKind(opts);
    const { sweep, scanned } = kind;
    if (sweep && opts.readBack && !this.stale) this.readBackState.full(result, opts.readBack === 'decoded', this.dirty, this.differ.frontendIdHints);
    // ---- 1. update the desired state; collect the frontends it concerns (sync-scope.ts)
    const affected = this.scope.affected(opts, kind, this.dirty, result.drift.length > 0);
    // Keys are strings: sort()'s default order (UTF-16 code units) is the key order, with no comparator call per comparison.
    const services = [...plans.keys()].sort();
    const w = newWrites();
    const touchedVips = new Set<string>();
    // A ClusterIP or NodePort frontend only this Service claims is diffed as
    // soon as the Service is read: the API server allocates those addresses
    // and ports uniquely, so no later claimant can win it in a real cluster
    // (one that does, from broken input, is re-diffed below in the same sync).
    // LoadBalancer and ExternalIP claims wait for the pass below, when every
    // claim is known: they lose to a ClusterIP claimed later in key order, and
    // may not use a ClusterIP address at all (ownership.ts). The planner's output and the
    // desired backends then die young instead of all living until a second
    // pass, which at 10,000 Services is most of the sync's garbage. Contested
    // and removed frontends wait for the pass below. Not after a failure: the
    // mirror must be re-read first.
    // Frontends diffed while streaming are kept in `diffed` only (not in
    // `affected`): at 10,000 Services that is ~40,000 set operations fewer.
    const diffed = new Set<string>();
    const sizedAt = services.length >= RESERVE_MIN_SERVICES ? services.length >> 4 : -1;
    const backendsBefore = this.mirror.backends.size;
    try {
      const streaming = !this.stale;
      for (let si = 0; si < services.length; si++) {
        const service = services[si];
        if (si === sizedAt) this.reserveBackends(backendsBefore, si, services.length);
        const mine = this.setDesired(service, plans.get(service) ?? [], affected, skipped);
        for (let i = 0; i < mine.length; i++) {
          const d = mine[i];
          if (!streaming || this.claims.claimants.get(d.fk) !== service || isAssertedClaim(d.feType)) {
            affected.add(d.fk);
            continue;
          }
          if (this.claims.adoptedUnclaimed.size > 0) this.claims.adoptedUnclaimed.delete(d.fk);
          this.diffQueued(d, w, touchedVips, skipped, result);
          diffed.add(d.fk);
        }
      }

      // The mirror is unknown after an earlier failure: read the maps first. The
      // desired state above is kept either way, so nothing asked for is lost.
      if (this.stale) {
        if (!this.reload()) {
          for (const fk of affected) this.dirty.add(fk);
          return this.finish(result, 'datapath maps could not be read back after an earlier failure');
        }
        this.scope.widenAfterReload(affected, opts, kind, this.dirty); // the reload may have marked more
      }

      // ---- 2. diff each remaining concerned frontend against the mirror, updating the mirror
      const order: string[] = [];
      for (const fk of affected) if (!diffed.has(fk) || Array.isArray(this.claims.claimants.get(fk))) order.push(fk);
      if (order.length > 1) order.sort();
      for (const fk of order) {
        const want = this.claims.winner(fk, skipped);
        if (want) {
          this.claims.adoptedUnclaimed.delete(fk);
          this.diffQueued(want, w, touchedVips, skipped, result);
        } else if (this.claims.haveFullDesired || !this.claims.adoptedUnclaimed.has(fk)) {
          this.differ.removeFrontend(fk, w, touchedVips);
        }
      }
      // Frontends diffed while streaming and still claimed by one Service only: any conflict they had is over.
      const claims = this.claims;
      if (claims.conflicts.size > 0) {
        for (const fk of [...claims.conflicts.keys()]) if (diffed.has(fk) && typeof claims.claimants.get(fk) === 'string') claims.setConflicts(fk, []);
      }

      // ---- 3. what nothing accounts for any more
      this.differ.sweepOrphans(w, touchedVips, sweep);
      this.differ.settleVips(touchedVips, w);
      this.differ.dropUnreferenced(w);

      // ---- 4. apply what is still queued, in the order that keeps the live datapath consistent
      this.apply('write', w, result);
      this.apply('delete', w, result);
      this.maps.flush(); // queued writes reach the kernel (or fail) before the sync counts as done
      // The rows of deleted backends leave the mirror only now: a write queued
      // for one earlier in this sync was encoded from its row.
      for (const id of w.backendDeletes) this.mirror.backends.remove(id);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.logger.error('datapath sync failed; re-reading the maps, will retry', { error: message, frontends: affected.size + diffed.size });
      for (const fk of affected) this.dirty.add(fk);
      for (const fk of diffed) this.dirty.add(fk);
      clearIfAny(this.differ.frontendIdHints);
      if (this.reload()) this.admission.learnFullMap(err, this.maps);
      return this.finish(result, message);
    }
    clearIfAny(this.differ.frontendIdHints);

    // ---- 5. commit: ids freed by this sync become reusable only now, so no
    //         entry was ever re-pointed at a different backend, frontend or
    //         Maglev table mid-sync (a table's chunks are deleted at the end).
    this.mirror.releaseIds(w);
    clearIfAny(this.dirty);
    if (sweep || scanned) this.admission.forgetGone();
    return this.finish(result);
  }

  /**
   * Writes the upserts queued so far and starts new queues, so a sync of
   * 10,000 Services never holds 200,000 queued entries (megabytes of columns
   * that would outlive it in the heap until a full GC). Safe mid-diff: every
   * master queued so far has its slots and backends queued before it, and
   * APPLY_ORDER keeps that order; deletions all wait for the end.
   */
  private flushUpserts(w: Writes, result: SyncResult): void {
    this.apply('write', w, result);
    resetUpserts(w);
  }

  /**
   * Sizes the backend tuple index for the whole sync once a sixteenth of
   * its Services is diffed: the backends added so far, extrapolated, with a
   * quarter of headroom, at most the backend map's capacity. A cold sync of
   * 100,000 Services then rebuilds the index once instead of a dozen times.
   */
  private reserveBackends(before: number, done: number, total: number): void {
    const rows = this.mirror.backends;
    const estimate = before + ((rows.size - before) * total * 1.25) / done;
    rows.reserve(Math.min(Math.ceil(estimate), this.admission.backendCapacity));
  }

  /** diffFrontend (or, for a Service that does not fit, removeFrontend), then a round of writes if enough is queued. */
  private diffQueued(want: DesiredFrontend, w: Writes, touchedVips: Set<string>, skipped: SkippedObject[], result: SyncResult): void {
    if (this.admission.admitted(want, w)) this.differ.diffFrontend(want, w, touchedVips, skipped);
    else this.differ.removeFrontend(want.fk, w, touchedVips);
    if (w.backendWrites.length + w.slotWrites.length + w.masterWrites.length >= FLUSH_ENTRIES) this.flushUpserts(w, result);
  }

  /** The writes (or the deletes) queued in `w`, in APPLY_ORDER. */
  private apply(op: 'write' | 'delete', w: Writes, result: SyncResult): void {
    const rb = this.readBackState;
    const target: ApplyTarget = { maps: this.maps, rows: this.mirror.backends, touched: (map) => rb.touched(map), result };
    applyPhases(op, target, w);
  }

  /** Replaces one Service's desired frontends (Claims.set), noting whether they were cut to MAX_SLOTS backends. */
  private setDesired(service: string, frontends: PlanFrontend[], affected: Set<string>, skipped: SkippedObject[]): readonly DesiredFrontend[] {
    const mine = this.claims.set(service, frontends, affected, skipped);
    this.admission.noteTruncation(service, mine);
    if (mine.length === 0) this.admission.forget(service);
    return mine;
  }

  /** After a failed write: rebuild the mirror from the maps. False (and stale) if they cannot be read. */
  private reload(): boolean {
    try {
      const r = this.mirror.load(KernelMirror.read(this.maps), this.dirty);
      this.stale = false;
      if (r.inconsistencies > 0) this.logger.warn('datapath maps re-read with inconsistencies', { ...r.details });
      return true;
    } catch (err) {
      this.stale = true;
      this.logger.error('cannot read the datapath maps', { error: err instanceof Error ? err.message : String(err) });
      return false;
    }
  }

  private finish(result: SyncResult, error?: string): SyncResult {
    if (error !== undefined) {
      result.ok = false;
      result.error = error;
    }
    result.frontends = this.frontendCount;
    result.backends = this.mirror.backends.size;
    const conflicts = this.claims.conflictCounts();
    let total = 0;
    for (const c of conflicts) total += c.frontends;
    this.claims.flushLog(total);
    result.conflicts = conflicts;
    return result;
  }
}
