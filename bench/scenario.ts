/**
 * The benchmark's workload, generated once and fed to both sides: N Services
 * (ClusterIPs in 198.19.0.0/16) with M endpoints each (non-existent pod IPs in
 * 198.18.128.0/17), plus one "echo" Service whose single endpoint is the real
 * pod of the data-plane test. Endpoints are distinct ip:port pairs (100,000
 * at full scale), so neither side can share backends between services. The same data becomes Kubernetes objects for kpr
 * and kube-proxy-shaped iptables rules for the comparison.
 *
 * Beyond 65,000 Services (198.19.0.0/16 is full) the further ClusterIPs come
 * from 198.18.128.0/18 + 198.18.192.0/19 and then 198.18.32.0/19 +
 * 198.18.64.0/19 (clear of the topologies' 198.18.0–31.x and 198.18.100.x),
 * and the endpoints move to 198.18.224.0/19: at most 105,960 Services.
 */
import type { KpService } from './kube-proxy-rules.js';
import { ipFromInt, ipToInt } from './kube-proxy-rules.js';

export const BENCH_NAMESPACE = 'bench';
export const PORT_NAME = 'http';
export const SERVICE_PORT = 80;
export const TARGET_PORT = 8080;

export const POD_IP = '198.18.0.10';
export const ECHO_PORT = 9000;
export const ECHO_SERVICE = 'echo';
export const ECHO_CLUSTER_IP = '198.19.255.250';
export const NODE_NAME = 'node-1';

const SVC_BASE = ipToInt('198.19.0.1');
const EP_BASE = ipToInt('198.18.128.0');
const EP_SPACE = 32768; // 198.18.128.0/17

/** ClusterIPs in 198.19.0.0/16 (below the echo service's 198.19.255.250). */
export const MAX_PRIMARY_SERVICES = 65000;
/** Further ClusterIPs beyond MAX_PRIMARY_SERVICES: [first address, count]. */
const OVERFLOW_RANGES: Array<[number, number]> = [
  [ipToInt('198.18.128.0'), 24576], // 198.18.128.0 – 198.18.223.255
  [ipToInt('198.18.32.0'), 16384], // 198.18.32.0 – 198.18.95.255
];
/** Endpoints of a scenario with overflow ClusterIPs: 198.18.224.0/19. */
const OVERFLOW_EP_BASE = ipToInt('198.18.224.0');
const OVERFLOW_EP_SPACE = 8192;
export const MAX_SERVICES = MAX_PRIMARY_SERVICES + OVERFLOW_RANGES.reduce((a, [, n]) => a + n, 0);

/** Service i's ClusterIP. */
export function serviceClusterIP(i: number): string {
  if (i < MAX_PRIMARY_SERVICES) return ipFromInt(SVC_BASE + i);
  let k = i - MAX_PRIMARY_SERVICES;
  for (const [base, n] of OVERFLOW_RANGES) {
    if (k < n) return ipFromInt(base + k);
    k -= n;
  }
  throw new Error(`at most ${MAX_SERVICES} services fit the benchmark's ClusterIP ranges`);
}

/** The ServiceCIDRs the ClusterIPs of `serviceCount` services come from. */
export function serviceCIDRs(serviceCount: number): string[] {
  return serviceCount <= MAX_PRIMARY_SERVICES ? ['198.19.0.0/16'] : ['198.19.0.0/16', '198.18.128.0/18', '198.18.192.0/19', '198.18.32.0/19', '198.18.64.0/19'];
}

export interface Scenario {
  /** The N synthetic services, then the echo service last. */
  services: KpService[];
  echo: KpService;
}

export function makeScenario(serviceCount: number, endpointsPerService: number): Scenario {
  if (serviceCount > MAX_SERVICES) throw new Error(`at most ${MAX_SERVICES} services fit the benchmark's ClusterIP ranges`);
  const overflow = serviceCount > MAX_PRIMARY_SERVICES;
  const epBase = overflow ? OVERFLOW_EP_BASE : EP_BASE;
  const epSpace = overflow ? OVERFLOW_EP_SPACE : EP_SPACE;
  const services: KpService[] = [];
  for (let i = 0; i < serviceCount; i++) {
    // Every endpoint is a distinct ip:port, as distinct pods are: the /17 holds
    // 32,768 addresses, so each further block of addresses uses the next
    // target port. A block is a whole number of services, so one service's
    // endpoints share a port (one EndpointSlice, one ports entry).
    const block = Math.floor(epSpace / endpointsPerService) * endpointsPerService;
    const endpoints = [];
    for (let j = 0; j < endpointsPerService; j++) {
      const k = i * endpointsPerService + j;
      endpoints.push({ ip: ipFromInt(epBase + (k % block)), port: TARGET_PORT + Math.floor(k / block) });
    }
    services.push({
      namespace: BENCH_NAMESPACE,
      name: `svc-${i}`,
      portName: PORT_NAME,
      clusterIP: serviceClusterIP(i),
      port: SERVICE_PORT,
      protocol: 'TCP',
      endpoints,
    });
  }
  const echo: KpService = {
    namespace: BENCH_NAMESPACE,
    name: ECHO_SERVICE,
    portName: PORT_NAME,
    clusterIP: ECHO_CLUSTER_IP,
    port: SERVICE_PORT,
    protocol: 'TCP',
    endpoints: [{ ip: POD_IP, port: ECHO_PORT }],
  };
  return { services: [...services, echo], echo };
}

export type KubeObj = Record<string, any>;

export function serviceObject(svc: KpService): KubeObj {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: svc.name, namespace: svc.namespace },
    spec: {
      type: 'ClusterIP',
      clusterIP: svc.clusterIP,
      clusterIPs: [svc.clusterIP],
      ports: [{ name: svc.portName, port: svc.port, protocol: svc.protocol, targetPort: svc.endpoints[0]?.port ?? TARGET_PORT }],
      selector: { app: svc.name },
    },
  };
}

export function sliceName(svc: KpService): string {
  return `${svc.name}-bench`;
}

/** The service's EndpointSlice; `notReady` marks endpoint indexes as ready=false. */
export function endpointSliceObject(svc: KpService, notReady: Set<number> = new Set(), resourceVersion?: string): KubeObj {
  const md: KubeObj = {
    name: sliceName(svc),
    namespace: svc.namespace,
    labels: { 'kubernetes.io/service-name': svc.name, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
  };
  if (resourceVersion) md.resourceVersion = resourceVersion;
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: md,
    addressType: 'IPv4',
    endpoints: svc.endpoints.map((ep, i) => ({
      addresses: [ep.ip],
      conditions: { ready: !notReady.has(i), serving: !notReady.has(i), terminating: false },
      nodeName: ep.ip === POD_IP ? NODE_NAME : 'node-2',
    })),
    ports: [{ name: svc.portName, port: svc.endpoints[0]?.port ?? TARGET_PORT, protocol: svc.protocol }],
  };
}

export function nodeObject(): KubeObj {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE_NAME, labels: { 'kubernetes.io/hostname': NODE_NAME } },
    status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
  };
}
