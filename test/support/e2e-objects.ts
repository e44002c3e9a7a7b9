/**
 * The objects most e2e suites serve, as an API server returns them: a
 * ClusterIP Service with one TCP port "http" (80 → targetPort 8080), and
 * EndpointSlices of its endpoints (behind port "http" 8080, or the ports
 * given). Each suite names its namespace.
 */
import { NODE_NAME } from '../../sandbox/cluster.js';
import type { KubeObject } from '../../sandbox/apiserver-selectors.js';

/** `spec` is merged over the ClusterIP spec (a type, traffic policies, another port list). */
export function httpService(namespace: string, name: string, clusterIP: string, spec: Record<string, unknown> = {}, port = 80): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: { type: 'ClusterIP', clusterIP, clusterIPs: [clusterIP], ports: [{ name: 'http', port, targetPort: 8080, protocol: 'TCP' }], ...spec },
  };
}

export interface SliceEndpoint {
  ip: string;
  /** Default: the sandbox's node. */
  node?: string;
  /** Default: { ready: true }. */
  conditions?: { ready?: boolean; serving?: boolean; terminating?: boolean };
}

export interface SlicePort {
  name: string;
  port: number;
  /** Default TCP. */
  protocol?: string;
}

/** An IPv4 slice of Service `svc` behind `ports`; an endpoint given as an address alone is ready, on the sandbox's node. `annotations`, when given, are set. */
export function endpointSlice(
  namespace: string,
  name: string,
  svc: string,
  endpoints: Array<string | SliceEndpoint>,
  ports: SlicePort[],
  annotations?: Record<string, string>,
): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace, labels: { 'kubernetes.io/service-name': svc }, ...(annotations ? { annotations } : {}) },
    addressType: 'IPv4',
    ports: ports.map((p) => ({ protocol: 'TCP', ...p })),
    endpoints: endpoints
      .map((e) => (typeof e === 'string' ? { ip: e } : e))
      .map((e) => ({ addresses: [e.ip], conditions: e.conditions ?? { ready: true }, nodeName: e.node ?? NODE_NAME })),
  };
}

/** A slice of Service `svc` behind port "http" 8080/TCP. */
export function httpSlice(
  namespace: string,
  name: string,
  svc: string,
  endpoints: Array<string | SliceEndpoint>,
  annotations?: Record<string, string>,
): KubeObject {
  return endpointSlice(namespace, name, svc, endpoints, [{ name: 'http', port: 8080 }], annotations);
}

/** The two-node suites' one port: "http" 80 → 8080/TCP (namespace e2e). */
export const E2E_HTTP_PORT = { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' };

/** A Service of the two-node suites (namespace e2e) with the http port (and its nodePort), `spec` and `status` added as given. */
export function e2eService(
  name: string,
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer',
  clusterIP: string,
  nodePort?: number,
  spec: Record<string, unknown> = {},
  status?: Record<string, unknown>,
): KubeObject {
  const svc = httpService('e2e', name, clusterIP, { type, ...(nodePort ? { ports: [{ ...E2E_HTTP_PORT, nodePort }] } : {}), ...spec });
  return status ? { ...svc, status } : svc;
}

/** The EndpointSlice of a two-node suite's Service `svc`: ready endpoints at `ips` on node-1, port http 8080. */
export function e2eSlice(svc: string, ips: string[]): KubeObject {
  return httpSlice(
    'e2e',
    `${svc}-1`,
    svc,
    ips.map((ip) => ({ ip, node: 'node-1' })),
  );
}
