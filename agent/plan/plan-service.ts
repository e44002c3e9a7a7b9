/**
 * planService: one Service and its EndpointSlices → the frontends this node
 * programs for it. Pure (no I/O, clock or randomness) and cheap, because the
 * agent re-plans only the Services that changed.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { CLUSTER_ONLY, categorizeEndpoints } from './categorize-endpoints.js';
import { endpointsByServicePort, portId } from './endpoint-slices.js';
import { readServiceInfo } from './service-info.js';
import type { PlanFrontend, ServicePlan } from './types.js';

export interface PlanContext {
  /** This node's name: decides which endpoints are local. "" means none is. */
  nodeName: string;
  /** This node, for its topology labels (later milestones). */
  node?: V1Node;
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
    const key = `${service?.metadata?.namespace ?? ''}/${service?.metadata?.name ?? ''}`;
    return { service: key, frontends: [], skipped: [{ object: `Service ${key}`, reason: `cannot be planned: ${err instanceof Error ? err.message : String(err)}` }] };
  }
}

function planServiceUnchecked(service: V1Service, slices: readonly V1EndpointSlice[], ctx: PlanContext): ServicePlan {
  const { key, info, skipped } = readServiceInfo(service);
  if (!info || info.ports.length === 0) return { service: key, frontends: [], skipped };

  const eps = endpointsByServicePort(key, slices, ctx.nodeName);
  if (eps.skipped.length) skipped.push(...eps.skipped);

  const frontends: PlanFrontend[] = [];
  for (const sp of info.ports) {
    // A Service port without a same-named slice port has no endpoints: the
    // frontend stays, with no backends, so the datapath refuses (rules 11, 23).
    const endpoints = eps.byPort.get(portId(sp.name, sp.protocol)) ?? [];
    const { cluster } = categorizeEndpoints(endpoints, CLUSTER_ONLY);
    frontends.push({
      service: key,
      portName: sp.name,
      type: 'ClusterIP',
      address: info.clusterIP,
      port: sp.port,
      protocol: sp.protocol,
      backends: (cluster ?? []).map((e) => ({ address: e.address, port: e.port })),
      trafficPolicy: 'Cluster',
      affinityTimeoutSeconds: 0,
      sourceRanges: [],
    });
  }
  return { service: key, frontends, skipped };
}
