/**
 * Drives the reconciler from cluster changes: services touched by an event
 * are re-planned and re-diffed alone (an endpoint change at 10,000 services
 * costs one service's work); a periodic full sync re-plans everything and
 * repairs drift; a failed sync is retried with backoff.
 *
 * Every full sync after the first runs sliced (resync.ts), with the event
 * loop between its slices, so event syncs run while it goes on, before its
 * next slice. The resync logs and reports once, at its end, with totals.
 */
import { type DriftCount, type Reconciler, type SyncResult, type UdpBackendLeft } from '../reconcile/reconciler.js';
import type { Logger } from '../log/log.js';
import type { PlanContext } from '../plan/index.js';
import { Resync, RESYNC_CHUNK, RESYNC_SLICE_MS, type ResyncHost } from './resync.js';
import { LoopBlockProbe } from './loop-block.js';
import { ServicePlans, type ClusterSource } from './service-plans.js';
import { OverLimitSummary, driftFields, syncLogFields, type SyncReport } from './sync-report.js';

export type { ClusterSource } from './service-plans.js';
export { creationMs } from './service-plans.js';
export type { SyncReport } from './sync-report.js';
export { RESYNC_CHUNK, RESYNC_SLICE_MS } from './resync.js';

export interface SyncLoopOptions {
  nodeName: string;
  /** Planner settings beyond the node (nodePortAddresses, sourceRangesForAllExternal). */
  plan?: Omit<PlanContext, 'nodeName' | 'node'>;
  syncPeriodMs: number;
  minSyncPeriodMs: number;
  log: Logger;
  /** Called after every successful sync with every Service that needs a healthCheckNodePort server. */
  onHealthChecks?: (targets: Array<{ service: string; port: number; localEndpoints: number }>) => void;
  /** Called after a successful sync with the UDP backends that left a frontend (for socket termination). */
  onUdpBackendsRemoved?: (left: UdpBackendLeft[]) => void;
  /**
   * Called at each periodic full sync after the reconciler's read-back: the
   * node-wide maps outside the reconciler (kpr_config) compared with what
   * was written and repaired; returns what differed.
   */
  repairNodeDrift?: () => DriftCount[];
  /** Services re-planned per step (one sync) of a sliced full resync (default RESYNC_CHUNK). */
  resyncChunk?: number;
  /** Time a slice of a sliced full resync may use, ms (default RESYNC_SLICE_MS); 0: one step per slice. */
  resyncSliceMs?: number;
  /** Called after every sync attempt, for metrics and health. */
  onSync?: (report: SyncReport) => void;
  now?: () => number;
}

/** A sync that threw instead of returning its failure: nothing is known to be written. */
function thrownSyncResult(err: unknown, last: { frontends: number; backends: number }): SyncResult {
  const error = err instanceof Error ? err.message : String(err);
  return {
    ok: false,
    error,
    servicesWritten: 0,
    servicesDeleted: 0,
    backendsWritten: 0,
    backendsDeleted: 0,
    auxWritten: 0,
    auxDeleted: 0,
    ...last,
    skipped: [],
    drift: [],
  };
}

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 30_000;

export class SyncLoop {
  private readonly dirty = new Set<string>();
  private oldestChangeAt: number | undefined;
  /** Cancels the scheduled sync, if one is pending. */
  private cancelPending: (() => void) | undefined;
  private periodic: NodeJS.Timeout | undefined;
  private lastSyncAt = 0;
  private retryMs = RETRY_MIN_MS;
  /** What the last sync left in the kernel (reported again by a sync that threw). */
  private lastCounts = { frontends: 0, backends: 0 };
  private needFull = true;
  /** The node changed: the next resync re-plans every Service, those refused for want of room too. */
  private replanAll = false;
  /** The sync period elapsed: the next full sync reads the maps back and repairs drift. */
  private readBackDue = false;
  private running = false;
  private stopped = false;
  private readonly plans: ServicePlans;
  private readonly overLimit: OverLimitSummary;
  private readonly now: () => number;
  /** A full sync has succeeded: later ones run sliced. */
  private fullDone = false;
  /** The sliced resync under way, and its next slice's immediate. */
  private resync: Resync | undefined;
  private sliceImmediate: NodeJS.Immediate | undefined;
  /** When the pending sync (cancelPending) is due. */
  private pendingAt = 0;
  private readonly host: ResyncHost;
  /** How long the event loop was held at most while a resync ran. */
  private readonly loopBlock = new LoopBlockProbe();

