/**
 * planService: one Service and its EndpointSlices → the frontends this node
 * programs for it. Pure (no I/O, clock or randomness) and cheap, because the
 * agent re-plans only the Services that changed.
 *
 * Per IP family (rule 4) and Service port (rule 7), the endpoints are
 * categorized once (rules 19–22) and every address the port answers on gets
 * one frontend: the clusterIP with the internal policy's set; NodePorts (one
 * per node address), load-balancer VIPs and externalIPs with the external
 * policy's set (rules 8, 9, 25; every rule number is one of docs/semantics.md).
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { categorizeEndpoints, type EndpointUse, type NodeTopology } from './categorize-endpoints.js';
import { endpointsByServicePort, portId, type Endpoint } from './endpoint-slices.js';
import { LABEL_TOPOLOGY_ZONE } from '../k8s/labels.js';
import { nodePortAddresses, parseNodePortAddresses } from './node-addresses.js';
import { withAllowedExternalIPs } from './external-ips.js';
import { primaryNodeIP, withImplicitLbAllow } from './source-ranges.js';
import { readServiceInfo, type FamilyInfo, type ServiceInfo, type ServicePortInfo } from './service-info.js';
import { lbAlgorithmOf, type LbAlgorithm } from './lb-algorithm.js';
import { namespacedKey } from '../runtime/flat-key.js';
import { frontendLabel, sameBackends, type FrontendType, type NoLocalEndpoints, type PlanBackend, type PlanFrontend, type ServicePlan } from './types.js';

export interface PlanContext {
  /** This node's name: decides which endpoints are local. "" means none is. */
  nodeName: string;
  /** This node: its zone label (topology hints) and its addresses (NodePorts). */
  node?: V1Node;
  /**
   * Which node addresses NodePorts answer on: CIDRs and/or "primary" (the
   * Node's InternalIPs). Unset or empty: every InternalIP/ExternalIP of the Node.
   */
  nodePortAddresses?: string[];
  /**
   * Apply loadBalancerSourceRanges to NodePort and externalIP frontends too.
   * kube-proxy applies them to load-balancer VIPs only (rule 28 of docs/semantics.md).
   */
  sourceRangesForAllExternal?: boolean;
  /** --external-ip-cidrs: only externalIPs inside these CIDRs are programmed; unset or empty, all are (external-ips.ts). */
  externalIPCidrs?: readonly string[];
  /** --lb-algorithm: the node's default backend selection (rule 40 of docs/semantics.md); unset: random. */
  lbAlgorithm?: LbAlgorithm;
}

/**
 * Plans one Service. `slices` should be the Service's EndpointSlices; slices
 * labelled for another Service are ignored, so passing extra ones is harmless.
 * Never throws: every piece that cannot be programmed is listed in `skipped`.
 */
export function planService(service: V1Service, slices: readonly V1EndpointSlice[], ctx: PlanContext): ServicePlan {
  try {
    return planServiceUnchecked(service, slices, ctx);
  } catch (err) {
    // Last line of defence: input the checks above did not foresee. One Service, never the whole plan.
    const key = namespacedKey(String(service?.metadata?.namespace ?? ''), String(service?.metadata?.name ?? ''));
    return {
      service: key,
      frontends: [],
      skipped: [{ object: `Service ${key}`, reason: `cannot be planned: ${err instanceof Error ? err.message : String(err)}` }],
    };
  }
}

const NO_ENDPOINTS: readonly Endpoint[] = Object.freeze([]);

function toBackends(list: readonly Endpoint[] | null): PlanBackend[] {
  if (!list) return [];
  const out = new Array<PlanBackend>(list.length);
  for (let i = 0; i < list.length; i++) {
    const e = list[i];
    out[i] = e.isLocal ? { address: e.address, port: e.port, local: true } : { address: e.address, port: e.port };
  }
  return out;
}

