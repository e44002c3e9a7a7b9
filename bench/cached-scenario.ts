/**
 * The bench scenario as the agent's watch caches hold it: objects parsed
 * from JSON and pruned (agent/k8s/prune.ts), keyed like the informers, behind
 * the SyncLoop's source interface. For the in-process cold-path tools, which
 * pass the prune functions of the build they measure.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import * as thisBuildPrune from '../agent/k8s/prune.js';
import { endpointSliceObject, makeScenario, nodeObject, serviceObject } from './scenario.js';

export interface Prune {
  pruneService(s: V1Service): V1Service;
  pruneEndpointSlice(s: V1EndpointSlice): V1EndpointSlice;
  pruneNode(n: V1Node): V1Node;
}

export interface CachedScenario {
  serviceKeys(): IterableIterator<string>;
  serviceByKey(key: string): V1Service | undefined;
  endpointSlicesByKey(key: string): V1EndpointSlice[];
  node(): V1Node;
}

/** `services` Services × `endpoints` endpoints (plus the scenario's echo Service), one slice each. */
export function cachedScenario(services: number, endpoints: number, prune: Prune = thisBuildPrune): CachedScenario {
  const scenario = makeScenario(services, endpoints);
  const viaJson = <T>(x: unknown): T => JSON.parse(JSON.stringify(x)) as T;
  const byKey = new Map<string, V1Service>();
  const slicesByKey = new Map<string, V1EndpointSlice[]>();
  for (const s of scenario.services) {
    const key = `${s.namespace}/${s.name}`;
    byKey.set(key, prune.pruneService(viaJson(serviceObject(s))));
    slicesByKey.set(key, [prune.pruneEndpointSlice(viaJson(endpointSliceObject(s)))]);
  }
  const node = prune.pruneNode(viaJson(nodeObject()));
  return {
    serviceKeys: () => byKey.keys(),
    serviceByKey: (k) => byKey.get(k),
    endpointSlicesByKey: (k) => slicesByKey.get(k) ?? [],
    node: () => node,
  };
}
