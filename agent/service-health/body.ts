/**
 * kube-proxy's per-service health check answer (pkg/proxy/healthcheck
 * service_health.go): the same status rule, headers and byte-for-byte body,
 * so load balancers configured for kube-proxy keep working.
 */

export interface ServiceHealthAnswer {
  status: 200 | 503;
  headers: Record<string, string>;
  body: string;
}

/** 200 only with local endpoints and a healthy proxy; the body is tab-indented with no trailing newline. */
export function serviceHealthAnswer(namespace: string, name: string, localEndpoints: number, proxyHealthy: boolean): ServiceHealthAnswer {
  const body = [
    '{',
    '\t"service": {',
    `\t\t"namespace": ${JSON.stringify(namespace)},`,
    `\t\t"name": ${JSON.stringify(name)}`,
    '\t},',
    `\t"localEndpoints": ${localEndpoints},`,
    `\t"serviceProxyHealthy": ${proxyHealthy}`,
    '}',
  ].join('\n');
  return {
    status: localEndpoints !== 0 && proxyHealthy ? 200 : 503,
    headers: {
      'Content-Type': 'application/json',
      'X-Content-Type-Options': 'nosniff',
      'X-Load-Balancing-Endpoint-Weight': String(localEndpoints),
    },
    body,
  };
}
