/**
 * planService beyond the plain ClusterIP: NodePort / LoadBalancer /
 * externalIPs frontends, traffic policies (with the eTP=Local in-node
 * short-circuit), ClientIP affinity, source ranges, health checks,
 * dual-stack and topology from the Node. Each case names the kube-proxy
 * endpoint rule it checks (numbered in docs/semantics.md).
 *
 * want lists "TYPE addr:port/PROTO → [backends]" with, where set,
 * " in-node [..]" (internalBackends) and " drop" (dropWhenEmpty).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { planService, type PlanContext } from '../../agent/plan/plan-service.js';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { ep, slice } from '../support/k8s-fixtures.js';

const NODE = 'node-1';

function node(addresses: Array<[string, string]>, zone?: string): V1Node {
  return {
    metadata: { name: NODE, labels: zone ? { 'topology.kubernetes.io/zone': zone } : {} },
    status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
  };
}

const dualNode = node([
  ['InternalIP', '192.168.1.10'],
  ['ExternalIP', '203.0.113.10'],
  ['InternalIP', 'fd00:1::10'],
  ['Hostname', 'node-1'],
]);

function svc(spec: Record<string, unknown>, status?: Record<string, unknown>): V1Service {
  return {
    metadata: { namespace: 'default', name: 'web' },
    spec: { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }], ...spec },
    ...(status ? { status } : {}),
  } as V1Service;
}

const http8080 = [{ name: 'http', port: 8080, protocol: 'TCP' }];
const local = (a: string, o = {}) => ep(a, { nodeName: NODE, ...o });
const remote = (a: string, o = {}) => ep(a, { nodeName: 'node-2', ...o });
const slices = (...eps: ReturnType<typeof ep>[]) => [slice('default/web-a', { ports: http8080, endpoints: eps })];

function render(frontends: PlanFrontend[]): string[] {
  const list = (bs: Array<{ address: string; port: number }>) =>
    `[${bs.map((b) => (b.address.includes(':') ? `[${b.address}]:${b.port}` : `${b.address}:${b.port}`)).join(' ')}]`;
  return frontends.map(
    (f) =>
      `${f.type} ${f.address.includes(':') ? `[${f.address}]` : f.address}:${f.port}/${f.protocol} → ${list(f.backends)}` +
      (f.internalBackends ? ` in-node ${list(f.internalBackends)}` : '') +
      (f.dropWhenEmpty ? ' drop' : ''),
  );
}

interface Case {
  name: string;
  service: V1Service;
  slices: V1EndpointSlice[];
  ctx?: Partial<PlanContext>;
  want: string[];
  /** Substrings of the skip reasons, in order (exact count). */
  skipped?: string[];
}

