/**
 * Drives the reconciler from cluster changes: services touched by an event
 * are re-planned and re-diffed alone (an endpoint change at 10,000 services
 * costs one service's work); a periodic full sync re-plans everything and
 * repairs drift; a failed sync is retried with backoff.
 *
 * Every full sync after the first runs sliced (a resync), each slice a few
 * milliseconds, with the event loop between them, so event syncs run while
 * it goes on, before its next slice: the maps read back one at a time
 * (Reconciler.readBackMatches; kpr_svc, kpr_backend, kpr_vip and kpr_svc_meta over several slices
 * each; a difference repaired in one step), then
 * kpr_config; then every Service (the cluster's and the desired state's, as
 * of that moment) re-planned and re-diffed in chunks of `resyncChunk`, as
 * incremental syncs; then one `sweep` sync (what no Service claims removed).
 * The desired state is never cleared: a Service deleted meanwhile is removed
 * by its event sync or its chunk, one changed after its chunk by its event
 * sync. A slice that fails ends the resync (reported failed); its retry is a
 * whole new resync. The resync logs and reports once, at its end, with totals.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { planService, type NoLocalEndpoints, type PlanContext, type PlanFrontend, type ServiceHealthCheck, type SkippedObject } from './plan/index.js';
import { READ_BACK_MAPS, addSyncResult, emptySyncResult, type DriftCount, type PlanSource, type Reconciler, type SyncResult, type UdpBackendLeft } from './reconcile/reconciler.js';
import type { Logger } from './log.js';
import { OncePerVersion } from './log-dedupe.js';
import { formatByLimit, summarizeLimits, type LimitReport } from './reconcile/limits.js';

/** Reasons of one skipped object printed in its log line; the rest are counted. */
const REASONS_PER_LINE = 10;
/** Services named in the over-limit summary line; the rest are counted (each has its own line, logged when it was refused). */
const OVER_LIMIT_PER_LINE = 10;

/**
 * What the loop reads from the watch layer's caches, by Service key
 * ("namespace/name"): the loop hands the cache's own key strings back, so a
 * lookup of 10,000 Services builds and hashes no key anew.
 */
export interface ClusterSource {
  /** The key of every Service, in any order. */
  serviceKeys(): Iterable<string>;
  serviceByKey(key: string): V1Service | undefined;
  /** The EndpointSlices labelled for the Service `key`, sorted by name. */
  endpointSlicesByKey(key: string): readonly V1EndpointSlice[];
  node(): V1Node | undefined;
}

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
  /** Services re-planned per slice of a sliced full resync (default RESYNC_CHUNK). */
  resyncChunk?: number;
  /** Called after every sync attempt, for metrics and health. */
  onSync?: (report: SyncReport) => void;
  now?: () => number;
}

export interface SyncReport {
  trigger: 'initial' | 'event' | 'periodic' | 'retry';
  full: boolean;
  services: number;
  durationMs: number;
  /** Time from the oldest change in this batch to maps written (event syncs). */
  eventToMapsMs?: number;
  result: SyncResult;
  /** Service ports with a Local policy and no local endpoint, over every Service as last planned (kubeproxy_sync_proxy_rules_no_local_endpoints_total). */
  noLocalEndpoints?: NoLocalEndpoints;
  /** Sliced resyncs: the slices it ran in, their time summed (the resync's own work; durationMs is start → end) and the longest. */
  slices?: number;
  busyMs?: number;
  longestSliceMs?: number;
}

/**
 * Services per resync slice: at 10,000 Services × 10 endpoints a Service's
 * re-plan and diff is ~20–30 µs on the benchmark machine unloaded, so a
 * chunk is ~2–3 ms (bench/resync.ts measures it).
 */
export const RESYNC_CHUNK = 100;

