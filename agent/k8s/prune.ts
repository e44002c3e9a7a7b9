/**
 * Slimming of watched objects before they are cached: kpr keeps every Service
 * and EndpointSlice of the cluster (twice referenced: the reflector's
 * cache and ClusterWatch's maps share the objects), so what it never reads is
 * dropped on arrival (managedFields, annotations, owner references, targetRefs,
 * Service status other than loadBalancer...). What stays is what agent/plan,
 * agent/metrics, agent/health and agent/datapath read, plus what the reflector
 * needs (namespace, name, resourceVersion).
 *
 * What stays is also stored compactly, since 100,000 endpoints multiply every
 * byte: an EndpointSlice's endpoints are packed into strings
 * (CompactEndpointSlice, compact-slice.ts; endpoint objects only for a slice
 * the packing cannot hold, each single address then held without its array
 * in a CachedEndpoint), other arrays are copied to their exact length (the
 * deserializer builds them by push, which reserves 17 slots: ~150 bytes for
 * a one-element array), and the endpoint conditions, node names, namespaces
 * and port lists, which repeat across the cluster, are shared instances.
 * Cached objects are never mutated (the plan is pure), so sharing is safe;
 * the shared conditions and port lists are frozen to keep it so.
 */
import {
  V1Endpoint,
  V1EndpointSlice,
  V1Node,
  V1NodeStatus,
  V1ObjectMeta,
  V1Service,
  V1ServicePort,
  V1ServiceSpec,
  V1ServiceStatus,
} from '@kubernetes/client-node';
import { KEPT_ANNOTATIONS, KEPT_LABELS } from './labels.js';
import { CachedEndpoint, CompactEndpointSlice, internConditions, packOf } from './compact-slice.js';

export { CachedEndpoint, CompactEndpointSlice, internConditions } from './compact-slice.js';

/** The annotations kpr reads (labels.ts KEPT_ANNOTATIONS), or undefined when there are none: most objects carry none of them. */
function keptAnnotations(all: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!all) return undefined;
  let out: Record<string, string> | undefined;
  for (const name of KEPT_ANNOTATIONS) {
    const v = all[name];
    if (v !== undefined) (out ??= {})[name] = v;
  }
  return out;
}

interface KeptMeta {
  /** The Node keeps every label (its zone label feeds topology hints) and its deletionTimestamp. */
  node?: boolean;
  /** A Service keeps its creationTimestamp: the oldest Service wins a same-class claim on a frontend (agent/reconcile/ownership.ts). */
  created?: boolean;
}

function pruneMeta(md: V1ObjectMeta | undefined, keep: KeptMeta = {}): V1ObjectMeta {
  const m = new V1ObjectMeta();
  // Always the same properties in the same order: one shared hidden class.
  m.name = md?.name;
  m.namespace = internName(md?.namespace);
  m.resourceVersion = md?.resourceVersion;
  m.labels = keep.node ? md?.labels : keptLabels(md?.labels);
  m.annotations = keptAnnotations(md?.annotations);
  if (keep.node && md?.deletionTimestamp) m.deletionTimestamp = md.deletionTimestamp;
  if (keep.created && md?.creationTimestamp !== undefined) m.creationTimestamp = md.creationTimestamp;
  return m;
}

/** The spec fields agent/plan reads (service-info.ts); the selector, ipFamilyPolicy and the rest are not kept. */
const SPEC_FIELDS = [
  'type',
  'clusterIP',
  'clusterIPs',
  'ipFamilies',
  'ports',
  'externalIPs',
  'externalTrafficPolicy',
  'internalTrafficPolicy',
  'healthCheckNodePort',
  'loadBalancerSourceRanges',
  'sessionAffinity',
  'sessionAffinityConfig',
] as const satisfies ReadonlyArray<keyof V1ServiceSpec>;

/** Spec fields whose values come from a handful of words (enums): shared. */
const SPEC_WORDS = new Set<string>(['type', 'externalTrafficPolicy', 'internalTrafficPolicy', 'sessionAffinity']);

function compactPort(p: V1ServicePort): V1ServicePort {
  if (!p || typeof p !== 'object') return p;
  const out = new V1ServicePort();
  Object.assign(out, p);
  out.name = internName(p.name) as string;
  out.protocol = internName(p.protocol);
  return out;
}

