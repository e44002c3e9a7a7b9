/** A kube-proxy service port for the rule generators' tests: ns1/<name> port p80, ClusterIP 198.19.0.1:80/TCP, `n` endpoints 198.18.128.1… on 8080. */
import type { KpService } from '../../../bench/kube-proxy-rules.js';

export function kpService(name: string, n: number, extra: Partial<KpService> = {}): KpService {
  return {
    namespace: 'ns1',
    name,
    portName: 'p80',
    clusterIP: '198.19.0.1',
    port: 80,
    protocol: 'TCP',
    endpoints: Array.from({ length: n }, (_, i) => ({ ip: `198.18.128.${i + 1}`, port: 8080 })),
    ...extra,
  };
}