  constructor(
    private readonly src: ClusterSource,
    private readonly reconciler: Reconciler,
    private readonly opts: SyncLoopOptions,
  ) {
    this.now = opts.now ?? (() => performance.now());
    this.plans = new ServicePlans(src, opts);
    this.overLimit = new OverLimitSummary(opts.log);
    this.host = {
      src,
      reconciler,
      plans: this.plans,
      chunk: opts.resyncChunk ?? RESYNC_CHUNK,
      sliceMs: opts.resyncSliceMs ?? RESYNC_SLICE_MS,
      repairNodeDrift: opts.repairNodeDrift && (() => this.guard('node map drift repair', () => this.opts.repairNodeDrift!())),
      reportUdpLeft: (r) => this.reportUdpLeft(r),
    };
  }

  /** Runs the first full sync (the caches must be synced) and starts the periodic one. */
  start(): SyncReport {
    const report = this.syncNow('initial');
    this.periodic = setInterval(() => {
      this.needFull = true;
      this.readBackDue = true;
      this.schedule(0, 'periodic');
    }, this.opts.syncPeriodMs);
    this.periodic.unref();
    return report;
  }

  stop(): void {
    this.stopped = true;
    this.cancelPending?.();
    clearInterval(this.periodic);
    if (this.sliceImmediate) clearImmediate(this.sliceImmediate);
    if (this.resync) this.reconciler.endReadBack();
    this.loopBlock.stop();
  }

  /** A Service (or its slices) changed; "" or a node change means everything may have. */
  serviceChanged(serviceKey: string | null): void {
    if (serviceKey === null) this.needFull = this.replanAll = true;
    else this.dirty.add(serviceKey);
    this.oldestChangeAt ??= this.now();
    const wait = Math.max(0, this.lastSyncAt + this.opts.minSyncPeriodMs - this.now());
    this.schedule(wait, 'event');
  }

  private schedule(delayMs: number, trigger: SyncReport['trigger']): void {
    if (this.stopped || this.cancelPending) return;
    const run = () => {
      this.cancelPending = undefined;
      this.runSync(trigger);
    };
    this.pendingAt = this.now() + delayMs;
    if (delayMs > 0) {
      const t = setTimeout(run, delayMs);
      this.cancelPending = () => clearTimeout(t);
    } else {
      const i = setImmediate(run);
      this.cancelPending = () => clearImmediate(i);
    }
  }

  /**
   * A sync as the schedule asks: a full one after the first starts a sliced
   * resync (if none runs; one asked for meanwhile follows it); changed
   * Services are synced now, incrementally while a resync runs.
   */
  private runSync(trigger: SyncReport['trigger']): SyncReport | undefined {
    if (this.needFull && this.fullDone && !this.resync) this.startResync(trigger);
    if (!this.resync) return this.syncNow(trigger);
    if (this.dirty.size === 0) return undefined;
    return this.syncNow(trigger === 'retry' ? 'retry' : 'event');
  }

  private syncNow(trigger: SyncReport['trigger']): SyncReport {
    if (this.running) throw new Error('sync re-entered');
    this.running = true;
    const started = this.now();
    const full = this.needFull && !this.resync;
    const readBack = full && this.readBackDue;
    if (readBack) this.readBackDue = false;
    // On a full sync, keys touched by events but no longer present still need their frontends removed.
    const keySet = new Set(full ? this.src.serviceKeys() : []);
    for (const k of this.dirty) keySet.add(k);
    const keys = [...keySet];
    const changeAt = this.oldestChangeAt;
    this.dirty.clear();
    this.oldestChangeAt = undefined;
    if (full) this.needFull = false;
    // Each Service is planned when the reconciler asks for it (before its own frontends are diffed).
    const plans = this.plans.source(keys, this.plans.context());
    let result: SyncResult;
    try {
      result = this.reconciler.sync(plans, { full, readBack });
      if (readBack && this.host.repairNodeDrift) {
        const node = this.host.repairNodeDrift();
        if (node) result.drift.push(...node);
      }
      if (result.ok) {
        this.reportUdpLeft(result);
        if (full) this.fullDone = true;
      }
    } catch (err) {
      // Whatever threw (a plan, a hook), the loop lives on: this sync failed and is retried.
      result = thrownSyncResult(err, this.lastCounts);
    }
    this.lastCounts = { frontends: result.frontends, backends: result.backends };
    const finished = this.now();
    this.lastSyncAt = finished;
    this.running = false;
    const report: SyncReport = {
      trigger,
      full,
      services: keys.length,
      durationMs: finished - started,
      eventToMapsMs: changeAt !== undefined && trigger !== 'initial' ? finished - changeAt : undefined,
      result,
      noLocalEndpoints: this.plans.noLocalTotal(),
    };
    this.afterSync(report, keys, changeAt);
    return report;
  }