function compactSpec(spec: V1ServiceSpec): V1ServiceSpec {
  const out = new V1ServiceSpec();
  const o = out as Record<string, unknown>;
  for (const k of SPEC_FIELDS) {
    const v = spec[k];
    if (v === undefined) continue;
    if (k === 'ports' && Array.isArray(v)) o[k] = sharedList(servicePortLists, (v as V1ServicePort[]).map(compactPort));
    else if (k === 'ipFamilies' && Array.isArray(v)) o[k] = (v as string[]).map((f) => internName(f));
    else if (Array.isArray(v)) o[k] = v.slice();
    else o[k] = SPEC_WORDS.has(k) && typeof v === 'string' ? internName(v) : v;
  }
  // clusterIP is clusterIPs[0] (the API server's rule): one string for both.
  if (typeof out.clusterIP === 'string' && out.clusterIPs?.[0] === out.clusterIP) out.clusterIP = out.clusterIPs[0];
  return out;
}

function keptLabels(labels: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!labels) return labels;
  let out: Record<string, string> | undefined;
  for (const k of KEPT_LABELS) {
    const v = labels[k];
    if (v !== undefined) (out ??= {})[k] = v;
  }
  return out;
}

export function pruneService(s: V1Service): V1Service {
  const out = new V1Service();
  out.metadata = pruneMeta(s.metadata, { created: true });
  out.spec = s.spec && compactSpec(s.spec);
  const lb = s.status?.loadBalancer;
  if (lb) {
    out.status = new V1ServiceStatus();
    out.status.loadBalancer = lb;
  }
  return out;
}

/** An exact-length copy (see above); anything else as it is. */
function exact<T>(a: T[] | undefined): T[] | undefined {
  return Array.isArray(a) ? a.slice() : a;
}

/**
 * Port lists, shared between the objects that have equal ones (most
 * Services of a cluster have one of a few: "http" 80 → 8080/TCP...), frozen
 * since they are. Bounded like the names.
 */
const LIST_INTERN_MAX = 65536;
const servicePortLists = new Map<string, readonly object[]>();
const slicePortLists = new Map<string, readonly object[]>();

function sharedList<T extends object>(lists: Map<string, readonly object[]>, list: T[] | undefined): T[] | undefined {
  if (!Array.isArray(list)) return list;
  const key = JSON.stringify(list);
  const seen = lists.get(key);
  if (seen !== undefined) return seen as T[];
  if (lists.size >= LIST_INTERN_MAX) lists.clear();
  // Frozen copies: the object given may be someone else's.
  const shared = Object.freeze(
    list.map((p) => (p && typeof p === 'object' ? Object.freeze(Object.assign(Object.create(Object.getPrototypeOf(p)) as T, p)) : p)),
  );
  lists.set(key, shared);
  return shared as T[];
}

/** Node names and enum-like words, shared; bounded so that churned names cannot pile up. */
const NAME_INTERN_MAX = 65536;
const names = new Map<string, string>();

export function internName(n: string | undefined): string | undefined {
  if (typeof n !== 'string') return n;
  const seen = names.get(n);
  if (seen !== undefined) return seen;
  if (names.size >= NAME_INTERN_MAX) names.clear();
  names.set(n, n);
  return n;
}

function pruneEndpoint(e: V1Endpoint): V1Endpoint {
  if (!e || typeof e !== 'object') return e;
  const a = e.addresses;
  if (Array.isArray(a) && a.length === 1 && typeof a[0] === 'string') {
    return new CachedEndpoint(a[0], internConditions(e.conditions), internName(e.nodeName), e.hints);
  }
  const out = new V1Endpoint();
  out.addresses = exact(a) as string[];
  out.conditions = internConditions(e.conditions);
  out.nodeName = internName(e.nodeName);
  if (e.hints !== undefined) out.hints = e.hints; // rare: no slot for it otherwise
  return out;
}

export function pruneEndpointSlice(s: V1EndpointSlice): V1EndpointSlice {
  const metadata = pruneMeta(s.metadata);
  const ports = sharedList(slicePortLists, s.ports);
  const packed = Array.isArray(s.endpoints) ? packOf(s.endpoints, internName as (n: string) => string) : undefined;
  if (packed) return new CompactEndpointSlice(metadata, internName(s.addressType) as string, ports, packed);
  // Not packable (compact-slice.ts): endpoint objects, each as compact as it can be.
  const out = new V1EndpointSlice();
  out.metadata = metadata;
  out.addressType = s.addressType;
  out.endpoints = Array.isArray(s.endpoints) ? s.endpoints.map(pruneEndpoint) : s.endpoints;
  out.ports = ports;
  return out;
}

/** One object: only the bulky parts go (managedFields, images, volumes). */
export function pruneNode(n: V1Node): V1Node {
  const out = new V1Node();
  out.metadata = pruneMeta(n.metadata, { node: true });
  out.spec = n.spec;
  if (n.status) {
    out.status = Object.assign(new V1NodeStatus(), n.status);
    delete out.status.images;
    delete out.status.volumesAttached;
    delete out.status.volumesInUse;
  }
  return out;
}