const cases: Case[] = [
  {
    name: 'NodePort: one frontend per node address of the family, eTP Cluster uses every ready endpoint (rules 8, 29 of docs/semantics.md)',
    service: svc({ type: 'NodePort' }),
    slices: slices(local('10.0.0.1'), remote('10.0.0.2')),
    want: [
      'ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080 10.0.0.2:8080]',
      'NodePort 192.168.1.10:30080/TCP → [10.0.0.1:8080 10.0.0.2:8080]',
      'NodePort 203.0.113.10:30080/TCP → [10.0.0.1:8080 10.0.0.2:8080]',
    ],
  },
  {
    name: 'nodePortAddresses "primary": only the InternalIP(s) (rule 29 of docs/semantics.md)',
    service: svc({ type: 'NodePort' }),
    slices: slices(remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['primary'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]', 'NodePort 192.168.1.10:30080/TCP → [10.0.0.2:8080]'],
  },
  {
    name: 'nodePortAddresses CIDRs filter node addresses; an invalid one is reported (rule 29 of docs/semantics.md)',
    service: svc({ type: 'NodePort' }),
    slices: slices(remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['203.0.113.0/24', 'bogus'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]', 'NodePort 203.0.113.10:30080/TCP → [10.0.0.2:8080]'],
    skipped: ['invalid CIDR "bogus"'],
  },
  {
    name: 'eTP Local: external frontends use local endpoints; in-node callers are short-circuited to the cluster set (rules 9, 21, 25 of docs/semantics.md)',
    service: svc({ type: 'NodePort', externalTrafficPolicy: 'Local' }),
    slices: slices(local('10.0.0.1'), remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['primary'] },
    want: [
      'ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080 10.0.0.2:8080]',
      'NodePort 192.168.1.10:30080/TCP → [10.0.0.1:8080] in-node [10.0.0.1:8080 10.0.0.2:8080]',
    ],
  },
  {
    name: 'eTP Local with no local endpoint but endpoints elsewhere: external traffic dropped, in-node callers still served (rule 25 of docs/semantics.md)',
    service: svc({ type: 'NodePort', externalTrafficPolicy: 'Local' }),
    slices: slices(remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['primary'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]', 'NodePort 192.168.1.10:30080/TCP → [] in-node [10.0.0.2:8080] drop'],
  },
  {
    name: 'eTP Local with no endpoints anywhere: every frontend refuses, nothing dropped (rule 23 of docs/semantics.md)',
    service: svc({ type: 'NodePort', externalTrafficPolicy: 'Local' }),
    slices: slices(remote('10.0.0.2', { ready: false, serving: false })),
    ctx: { nodePortAddresses: ['primary'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → []', 'NodePort 192.168.1.10:30080/TCP → []'],
  },
  {
    name: 'iTP Local: the ClusterIP uses local endpoints only, external frontends (eTP Cluster) all (rules 9, 21 of docs/semantics.md)',
    service: svc({ type: 'NodePort', internalTrafficPolicy: 'Local' }),
    slices: slices(local('10.0.0.1'), remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['primary'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080]', 'NodePort 192.168.1.10:30080/TCP → [10.0.0.1:8080 10.0.0.2:8080]'],
  },
  {
    name: 'iTP Local with no local endpoints but endpoints elsewhere: kube-proxy drops (rule 24 of docs/semantics.md), kpr refuses at once',
    service: svc({ internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80 }] }),
    slices: slices(remote('10.0.0.2')),
    want: ['ClusterIP 10.96.0.10:80/TCP → []'],
  },
  {
    name: 'iTP Local: a local serving+terminating endpoint is the fallback, a remote ready one is not used (rule 21 of docs/semantics.md)',
    service: svc({ internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80 }] }),
    slices: slices(local('10.0.0.1', { ready: false, terminating: true }), remote('10.0.0.2')),
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080]'],
  },
  {
    name: 'LoadBalancer: VIP-mode ingress IPs only; ipMode Proxy and hostname-only get nothing (rule 8 of docs/semantics.md)',
    service: svc(
      { type: 'LoadBalancer' },
      {
        loadBalancer: {
          ingress: [{ ip: '198.51.100.1' }, { ip: '198.51.100.2', ipMode: 'Proxy' }, { hostname: 'lb.example' }, { ip: '198.51.100.3', ipMode: 'VIP' }],
        },
      },
    ),
    slices: slices(remote('10.0.0.2')),
    ctx: { nodePortAddresses: ['primary'] },
    want: [
      'ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]',
      'NodePort 192.168.1.10:30080/TCP → [10.0.0.2:8080]',
      'LoadBalancer 198.51.100.1:80/TCP → [10.0.0.2:8080]',
      'LoadBalancer 198.51.100.3:80/TCP → [10.0.0.2:8080]',
    ],
  },
  {
    name: 'LoadBalancer with allocateLoadBalancerNodePorts false (no nodePort): no NodePort frontends (rule 10 of docs/semantics.md)',
    service: svc(
      { type: 'LoadBalancer', allocateLoadBalancerNodePorts: false, ports: [{ name: 'http', port: 80 }] },
      { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } },
    ),
    slices: slices(remote('10.0.0.2')),
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]', 'LoadBalancer 198.51.100.1:80/TCP → [10.0.0.2:8080]'],
  },
  {
    name: 'externalIPs on a ClusterIP Service: one frontend each, filtered by family; invalid ones reported (rule 8 of docs/semantics.md)',
    service: svc({ externalIPs: ['198.51.100.7', 'fd00:9::7', 'nope'], ports: [{ name: 'http', port: 80 }] }),
    slices: slices(remote('10.0.0.2')),
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]', 'ExternalIP 198.51.100.7:80/TCP → [10.0.0.2:8080]'],
    skipped: ['invalid externalIP "nope"'],
  },
  {
    name: 'no endpoints: every frontend refuses (rule 23 of docs/semantics.md)',
    service: svc({ type: 'LoadBalancer' }, { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } }),
    slices: [],
    ctx: { nodePortAddresses: ['primary'] },
    want: ['ClusterIP 10.96.0.10:80/TCP → []', 'NodePort 192.168.1.10:30080/TCP → []', 'LoadBalancer 198.51.100.1:80/TCP → []'],
  },
  {
    name: 'dual-stack NodePort Service: each family its clusterIP, node address and slices (rules 4, 5 of docs/semantics.md)',
    service: svc({ type: 'NodePort', clusterIPs: ['10.96.0.10', 'fd00::10'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack' }),
    slices: [
      slice('default/web-a', { ports: http8080, endpoints: [remote('10.0.0.2')] }),
      slice('default/web-b', { addressType: 'IPv6', ports: http8080, endpoints: [remote('fd00:0:0::2')] }),
    ],
    ctx: { nodePortAddresses: ['primary'] },
    want: [
      'ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]',
      'NodePort 192.168.1.10:30080/TCP → [10.0.0.2:8080]',
      'ClusterIP [fd00::10]:80/TCP → [[fd00::2]:8080]',
      'NodePort [fd00:1::10]:30080/TCP → [[fd00::2]:8080]',
    ],
  },
  {
    name: 'SCTP port of a NodePort Service is programmed like the TCP one: ClusterIP and NodePort frontends (rule 39 of docs/semantics.md)',
    service: svc({
      type: 'NodePort',
      ports: [
        { name: 'http', port: 80, nodePort: 30080 },
        { name: 's', port: 90, protocol: 'SCTP', nodePort: 30090 },
      ],
    }),
    slices: [
      slice('default/web-a', {
        ports: [...http8080, { name: 's', port: 9090, protocol: 'SCTP' }],
        endpoints: [remote('10.0.0.2')],
      }),
    ],
    ctx: { nodePortAddresses: ['primary'] },
    want: [
      'ClusterIP 10.96.0.10:80/TCP → [10.0.0.2:8080]',
      'NodePort 192.168.1.10:30080/TCP → [10.0.0.2:8080]',
      'ClusterIP 10.96.0.10:90/SCTP → [10.0.0.2:9090]',
      'NodePort 192.168.1.10:30090/SCTP → [10.0.0.2:9090]',
    ],
  },
  {
    name: "zone hints from the Node's zone label apply to the ClusterIP (rule 20 of docs/semantics.md)",
    service: svc({ ports: [{ name: 'http', port: 80 }] }),
    slices: [
      slice('default/web-a', {
        ports: http8080,
        endpoints: [
          { ...remote('10.0.0.1'), hints: { forZones: [{ name: 'zone-a' }] } },
          { ...remote('10.0.0.2'), hints: { forZones: [{ name: 'zone-b' }] } },
        ],
      }),
    ],
    ctx: { node: node([['InternalIP', '192.168.1.10']], 'zone-a') },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080]'],
  },
  {
    name: 'zone hints without a zone label on the Node: no filtering (rule 20 of docs/semantics.md)',
    service: svc({ ports: [{ name: 'http', port: 80 }] }),
    slices: [
      slice('default/web-a', {
        ports: http8080,
        endpoints: [
          { ...remote('10.0.0.1'), hints: { forZones: [{ name: 'zone-a' }] } },
          { ...remote('10.0.0.2'), hints: { forZones: [{ name: 'zone-b' }] } },
        ],
      }),
    ],
    ctx: { node: node([['InternalIP', '192.168.1.10']]) },
    want: ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080 10.0.0.2:8080]'],
  },
];