function planServiceUnchecked(service: V1Service, slices: readonly V1EndpointSlice[], ctx: PlanContext): ServicePlan {
  const { key, info, skipped } = readServiceInfo(service);
  if (!info || info.ports.length === 0) return { service: key, frontends: [], skipped };

  const topo: NodeTopology = { nodeName: ctx.nodeName, zone: ctx.node?.metadata?.labels?.[LABEL_TOPOLOGY_ZONE] ?? '' };
  let hasNodePorts = false;
  for (let i = 0; i < info.ports.length; i++) if (info.ports[i].nodePort !== 0) hasNodePorts = true;
  const filter = hasNodePorts ? parseNodePortAddresses(ctx.nodePortAddresses, skipped) : null;
  const frontends: PlanFrontend[] = [];
  // Frontend keys, built once a second frontend needs checking against the first (most Services have one).
  let seen: Set<string> | null = null;
  let healthCheck: ServicePlan['healthCheck'];
  const noLocal: NoLocalEndpoints = { internal: 0, external: 0 };

  for (let fi = 0; fi < info.families.length; fi++) {
    const fam = withAllowedExternalIPs(info.families[fi], ctx.externalIPCidrs, `Service ${key}`, skipped);
    const eps = endpointsByServicePort(key, slices, ctx.nodeName, fam.family, skipped);
    const nodeAddrs = hasNodePorts ? nodePortAddresses(ctx.node, fam.family, filter) : [];
    if (hasNodePorts && nodeAddrs.length === 0) {
      skipped.push({
        object: `Service ${key}`,
        reason: `NodePorts: node ${JSON.stringify(ctx.nodeName)} has no ${fam.family} address to listen on${ctx.node ? '' : ' (no Node object)'}`,
      });
    }
    for (let pi = 0; pi < info.ports.length; pi++) {
      const sp = info.ports[pi];
      // A Service port without a same-named slice port has no endpoints: its
      // frontends stay, with no backends, so the datapath refuses (rules 11, 23 of docs/semantics.md).
      const endpoints = eps.byPort.get(portId(sp.name, sp.protocol)) ?? NO_ENDPOINTS;
      const planned = portFrontends(info, fam, sp, endpoints, nodeAddrs, topo, ctx, noLocal);
      for (let k = 0; k < planned.length; k++) {
        const f = planned[k];
        if (frontends.length > 0) {
          seen ??= new Set(frontends.map(frontendLabel));
          const label = frontendLabel(f);
          if (seen.has(label)) {
            skipped.push({ object: `Service ${key}`, reason: `${f.type} ${label} duplicates another frontend of the Service; the first is used` });
            continue;
          }
          seen.add(label);
        }
        frontends.push(f);
      }
    }
    if (info.healthCheckNodePort && healthCheck === undefined) {
      healthCheck = { nodePort: info.healthCheckNodePort, localReadyEndpoints: localReadyEndpoints(eps.byPort) };
    }
  }
  // The selection algorithm, one per Service (rule 40 of docs/semantics.md); random is the default and left unsaid.
  if (frontends.length > 0 && (ctx.lbAlgorithm === 'maglev' || service.metadata?.annotations)) {
    const algorithm = lbAlgorithmOf(key, service.metadata?.annotations, ctx.lbAlgorithm ?? 'random', skipped);
    if (algorithm === 'maglev') for (const f of frontends) f.lbAlgorithm = 'maglev';
  }
  const plan: ServicePlan = healthCheck ? { service: key, frontends, skipped, healthCheck } : { service: key, frontends, skipped };
  if (noLocal.internal > 0 || noLocal.external > 0) plan.noLocalEndpoints = noLocal;
  return plan;
}

