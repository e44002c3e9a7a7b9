/**
 * Slimming of watched objects before they are cached: kpr keeps every Service
 * and EndpointSlice of the cluster (twice referenced: client-node's ListWatch
 * cache and ClusterWatch's maps share the objects), so what it never reads is
 * dropped on arrival (managedFields, annotations, owner references, targetRefs,
 * Service status other than loadBalancer...). What stays is what agent/plan,
 * agent/metrics, agent/health and agent/datapath read, plus what ListWatch
 * needs (namespace, name, resourceVersion).
 */
import {
  V1Endpoint,
  V1EndpointSlice,
  V1Node,
  V1NodeStatus,
  V1ObjectMeta,
  V1Service,
  V1ServiceStatus,
} from '@kubernetes/client-node';

/** The one annotation read (agent/metrics/change-tracker.ts: network programming latency). */
export const LAST_CHANGE_TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';

function pruneMeta(md: V1ObjectMeta | undefined, withDeletion = false): V1ObjectMeta {
  const m = new V1ObjectMeta();
  // Always the same properties in the same order: one shared hidden class.
  m.name = md?.name;
  m.namespace = md?.namespace;
  m.resourceVersion = md?.resourceVersion;
  m.labels = md?.labels;
  const t = md?.annotations?.[LAST_CHANGE_TRIGGER_TIME];
  m.annotations = t === undefined ? undefined : { [LAST_CHANGE_TRIGGER_TIME]: t };
  if (withDeletion && md?.deletionTimestamp) m.deletionTimestamp = md.deletionTimestamp;
  return m;
}

export function pruneService(s: V1Service): V1Service {
  const out = new V1Service();
  out.metadata = pruneMeta(s.metadata);
  out.spec = s.spec;
  const lb = s.status?.loadBalancer;
  if (lb) {
    out.status = new V1ServiceStatus();
    out.status.loadBalancer = lb;
  }
  return out;
}

function pruneEndpoint(e: V1Endpoint): V1Endpoint {
  if (!e || (e.targetRef === undefined && e.deprecatedTopology === undefined && e.hostname === undefined && e.zone === undefined)) return e;
  const out = new V1Endpoint();
  out.addresses = e.addresses;
  out.conditions = e.conditions;
  out.nodeName = e.nodeName;
  out.hints = e.hints;
  return out;
}

export function pruneEndpointSlice(s: V1EndpointSlice): V1EndpointSlice {
  const out = new V1EndpointSlice();
  out.metadata = pruneMeta(s.metadata);
  out.addressType = s.addressType;
  out.endpoints = Array.isArray(s.endpoints) ? s.endpoints.map(pruneEndpoint) : s.endpoints;
  out.ports = s.ports;
  return out;
}

/** One object: only the bulky parts go (managedFields, images, volumes). */
export function pruneNode(n: V1Node): V1Node {
  const out = new V1Node();
  out.metadata = pruneMeta(n.metadata, true);
  out.spec = n.spec;
  if (n.status) {
    out.status = Object.assign(new V1NodeStatus(), n.status);
    delete out.status.images;
    delete out.status.volumesAttached;
    delete out.status.volumesInUse;
  }
  return out;
}