describe('planService: external frontends and policies', () => {
  for (const tc of cases) {
    it(tc.name, () => {
      const plan = planService(tc.service, tc.slices, { nodeName: NODE, node: dualNode, ...tc.ctx });
      assert.deepEqual(render(plan.frontends), tc.want);
      const want = tc.skipped ?? [];
      assert.equal(plan.skipped.length, want.length, JSON.stringify(plan.skipped));
      want.forEach((w, i) => assert.ok(plan.skipped[i].reason.includes(w), `${plan.skipped[i].reason} ∌ ${w}`));
    });
  }

  it('ClientIP affinity: default timeout 10800 s on every frontend of the Service (rules 8, 10 of docs/semantics.md)', () => {
    const plan = planService(svc({ type: 'NodePort', sessionAffinity: 'ClientIP' }), slices(remote('10.0.0.2')), { nodeName: NODE, node: dualNode });
    assert.deepEqual(
      plan.frontends.map((f) => f.affinityTimeoutSeconds),
      [10800, 10800, 10800],
    );
  });

  it('ClientIP affinity: timeoutSeconds is used, capped at 86400 s (reported); None means 0 (rules 8, 10 of docs/semantics.md)', () => {
    const t = (cfg: unknown, aff = 'ClientIP') =>
      planService(svc({ sessionAffinity: aff, sessionAffinityConfig: cfg, ports: [{ name: 'http', port: 80 }] }), [], { nodeName: NODE });
    assert.equal(t({ clientIP: { timeoutSeconds: 60 } }).frontends[0].affinityTimeoutSeconds, 60);
    const big = t({ clientIP: { timeoutSeconds: 100000 } });
    assert.equal(big.frontends[0].affinityTimeoutSeconds, 86400);
    assert.match(big.skipped[0].reason, /above the maximum/);
    assert.equal(t({ clientIP: { timeoutSeconds: 60 } }, 'None').frontends[0].affinityTimeoutSeconds, 0);
  });

  it('loadBalancerSourceRanges apply to LB frontends only (trimmed, by family); NodePorts are not subject to them (rule 28 of docs/semantics.md)', () => {
    const s = svc(
      { type: 'LoadBalancer', loadBalancerSourceRanges: [' 198.51.100.0/24 ', 'fd00::/64'] },
      { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } },
    );
    const plan = planService(s, [], { nodeName: NODE, node: dualNode, nodePortAddresses: ['primary'] });
    assert.deepEqual(
      plan.frontends.map((f) => [f.type, f.sourceRanges]),
      [
        ['ClusterIP', []],
        ['NodePort', []],
        ['LoadBalancer', ['198.51.100.0/24']],
      ],
    );
    const all = planService(s, [], { nodeName: NODE, node: dualNode, nodePortAddresses: ['primary'], sourceRangesForAllExternal: true });
    assert.deepEqual(
      all.frontends.map((f) => f.sourceRanges.length),
      [0, 1, 1],
    );
  });

  it('trafficPolicy names the policy whose set each frontend uses', () => {
    const plan = planService(svc({ type: 'NodePort', internalTrafficPolicy: 'Local', externalTrafficPolicy: 'Cluster' }), [], {
      nodeName: NODE,
      node: dualNode,
      nodePortAddresses: ['primary'],
    });
    assert.deepEqual(
      plan.frontends.map((f) => f.trafficPolicy),
      ['Local', 'Cluster'],
    );
  });

  it('backends on this node are marked local (backend flag LOCAL)', () => {
    const plan = planService(svc({ ports: [{ name: 'http', port: 80 }] }), slices(local('10.0.0.1'), remote('10.0.0.2')), { nodeName: NODE });
    assert.deepEqual(plan.frontends[0].backends, [
      { address: '10.0.0.1', port: 8080, local: true },
      { address: '10.0.0.2', port: 8080 },
    ]);
  });

  it('healthCheckNodePort: LoadBalancer with eTP Local; localReadyEndpoints counts distinct ready local IPs over every port (rules 8, 31 of docs/semantics.md)', () => {
    const s = svc({
      type: 'LoadBalancer',
      externalTrafficPolicy: 'Local',
      healthCheckNodePort: 32000,
      ports: [
        { name: 'http', port: 80, nodePort: 30080 },
        { name: 'admin', port: 81, nodePort: 30081 },
      ],
    });
    const sl = [
      slice('default/web-a', {
        ports: [...http8080, { name: 'admin', port: 9090, protocol: 'TCP' }],
        endpoints: [local('10.0.0.1'), local('10.0.0.3', { ready: false, terminating: true }), remote('10.0.0.2')],
      }),
    ];
    assert.deepEqual(planService(s, sl, { nodeName: NODE, node: dualNode }).healthCheck, { nodePort: 32000, localReadyEndpoints: 1 });
    assert.equal(
      planService(svc({ type: 'NodePort', externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 }), sl, { nodeName: NODE }).healthCheck,
      undefined,
    );
  });

  it('a frontend address shared by two kinds (externalIP = LB IP) is kept once and reported', () => {
    const s = svc(
      { type: 'LoadBalancer', externalIPs: ['198.51.100.1'], ports: [{ name: 'http', port: 80 }] },
      { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } },
    );
    const plan = planService(s, [], { nodeName: NODE });
    assert.deepEqual(
      plan.frontends.map((f) => f.type),
      ['ClusterIP', 'LoadBalancer'],
    );
    assert.match(plan.skipped[0].reason, /ExternalIP 198\.51\.100\.1:80\/TCP duplicates/);
  });
});

