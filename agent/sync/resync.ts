/**
 * The periodic full resync, in slices of about RESYNC_SLICE_MS with the
 * event loop free between them (the sync loop runs event syncs there): the
 * maps read back one at a time (Reconciler.readBackMatches, a batch of
 * records per step; a difference repaired in one step), then kpr_config;
 * then every Service (the cluster's, then those only the desired state
 * still holds) re-planned and re-diffed in chunks, as incremental syncs —
 * but for those refused for want of room while no room was made; then the
 * mirror walked for what a full sync would remove (Reconciler.sweepScan, a
 * batch per step) and one `sweep: 'scanned'` sync that removes it.
 * The desired state is never cleared: a Service deleted meanwhile is removed
 * by its event sync or its chunk, one changed after its chunk by its event
 * sync. A slice that fails ends the resync (reported failed); its retry is a
 * whole new resync.
 */
import { READ_BACK_MAPS, addSyncResult, emptySyncResult, type DriftCount, type Reconciler, type SyncResult } from '../reconcile/reconciler.js';
import type { ClusterSource, ServicePlans } from './service-plans.js';
import type { SyncReport } from './sync-report.js';

/**
 * The time a slice of the resync may use (ms): it runs steps — a batch of a
 * map read back, a chunk of Services re-planned, a batch of the sweep's walk
 * — until it has used this much, at least one step, then gives the event
 * loop back (a change's sync waits at most about this long, plus one step).
 */
export const RESYNC_SLICE_MS = 2;

/**
 * Services re-planned and re-diffed per step (one incremental sync): at
 * 10,000 Services × 10 endpoints ~10–15 µs each unloaded, so a step is
 * ~0.3 ms, a slice several of them (bench/resync.ts measures it).
 */
export const RESYNC_CHUNK = 24;

/** What a resync works with: the loop's source, planner and reconciler, its pace, and its hooks. */
export interface ResyncHost {
  readonly src: ClusterSource;
  readonly reconciler: Reconciler;
  readonly plans: ServicePlans;
  /** Services re-planned per step (one sync). */
  readonly chunk: number;
  /** Time a slice may use (ms); 0: one step per slice. */
  readonly sliceMs: number;
  /** The node-wide maps outside the reconciler compared and repaired (kpr_config); what differed, undefined if it failed (logged). */
  repairNodeDrift?(): DriftCount[] | undefined;
  /** After a step's successful sync: the UDP backends that left reported. */
  reportUdpLeft(r: SyncResult): void;
}

export class Resync {
  /** Steps left: read-back of each map (by name), 'repair', 'node', 'chunks', 'sweep-scan', 'sweep'. */
  private readonly steps: string[];
  /**
   * The Services still to re-plan: the cluster's, then those the desired
   * state holds that the cluster no longer has (gone without their event
   * reaching a sync), each walked by a live iterator (no list of 10,000
   * keys built, sorted and dropped): a Service added meanwhile has its own
   * event sync, one deleted before its turn is found by the second walk.
   */
  private clusterKeys: Iterator<string> | null = null;
  private desiredKeys: Iterator<string> | null = null;
  /** Services looked at (re-planned, or kept refused). */
  services = 0;
  readonly result: SyncResult = emptySyncResult();
  slices = 0;
  busyMs = 0;
  longestSliceMs = 0;
  /** Services over a limit not re-planned (refused, and no room of their kind made since). */
  refusedKept = 0;

  /**
   * `replanRefused`: re-plan Services refused for want of room even when no
   * room was made (a node change: their plans may differ).
   */
  constructor(
    private readonly host: ResyncHost,
    readonly trigger: SyncReport['trigger'],
    readBack: boolean,
    readonly started: number,
    readonly replanRefused: boolean,
  ) {
    this.steps = readBack ? [...READ_BACK_MAPS, 'node'] : [];
    this.steps.push('chunks', 'sweep-scan', 'sweep');
    if (readBack) this.result.readBackMs = 0;
  }