/** Where a sliced resync is. */
interface Resync {
  trigger: SyncReport['trigger'];
  started: number;
  /** Steps left: read-back of each map (by name), 'repair', 'node', 'keys', 'chunks', 'sweep'. */
  steps: string[];
  /** The Services re-planned, snapshot at the 'keys' step; `next` indexes the next chunk. */
  keys: string[];
  next: number;
  result: SyncResult;
  slices: number;
  busyMs: number;
  longestSliceMs: number;
}

/** A sync that threw instead of returning its failure: nothing is known to be written. */
function thrownSyncResult(err: unknown, last: { frontends: number; backends: number }): SyncResult {
  const error = err instanceof Error ? err.message : String(err);
  return { ok: false, error, servicesWritten: 0, servicesDeleted: 0, backendsWritten: 0, backendsDeleted: 0, auxWritten: 0, auxDeleted: 0, ...last, skipped: [], drift: [] };
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
  /** The sync period elapsed: the next full sync reads the maps back and repairs drift. */
  private readBackDue = false;
  private running = false;
  private stopped = false;
  /** Per Service, the objects its plan last skipped (Service, EndpointSlices): each is warned about once per change of its reasons. */
  private readonly skippedObjects = new Map<string, readonly string[]>();
  private readonly skipWarnings = new OncePerVersion();
  /** healthCheckNodePort and local endpoint count per Service that has one. */
  private readonly healthChecks = new Map<string, ServiceHealthCheck>();
  /** Per Service with any, its ports with a Local policy and no local endpoint; `noLocalTotal` is their sum. */
  private readonly noLocal = new Map<string, NoLocalEndpoints>();
  private readonly noLocalTotal: NoLocalEndpoints = { internal: 0, external: 0 };
  private readonly now: () => number;
  /** A full sync has succeeded: later ones run sliced. */
  private fullDone = false;
  /** The sliced resync under way, and its next slice's immediate. */
  private resync: Resync | undefined;
  private sliceImmediate: NodeJS.Immediate | undefined;
  /** When the pending sync (cancelPending) is due. */
  private pendingAt = 0;
  /** Service → the limit it was over after the last sync that reported limits (the summary line is logged when this changes). */
  private overLimit = new Map<string, string>();
  private lastLimits: readonly LimitReport[] | undefined;

  constructor(
    private readonly src: ClusterSource,
    private readonly reconciler: Reconciler,
    private readonly opts: SyncLoopOptions,
  ) {
    this.now = opts.now ?? (() => performance.now());
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
  }

  /** A Service (or its slices) changed; "" or a node change means everything may have. */
  serviceChanged(serviceKey: string | null): void {
    if (serviceKey === null) this.needFull = true;
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

  private planFor(key: string, ctx: PlanContext): PlanFrontend[] {
    const svc = this.src.serviceByKey(key);
    if (!svc) {
      this.reportSkips(key, []);
      this.healthChecks.delete(key);
      this.setNoLocal(key, undefined);
      return [];
    }
    const plan = planService(svc, this.src.endpointSlicesByKey(key), ctx);
    this.reportSkips(key, plan.skipped);
    if (plan.healthCheck) this.healthChecks.set(key, plan.healthCheck);
    else this.healthChecks.delete(key);
    this.setNoLocal(key, plan.noLocalEndpoints);
    return plan.frontends;
  }

  private setNoLocal(key: string, now: NoLocalEndpoints | undefined): void {
    const before = this.noLocal.get(key);
    if (before) {
      this.noLocalTotal.internal -= before.internal;
      this.noLocalTotal.external -= before.external;
    }
    if (now) {
      this.noLocal.set(key, now);
      this.noLocalTotal.internal += now.internal;
      this.noLocalTotal.external += now.external;
    } else this.noLocal.delete(key);
  }

  /**
   * One warning per skipped object (its first reasons, and how many more),
   * logged when the object's reasons change, not on every sync: a Service
   * with 1,000 bad ipFamilies entries is one line, once.
   */
  private reportSkips(key: string, skipped: SkippedObject[]): void {
    if (skipped.length === 0 && !this.skippedObjects.has(key)) return; // the common case: nothing to report, before or now
    const byObject = new Map<string, string[]>();
    for (const s of skipped) {
      const reasons = byObject.get(s.object);
      if (reasons) reasons.push(s.reason);
      else byObject.set(s.object, [s.reason]);
    }
    // Keyed by the object alone: "Setting nodePortAddresses" (a bad flag, in every NodePort Service's plan) is one line,
    // and is never forgotten (settings do not change while the agent runs).
    for (const object of this.skippedObjects.get(key) ?? []) if (!byObject.has(object) && !object.startsWith('Setting ')) this.skipWarnings.forget(object);
    if (byObject.size > 0) this.skippedObjects.set(key, [...byObject.keys()]);
    else this.skippedObjects.delete(key);
    for (const [object, reasons] of byObject) {
      if (!this.skipWarnings.isNew(object, reasons.join('\n'))) continue;
      const fields: Record<string, unknown> = { object, reason: reasons[0] };
      if (reasons.length > 1) fields.otherReasons = reasons.slice(1, REASONS_PER_LINE);
      if (reasons.length > REASONS_PER_LINE) fields.reasonsNotShown = reasons.length - REASONS_PER_LINE;
      this.opts.log.warn('skipped invalid or unsupported input', fields);
    }
  }

  /**
   * A sync as the schedule asks: a full one after the first starts a sliced
   * resync (if none runs; one asked for meanwhile follows it); changed
   * Services are synced now, incrementally while a resync runs.
   */
  /**
   * The plan source of one sync pass over `keys`: each Service planned when
   * the reconciler asks for it, and its creation
   * time, by which same-class claims on one frontend are decided
   * (agent/reconcile/ownership.ts) — the same in every kind of pass.
   */
  private planSource(keys: string[], ctx: PlanContext): PlanSource {
    return {
      keys: () => keys,
      get: (k) => this.planFor(k, ctx),
      created: (k) => creationMs(this.src.serviceByKey(k)),
    };
  }

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
    // One context for the whole sync: the node cannot change while it runs.
    const ctx: PlanContext = { ...this.opts.plan, nodeName: this.opts.nodeName, node: this.src.node() };
    const plans = this.planSource(keys, ctx);
    let result: SyncResult;
    try {
      result = this.reconciler.sync(plans, { full, readBack });
      if (readBack && this.opts.repairNodeDrift) {
        const node = this.guard('node map drift repair', () => this.opts.repairNodeDrift!());
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
      noLocalEndpoints: { ...this.noLocalTotal },
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
    const steps = readBack ? [...READ_BACK_MAPS, 'node'] : [];
    steps.push('keys', 'chunks', 'sweep');
    this.resync = { trigger, started: this.now(), steps, keys: [], next: 0, result: emptySyncResult(), slices: 0, busyMs: 0, longestSliceMs: 0 };
    if (readBack) this.resync.result.readBackMs = 0;
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
    if (this.cancelPending && this.dirty.size > 0 && this.pendingAt <= this.now()) {
      this.cancelPending();
      this.cancelPending = undefined;
      this.runSync('event');
    }
    if (this.running) throw new Error('sync re-entered');
    this.running = true;
    const t0 = this.now();
    const step = rs.steps[0];
    let failed: SyncResult | undefined;
    try {
      failed = this.resyncStep(rs, step);
    } catch (err) {
      failed = thrownSyncResult(err, this.lastCounts);
    }
    const ms = this.now() - t0;
    this.running = false;
    rs.slices++;
    rs.busyMs += ms;
    if (ms > rs.longestSliceMs) rs.longestSliceMs = ms;
    if (rs.result.readBackMs !== undefined && step !== 'keys' && step !== 'chunks' && step !== 'sweep') rs.result.readBackMs += ms;
    if (failed || rs.steps.length === 0) this.finishResync(rs, failed);
    else this.scheduleSlice();
  }

  /** Runs the resync's first step (or one chunk of it), dropping it once done; a failed step's result. */
  private resyncStep(rs: Resync, step: string): SyncResult | undefined {
    if (READ_BACK_MAPS.includes(step)) {
      const r = this.reconciler.readBackMatches(step);
      if (r === 'pending') return undefined; // kpr_svc, kpr_backend, kpr_vip, kpr_svc_meta: read back over several slices
      if (r === 'drift') rs.steps.splice(0, rs.steps.indexOf('node'), 'repair');
      else if (r === 'unreadable') rs.steps.splice(0, rs.steps.indexOf('node'));
      else rs.steps.shift();
      return undefined;
    }
    switch (step) {
      case 'repair': {
        rs.steps.shift();
        return this.stepSynced(rs, this.reconciler.repairDrift());
      }
      case 'node': {
        rs.steps.shift();
        if (this.opts.repairNodeDrift) {
          const node = this.guard('node map drift repair', () => this.opts.repairNodeDrift!());
          if (node) rs.result.drift.push(...node);
        }
        return undefined;
      }
      case 'keys': {
        // Every Service of the cluster, and every one the desired state still holds (gone without its event reaching a sync).
        rs.steps.shift();
        const keys = new Set(this.src.serviceKeys());
        for (const k of this.reconciler.desiredServices()) keys.add(k);
        rs.keys = [...keys].sort();
        return undefined;
      }
      case 'chunks': {
        const n = Math.max(1, this.opts.resyncChunk ?? RESYNC_CHUNK);
        const chunk = rs.keys.slice(rs.next, rs.next + n);
        rs.next += n;
        if (rs.next >= rs.keys.length) rs.steps.shift();
        if (chunk.length === 0) return undefined;
        const ctx: PlanContext = { ...this.opts.plan, nodeName: this.opts.nodeName, node: this.src.node() };
        return this.stepSynced(rs, this.reconciler.sync(this.planSource(chunk, ctx), { full: false }));
      }
      case 'sweep': {
        rs.steps.shift();
        return this.stepSynced(rs, this.reconciler.sync({ keys: () => [], get: () => undefined, created: (k) => creationMs(this.src.serviceByKey(k)) }, { full: false, sweep: true }));
      }
    }
    throw new Error(`unknown resync step ${step}`);
  }

  /** A resync step's sync: added to the resync's totals; its failure returned, else the UDP backends that left reported. */
  private stepSynced(rs: Resync, r: SyncResult): SyncResult | undefined {
    addSyncResult(rs.result, r);
    if (!r.ok) return r;
    this.reportUdpLeft(r);
    return undefined;
  }

  private finishResync(rs: Resync, failed: SyncResult | undefined): void {
    this.resync = undefined;
    this.reconciler.endReadBack(); // a read-back a failed slice left unfinished
    let result = rs.result;
    if (failed) {
      // The totals so far, marked failed: what was written stays written.
      result = { ...rs.result, ok: false, error: failed.error };
      if (rs.steps.some((s) => READ_BACK_MAPS.includes(s) || s === 'repair')) this.readBackDue = true; // the read-back did not finish
    }
    result.frontends = this.reconciler.frontendCount;
    result.backends = this.reconciler.backendCount;
    this.lastCounts = { frontends: result.frontends, backends: result.backends };
    const finished = this.now();
    this.lastSyncAt = finished;
    const report: SyncReport = {
      trigger: rs.trigger,
      full: true,
      services: rs.keys.length,
      durationMs: finished - rs.started,
      result,
      noLocalEndpoints: { ...this.noLocalTotal },
      slices: rs.slices,
      busyMs: rs.busyMs,
      longestSliceMs: rs.longestSliceMs,
    };
    this.afterSync(report, [], undefined);
    // A full sync asked for while this one ran (a node change, the next period): now.
    if (result.ok && this.needFull) this.schedule(0, this.readBackDue ? 'periodic' : 'event');
  }

  private afterSync(report: SyncReport, keys: string[], changeAt: number | undefined): void {
    const { result } = report;
    const fields = {
      trigger: report.trigger,
      full: report.full,
      services: report.services,
      durationMs: Number(report.durationMs.toFixed(3)),
      eventToMapsMs: report.eventToMapsMs === undefined ? undefined : Number(report.eventToMapsMs.toFixed(3)),
      frontends: result.frontends,
      backends: result.backends,
      written: result.servicesWritten + result.backendsWritten,
      deleted: result.servicesDeleted + result.backendsDeleted,
      readBackMs: result.readBackMs === undefined ? undefined : Number(result.readBackMs.toFixed(3)),
      readBackDecoded: result.readBackDecoded,
      // Services refused or cut by a datapath limit (each logged when it started; kpr_services_over_limit).
      overLimit: result.limits?.length ? result.limits.length : undefined,
      slices: report.slices,
      busyMs: report.busyMs === undefined ? undefined : Number(report.busyMs.toFixed(3)),
      longestSliceMs: report.longestSliceMs === undefined ? undefined : Number(report.longestSliceMs.toFixed(3)),
    };
    if (result.ok) {
      this.retryMs = RETRY_MIN_MS;
      this.guard('health check servers', () =>
        this.opts.onHealthChecks?.([...this.healthChecks].map(([service, h]) => ({ service, port: h.nodePort, localEndpoints: h.localReadyEndpoints }))),
      );
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
    this.summarizeOverLimit(result.limits);
    this.guard('sync report', () => this.opts.onSync?.(report));
  }

  /**
   * The event-style summary of the Services over a datapath limit: one line
   * when the set changes (a Service newly refused, or programmed again), none
   * while it stays the same, however often the same work is re-examined.
   * Each Service has its own line from the reconciler, once, when it is refused.
   */
  private summarizeOverLimit(limits: readonly LimitReport[] | undefined): void {
    // The reconciler hands out the same list until a Service starts or stops being over a limit.
    if (!limits || limits === this.lastLimits) return;
    this.lastLimits = limits;
    const now = new Map<string, string>();
    for (const l of limits) now.set(l.service, l.limit);
    let newly = 0;
    let back = 0;
    for (const [service, limit] of now) if (this.overLimit.get(service) !== limit) newly++;
    for (const service of this.overLimit.keys()) if (!now.has(service)) back++;
    this.overLimit = now;
    if (newly === 0 && back === 0) return;
    const sum = summarizeLimits(limits, OVER_LIMIT_PER_LINE);
    if (sum.degraded) {
      this.opts.log.warn('Services over the datapath limits are not served', {
        event: 'ServicesOverLimit',
        type: 'Warning',
        message: `${sum.services} Services over a datapath limit (${formatByLimit(sum.byLimit)}) are not served on this node; every other Service is`,
        services: sum.services,
        byLimit: sum.byLimit,
        newlyOverLimit: newly,
        backWithinLimits: back,
        first: sum.listed.map((l) => l.service),
        ...(sum.notListed > 0 ? { notListed: sum.notListed } : {}),
      });
    } else {
      this.opts.log.info('every Service within the datapath limits again', { event: 'ServicesWithinLimits', type: 'Normal', backWithinLimits: back });
    }
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

/** metadata.creationTimestamp in ms (a Date once deserialised, an RFC 3339 string as read raw); undefined when absent or invalid. */
export function creationMs(svc: V1Service | undefined): number | undefined {
  const t = svc?.metadata?.creationTimestamp as unknown;
  const ms = t instanceof Date ? t.getTime() : typeof t === 'string' ? Date.parse(t) : NaN;
  return Number.isFinite(ms) ? ms : undefined;
}

/** The log fields of a repair round: per map, entries by kind, and the total. */
function driftFields(result: SyncResult): Record<string, unknown> {
  const maps: Record<string, Record<string, number>> = {};
  let entries = 0;
  for (const d of result.drift) {
    (maps[d.map] ??= {})[d.kind] = (maps[d.map]?.[d.kind] ?? 0) + d.entries;
    entries += d.entries;
  }
  return { maps, entries, readBackMs: result.readBackMs === undefined ? undefined : Number(result.readBackMs.toFixed(3)) };
}
