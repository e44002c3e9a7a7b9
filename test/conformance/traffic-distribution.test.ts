/**
 * Conformance: kubernetes/kubernetes test/e2e/network/traffic_distribution.go
 * ("[sig-network] Traffic Distribution"), one node:test test per upstream
 * It() (upstream-tests.ts). A Service with spec.trafficDistribution, a
 * server pod in each zone and a client pod in each zone; the EndpointSlice
 * is what the controller writes for it: each endpoint's zone and a zone hint
 * for its own zone. Each client's requests must all reach the endpoint of
 * its zone (checkTrafficDistribution: at least 10 in a row, every wanted
 * endpoint reached, no other). Topology: sandbox/two-node.ts (node-1 is in
 * zone-a, node-2 in zone-b); conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { ZONE } from '../../sandbox/two-node.js';
import { requireRoot } from '../support/preflight.js';
import { clusterIP, ConformanceBox, eventually, registerUpstream, type PodSpec, type UpstreamImpl } from './harness.js';

const PODS: PodSpec[] = [
  { name: 'server-0-node-1', ip: '198.18.10.10', node: 'node-1' },
  { name: 'server-1-node-2', ip: '198.18.20.10', node: 'node-2' },
  { name: 'client-0-node-1', ip: '198.18.10.50', node: 'node-1' },
  { name: 'client-1-node-2', ip: '198.18.20.50', node: 'node-2' },
];

let c: ConformanceBox;

async function sameZone(trafficDistribution: string): Promise<void> {
  const name = `traffic-dist-${trafficDistribution.toLowerCase()}`;
  const svc = c.createService(name, { ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }], selector: { app: name }, trafficDistribution });
  c.setEndpoints(name, [
    { pod: 'server-0-node-1', zone: ZONE['node-1'], hintZone: ZONE['node-1'] },
    { pod: 'server-1-node-2', zone: ZONE['node-2'], hintZone: ZONE['node-2'] },
  ], [{ name: '', port: 8080 }]);
  const target = `${clusterIP(svc)}:80`;
  for (const [client, wanted] of [['client-0-node-1', 'server-0-node-1'], ['client-1-node-2', 'server-1-node-2']]) {
    await eventually(`${client} reaches ${wanted} only`, async () => {
      const [rep] = await c.batch({ pod: client }, [{ mode: 'http', target, count: 20 }]);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      return rep.byPod[wanted] === 20 ? true : undefined;
    });
  }
}

const tests: Record<string, UpstreamImpl> = {
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
