/**
 * categorizeEndpoints table test, modelled on kube-proxy's
 * TestCategorizeEndpoints (pkg/proxy/topology_test.go; rules 19–22 of docs/semantics.md).
 * nil versus empty: null means the policy is not used at all (or, for local,
 * that no local endpoint is usable, as upstream); [] means cluster endpoints
 * are used and there is nothing to send to. Unless a case says otherwise the
 * node is "node-1" in zone "zone-a".
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { categorizeEndpoints, type EndpointUse, type NodeTopology } from '../../agent/plan/categorize-endpoints.js';
import type { Endpoint } from '../../agent/plan/endpoint-slices.js';
import { parseIPv4 } from '../../agent/net/ip.js';

function e(addr: string, o: Partial<Endpoint> = {}): Endpoint {
  return {
    address: addr,
    addressKey: parseIPv4(addr)!.num,
    port: 80,
    ready: true,
    serving: true,
    terminating: false,
    isLocal: false,
    zoneHints: null,
    nodeHints: null,
    ...o,
  };
}
const names = (l: readonly Endpoint[] | null) => (l === null ? null : l.map((x) => x.address));

const zone = (z: string, o: Partial<Endpoint> = {}): Partial<Endpoint> => ({ zoneHints: [z], ...o });
const node = (n: string, z: string, o: Partial<Endpoint> = {}): Partial<Endpoint> => ({ nodeHints: [n], zoneHints: [z], ...o });
const ITP_LOCAL: EndpointUse = { usesCluster: false, usesLocal: true };
/** eTP=Local on an externally accessible port (cluster endpoints still used for the short-circuit, rule 9 of docs/semantics.md). */
const ETP_LOCAL: EndpointUse = { usesCluster: true, usesLocal: true };

