/**
 * The NodePort benchmark's workload (bench/nodeport.ts): `total` Services,
 * the first MAX_NODE_PORTS of them NodePort Services at NODEPORT_BASE + their
 * index, the echo Service (the real pod) in the middle of those, and the
 * Kubernetes objects the agent is served for them.
 */
import { NP_ECHO_PORT, NP_NODE_IP, NP_POD_IP } from './nodeport-topology.js';
import type { KpService } from './kube-proxy-rules.js';
import {
  BENCH_NAMESPACE,
  ECHO_CLUSTER_IP,
  endpointSliceObject,
  makeScenario,
  NODE_NAME,
  PORT_NAME,
  serviceObject,
  SERVICE_PORT,
  type KubeObj,
} from './scenario.js';

export const NODEPORT_BASE = 20000;
/** Node ports NODEPORT_BASE..65535: NodePort Services beyond these are ClusterIP only. */
export const MAX_NODE_PORTS = 65536 - NODEPORT_BASE;
export const NP_ECHO_SERVICE = 'echo-np';

export interface NodePortScenario {
  services: KpService[];
  echo: KpService;
}

/** `total` Services (≥ 1), the echo service among them; the first MAX_NODE_PORTS are NodePort Services. */
export function makeNodePortScenario(total: number, endpointsPerService: number): NodePortScenario {
  if (total < 1) throw new Error('the NodePort scenario needs at least the echo service');
  const nodePorts = Math.min(total, MAX_NODE_PORTS);
  const fakes = makeScenario(total - 1, endpointsPerService).services.slice(0, total - 1);
  const echo: KpService = {
    namespace: BENCH_NAMESPACE,
    name: NP_ECHO_SERVICE,
    portName: PORT_NAME,
    clusterIP: ECHO_CLUSTER_IP,
    port: SERVICE_PORT,
    protocol: 'TCP',
    endpoints: [{ ip: NP_POD_IP, port: NP_ECHO_PORT }],
  };
  const mid = Math.floor((nodePorts - 1) / 2);
  const ordered = [...fakes.slice(0, mid), echo, ...fakes.slice(mid)];
  const services = ordered.map((s, i) => (i < nodePorts ? { ...s, nodePort: NODEPORT_BASE + i } : s));
  return { services, echo: services[mid] };
}

/** The Service (type NodePort, externalTrafficPolicy Cluster, where it has a node port) and its EndpointSlice. */
export function nodePortObjects(svc: KpService): KubeObj[] {
  const service = serviceObject(svc);
  const slice = endpointSliceObject(svc);
  for (const ep of slice.endpoints) ep.nodeName = ep.addresses[0] === NP_POD_IP ? NODE_NAME : 'node-2';
  if (!svc.nodePort) return [service, slice];
  service.spec.type = 'NodePort';
  service.spec.externalTrafficPolicy = 'Cluster';
  service.spec.ports[0].nodePort = svc.nodePort;
  return [service, slice];
}

/** node-1, whose InternalIP is the uplink address: NodePorts answer there and kpr SNATs to it. */
export function nodePortNodeObject(): KubeObj {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE_NAME, labels: { 'kubernetes.io/hostname': NODE_NAME } },
    status: {
      addresses: [
        { type: 'InternalIP', address: NP_NODE_IP },
        { type: 'Hostname', address: NODE_NAME },
      ],
    },
  };
}