  /** After a successful sync: the clients of the UDP backends that left a frontend told (the reconciler reports them). */
  private reportUdpLeft(r: SyncResult): void {
    const left = r.udpBackendsLeft;
    if (left?.length) this.guard('UDP socket termination', () => this.opts.onUdpBackendsRemoved?.(left));
  }

  // ------------------------------------------------------------------ sliced resync

  private startResync(trigger: SyncReport['trigger']): void {
    const readBack = this.readBackDue;
    this.readBackDue = false;
    this.needFull = false;
    this.resync = new Resync(this.host, trigger, readBack, this.now(), this.replanAll);
    this.replanAll = false;
    this.loopBlock.start();
    this.scheduleSlice();
  }

  private scheduleSlice(): void {
    if (this.stopped) return;
    this.sliceImmediate = setImmediate(() => {
      this.sliceImmediate = undefined;
      this.runSlice();
    });
  }

  /** One slice of the resync; a sync of changed Services that is due runs first. */
  private runSlice(): void {
    const rs = this.resync;
    if (!rs || this.stopped) return;
    const from = this.now();
    if (this.cancelPending && this.dirty.size > 0 && this.pendingAt <= this.now()) {
      this.cancelPending();
      this.cancelPending = undefined;
      this.runSync('event');
    }
    if (this.running) throw new Error('sync re-entered');
    this.running = true;
    const failed = rs.slice(this.now, from, (err) => thrownSyncResult(err, this.lastCounts));
    this.running = false;
    if (failed || rs.done) this.finishResync(rs, failed);
    else this.scheduleSlice();
  }

  private finishResync(rs: Resync, failed: SyncResult | undefined): void {
    this.resync = undefined;
    this.reconciler.endReadBack(); // a read-back a failed slice left unfinished
    let result = rs.result;
    if (failed) {
      // The totals so far, marked failed: what was written stays written.
      result = { ...rs.result, ok: false, error: failed.error };
      if (rs.readBackLeft) this.readBackDue = true; // the read-back did not finish
      if (rs.replanRefused) this.replanAll = true;
    }
    result.frontends = this.reconciler.frontendCount;
    result.backends = this.reconciler.backendCount;
    this.lastCounts = { frontends: result.frontends, backends: result.backends };
    const finished = this.now();
    this.lastSyncAt = finished;
    const report: SyncReport = {
      trigger: rs.trigger,
      full: true,
      services: rs.services,
      durationMs: finished - rs.started,
      result,
      noLocalEndpoints: this.plans.noLocalTotal(),
      slices: rs.slices,
      busyMs: rs.busyMs,
      longestSliceMs: rs.longestSliceMs,
      loopBlockMs: this.loopBlock.stop(),
      overLimitKept: rs.refusedKept,
    };
    this.afterSync(report, [], undefined);
    // A full sync asked for while this one ran (a node change, the next period): now.
    if (result.ok && this.needFull) this.schedule(0, this.readBackDue ? 'periodic' : 'event');
  }

  private afterSync(report: SyncReport, keys: string[], changeAt: number | undefined): void {
    const { result } = report;
    const fields = syncLogFields(report);
    if (result.ok) {
      this.retryMs = RETRY_MIN_MS;
      this.guard('health check servers', () => this.opts.onHealthChecks?.(this.plans.healthCheckTargets()));
      if (report.trigger !== 'initial') this.opts.log.info('sync', fields);
      if (result.drift.length > 0) this.opts.log.warn('drift repaired', driftFields(result));
    } else {
      // Keep the work: the same services (or everything) are retried.
      if (report.full) this.needFull = true;
      for (const k of keys) this.dirty.add(k);
      this.oldestChangeAt ??= changeAt;
      this.opts.log.error('sync failed, will retry', { ...fields, error: result.error, retryInMs: this.retryMs });
      this.schedule(this.retryMs, 'retry');
      this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
    }
    this.overLimit.update(result.limits);
    this.guard('sync report', () => this.opts.onSync?.(report));
  }

  /**
   * Runs a callback of the loop's owner: its failure (the node namespace
   * gone, a socket error) is logged and never escapes into the timer that
   * ran the sync, where it would end the agent.
   */
  private guard<T>(what: string, fn: () => T): T | undefined {
    try {
      return fn();
    } catch (err) {
      this.opts.log.error(`${what} failed`, { error: err instanceof Error ? err.message : String(err) });
      return undefined;
    }
  }
}
