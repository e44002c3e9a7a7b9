/**
 * Conformance: kubernetes/kubernetes test/e2e/network/loadbalancer.go
 * ("[sig-network] LoadBalancers", "LoadBalancers ESIPP"), one node:test
 * test per upstream It() (upstream-tests.ts); most need a cloud load
 * balancer and are n/a. "LoadBalancers ESIPP ... should work for
 * type=NodePort": a NodePort Service with externalTrafficPolicy=Local and
 * one endpoint (jig.CreateOnlyLocalNodePortService with a pod); from the
 * test container pod, GET /clientip on the NodePort of each node that has
 * an endpoint must show the test container's own IP (source IP preserved).
 * The test container runs once on the endpoint's node and once on the
 * other node. Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { requireRoot } from '../support/preflight.js';
import { ConformanceBox, eventually, nodePortOf, registerUpstream, type PodSpec, type UpstreamImpl } from './harness.js';

const PODS: PodSpec[] = [
  { name: 'external-local-nodeport', ip: '198.18.20.10', node: 'node-2' },
  { name: 'test-container-pod', ip: '198.18.10.50', node: 'node-1' },
  { name: 'test-container-pod-2', ip: '198.18.20.50', node: 'node-2' },
];

let c: ConformanceBox;

const tests: Record<string, UpstreamImpl> = {
  // loadbalancer.go (LoadBalancers ESIPP): "should work for type=NodePort"
  'should work for type=NodePort': async () => {
    const svc = c.createService('external-local-nodeport', {
      type: 'NodePort',
      externalTrafficPolicy: 'Local',
      ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }],
      selector: { name: 'external-local-nodeport' },
    });
    c.setEndpoints('external-local-nodeport', [{ pod: 'external-local-nodeport' }]);
    // getEndpointNodesWithInternalIP: the nodes with an endpoint, by InternalIP.
    const endpointNodes = [...new Set(['external-local-nodeport'].map((p) => c.pod(p).node))];
    for (const testContainer of ['test-container-pod', 'test-container-pod-2']) {
      for (const node of endpointNodes) {
        const target = `${c.nodeIp(node)}:${nodePortOf(svc)}`;
        const rep = await eventually(`${testContainer} → ${target}/clientip`, async () => {
          const r = await c.fromPod(testContainer, 'once', target);
          return r.ok === 1 ? r : undefined;
        });
        assert.deepEqual(rep.byPod, { 'external-local-nodeport': 1 });
        assert.deepEqual(
          rep.seenAs,
          { [c.pod(testContainer).ip]: 1 },
          `Source IP was NOT preserved: ${testContainer} → ${target}, the backend saw ${JSON.stringify(rep.seenAs)}`,
        );
      }
    }
  },
};

describe('conformance: test/e2e/network/loadbalancer.go', { timeout: scaled(90_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
  });
  after(async () => {
    await c?.close();
  });
  registerUpstream('loadbalancer.go', tests);
});
