/**
 * Planning one Service for a sync, and what the loop keeps from each plan:
 * the objects a plan skipped (each warned about once per change of its
 * reasons), the Services that need a healthCheckNodePort server, and the
 * Service ports with a Local policy and no local endpoint. Every kind of
 * sync pass (an event sync, a resync's chunk, the initial full sync) plans
 * through it, so they all decide alike.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { planService, type NoLocalEndpoints, type PlanContext, type PlanFrontend, type ServiceHealthCheck, type SkippedObject } from '../plan/index.js';
import type { PlanSource } from '../reconcile/reconciler.js';
import type { Logger } from '../log/log.js';
import { OncePerVersion } from '../log/log-dedupe.js';

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

export interface ServicePlansOptions {
  nodeName: string;
  /** Planner settings beyond the node (nodePortAddresses, sourceRangesForAllExternal). */
  plan?: Omit<PlanContext, 'nodeName' | 'node'>;
  log: Logger;
}

export class ServicePlans {
  /** Per Service, the objects its plan last skipped (Service, EndpointSlices): each is warned about once per change of its reasons. */
  private readonly skippedObjects = new Map<string, readonly string[]>();
  private readonly skipWarnings = new OncePerVersion();
  /** healthCheckNodePort and local endpoint count per Service that has one. */
  private readonly healthChecks = new Map<string, ServiceHealthCheck>();
  /** Per Service with any, its ports with a Local policy and no local endpoint; `noLocalTotal` is their sum. */
  private readonly noLocal = new Map<string, NoLocalEndpoints>();
  private readonly noLocalSum: NoLocalEndpoints = { internal: 0, external: 0 };

  constructor(
    private readonly src: ClusterSource,
    private readonly opts: ServicePlansOptions,
  ) {}

  /** The planner's context for one sync pass: the node cannot change while it runs. */
  context(): PlanContext {
    return { ...this.opts.plan, nodeName: this.opts.nodeName, node: this.src.node() };
  }

  /**
   * The plan source of one sync pass over `keys`: each Service planned when
   * the reconciler asks for it, and its creation time, by which same-class
   * claims on one frontend are decided (agent/reconcile/ownership.ts) — the
   * same in every kind of pass.
   */
  source(keys: string[], ctx: PlanContext): PlanSource {
    return {
      keys: () => keys,
      get: (k) => this.planFor(k, ctx),
      created: (k) => creationMs(this.src.serviceByKey(k)),
    };
  }

  /** A plan source with no Service, whose claims still age by creation time (a sweep's). */
  none(): PlanSource {
    return { keys: () => [], get: () => undefined, created: (k) => creationMs(this.src.serviceByKey(k)) };
  }

  /** The sum over every Service as last planned (kubeproxy_sync_proxy_rules_no_local_endpoints_total), a copy. */
  noLocalTotal(): NoLocalEndpoints {
    return { ...this.noLocalSum };
  }

  /** Every Service that needs a healthCheckNodePort server, as last planned. */
  healthCheckTargets(): Array<{ service: string; port: number; localEndpoints: number }> {
    return [...this.healthChecks].map(([service, h]) => ({ service, port: h.nodePort, localEndpoints: h.localReadyEndpoints }));
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
      this.noLocalSum.internal -= before.internal;
      this.noLocalSum.external -= before.external;
    }
    if (now) {
      this.noLocal.set(key, now);
      this.noLocalSum.internal += now.internal;
      this.noLocalSum.external += now.external;
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
}

/** metadata.creationTimestamp in ms (a Date once deserialised, an RFC 3339 string as read raw); undefined when absent or invalid. */
export function creationMs(svc: V1Service | undefined): number | undefined {
  const t = svc?.metadata?.creationTimestamp as unknown;
  const ms = t instanceof Date ? t.getTime() : typeof t === 'string' ? Date.parse(t) : NaN;
  return Number.isFinite(ms) ? ms : undefined;
}
