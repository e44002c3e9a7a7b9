/**
 * kpr's addition to /healthz (pure, clock-free): whether the agent's view of
 * the cluster can be trusted. Unhealthy when the k8s caches have not all
 * synced within syncBoundMs of the agent's start, or when a synced cache has
 * not been confirmed against the API server (a successful list, any watch
 * event or bookmark) for longer than staleBoundMs. kube-proxy's /healthz has
 * no such rule; see docs/metrics.md, Health.
 */

/** One informer's cache (ClusterWatch.cacheStatus() fits). */
export interface CacheState {
  kind: string;
  synced: boolean;
  lastConfirmed: Date | undefined;
}

export interface CacheHealthBounds {
  /** When the agent started. */
  startedAt: Date;
  /** Caches not synced this long after the start: unhealthy. */
  syncBoundMs: number;
  /** A cache not confirmed for longer than this: unhealthy. */
  staleBoundMs: number;
}

export interface CacheHealth {
  healthy: boolean;
  /** Why not, when not healthy. */
  reason?: string;
  /** Per kind: synced, and seconds since the last confirmation (null before any). */
  caches: Record<string, { synced: boolean; ageSeconds: number | null }>;
}

/** `caches` undefined: the watch does not exist yet (nothing synced). */
export function cacheHealth(caches: CacheState[] | undefined, now: Date, b: CacheHealthBounds): CacheHealth {
  const out: CacheHealth = { healthy: true, caches: {} };
  const sinceStart = now.getTime() - b.startedAt.getTime();
  const unsynced: string[] = [];
  const stale: string[] = [];
  for (const c of caches ?? []) {
    const age = c.lastConfirmed ? Math.max(0, now.getTime() - c.lastConfirmed.getTime()) : null;
    out.caches[c.kind] = { synced: c.synced, ageSeconds: age === null ? null : Math.round(age / 100) / 10 };
    if (!c.synced) unsynced.push(c.kind);
    else if (age !== null && age > b.staleBoundMs) stale.push(c.kind);
  }
  if ((caches === undefined || unsynced.length > 0) && sinceStart >= b.syncBoundMs) {
    out.healthy = false;
    out.reason = `k8s caches not synced ${Math.round(sinceStart / 1000)}s after start${unsynced.length ? `: ${unsynced.join(', ')}` : ''}`;
  } else if (stale.length > 0) {
    out.healthy = false;
    out.reason = `k8s caches not confirmed by the API server for over ${Math.round(b.staleBoundMs / 1000)}s: ${stale.join(', ')}`;
  }
  return out;
}