/** Every frontend of one Service port in one family. */
function portFrontends(
  info: ServiceInfo,
  fam: FamilyInfo,
  sp: ServicePortInfo,
  endpoints: readonly Endpoint[],
  nodeAddrs: readonly string[],
  topo: NodeTopology,
  ctx: PlanContext,
  noLocal: NoLocalEndpoints,
): PlanFrontend[] {
  // ExternallyAccessible() and the policy predicates, per port (rule 9 of docs/semantics.md).
  const externallyAccessible = sp.nodePort !== 0 || fam.loadBalancerIPs.length > 0 || fam.externalIPs.length > 0;
  const externalLocal = info.externalPolicyLocal && externallyAccessible;
  const use: EndpointUse = {
    usesCluster: !info.internalPolicyLocal || externallyAccessible,
    usesLocal: info.internalPolicyLocal || externalLocal,
  };
  const cat = categorizeEndpoints(endpoints, use, topo);
  const cluster = cat.hasAny ? toBackends(cat.cluster) : [];
  const local = cat.hasAny ? toBackends(cat.local) : [];
  // kubeproxy_sync_proxy_rules_no_local_endpoints_total: a Local policy with endpoints elsewhere but none here
  // (kube-proxy's !hasInternalEndpoints / !hasExternalEndpoints when hasEndpoints).
  if (cat.hasAny && local.length === 0) {
    if (info.internalPolicyLocal) noLocal.internal++;
    if (externalLocal) noLocal.external++;
  }

  // ClusterIP: the internal policy's set. iTP=Local with no local endpoint
  // but endpoints elsewhere is a DROP in kube-proxy (rule 24 of docs/semantics.md); a socket hook
  // cannot drop a connect, so kpr refuses at once (the same rule).
  const out: PlanFrontend[] = [
    newFrontend(info, sp, 'ClusterIP', fam.clusterIP, sp.port, info.internalPolicyLocal ? local : cluster, info.internalPolicyLocal, []),
  ];
  if (!externallyAccessible) return out;

  // External frontends: the external policy's set for traffic from outside.
  // With eTP=Local, in-node callers are short-circuited to the cluster set
  // (rule 25 of docs/semantics.md), and outside traffic with no local endpoint is dropped.
  const external = externalLocal ? local : cluster;
  const internal = externalLocal && !sameBackends(cluster, external) ? cluster : undefined;
  const drop = externalLocal && cat.hasAny && external.length === 0;
  // The LB IPs themselves are allowed when a range holds the node's IP (rule 34 of docs/semantics.md).
  const lbRanges = fam.sourceRanges.length ? withImplicitLbAllow(fam.sourceRanges, fam.loadBalancerIPs, primaryNodeIP(ctx.node, fam.family)) : fam.sourceRanges;
  const ranges = ctx.sourceRangesForAllExternal ? lbRanges : [];
  const ext = (type: FrontendType, address: string, port: number, sourceRanges: string[]): PlanFrontend => {
    const f = newFrontend(info, sp, type, address, port, external, externalLocal, sourceRanges);
    if (internal) f.internalBackends = internal;
    if (drop) f.dropWhenEmpty = true;
    return f;
  };
  // Source ranges kpr cannot read restrict nothing it could program: the
  // frontends they apply to are left out (fail closed, reported by readServiceInfo).
  const closedLB = info.sourceRangesUnreadable;
  const closedOther = closedLB && ctx.sourceRangesForAllExternal === true;
  if (sp.nodePort && !closedOther) for (const a of nodeAddrs) out.push(ext('NodePort', a, sp.nodePort, ranges));
  if (!closedLB) for (const a of fam.loadBalancerIPs) out.push(ext('LoadBalancer', a, sp.port, lbRanges));
  if (!closedOther) for (const a of fam.externalIPs) out.push(ext('ExternalIP', a, sp.port, ranges));
  return out;
}

/** One frontend of Service port `sp`. */
function newFrontend(
  info: ServiceInfo,
  sp: ServicePortInfo,
  type: FrontendType,
  address: string,
  port: number,
  backends: PlanBackend[],
  policyLocal: boolean,
  sourceRanges: string[],
): PlanFrontend {
  return {
    service: info.key,
    portName: sp.name,
    type,
    address,
    port,
    protocol: sp.protocol,
    backends,
    trafficPolicy: policyLocal ? 'Local' : 'Cluster',
    affinityTimeoutSeconds: info.affinityTimeoutSeconds,
    sourceRanges,
  };
}

/** LocalReadyEndpoints (rule 31 of docs/semantics.md): distinct IPs of ready, local endpoints over every port. */
function localReadyEndpoints(byPort: Map<string, Endpoint[]>): number {
  const ips = new Set<string>();
  for (const list of byPort.values()) for (const e of list) if (e.ready && e.isLocal) ips.add(e.address);
  return ips.size;
}