  get done(): boolean {
    return this.steps.length === 0;
  }

  /** Whether the read-back had not finished (a resync that failed before: the next one must read back). */
  get readBackLeft(): boolean {
    return this.steps.some((s) => READ_BACK_MAPS.includes(s) || s === 'repair');
  }

  /**
   * Runs one slice, begun at `from` (the loop may have run a change's sync
   * in it first): steps until the slice's time is used, at least one; a
   * failed step's result.
   */
  slice(now: () => number, from: number, onError: (err: unknown) => SyncResult): SyncResult | undefined {
    const deadline = from + this.host.sliceMs;
    const t0 = now();
    let failed: SyncResult | undefined;
    let t = t0;
    do {
      const step = this.steps[0];
      try {
        failed = this.step(step);
      } catch (err) {
        failed = onError(err);
      }
      const after = now();
      if (this.result.readBackMs !== undefined && (READ_BACK_MAPS.includes(step) || step === 'repair' || step === 'node')) this.result.readBackMs += after - t;
      t = after;
    } while (!failed && this.steps.length > 0 && t < deadline);
    const ms = t - t0;
    this.slices++;
    this.busyMs += ms;
    if (ms > this.longestSliceMs) this.longestSliceMs = ms;
    return failed;
  }

  /** Runs one step of the resync's first stage, dropping the stage once done; a failed step's result. */
  private step(step: string): SyncResult | undefined {
    const { reconciler, plans } = this.host;
    if (READ_BACK_MAPS.includes(step)) {
      const r = reconciler.readBackMatches(step);
      if (r === 'pending') return undefined; // read back over several steps
      if (r === 'drift') this.steps.splice(0, this.steps.indexOf('node'), 'repair');
      else if (r === 'unreadable') this.steps.splice(0, this.steps.indexOf('node'));
      else this.steps.shift();
      return undefined;
    }
    switch (step) {
      case 'repair': {
        this.steps.shift();
        return this.synced(reconciler.repairDrift());
      }
      case 'node': {
        this.steps.shift();
        const node = this.host.repairNodeDrift?.();
        if (node) this.result.drift.push(...node);
        return undefined;
      }
      case 'chunks': {
        const chunk: string[] = [];
        const n = Math.max(1, this.host.chunk);
        while (chunk.length < n) {
          const k = this.nextKey();
          if (k === undefined) {
            this.steps.shift();
            break;
          }
          this.services++;
          // Re-planning a refused Service refuses it again until room is made (and a sync that makes room retries it at once).
          if (!this.replanRefused && reconciler.refusedWithoutRoom(k)) this.refusedKept++;
          else chunk.push(k);
        }
        if (chunk.length === 0) return undefined;
        return this.synced(reconciler.sync(plans.source(chunk, plans.context()), { full: false }));
      }
      case 'sweep-scan': {
        if (reconciler.sweepScan()) this.steps.shift();
        return undefined;
      }
      case 'sweep': {
        this.steps.shift();
        return this.synced(reconciler.sync(plans.none(), { full: false, sweep: 'scanned' }));
      }
    }
    throw new Error(`unknown resync step ${step}`);
  }

  /** The next Service to re-plan; undefined once both walks are over. */
  private nextKey(): string | undefined {
    const { src, reconciler } = this.host;
    if (this.desiredKeys === null) {
      this.clusterKeys ??= src.serviceKeys()[Symbol.iterator]();
      const k = this.clusterKeys.next();
      if (!k.done) return k.value;
      this.desiredKeys = reconciler.desiredServices();
    }
    for (let k = this.desiredKeys.next(); !k.done; k = this.desiredKeys.next()) if (src.serviceByKey(k.value) === undefined) return k.value;
    return undefined;
  }

  /** A step's sync: added to the resync's totals; its failure returned, else the UDP backends that left reported. */
  private synced(r: SyncResult): SyncResult | undefined {
    addSyncResult(this.result, r);
    if (!r.ok) return r;
    this.host.reportUdpLeft(r);
    return undefined;
  }
}
