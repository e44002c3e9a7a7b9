/**
 * planDataplane: the whole node's plan from every Service and EndpointSlice.
 * Groups slices by Service (rule 6 of docs/semantics.md), plans each Service, and sorts the
 * result so the same input always prints the same plan.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { groupSlicesByService } from './endpoint-slices.js';
import { compareAddrKeys, parseIP } from '../net/ip.js';
import { planService, type PlanContext } from './plan-service.js';
import { serviceKeyOf } from './service-info.js';
import type { DataplanePlan, PlanFrontend, SkippedObject } from './types.js';

export interface DataplaneInput extends Omit<PlanContext, 'node'> {
  node?: V1Node;
  services: readonly V1Service[];
  endpointSlices: readonly V1EndpointSlice[];
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

const TYPE_ORDER = { ClusterIP: 0, NodePort: 1, LoadBalancer: 2, ExternalIP: 3 } as const;

/** Frontend order of a plan: service, type, then address (numerically, IPv4 first), port, protocol. */
export function compareFrontends(a: PlanFrontend, b: PlanFrontend): number {
  return (
    cmp(a.service, b.service) ||
    TYPE_ORDER[a.type] - TYPE_ORDER[b.type] ||
    compareAddrKeys(parseIP(a.address)?.key ?? 0, parseIP(b.address)?.key ?? 0) ||
    cmp(a.address, b.address) ||
    a.port - b.port ||
    cmp(a.protocol, b.protocol)
  );
}

/**
 * Plans every Service. Slices of Services not in `services` are ignored,
 * like kube-proxy does; they are not reported.
 */
export function planDataplane(input: DataplaneInput): DataplanePlan {
  const slicesByService = groupSlicesByService(input.endpointSlices);
  const services = input.services.map((svc) => ({ svc, key: serviceKeyOf(svc) })).sort((a, b) => cmp(a.key, b.key));
  const ctx: PlanContext = {
    nodeName: input.nodeName,
    node: input.node,
    nodePortAddresses: input.nodePortAddresses,
    sourceRangesForAllExternal: input.sourceRangesForAllExternal,
    externalIPCidrs: input.externalIPCidrs,
    lbAlgorithm: input.lbAlgorithm,
  };

  const frontends: PlanFrontend[] = [];
  const skipped: SkippedObject[] = [];
  for (let i = 0; i < services.length; i++) {
    const { svc, key } = services[i];
    // The same Service given twice (two manifests, a replayed object): planned once, from the first.
    if (i > 0 && services[i - 1].key === key) {
      skipped.push({ object: `Service ${key}`, reason: 'duplicate object: the first one is used' });
      continue;
    }
    const plan = planService(svc, slicesByService.get(key) ?? [], ctx);
    // Services are already in order; only a Service's own frontends need sorting.
    if (plan.frontends.length > 1) plan.frontends.sort(compareFrontends);
    for (const f of plan.frontends) frontends.push(f);
    for (const s of plan.skipped) skipped.push(s);
  }
  return { node: input.nodeName, frontends, skipped };
}
