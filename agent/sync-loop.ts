/**
 * Drives the reconciler from cluster changes: services touched by an event
 * are re-planned and re-diffed alone (an endpoint change at 10,000 services
 * costs one service's work); a periodic full sync re-plans everything and
 * repairs drift; a failed sync is retried with backoff.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { planService, type PlanContext, type PlanFrontend, type ServiceHealthCheck, type SkippedObject } from './plan/index.js';
import type { DriftCount, PlanSource, Reconciler, SyncResult } from './reconcile/reconciler.js';
import type { Logger } from './log.js';
import { OncePerVersion } from './log-dedupe.js';

/** Reasons of one skipped object printed in its log line; the rest are counted. */
const REASONS_PER_LINE = 10;

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
  onUdpBackendsRemoved?: (left: Array<{ addr: string; port: number; revNatId: number }>) => void;
  /**
   * Called at each periodic full sync after the reconciler's read-back: the
   * node-wide maps outside the reconciler (kpr_config) compared with what
   * was written and repaired; returns what differed.
   */
  repairNodeDrift?: () => DriftCount[];
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
}

/** One Service's UDP frontends ("addr|port") and the backends ("addr|port") of each, both scopes. */
type UdpView = Map<string, Set<string>>;

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
  /** Per Service, its UDP view: as of the last successful sync. */
  private readonly udpBackends = new Map<string, UdpView>();
  /** healthCheckNodePort and local endpoint count per Service that has one. */
  private readonly healthChecks = new Map<string, ServiceHealthCheck>();
  private readonly now: () => number;

  constructor(
    private readonly src: ClusterSource,
    private readonly reconciler: Reconciler,
    private readonly opts: SyncLoopOptions,
  ) {
    this.now = opts.now ?? (() => performance.now());
  }

  /** Runs the first full sync (the caches must be synced) and starts the periodic one. */
  start(): SyncReport {
    const report = this.runSync('initial');
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
      return [];
    }
    const plan = planService(svc, this.src.endpointSlicesByKey(key), ctx);
    this.reportSkips(key, plan.skipped);
    if (plan.healthCheck) this.healthChecks.set(key, plan.healthCheck);
    else this.healthChecks.delete(key);
    return plan.frontends;
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
   * The UDP backends that leave one Service's frontends with this sync, with
   * the frontend's id (read before the sync, which may release it). The new
   * view goes to `staged`, recorded only once the sync has succeeded: after a
   * failed one the retry compares against the old view again, so the
   * backends that left are still reported and their sockets destroyed.
   */
  private udpBackendsLeaving(
    service: string,
    frontends: PlanFrontend[],
    left: Array<{ addr: string; port: number; revNatId: number }>,
    staged: Map<string, UdpView | null>,
  ): void {
    let now: UdpView | null = null;
    for (const f of frontends) {
      if (f.protocol !== 'UDP') continue;
      const set = new Set<string>();
      for (const b of f.backends) set.add(`${b.address}|${b.port}`);
      for (const b of f.internalBackends ?? []) set.add(`${b.address}|${b.port}`);
      (now ??= new Map()).set(`${f.address}|${f.port}`, set);
    }
    const before = this.udpBackends.get(service);
    if (!now && !before) return; // no UDP frontend before or after: nothing to track
    if (before) {
      for (const [fe, backends] of before) {
        const still = now?.get(fe);
        const [feAddr, fePort] = fe.split('|');
        let revNatId: number | undefined;
        for (const be of backends) {
          if (still?.has(be)) continue;
          revNatId ??= this.reconciler.revNatIdOf(feAddr, Number(fePort), 'UDP') ?? 0;
          if (revNatId === 0) break;
          const [addr, port] = be.split('|');
          left.push({ addr, port: Number(port), revNatId });
        }
      }
    }
    staged.set(service, now);
  }

  private runSync(trigger: SyncReport['trigger']): SyncReport {
    if (this.running) throw new Error('sync re-entered');
    this.running = true;
    const started = this.now();
    const full = this.needFull;
    const readBack = full && this.readBackDue;
    if (readBack) this.readBackDue = false;
    // On a full sync, keys touched by events but no longer present still need their frontends removed.
    const keySet = new Set(full ? this.src.serviceKeys() : []);
    for (const k of this.dirty) keySet.add(k);
    const keys = [...keySet];
    const changeAt = this.oldestChangeAt;
    this.dirty.clear();
    this.oldestChangeAt = undefined;
    this.needFull = false;
    // Each Service is planned when the reconciler asks for it (before its own
    // frontends are diffed, so the UDP view below still reads their revNatIds).
    const udpLeft: Array<{ addr: string; port: number; revNatId: number }> = [];
    const udpViews = new Map<string, UdpView | null>();
    // One context for the whole sync: the node cannot change while it runs.
    const ctx: PlanContext = { ...this.opts.plan, nodeName: this.opts.nodeName, node: this.src.node() };
    const plans: PlanSource = {
      keys: () => keys,
      get: (k) => {
        const frontends = this.planFor(k, ctx);
        this.udpBackendsLeaving(k, frontends, udpLeft, udpViews);
        return frontends;
      },
      // Same-class claims on one frontend: the oldest Service wins (agent/reconcile/ownership.ts).
      created: (k) => creationMs(this.src.serviceByKey(k)),
    };
    let result: SyncResult;
    try {
      result = this.reconciler.sync(plans, { full, readBack });
      if (readBack && this.opts.repairNodeDrift) {
        const node = this.guard('node map drift repair', () => this.opts.repairNodeDrift!());
        if (node) result.drift.push(...node);
      }
      if (result.ok) {
        for (const [service, view] of udpViews) {
          if (view) this.udpBackends.set(service, view);
          else this.udpBackends.delete(service);
        }
        if (udpLeft.length) this.guard('UDP socket termination', () => this.opts.onUdpBackendsRemoved?.(udpLeft));
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
    };
    this.afterSync(report, keys, changeAt);
    return report;
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
