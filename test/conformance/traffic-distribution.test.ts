/**
 * Conformance: kubernetes/kubernetes test/e2e/network/traffic_distribution.go
 * ("[sig-network] Traffic Distribution"), one node:test test per upstream
 * It() (upstream-tests.ts). A Service with spec.trafficDistribution, server
 * and client pods placed by zone; the EndpointSlice is what the controller
 * writes for it: each endpoint's zone and a zone hint for its own zone. Each
 * client's requests must reach the wanted endpoints only, every one of them
 * (checkTrafficDistribution: at least 10 in a row, every wanted endpoint
 * reached, no other). Upstream needs three zones; the sandbox has two nodes,
 * so each test runs in steps and changes the Node objects' zone labels
 * between them (sameZone, multiNode say how). Topology: sandbox/two-node.ts
 * (node-1 is in zone-a, node-2 in zone-b, restored after each test);
 * conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { NODE_NAMES, ZONE, type NodeName } from '../../sandbox/two-node.js';
import { requireRoot } from '../support/preflight.js';
import { clusterIP, ConformanceBox, eventually, registerUpstream, type PodSpec, type UpstreamImpl } from './harness.js';

const PODS: PodSpec[] = [
  { name: 'server-0-node-1', ip: '198.18.10.10', node: 'node-1' },
  { name: 'server-1-node-2', ip: '198.18.20.10', node: 'node-2' },
  { name: 'client-0-node-1', ip: '198.18.10.50', node: 'node-1' },
  { name: 'client-1-node-2', ip: '198.18.20.50', node: 'node-2' },
  { name: 'server-2-node-2', ip: '198.18.20.11', node: 'node-2' },
];

let c: ConformanceBox;

/**
 * allocateClientsAndServers over two nodes, in two steps: node-1 in zone-a and node-2 in zone-b, a server and a client
 * on each: each client reaches only its zone's server; then node-2 is in zone-c (its label changed), with no endpoint
 * there: its client, upstream's third one, reaches both servers (server-1 stands for zone-b's pod then).
 */
async function sameZone(trafficDistribution: string): Promise<void> {
  const name = `traffic-dist-${trafficDistribution.toLowerCase()}`;
  const svc = c.createService(name, { ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }], selector: { app: name }, trafficDistribution });
  c.setEndpoints(
    name,
    [
      { pod: 'server-0-node-1', zone: ZONE['node-1'], hintZone: ZONE['node-1'] },
      { pod: 'server-1-node-2', zone: ZONE['node-2'], hintZone: ZONE['node-2'] },
    ],
    [{ name: '', port: 8080 }],
  );
  const target = `${clusterIP(svc)}:80`;
  await reachesOnly('client-0-node-1', target, ['server-0-node-1']);
  await reachesOnly('client-1-node-2', target, ['server-1-node-2']);
  try {
    setZones({ ...ZONE, 'node-2': 'zone-c' });
    await reachesOnly('client-1-node-2', target, ['server-0-node-1', 'server-1-node-2']);
  } finally {
    setZones(ZONE);
  }
}

/** checkTrafficDistribution for one client: its requests reach only `wanted`, every one of them (20 in a row here). */
async function reachesOnly(client: string, target: string, wanted: string[]): Promise<void> {
  let last = {};
  await eventually(`${client} reaches ${wanted.join(', ')} only`, async () => {
    const [rep] = await c.batch({ pod: client }, [{ mode: 'http', target, count: 20 }]);
    last = rep.byPod;
    return rep.failed === 0 && Object.keys(rep.byPod).every((p) => wanted.includes(p)) && wanted.every((p) => rep.byPod[p] > 0);
  }).catch((err: Error) => {
    throw new Error(`${err.message}; last answers: ${JSON.stringify(last)}`);
  });
}

/** The Node objects' zone labels, as the cloud provider sets them. */
function setZones(zones: Record<NodeName, string>): void {
  for (const n of NODE_NAMES) {
    const node = structuredClone(c.box.api.get('Node', undefined, n));
    assert.ok(node, n);
    node.metadata!.labels = { ...node.metadata!.labels, 'topology.kubernetes.io/zone': zones[n] };
    c.box.api.update(node);
  }
}

/**
 * allocateMultiNodeClientsAndServers over two nodes, in two steps (the zones are the Node objects' labels, changed
 * between them; each step's EndpointSlice is what the controller writes, an endpoint's zone its own and its hint):
 *  1. zone-1 holds both nodes, with a server pod and a client pod on each: both clients reach both servers, on either
 *     node, and never server-2, an endpoint of zone-2 (its pod runs on node-2: the sandbox has no zone-2 node then);
 *  2. node-1 is in zone-2, node-2 in zone-3: the zone-2 client (on node-1) reaches only zone-2's endpoint, server-2, on
 *     the other node (node-2), and the zone-3 client (on node-2), with no endpoint in its zone, reaches every endpoint:
 *     server-0 and server-1 stand for zone-1's two pods (their nodes are in other zones then).
 */
async function multiNode(trafficDistribution: string): Promise<void> {
  const name = `traffic-dist-multi-${trafficDistribution.toLowerCase()}`;
  const svc = c.createService(name, { ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }], selector: { app: name }, trafficDistribution });
  const target = `${clusterIP(svc)}:80`;
  const slice = (zoneOf: Record<string, string>) =>
    c.setEndpoints(
      name,
      Object.entries(zoneOf).map(([pod, zone]) => ({ pod, zone, hintZone: zone })),
      [{ name: '', port: 8080 }],
    );
  try {
    setZones({ 'node-1': 'zone-1', 'node-2': 'zone-1' });
    slice({ 'server-0-node-1': 'zone-1', 'server-1-node-2': 'zone-1', 'server-2-node-2': 'zone-2' });
    await reachesOnly('client-0-node-1', target, ['server-0-node-1', 'server-1-node-2']);
    await reachesOnly('client-1-node-2', target, ['server-0-node-1', 'server-1-node-2']);

    setZones({ 'node-1': 'zone-2', 'node-2': 'zone-3' });
    await reachesOnly('client-0-node-1', target, ['server-2-node-2']);
    await reachesOnly('client-1-node-2', target, ['server-0-node-1', 'server-1-node-2', 'server-2-node-2']);
  } finally {
    setZones(ZONE);
  }
}

const tests: Record<string, UpstreamImpl> = {
  // traffic_distribution.go: "should route traffic correctly between pods on multiple nodes when using PreferClose"
  'should route traffic correctly between pods on multiple nodes when using PreferClose': () => multiNode('PreferClose'),
  // traffic_distribution.go: "... when using PreferSameZone"
  'should route traffic correctly between pods on multiple nodes when using PreferSameZone': () => multiNode('PreferSameZone'),
  // traffic_distribution.go: "should route traffic to an endpoint in the same zone when using PreferClose"
  'should route traffic to an endpoint in the same zone when using PreferClose': () => sameZone('PreferClose'),
  // traffic_distribution.go: "... when using PreferSameZone" (the controller writes the same hints)
  'should route traffic to an endpoint in the same zone when using PreferSameZone': () => sameZone('PreferSameZone'),
};

describe('conformance: test/e2e/network/traffic_distribution.go', { timeout: scaled(120_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
  });
  after(async () => {
    await c?.close();
  });
  registerUpstream('traffic_distribution.go', tests);
});
