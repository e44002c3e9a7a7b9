/**
 * The planner on input validation did not filter (`kpr plan` on files, or
 * objects decoded by client-node): anything security-relevant fails closed,
 * every bad piece is reported with its field, one bad endpoint costs only
 * itself, a malformed list costs one report, keys cannot collide and
 * duplicate objects give no duplicate frontends (docs/validation.md).
 *
 * want lists "TYPE addr:port/PROTO → [backends]"; skipped lists substrings
 * of the reasons, in order, and must match the skipped list's length.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { planDataplane } from '../../agent/plan/plan-dataplane.js';
import { planService, type PlanContext } from '../../agent/plan/plan-service.js';
import type { PlanFrontend, ServicePlan } from '../../agent/plan/types.js';
import { ep, slice } from '../support/k8s-fixtures.js';

const NODE = 'node-1';
const node: V1Node = { metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '192.168.1.10' }] } };

/** A LoadBalancer Service default/web: port 80 with nodePort 30080, one VIP, one externalIP, the given spec fields. */
function lb(spec: Record<string, unknown> = {}): V1Service {
  return {
    metadata: { namespace: 'default', name: 'web' },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.10',
      ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }],
      externalIPs: ['198.51.100.1'],
      ...spec,
    },
    status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } },
  } as V1Service;
}

/** The same without a load balancer (no status). */
function noLB(spec: Record<string, unknown>): V1Service {
  const s = lb(spec);
  delete s.status;
  return s;
}

const http8080 = [{ name: 'http', port: 8080, protocol: 'TCP' }];
const slices = (...eps: unknown[]) => [slice('default/web-a', { ports: http8080, endpoints: eps as V1EndpointSlice['endpoints'] })];
const one = slices(ep('10.0.0.1'));

function render(frontends: PlanFrontend[]): string[] {
  return frontends.map(
    (f) =>
      `${f.type} ${f.address}:${f.port}/${f.protocol} → [${f.backends.map((b) => `${b.address}:${b.port}`).join(' ')}]${f.sourceRanges.length ? ` from ${f.sourceRanges.join(',')}` : ''}`,
  );
}

function plan(service: V1Service, s: V1EndpointSlice[] = one, ctx: Partial<PlanContext> = {}): ServicePlan {
  return planService(service, s, { nodeName: NODE, node, ...ctx });
}

function assertSkipped(p: ServicePlan, want: string[]): void {
  assert.equal(p.skipped.length, want.length, JSON.stringify(p.skipped));
  want.forEach((w, i) => assert.ok(p.skipped[i].reason.includes(w), `${p.skipped[i].reason} ∌ ${w}`));
}

/** As the agent's watcher hands it over: through client-node's decoder (a string given for a list becomes its characters). */
function decoded(s: V1Service): V1Service {
  return ObjectSerializer.deserialize(JSON.parse(JSON.stringify(s)), 'V1Service', '') as V1Service;
}

const CLUSTER_IP = 'ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080]';
const NODE_PORT = 'NodePort 192.168.1.10:30080/TCP → [10.0.0.1:8080]';
const VIP = 'LoadBalancer 203.0.113.7:80/TCP → [10.0.0.1:8080]';
const EXTERNAL_IP = 'ExternalIP 198.51.100.1:80/TCP → [10.0.0.1:8080]';