const cases: Array<{
  name: string;
  use?: EndpointUse;
  topo?: NodeTopology;
  endpoints: Endpoint[];
  cluster: string[] | null;
  local: string[] | null;
  allReachable: string[];
  hasAny: boolean;
}> = [
  { name: 'no endpoints', endpoints: [], cluster: [], local: null, allReachable: [], hasAny: false },
  {
    name: 'Cluster policy: all ready endpoints, local or not',
    endpoints: [e('10.0.0.1'), e('10.0.0.2', { isLocal: true }), e('10.0.0.3', { ready: false })],
    cluster: ['10.0.0.1', '10.0.0.2'],
    local: null,
    allReachable: ['10.0.0.1', '10.0.0.2'],
    hasAny: true,
  },
  {
    name: 'Cluster policy, only a serving+terminating endpoint: it is the fallback (rule 19 of docs/semantics.md)',
    endpoints: [e('10.0.0.1', { ready: false, terminating: true })],
    cluster: ['10.0.0.1'],
    local: null,
    allReachable: ['10.0.0.1'],
    hasAny: true,
  },
  {
    name: 'Local policy only: local ready endpoints; hasAny counts remote ones too',
    use: { usesCluster: false, usesLocal: true },
    endpoints: [e('10.0.0.1'), e('10.0.0.2', { isLocal: true, ready: false, serving: false })],
    cluster: null,
    local: null,
    allReachable: [],
    hasAny: true,
  },
  {
    name: 'both policies: allReachable is the sorted union',
    use: { usesCluster: true, usesLocal: true },
    endpoints: [e('10.0.0.1', { isLocal: true }), e('10.0.0.2')],
    cluster: ['10.0.0.1', '10.0.0.2'],
    local: ['10.0.0.1'],
    allReachable: ['10.0.0.1', '10.0.0.2'],
    hasAny: true,
  },
  // ---- topology (rule 20 of docs/semantics.md)
  {
    name: "zone hints: endpoints hinted for the node's zone only",
    endpoints: [e('10.1.2.3', zone('zone-a')), e('10.1.2.4', zone('zone-b')), e('10.1.2.5', zone('zone-c')), e('10.1.2.6', zone('zone-a'))],
    cluster: ['10.1.2.3', '10.1.2.6'],
    local: null,
    allReachable: ['10.1.2.3', '10.1.2.6'],
    hasAny: true,
  },
  {
    name: 'empty node labels: no zone, no filtering',
    topo: { nodeName: 'node-1', zone: '' },
    endpoints: [e('10.1.2.3', zone('zone-a'))],
    cluster: ['10.1.2.3'],
    local: null,
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  {
    name: 'node in a different zone: no endpoint filtering',
    topo: { nodeName: 'node-1', zone: 'zone-b' },
    endpoints: [e('10.1.2.3', zone('zone-a'))],
    cluster: ['10.1.2.3'],
    local: null,
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  {
    name: 'unready endpoint: not counted for hints, not used',
    endpoints: [e('10.1.2.3', zone('zone-a')), e('10.1.2.4', zone('zone-b')), e('10.1.2.5', zone('zone-c')), e('10.1.2.6', zone('zone-a', { ready: false }))],
    cluster: ['10.1.2.3'],
    local: null,
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  {
    name: 'only unready endpoints in the same zone: should not filter',
    endpoints: [e('10.1.2.3', zone('zone-a', { ready: false })), e('10.1.2.4', zone('zone-b')), e('10.1.2.5', zone('zone-c'))],
    cluster: ['10.1.2.4', '10.1.2.5'],
    local: null,
    allReachable: ['10.1.2.4', '10.1.2.5'],
    hasAny: true,
  },
  {
    name: 'missing hints on one ready endpoint: no filtering',
    endpoints: [e('10.1.2.3', zone('zone-a')), e('10.1.2.4'), e('10.1.2.5', zone('zone-c'))],
    cluster: ['10.1.2.3', '10.1.2.4', '10.1.2.5'],
    local: null,
    allReachable: ['10.1.2.3', '10.1.2.4', '10.1.2.5'],
    hasAny: true,
  },
  {
    name: 'multiple hints per endpoint: any endpoint with the zone included',
    endpoints: [e('10.1.2.3', { zoneHints: ['zone-a', 'zone-b'] }), e('10.1.2.4', zone('zone-b')), e('10.1.2.5', { zoneHints: ['zone-b', 'zone-a'] })],
    cluster: ['10.1.2.3', '10.1.2.5'],
    local: null,
    allReachable: ['10.1.2.3', '10.1.2.5'],
    hasAny: true,
  },
  {
    name: 'PreferSameNode: every ready endpoint has a node hint and one names this node',
    endpoints: [e('10.1.2.3', node('node-1', 'zone-a')), e('10.1.2.4', node('node-2', 'zone-a')), e('10.1.2.5', node('node-3', 'zone-b'))],
    cluster: ['10.1.2.3'],
    local: null,
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  {
    name: 'PreferSameNode not possible (no endpoint for this node): falls back to same zone',
    endpoints: [e('10.1.2.3', node('node-2', 'zone-a')), e('10.1.2.4', node('node-3', 'zone-b'))],
    cluster: ['10.1.2.3'],
    local: null,
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  {
    name: 'PreferSameNode ignored if some endpoints are missing node hints',
    endpoints: [e('10.1.2.3', node('node-1', 'zone-a')), e('10.1.2.4', zone('zone-a')), e('10.1.2.5', zone('zone-b'))],
    cluster: ['10.1.2.3', '10.1.2.4'],
    local: null,
    allReachable: ['10.1.2.3', '10.1.2.4'],
    hasAny: true,
  },
  {
    name: 'conflicting topology and localness require merging allReachable',
    use: ETP_LOCAL,
    endpoints: [
      e('10.0.0.0', zone('zone-a', { isLocal: true })),
      e('10.0.0.1', zone('zone-b', { isLocal: true })),
      e('10.0.0.2', zone('zone-a')),
      e('10.0.0.3', zone('zone-b')),
    ],
    cluster: ['10.0.0.0', '10.0.0.2'],
    local: ['10.0.0.0', '10.0.0.1'],
    allReachable: ['10.0.0.0', '10.0.0.1', '10.0.0.2'],
    hasAny: true,
  },
  {
    name: 'iTP: Local, topology ignored for Local endpoints',
    use: ITP_LOCAL,
    endpoints: [e('10.1.2.3', zone('zone-b', { isLocal: true })), e('10.1.2.4', zone('zone-a'))],
    cluster: null,
    local: ['10.1.2.3'],
    allReachable: ['10.1.2.3'],
    hasAny: true,
  },
  // ---- traffic policies and the terminating fallback (rules 19, 21 of docs/semantics.md)
  {
    name: 'iTP: Local, eTP: Cluster (not externally accessible), some endpoints local',
    use: ITP_LOCAL,
    endpoints: [e('10.0.0.0', { isLocal: true }), e('10.0.0.1')],
    cluster: null,
    local: ['10.0.0.0'],
    allReachable: ['10.0.0.0'],
    hasAny: true,
  },
  {
    name: 'iTP: Cluster, eTP: Local, some endpoints local',
    use: ETP_LOCAL,
    endpoints: [e('10.0.0.0', { isLocal: true }), e('10.0.0.1')],
    cluster: ['10.0.0.0', '10.0.0.1'],
    local: ['10.0.0.0'],
    allReachable: ['10.0.0.0', '10.0.0.1'],
    hasAny: true,
  },
  {
    name: 'iTP: Local, eTP: Local, all endpoints remote',
    use: ETP_LOCAL,
    endpoints: [e('10.0.0.0'), e('10.0.0.1')],
    cluster: ['10.0.0.0', '10.0.0.1'],
    local: null,
    allReachable: ['10.0.0.0', '10.0.0.1'],
    hasAny: true,
  },
  {
    name: 'iTP: Local, all endpoints remote and terminating: nothing local, but hasAny',
    use: ITP_LOCAL,
    endpoints: [e('10.0.0.0', { ready: false, terminating: true }), e('10.0.0.1', { ready: false, terminating: true })],
    cluster: null,
    local: null,
    allReachable: [],
    hasAny: true,
  },
  {
    name: 'eTP: Local, only terminating local endpoints: they are used, cluster falls back too',
    use: ETP_LOCAL,
    endpoints: [
      e('10.0.0.0', { isLocal: true, ready: false, terminating: true }),
      e('10.0.0.1', { ready: false, terminating: true }),
      e('10.0.0.2', { ready: false, serving: false, terminating: true }),
    ],
    cluster: ['10.0.0.0', '10.0.0.1'],
    local: ['10.0.0.0'],
    allReachable: ['10.0.0.0', '10.0.0.1'],
    hasAny: true,
  },
  {
    name: 'eTP: Local, a ready remote endpoint and a terminating local one: local uses the terminating one, union reachable',
    use: ETP_LOCAL,
    endpoints: [e('10.0.0.0', { isLocal: true, ready: false, terminating: true }), e('10.0.0.1')],
    cluster: ['10.0.0.1'],
    local: ['10.0.0.0'],
    allReachable: ['10.0.0.0', '10.0.0.1'],
    hasAny: true,
  },
  {
    name: 'not-serving terminating endpoints are never used (rule 19 of docs/semantics.md)',
    use: ETP_LOCAL,
    endpoints: [e('10.0.0.0', { isLocal: true, ready: false, serving: false, terminating: true })],
    cluster: [],
    local: null,
    allReachable: [],
    hasAny: false,
  },
  {
    name: 'the terminating fallback ignores topology',
    endpoints: [e('10.1.2.3', zone('zone-b', { ready: false, terminating: true })), e('10.1.2.4', zone('zone-a', { ready: false, terminating: true }))],
    cluster: ['10.1.2.3', '10.1.2.4'],
    local: null,
    allReachable: ['10.1.2.3', '10.1.2.4'],
    hasAny: true,
  },
];

describe('categorizeEndpoints', () => {
  for (const tc of cases) {
    it(tc.name, () => {
      const got = categorizeEndpoints(tc.endpoints, tc.use, tc.topo ?? { nodeName: 'node-1', zone: 'zone-a' });
      assert.deepEqual(
        { cluster: names(got.cluster), local: names(got.local), allReachable: names(got.allReachable), hasAny: got.hasAny },
        { cluster: tc.cluster, local: tc.local, allReachable: tc.allReachable, hasAny: tc.hasAny },
      );
    });
  }
});
