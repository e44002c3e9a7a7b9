/**
 * categorizeEndpoints table test (kube-proxy's TestCategorizeEndpoints, the
 * part kpr implements today). nil versus empty: null means the policy is not
 * used at all; [] means it is used and has nothing to send to.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { categorizeEndpoints, type EndpointUse } from '../../agent/plan/categorize-endpoints.js';
import type { Endpoint } from '../../agent/plan/endpoint-slices.js';
import { parseIPv4 } from '../../agent/plan/ip.js';

function e(addr: string, o: Partial<Endpoint> = {}): Endpoint {
  return { address: addr, addressNum: parseIPv4(addr)!.num, port: 80, ready: true, serving: true, terminating: false, isLocal: false, zoneHints: null, nodeHints: null, ...o };
}
const names = (l: Endpoint[] | null) => (l === null ? null : l.map((x) => x.address));

const cases: Array<{
  name: string;
  use?: EndpointUse;
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
    name: 'Cluster policy, only not-ready endpoints: none (terminating fallback not yet)',
    endpoints: [e('10.0.0.1', { ready: false, terminating: true })],
    cluster: [],
    local: null,
    allReachable: [],
    hasAny: false,
  },
  {
    name: 'Local policy only: local ready endpoints; hasAny counts remote ones too',
    use: { usesCluster: false, usesLocal: true },
    endpoints: [e('10.0.0.1'), e('10.0.0.2', { isLocal: true, ready: false })],
    cluster: null,
    local: [],
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
];

describe('categorizeEndpoints', () => {
  for (const tc of cases) {
    it(tc.name, () => {
      const got = categorizeEndpoints(tc.endpoints, tc.use);
      assert.deepEqual(
        { cluster: names(got.cluster), local: names(got.local), allReachable: names(got.allReachable), hasAny: got.hasAny },
        { cluster: tc.cluster, local: tc.local, allReachable: tc.allReachable, hasAny: tc.hasAny },
      );
    });
  }
});