describe('planner: loadBalancerSourceRanges it cannot read fail closed', () => {
  it('readable ranges restrict the VIP (the control case)', () => {
    const p = plan(lb({ loadBalancerSourceRanges: ['10.0.0.0/8', ' 192.0.2.0/24 '] }));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP, NODE_PORT, `${VIP} from 10.0.0.0/8,192.0.2.0/24`, EXTERNAL_IP]);
    assertSkipped(p, []);
  });

  const unreadable: Array<[string, unknown, string]> = [
    ['a string instead of a list', '10.0.0.0/8', 'not a list ("10.0.0.0/8")'],
    ['a number', 8, 'not a list (8)'],
    ['an object', { cidr: '10.0.0.0/8' }, 'not a list'],
    ['one entry that is not a CIDR', ['everyone'], 'not a CIDR: "everyone"'],
    ['a good entry next to a bad one', ['10.0.0.0/8', '10.0.0.0/99'], 'not a CIDR: "10.0.0.0/99"'],
    ['a zone in the address', ['fe80::%eth0/64'], 'not a CIDR'],
    ['a number entry', [10], 'not a CIDR: 10'],
    ['1,000 bad entries (one report)', Array.from({ length: 1000 }, (_, i) => `bad${i}`), 'not a CIDR: "bad0", "bad1", "bad2" (and 997 more)'],
  ];
  for (const [name, ranges, reason] of unreadable) {
    it(`${name}: no VIP frontend, never an open one; the rest stays`, () => {
      const p = plan(lb({ loadBalancerSourceRanges: ranges }));
      assert.deepEqual(render(p.frontends), [CLUSTER_IP, NODE_PORT, EXTERNAL_IP]);
      assertSkipped(p, [`spec.loadBalancerSourceRanges cannot be read (${reason}`]);
    });
  }

  it('a string decoded by client-node into its characters is as unreadable', () => {
    const s = decoded(lb({ loadBalancerSourceRanges: '10.0.0.0/8' }));
    assert.deepEqual(s.spec!.loadBalancerSourceRanges!.slice(0, 3), ['1', '0', '.']);
    const p = plan(s);
    assert.deepEqual(render(p.frontends), [CLUSTER_IP, NODE_PORT, EXTERNAL_IP]);
    assertSkipped(p, ['not a CIDR: "1", "0", "." (and 7 more)']);
  });

  it('with --source-ranges-for-all-external the NodePort and externalIP frontends go too', () => {
    const p = plan(lb({ loadBalancerSourceRanges: 'x' }), one, { sourceRangesForAllExternal: true });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, ['spec.loadBalancerSourceRanges cannot be read']);
  });
});

describe('planner: invalid numbers and enums are reported with their field', () => {
  for (const nodePort of [-1, 70000, '30080', 30080.5, { n: 1 }]) {
    it(`nodePort ${JSON.stringify(nodePort)}: no NodePort frontend, reported`, () => {
      const p = plan(noLB({ type: 'NodePort', externalIPs: [], ports: [{ name: 'http', port: 80, nodePort }] }));
      assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
      assertSkipped(p, [`invalid nodePort (port "http" 80/TCP) ${JSON.stringify(nodePort)}`]);
    });
  }

  it('nodePort 0 is "not set": no frontend, nothing to report', () => {
    const p = plan(noLB({ type: 'NodePort', externalIPs: [], ports: [{ name: 'http', port: 80, nodePort: 0 }] }));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, []);
  });

  it('a valid healthCheckNodePort gives the health check (the control case)', () => {
    const p = plan(lb({ externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 }));
    assert.deepEqual(p.healthCheck, { nodePort: 32000, localReadyEndpoints: 0 });
    assertSkipped(p, []);
  });

  for (const hc of [-1, 70000, 'x', 3.5]) {
    it(`healthCheckNodePort ${JSON.stringify(hc)}: no health check server, reported`, () => {
      const p = plan(lb({ externalTrafficPolicy: 'Local', healthCheckNodePort: hc }));
      assert.equal(p.healthCheck, undefined);
      assertSkipped(p, [`invalid spec.healthCheckNodePort ${JSON.stringify(hc)} (an integer 1..65535): no health check server`]);
    });
  }

  it('unknown sessionAffinity, externalTrafficPolicy and internalTrafficPolicy: the API defaults, each reported', () => {
    const p = plan(lb({ sessionAffinity: 'Sticky', externalTrafficPolicy: 'local', internalTrafficPolicy: 7 }));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP, NODE_PORT, VIP, EXTERNAL_IP]);
    assert.ok(p.frontends.every((f) => f.trafficPolicy === 'Cluster' && f.affinityTimeoutSeconds === 0));
    assertSkipped(p, [
      'invalid spec.externalTrafficPolicy "local" (one of Cluster, Local); using Cluster',
      'invalid spec.internalTrafficPolicy 7 (one of Cluster, Local); using Cluster',
      'invalid spec.sessionAffinity "Sticky" (one of None, ClientIP); using None',
    ]);
  });

  it('spec.ports that is not a list: reported, nothing programmed', () => {
    const p = plan(lb({ ports: 5 }));
    assert.deepEqual(p.frontends, []);
    assertSkipped(p, ['spec.ports is not a list (5)', 'no ports']);
  });
});

