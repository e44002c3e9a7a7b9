/**
 * Which endpoints of one Service port this node uses: kpr's counterpart of
 * kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go, rules 19–22).
 * Pure; no logging.
 *
 * Implemented today: cluster = the ready endpoints. Not yet (later
 * milestones, each one place in this file): the serving+terminating fallback
 * (rule 19), topology hints (rule 20), local endpoints for traffic policy
 * Local (rule 21).
 */
import type { Endpoint } from './endpoint-slices.js';

/** The traffic-policy view of a Service port (rule 9). */
export interface EndpointUse {
  /** UsesClusterEndpoints(): !internalPolicyLocal || externally accessible. */
  usesCluster: boolean;
  /** UsesLocalEndpoints(): internalPolicyLocal || (externalPolicyLocal && externally accessible). */
  usesLocal: boolean;
}

export const CLUSTER_ONLY: EndpointUse = { usesCluster: true, usesLocal: false };

export interface CategorizedEndpoints {
  /** Endpoints for Cluster traffic policy; null when the port does not use cluster endpoints. */
  cluster: Endpoint[] | null;
  /** Endpoints for Local traffic policy; null when the port does not use local endpoints. */
  local: Endpoint[] | null;
  /** Every endpoint some policy of this port may reach (the union of cluster and local). */
  allReachable: Endpoint[];
  /** False when traffic to this port must be refused (rule 23). */
  hasAny: boolean;
}

/**
 * `endpoints` must be sorted (address, port) and unique; every returned list
 * keeps that order. An empty list means "used, but nothing to send to".
 */
export function categorizeEndpoints(endpoints: readonly Endpoint[], use: EndpointUse = CLUSTER_ONLY): CategorizedEndpoints {
  let cluster: Endpoint[] | null = null;
  let local: Endpoint[] | null = null;
  let hasAny = false;

  if (use.usesCluster) {
    cluster = endpoints.filter((e) => e.ready);
    // Later: topology filter of the ready set (rule 20), then, if empty, all serving && terminating (rule 19).
    hasAny = cluster.length > 0;
  }
  if (use.usesLocal) {
    local = endpoints.filter((e) => e.isLocal && e.ready);
    // Later: local serving && terminating fallback (rule 21).
    if (!hasAny) hasAny = endpoints.some((e) => e.ready || (e.serving && e.terminating));
  }

  let allReachable: Endpoint[];
  if (!use.usesLocal) allReachable = cluster ?? [];
  else if (!use.usesCluster) allReachable = local ?? [];
  else allReachable = unionSorted(cluster ?? [], local ?? []);
  return { cluster, local, allReachable, hasAny };
}

function unionSorted(a: readonly Endpoint[], b: readonly Endpoint[]): Endpoint[] {
  const seen = new Map<string, Endpoint>();
  for (const e of a) seen.set(`${e.address}:${e.port}`, e);
  for (const e of b) if (!seen.has(`${e.address}:${e.port}`)) seen.set(`${e.address}:${e.port}`, e);
  return [...seen.values()].sort((x, y) => x.addressNum - y.addressNum || x.port - y.port);
}
