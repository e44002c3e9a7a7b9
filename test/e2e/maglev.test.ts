/**
 * Maglev across nodes (rule 40 of docs/semantics.md): two real agents, one
 * per node namespace, a NodePort Service annotated kpr.dev/lb-algorithm:
 * maglev, and one outside client. The same client flow (address and source
 * port) sent to node-1's NodePort and to node-2's reaches the same backend
 * pod on both, for every flow, where random selection would agree by
 * chance only. Topology: sandbox/two-node.ts.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { TwoNodeCluster, UNDERLAY, type NodeName } from '../../sandbox/two-node.js';
import type { BatchStep } from '../../sandbox/client.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice } from '../support/e2e-objects.js';

const PODS = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName },
  { name: 'web-1b', ip: '198.18.10.11', node: 'node-1' as NodeName },
  { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' as NodeName },
  { name: 'web-2b', ip: '198.18.20.11', node: 'node-2' as NodeName },
];
const N1 = UNDERLAY['node-1'];
const N2 = UNDERLAY['node-2'];
const FLOWS = 24;

describe('Maglev: the same client flow through either node reaches the same backend', { timeout: scaled(150_000) }, () => {
  let box: TwoNodeCluster;

  before(async () => {
    requireRoot();
    box = await TwoNodeCluster.create({ pods: PODS });
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'mg', namespace: 'e2e', annotations: { 'kpr.dev/lb-algorithm': 'maglev' } },
      spec: {
        type: 'NodePort',
        clusterIP: '198.19.0.20',
        clusterIPs: ['198.19.0.20'],
        ports: [{ name: 'dns', port: 53, targetPort: 5353, nodePort: 30090, protocol: 'UDP' }],
      },
    });
    box.api.create(
      endpointSlice(
        'e2e',
        'mg-1',
        'mg',
        PODS.map((p) => ({ ip: p.ip, node: p.node })),
        [{ name: 'dns', port: 5353, protocol: 'UDP' }],
      ),
    );
    await box.startAgents();
  });

  after(async () => {
    await box?.close();
  });

  test(`${FLOWS} UDP flows, each sent from one source port to node-1's and node-2's NodePort: one backend per flow, the same on both nodes`, async () => {
    const ports = Array.from({ length: FLOWS }, (_, i) => 41000 + i * 37);
    const steps: BatchStep[] = ports.flatMap((srcPort) => [
      { mode: 'udp', target: `${N1}:30090`, srcPort },
      { mode: 'udp', target: `${N2}:30090`, srcPort },
    ]);
    const rep = await box.external('client-a', 'batch', '', ['--plan', JSON.stringify(steps)]);
    assert.equal(rep.failed, 0, JSON.stringify(rep.steps?.filter((s) => s.failed > 0).slice(0, 3)));
    const pod = (i: number) => Object.keys(rep.steps![i].byPod ?? {});
    let same = 0;
    const used = new Set<string>();
    for (let f = 0; f < FLOWS; f++) {
      const [a, b] = [pod(2 * f), pod(2 * f + 1)];
      assert.equal(a.length, 1, `flow ${ports[f]} via node-1: ${JSON.stringify(rep.steps![2 * f].byPod)}`);
      used.add(a[0]);
      if (a[0] === b[0]) same++;
    }
    assert.equal(same, FLOWS, `${same} of ${FLOWS} flows reached the same backend through both nodes`);
    assert.ok(used.size >= 2, `the flows are spread over the backends: ${[...used].join(', ')}`);
  });
});
