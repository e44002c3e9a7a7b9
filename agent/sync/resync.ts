/**
 * The periodic full resync, in slices with the event loop free between them
 * (the sync loop runs event syncs there): the maps read back one at a time
 * (Reconciler.readBackMatches; kpr_svc, kpr_backend, kpr_vip and
 * kpr_svc_meta over several slices each; a difference repaired in one
 * step), then kpr_config; then every Service (the cluster's and the desired
 * state's, as of that moment) re-planned and re-diffed in chunks, as
 * incremental syncs; then one `sweep` sync (what no Service claims removed).
 * The desired state is never cleared: a Service deleted meanwhile is removed
 * by its event sync or its chunk, one changed after its chunk by its event
 * sync. A slice that fails ends the resync (reported failed); its retry is a
 * whole new resync.
 */
import { READ_BACK_MAPS, addSyncResult, emptySyncResult, type DriftCount, type Reconciler, type SyncResult } from '../reconcile/reconciler.js';
import type { ClusterSource, ServicePlans } from './service-plans.js';
import type { SyncReport } from './sync-report.js';

/**
 * Services per resync slice: at 10,000 Services × 10 endpoints a Service's
 * re-plan and diff is ~20–30 µs on the benchmark machine unloaded, so a
 * chunk is ~2–3 ms (bench/resync.ts measures it).
 */
export const RESYNC_CHUNK = 100;

/** What a resync works with: the loop's source, planner and reconciler, and its hooks. */
export interface ResyncHost {
  readonly src: ClusterSource;
  readonly reconciler: Reconciler;
  readonly plans: ServicePlans;
  /** Services re-planned per chunk. */
  readonly chunk: number;
  /** The node-wide maps outside the reconciler compared and repaired (kpr_config); what differed, undefined if it failed (logged). */
  repairNodeDrift?(): DriftCount[] | undefined;
  /** After a step's successful sync: the UDP backends that left reported. */
  reportUdpLeft(r: SyncResult): void;
}

export class Resync {
  /** Steps left: read-back of each map (by name), 'repair', 'node', 'keys', 'chunks', 'sweep'. */
  private readonly steps: string[];
  /** The Services re-planned, snapshot at the 'keys' step; `next` indexes the next chunk. */
  keys: string[] = [];
  private next = 0;
  readonly result: SyncResult = emptySyncResult();
  slices = 0;
  busyMs = 0;
  longestSliceMs = 0;

  constructor(
    private readonly host: ResyncHost,
    readonly trigger: SyncReport['trigger'],
    readBack: boolean,
    readonly started: number,
  ) {
    this.steps = readBack ? [...READ_BACK_MAPS, 'node'] : [];
    this.steps.push('keys', 'chunks', 'sweep');
    if (readBack) this.result.readBackMs = 0;
  }

  get done(): boolean {
    return this.steps.length === 0;
  }

  /** Whether the read-back had not finished (a resync that failed before: the next one must read back). */
  get readBackLeft(): boolean {
    return this.steps.some((s) => READ_BACK_MAPS.includes(s) || s === 'repair');
  }

  /** Runs one slice (the first step, or one chunk of it), timed by `now`; a failed step's result. */
  slice(now: () => number, onError: (err: unknown) => SyncResult): SyncResult | undefined {
    const t0 = now();
    const step = this.steps[0];
    let failed: SyncResult | undefined;
    try {
      failed = this.step(step);
    } catch (err) {
      failed = onError(err);
    }
    const ms = now() - t0;
    this.slices++;
    this.busyMs += ms;
    if (ms > this.longestSliceMs) this.longestSliceMs = ms;
    if (this.result.readBackMs !== undefined && step !== 'keys' && step !== 'chunks' && step !== 'sweep') this.result.readBackMs += ms;
    return failed;
  }

  /** Runs the resync's first step (or one chunk of it), dropping it once done; a failed step's result. */
  private step(step: string): SyncResult | undefined {
    const { reconciler, plans, src } = this.host;
    if (READ_BACK_MAPS.includes(step)) {
      const r = reconciler.readBackMatches(step);
      if (r === 'pending') return undefined; // kpr_svc, kpr_backend, kpr_vip, kpr_svc_meta: read back over several slices
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
      case 'keys': {
        // Every Service of the cluster, and every one the desired state still holds (gone without its event reaching a sync).
        this.steps.shift();
        const keys = new Set(src.serviceKeys());
        for (const k of reconciler.desiredServices()) keys.add(k);
        this.keys = [...keys].sort();
        return undefined;
      }
      case 'chunks': {
        const n = Math.max(1, this.host.chunk);
        const chunk = this.keys.slice(this.next, this.next + n);
        this.next += n;
        if (this.next >= this.keys.length) this.steps.shift();
        if (chunk.length === 0) return undefined;
        return this.synced(reconciler.sync(plans.source(chunk, plans.context()), { full: false }));
      }
      case 'sweep': {
        this.steps.shift();
        return this.synced(reconciler.sync(plans.none(), { full: false, sweep: true }));
      }
    }
    throw new Error(`unknown resync step ${step}`);
  }

  /** A step's sync: added to the resync's totals; its failure returned, else the UDP backends that left reported. */
  private synced(r: SyncResult): SyncResult | undefined {
    addSyncResult(this.result, r);
    if (!r.ok) return r;
    this.host.reportUdpLeft(r);
    return undefined;
  }
}