describe('planner: one bad endpoint is skipped alone', () => {
  const cip = (s: V1EndpointSlice[], family: 'IPv4' | 'IPv6' = 'IPv4') =>
    plan(
      {
        metadata: { namespace: 'default', name: 'web' },
        spec:
          family === 'IPv4'
            ? { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80 }] }
            : { clusterIP: 'fd00::a', ipFamilies: ['IPv6'], ports: [{ name: 'http', port: 80 }] },
      },
      s,
    );

  it('an IPv6 zone (fe80::1%eth0) among good endpoints: the others are planned, that one reported', () => {
    const p = cip(
      [slice('default/web-a', { addressType: 'IPv6', ports: http8080, endpoints: [ep('2001:db8::1'), ep('fe80::1%eth0'), ep('2001:db8::2')] })],
      'IPv6',
    );
    assert.deepEqual(render(p.frontends), ['ClusterIP fd00::a:80/TCP → [2001:db8::1:8080 2001:db8::2:8080]']);
    assertSkipped(p, ['endpoints[1]: invalid endpoint address "fe80::1%eth0"; this endpoint is skipped']);
  });

  it('garbage addresses of every kind in an IPv4 slice: each skipped, the good one planned', () => {
    const bad = [ep('10.0.0.300'), { addresses: [7] }, { addresses: '10.0.0.9' }, { addresses: [] }, null, 'x', ep('2001:db8::1')];
    const p = cip(slices(...bad, ep('10.0.0.1')));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, [
      'endpoints[0]: invalid endpoint address "10.0.0.300"',
      'endpoints[1]: invalid endpoint address 7',
      'endpoints[2]: endpoint with no addresses',
      'endpoints[3]: endpoint with no addresses',
      'endpoints[4]: endpoint with no addresses',
      'endpoints[5]: endpoint with no addresses',
      'endpoints[6]: invalid endpoint address "2001:db8::1" in an IPv4 slice',
    ]);
  });

  it('1,000 bad endpoints: 8 named, the rest in one line', () => {
    const p = cip(slices(...Array.from({ length: 1000 }, () => ep('bad')), ep('10.0.0.1')));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assert.equal(p.skipped.length, 9);
    assert.match(p.skipped[8].reason, /^992 more invalid endpoints skipped$/);
  });

  it('conditions that are not booleans: never ready by accident, reported', () => {
    const p = cip(slices({ addresses: ['10.0.0.2'], conditions: { ready: 'false' } }, ep('10.0.0.1')));
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, ['endpoints[0]: conditions that are not booleans are taken as false']);
  });

  it('endpoints that is not a list: reported, no endpoints', () => {
    const p = cip([{ ...slice('default/web-a', { ports: http8080 }), endpoints: 5 } as unknown as V1EndpointSlice]);
    assert.deepEqual(render(p.frontends), ['ClusterIP 10.96.0.10:80/TCP → []']);
    assertSkipped(p, ['endpoints is not a list (5)']);
  });
});

