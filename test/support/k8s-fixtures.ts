/** Small builders for Services and EndpointSlices in plan tests. Plain objects, as the API returns them. */
import type { V1Endpoint, V1EndpointSlice, V1Service, V1ServicePort, DiscoveryV1EndpointPort } from '@kubernetes/client-node';

export interface ServiceOpts {
  clusterIP?: string;
  clusterIPs?: string[];
  ipFamilies?: string[];
  type?: string;
  ports?: V1ServicePort[];
  labels?: Record<string, string>;
  externalIPs?: string[];
  sessionAffinity?: string;
  internalTrafficPolicy?: string;
}

/** A Service "ns/name"; clusterIP defaults to 10.96.0.10 and ports to one unnamed TCP 80. */
export function service(key: string, o: ServiceOpts = {}): V1Service {
  const [namespace, name] = key.split('/');
  return {
    metadata: { namespace, name, ...(o.labels ? { labels: o.labels } : {}) },
    spec: {
      clusterIP: 'clusterIP' in o ? o.clusterIP : '10.96.0.10',
      ...(o.clusterIPs ? { clusterIPs: o.clusterIPs } : {}),
      ...(o.ipFamilies ? { ipFamilies: o.ipFamilies } : {}),
      ...(o.type !== undefined ? { type: o.type } : {}),
      ...(o.externalIPs ? { externalIPs: o.externalIPs } : {}),
      ...(o.sessionAffinity ? { sessionAffinity: o.sessionAffinity } : {}),
      ...(o.internalTrafficPolicy ? { internalTrafficPolicy: o.internalTrafficPolicy } : {}),
      ports: o.ports ?? [{ port: 80, protocol: 'TCP' }],
    },
  };
}

export interface EndpointOpts {
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
  nodeName?: string;
  /** Extra addresses after the first. */
  more?: string[];
}

export function ep(address: string, o: EndpointOpts = {}): V1Endpoint {
  const conditions: V1Endpoint['conditions'] = {};
  if (o.ready !== undefined) conditions.ready = o.ready;
  if (o.serving !== undefined) conditions.serving = o.serving;
  if (o.terminating !== undefined) conditions.terminating = o.terminating;
  return {
    addresses: [address, ...(o.more ?? [])],
    conditions,
    ...(o.nodeName ? { nodeName: o.nodeName } : {}),
  };
}

export interface SliceOpts {
  addressType?: string;
  ports?: DiscoveryV1EndpointPort[];
  endpoints?: V1Endpoint[];
  /** null: no service-name label. */
  serviceName?: string | null;
}

/** A slice "ns/sliceName" of Service "ns/<serviceName>" (default: the slice name up to its last "-"). */
export function slice(key: string, o: SliceOpts = {}): V1EndpointSlice {
  const [namespace, name] = key.split('/');
  const svc = o.serviceName === undefined ? name.slice(0, name.lastIndexOf('-')) : o.serviceName;
  return {
    metadata: { namespace, name, labels: svc === null ? {} : { 'kubernetes.io/service-name': svc } },
    addressType: o.addressType ?? 'IPv4',
    ports: 'ports' in o ? o.ports : [{ name: '', port: 8080, protocol: 'TCP' }],
    endpoints: o.endpoints ?? [],
  };
}
