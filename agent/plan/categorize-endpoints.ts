/**
 * Which endpoints of one Service port this node uses: kpr's counterpart of
 * kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go @ 008b3652,
 * rules 19–22 of docs/semantics.md). Pure; no logging.
 *
 * Topology acts only on the hints the EndpointSlice controller wrote
 * (hints.forZones, hints.forNodes): like kube-proxy, kpr never reads
 * spec.trafficDistribution or the topology-mode annotation itself (rule 20 of docs/semantics.md).
 * The PreferSameTrafficDistribution gate is taken as on, as in current
 * Kubernetes, so node hints are honoured.
 */
import { compareEndpoints, type Endpoint } from './endpoint-slices.js';

/** The traffic-policy view of a Service port (rule 9 of docs/semantics.md). */
export interface EndpointUse {
  /** UsesClusterEndpoints(): !internalPolicyLocal || externally accessible. */
  usesCluster: boolean;
  /** UsesLocalEndpoints(): internalPolicyLocal || (externalPolicyLocal && externally accessible). */
  usesLocal: boolean;
}

export const CLUSTER_ONLY: EndpointUse = { usesCluster: true, usesLocal: false };

/** Where this node is, for topology hints. */
export interface NodeTopology {
  nodeName: string;
  /** The node's topology.kubernetes.io/zone label; "" when missing. */
  zone: string;
}

const NO_TOPOLOGY: NodeTopology = { nodeName: '', zone: '' };

export type TopologyMode = '' | 'PreferSameNode' | 'PreferSameZone';

/**
 * The lists may be the input list itself (when every endpoint qualifies):
 * read them, never change them.
 */
export interface CategorizedEndpoints {
  /** Endpoints for Cluster traffic policy; null when the port does not use cluster endpoints. */
  cluster: readonly Endpoint[] | null;
  /** Endpoints for Local traffic policy; null when not used, or when no local endpoint is usable. */
  local: readonly Endpoint[] | null;
  /** Every endpoint some policy of this port may reach (the union of cluster and local). */
  allReachable: readonly Endpoint[];
  /** False when traffic to this port must be refused (rule 23 of docs/semantics.md). */
  hasAny: boolean;
}

/**
 * topologyModeFromHints (rule 20 of docs/semantics.md): only ready endpoints count. PreferSameNode
 * when every ready endpoint has a node hint and one names this node;
 * otherwise PreferSameZone when every ready endpoint has a zone hint and one
 * names this node's zone (a missing zone label never matches); otherwise none.
 */
export function topologyMode(endpoints: readonly Endpoint[], topo: NodeTopology): TopologyMode {
  let anyReady = false;
  let allNodeHints = true;
  let forNode = false;
  let allZoneHints = true;
  let forZone = false;
  for (const e of endpoints) {
    if (!e.ready) continue;
    anyReady = true;
    if (!e.zoneHints) allZoneHints = false;
    else if (topo.zone !== '' && e.zoneHints.includes(topo.zone)) forZone = true;
    if (!e.nodeHints) allNodeHints = false;
    else if (topo.nodeName !== '' && e.nodeHints.includes(topo.nodeName)) forNode = true;
  }
  if (!anyReady) return '';
  if (allNodeHints && forNode) return 'PreferSameNode';
  if (allZoneHints && forZone) return 'PreferSameZone';
  return '';
}

function availableForTopology(e: Endpoint, mode: TopologyMode, topo: NodeTopology): boolean {
  if (mode === 'PreferSameNode') return e.nodeHints!.includes(topo.nodeName);
  if (mode === 'PreferSameZone') return e.zoneHints!.includes(topo.zone);
  return true;
}

const servingTerminating = (e: Endpoint) => e.serving && e.terminating;

/**
 * `endpoints` must be sorted (compareEndpoints) and unique; every returned
 * list keeps that order. An empty cluster list means "used, but nothing to
 * send to"; local is null when no local endpoint is usable (as upstream).
 */
export function categorizeEndpoints(endpoints: readonly Endpoint[], use: EndpointUse = CLUSTER_ONLY, topo: NodeTopology = NO_TOPOLOGY): CategorizedEndpoints {
  let cluster: readonly Endpoint[] | null = null;
  let local: readonly Endpoint[] | null = null;
  let hasAny = false;
  let mode: TopologyMode = '';

  if (use.usesCluster) {
    // Rules 19, 20 of docs/semantics.md: ready endpoints of this node's topology; if none anywhere,
    // every serving+terminating endpoint, without topology.
    mode = topologyMode(endpoints, topo);
    cluster = mode === '' ? readyEndpoints(endpoints) : endpoints.filter((e) => e.ready && availableForTopology(e, mode, topo));
    if (cluster.length === 0) cluster = endpoints.filter(servingTerminating);
    hasAny = cluster.length > 0;
  }
  if (!use.usesLocal) return { cluster, local, allReachable: cluster ?? [], hasAny };

  // Rule 21 of docs/semantics.md: local ready endpoints, else local serving+terminating ones, never topology-filtered.
  let localReady = false;
  let localTerminating = false;
  for (const e of endpoints) {
    if (e.ready) {
      hasAny = true;
      if (e.isLocal) localReady = true;
    } else if (servingTerminating(e)) {
      hasAny = true;
      if (e.isLocal) localTerminating = true;
    }
  }
  const localUsesTerminating = !localReady && localTerminating;
  if (localReady) local = endpoints.filter((e) => e.isLocal && e.ready);
  else if (localUsesTerminating) local = endpoints.filter((e) => e.isLocal && servingTerminating(e));

  // Rule 22 of docs/semantics.md: without topology or a terminating fallback, local ⊆ cluster.
  if (!use.usesCluster) return { cluster, local, allReachable: local ?? [], hasAny };
  if (mode === '' && !localUsesTerminating) return { cluster, local, allReachable: cluster ?? [], hasAny };
  return { cluster, local, allReachable: unionSorted(cluster ?? [], local ?? []), hasAny };
}

/** The ready endpoints: `endpoints` itself when all are (the common case: no copy). */
function readyEndpoints(endpoints: readonly Endpoint[]): readonly Endpoint[] {
  let i = 0;
  while (i < endpoints.length && endpoints[i].ready) i++;
  if (i === endpoints.length) return endpoints;
  const out = endpoints.slice(0, i);
  for (i++; i < endpoints.length; i++) if (endpoints[i].ready) out.push(endpoints[i]);
  return out;
}

function unionSorted(a: readonly Endpoint[], b: readonly Endpoint[]): Endpoint[] {
  const seen = new Map<string, Endpoint>();
  for (const e of a) seen.set(`${e.address}:${e.port}`, e);
  for (const e of b) if (!seen.has(`${e.address}:${e.port}`)) seen.set(`${e.address}:${e.port}`, e);
  return [...seen.values()].sort(compareEndpoints);
}