describe('planner: ipFamilies and other lists cost one report', () => {
  it('ipFamilies with 1,000 entries: one report, the primary clusterIP planned', () => {
    const families = Array.from({ length: 1000 }, () => 'IPv4');
    const p = plan({
      metadata: { namespace: 'default', name: 'web' },
      spec: { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ipFamilies: families, ports: [{ name: 'http', port: 80 }] },
    });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, ['invalid spec.ipFamilies an array of 1000 ignored']);
  });

  it('ipFamilies with an unknown family: one report, the primary clusterIP planned', () => {
    const p = plan({
      metadata: { namespace: 'default', name: 'web' },
      spec: { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00::a'], ipFamilies: ['IPv4', 'IPv7'], ports: [{ name: 'http', port: 80 }] },
    });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, ['invalid spec.ipFamilies']);
  });

  it('1,000 invalid externalIPs: one report naming three', () => {
    const p = plan(
      noLB({ type: 'ClusterIP', ports: [{ name: 'http', port: 80 }], externalIPs: [...Array.from({ length: 1000 }, (_, i) => `x${i}`), '198.51.100.1'] }),
    );
    assert.deepEqual(render(p.frontends), [CLUSTER_IP, EXTERNAL_IP]);
    assertSkipped(p, ['invalid externalIP "x0", "x1", "x2" (and 997 more) ignored']);
  });
});

describe('planner: keys cannot collide, duplicates are planned once', () => {
  const svcOf = (namespace: string, name: string, clusterIP: string): V1Service => ({
    metadata: { namespace, name },
    spec: { clusterIP, ports: [{ name: 'http', port: 80 }] },
  });
  const sliceOf = (namespace: string, name: string, service: string, address: string): V1EndpointSlice => ({
    metadata: { namespace, name, labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: http8080,
    endpoints: [ep(address)],
  });

  it('"a/b"+"c" and "a"+"b/c" are two Services, each with its own endpoints', () => {
    const p = planDataplane({
      nodeName: NODE,
      services: [svcOf('a/b', 'c', '10.96.0.1'), svcOf('a', 'b/c', '10.96.0.2')],
      endpointSlices: [sliceOf('a/b', 's1', 'c', '10.0.0.1'), sliceOf('a', 's2', 'b/c', '10.0.0.2')],
    });
    const byService = Object.fromEntries(p.frontends.map((f) => [f.service, render([f])[0]]));
    assert.deepEqual(byService, {
      'a%2Fb/c': 'ClusterIP 10.96.0.1:80/TCP → [10.0.0.1:8080]',
      'a/b%2Fc': 'ClusterIP 10.96.0.2:80/TCP → [10.0.0.2:8080]',
    });
  });

  it('the same Service twice: its frontends once, the duplicate reported', () => {
    const s = svcOf('default', 'web', '10.96.0.10');
    const p = planDataplane({ nodeName: NODE, services: [s, structuredClone(s)], endpointSlices: one });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assert.deepEqual(p.skipped, [{ object: 'Service default/web', reason: 'duplicate object: the first one is used' }]);
  });

  it('the same slice twice: its backends once, the duplicate reported', () => {
    const p = planDataplane({ nodeName: NODE, services: [svcOf('default', 'web', '10.96.0.10')], endpointSlices: [...one, ...structuredClone(one)] });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assert.deepEqual(p.skipped, [{ object: 'EndpointSlice default/web-a', reason: 'duplicate object: the first one is used' }]);
  });

  it('the same endpoints in two slices, and one endpoint twice in a slice: each IP:port once (as kube-proxy)', () => {
    const two = [
      slice('default/web-a', { ports: http8080, endpoints: [ep('10.0.0.2'), ep('10.0.0.1'), ep('10.0.0.2')] }),
      slice('default/web-b', { ports: http8080, endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] }),
    ];
    const p = planDataplane({ nodeName: NODE, services: [svcOf('default', 'web', '10.96.0.10')], endpointSlices: two });
    assert.deepEqual(render(p.frontends), ['ClusterIP 10.96.0.10:80/TCP → [10.0.0.1:8080 10.0.0.2:8080]']);
    assert.deepEqual(p.skipped, []);
  });

  it('duplicate Service ports: the first is used, reported, no duplicate frontend', () => {
    const s = svcOf('default', 'web', '10.96.0.10');
    s.spec!.ports = [
      { name: 'http', port: 80 },
      { name: 'http2', port: 80 },
    ];
    const p = planService(s, one, { nodeName: NODE });
    assert.deepEqual(render(p.frontends), [CLUSTER_IP]);
    assertSkipped(p, ['duplicate port 80/TCP']);
  });
});
