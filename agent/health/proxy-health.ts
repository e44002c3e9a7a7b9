/**
 * kube-proxy's proxy health (pkg/proxy/healthcheck/proxy_health.go), pure and
 * clock-injected: per IP family, the time of the last applied update and of
 * the oldest update queued since. A family is unhealthy only when an update
 * was queued and not applied within the timeout (2 × syncPeriod); an idle
 * proxy whose last sync is old is healthy. Families that never reported an
 * update are not considered, so a proxy still starting is healthy.
 *
 * /healthz also requires the node to be eligible (known, not being deleted,
 * not tainted ToBeDeletedByClusterAutoscaler); /livez ignores the node.
 */

import type { IPFamily } from '../net/ip.js';

/** The part of a Node object eligibility looks at (V1Node fits). */
export interface NodeLike {
  metadata?: { deletionTimestamp?: Date | string | null };
  spec?: { taints?: Array<{ key: string }> | null };
}

/** The cluster autoscaler's taint on a node it is about to delete. */
export const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';

export interface FamilyHealth {
  lastUpdated: Date;
  healthy: boolean;
}

/** kube-proxy's ProxyHealth struct. */
export interface ProxyHealthSnapshot {
  /** Latest update over all families (the zero time when none updated yet). */
  lastUpdated: Date;
  currentTime: Date;
  /** Proxier health only; node eligibility is not part of it. */
  healthy: boolean;
  status: Map<IPFamily, FamilyHealth>;
}

/** Go's zero time.Time, which kube-proxy reports before any update. */
export const ZERO_TIME = new Date(-62135596800000); // 0001-01-01T00:00:00Z

export class ProxyHealthState {
  private readonly lastUpdated = new Map<IPFamily, Date>();
  private readonly oldestPendingQueued = new Map<IPFamily, Date>();
  private readonly now: () => Date;

  /**
   * @param healthTimeoutMs how long a queued update may stay unapplied (kube-proxy: 2 × syncPeriod).
   * @param now the clock (tests inject a fake one).
   */
  constructor(
    readonly healthTimeoutMs: number,
    now: () => Date = () => new Date(),
  ) {
    this.now = now;
  }

  /** A change was queued for `family`; only the first one since the last update counts. */
  queuedUpdate(family: IPFamily): void {
    if (!this.oldestPendingQueued.has(family)) this.oldestPendingQueued.set(family, this.now());
  }

  /** A sync for `family` succeeded: nothing is pending any more. */
  updated(family: IPFamily): void {
    this.lastUpdated.set(family, this.now());
    this.oldestPendingQueued.delete(family);
  }

  health(): ProxyHealthSnapshot {
    const currentTime = this.now();
    const snap: ProxyHealthSnapshot = { lastUpdated: ZERO_TIME, currentTime, healthy: true, status: new Map() };
    for (const [family, last] of this.lastUpdated) {
      if (last > snap.lastUpdated) snap.lastUpdated = last;
      const queued = this.oldestPendingQueued.get(family);
      const healthy = queued === undefined || currentTime.getTime() - queued.getTime() < this.healthTimeoutMs;
      if (!healthy) snap.healthy = false;
      snap.status.set(family, { lastUpdated: last, healthy });
    }
    return snap;
  }
}

/** kube-proxy's NodeEligible: false until the node is known, while it is deleted, or when the autoscaler will delete it. */
export function nodeEligible(node: NodeLike | undefined | null): boolean {
  if (!node) return false;
  if (node.metadata?.deletionTimestamp) return false;
  return !(node.spec?.taints ?? []).some((t) => t.key === TO_BE_DELETED_TAINT);
}

export interface HealthResponse {
  statusCode: 200 | 503;
  /** Serialize with JSON.stringify: the field order is kube-proxy's. */
  body: Record<string, unknown>;
}

function bodyOf(h: ProxyHealthSnapshot, nodeOk: boolean | undefined, ok: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    // Backward compatibility (kube-proxy): lastUpdated is "recent" when healthy.
    lastUpdated: (ok ? h.currentTime : h.lastUpdated).toISOString(),
    currentTime: h.currentTime.toISOString(),
  };
  if (nodeOk !== undefined) body.nodeEligible = nodeOk;
  body.healthy = h.healthy;
  if (h.status.size > 0) {
    const status: Record<string, unknown> = {};
    for (const family of [...h.status.keys()].sort()) {
      const s = h.status.get(family)!;
      status[family] = { lastUpdated: s.lastUpdated.toISOString(), healthy: s.healthy };
    }
    body.status = status;
  }
  return body;
}

/**
 * The /healthz answer: 200 iff the proxier is healthy and the node eligible and,
 * when `caches` is given (kpr's addition, agent/health/cache-health.ts), the k8s
 * caches are synced and recently confirmed. The cache verdict is the body's
 * field "k8sCaches" (kube-proxy's fields keep their order and meaning).
 *
 * `overLimit` (kpr's addition): the Services over a datapath limit, as the
 * last sync left them, in the field "servicesOverLimit" after it. It never
 * changes the status: a node that serves every Service that fits stays in
 * load-balancer rotation, as kube-proxy's does when some rules cannot be
 * programmed for one Service (docs/metrics.md, Health).
 *
 * `mapSizes` (kpr's addition): the BPF map sizes configured and in use, in
 * the field "mapSizes" last; it never changes the status either.
 */
export function healthzResponse(
  state: ProxyHealthState,
  node: NodeLike | undefined | null,
  caches?: (now: Date) => { healthy: boolean; reason?: string; caches: Record<string, unknown> },
  overLimit?: () => Record<string, unknown> | undefined,
  mapSizes?: () => Record<string, unknown> | undefined,
): HealthResponse {
  const h = state.health();
  const eligible = nodeEligible(node);
  const c = caches?.(h.currentTime);
  const ok = h.healthy && eligible && (c?.healthy ?? true);
  const body = bodyOf(h, eligible, ok);
  if (c) body.k8sCaches = c;
  const o = overLimit?.();
  if (o) body.servicesOverLimit = o;
  const sizes = mapSizes?.();
  if (sizes) body.mapSizes = sizes;
  return { statusCode: ok ? 200 : 503, body };
}

/** The /livez answer: 200 iff the proxier is healthy, whatever the node. */
export function livezResponse(state: ProxyHealthState): HealthResponse {
  const h = state.health();
  return { statusCode: h.healthy ? 200 : 503, body: bodyOf(h, undefined, h.healthy) };
}
