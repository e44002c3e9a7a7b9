/**
 * The Service and EndpointSlice objects of the two-node e2e suites (namespace
 * e2e, one TCP port "http" 80 → 8080), as the embedded API server stores them.
 */
export const E2E_HTTP_PORT = { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' };

/** A Service of namespace e2e with the one http port (and its nodePort), `spec` and `status` added as given. */
export function e2eService(
  name: string,
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer',
  clusterIP: string,
  nodePort?: number,
  spec: Record<string, unknown> = {},
  status?: Record<string, unknown>,
) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'e2e' },
    spec: { type, clusterIP, clusterIPs: [clusterIP], ports: [{ ...E2E_HTTP_PORT, ...(nodePort ? { nodePort } : {}) }], ...spec },
    ...(status ? { status } : {}),
  };
}

/** The EndpointSlice of Service `svc`: ready endpoints at `ips` on node-1, port http 8080. */
export function e2eSlice(svc: string, ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${svc}-1`, namespace: 'e2e', labels: { 'kubernetes.io/service-name': svc } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: 'node-1' })),
  };
}