describe("planService: kube-proxy's no-local-endpoints count (kubeproxy_sync_proxy_rules_no_local_endpoints_total)", () => {
  const ctx: PlanContext = { nodeName: NODE, node: dualNode };
  const count = (service: V1Service, s: V1EndpointSlice[]) => planService(service, s, ctx).noLocalEndpoints;
  it('a Local policy with endpoints elsewhere but none here counts once per port, by policy', () => {
    const lb = { type: 'LoadBalancer', externalTrafficPolicy: 'Local' };
    assert.deepEqual(count(svc(lb), slices(remote('10.244.1.1'))), { internal: 0, external: 1 });
    assert.deepEqual(count(svc({ internalTrafficPolicy: 'Local' }), slices(remote('10.244.1.1'))), { internal: 1, external: 0 });
    assert.deepEqual(count(svc({ ...lb, internalTrafficPolicy: 'Local' }), slices(remote('10.244.1.1'))), { internal: 1, external: 1 });
    const twoPorts = svc({
      ...lb,
      ports: [
        { name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 },
        { name: 'dns', port: 53, protocol: 'UDP', nodePort: 30053 },
      ],
    });
    const both = [slice('default/web-a', { ports: [...http8080, { name: 'dns', port: 5353, protocol: 'UDP' }], endpoints: [remote('10.244.1.1')] })];
    assert.deepEqual(count(twoPorts, both), { internal: 0, external: 2 });
  });
  it('not counted: a local endpoint, no endpoint at all (refused, not "no local"), a Cluster policy, eTP=Local on a ClusterIP-only Service', () => {
    const lb = svc({ type: 'LoadBalancer', externalTrafficPolicy: 'Local', internalTrafficPolicy: 'Local' });
    assert.equal(count(lb, slices(local('10.244.0.1'), remote('10.244.1.1'))), undefined);
    assert.equal(count(lb, []), undefined);
    assert.equal(count(svc({ type: 'LoadBalancer' }), slices(remote('10.244.1.1'))), undefined);
    const clusterIpOnly = svc({ externalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
    assert.equal(count(clusterIpOnly, slices(remote('10.244.1.1'))), undefined);
  });
});
