import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { V1EndpointSlice, type V1Node, type V1Service } from '@kubernetes/client-node';
import { CompactEndpointSlice, pruneEndpointSlice, pruneNode, pruneService } from '../../agent/k8s/prune.js';
import { ReflectorCache } from '../../agent/k8s/reflector-cache.js';
import { endpointsByServicePort, planService } from '../../agent/plan/index.js';

/** As the deserializer types what the API server sends. */
const typed = <T>(raw: object, type: string): T => ObjectSerializer.deserialize(JSON.parse(JSON.stringify(raw)), type, '') as T;

const conds = (ready?: boolean, serving?: boolean, terminating?: boolean) => {
  const c: Record<string, boolean> = {};
  if (ready !== undefined) c.ready = ready;
  if (serving !== undefined) c.serving = serving;
  if (terminating !== undefined) c.terminating = terminating;
  return c;
};

/** Every condition combination (absent/true/false each) and no conditions object at all; nodes local, remote, absent; zone and node hints. */
function v4Endpoints(): object[] {
  const out: object[] = [];
  const tri = [undefined, true, false];
  let i = 10;
  for (const r of tri) {
    for (const s of tri) {
      for (const t of tri) {
        const ep: Record<string, unknown> = { addresses: [`198.18.1.${i}`], conditions: conds(r, s, t) };
        if (i % 3 === 0) ep.nodeName = 'node-1';
        else if (i % 3 === 1) ep.nodeName = `node-${i}`;
        if (i % 4 === 0) ep.hints = { forZones: [{ name: 'z1' }], forNodes: [{ name: 'node-1' }] };
        ep.targetRef = { kind: 'Pod', name: `p${i}` };
        ep.zone = 'z1';
        out.push(ep);
        i++;
      }
    }
  }
  out.push({ addresses: ['198.18.1.200'], nodeName: 'node-1' }); // no conditions: ready and serving (kube-proxy's nil)
  return out;
}

const ports = [
  { name: 'http', port: 8080, protocol: 'TCP', appProtocol: 'kubernetes.io/h2c' },
  { name: 'dns', port: 5353, protocol: 'UDP' },
  { name: 'sctp', port: 9999, protocol: 'SCTP' },
  { name: '', port: 7070 },
];

const slice = (name: string, addressType: string, endpoints: object[], extra: object = {}) => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: { name, namespace: 'ns', resourceVersion: '3', labels: { 'kubernetes.io/service-name': 'web' }, managedFields: [{ manager: 'x' }] },
  addressType,
  endpoints,
  ports,
  ...extra,
});

const service = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web', namespace: 'ns', resourceVersion: '2' },
  spec: {
    type: 'LoadBalancer',
    clusterIP: '198.19.0.1',
    clusterIPs: ['198.19.0.1', '2001:db8::1'],
    ipFamilies: ['IPv4', 'IPv6'],
    ipFamilyPolicy: 'RequireDualStack',
    ports: [
      { name: 'http', port: 80, protocol: 'TCP', targetPort: 8080, nodePort: 30080, appProtocol: 'kubernetes.io/h2c' },
      { name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns', nodePort: 30053 },
      { name: 'sctp', port: 99, protocol: 'SCTP', targetPort: 9999, nodePort: 30099 },
      { name: '', port: 70, targetPort: 7070, nodePort: 30070 },
    ],
    externalIPs: ['198.18.9.9'],
    externalTrafficPolicy: 'Local',
    internalTrafficPolicy: 'Cluster',
    healthCheckNodePort: 32000,
  },
  status: { loadBalancer: { ingress: [{ ip: '198.18.8.8' }] } },
};

const node = {
  metadata: { name: 'node-1', labels: { 'topology.kubernetes.io/zone': 'z1' } },
  status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
};

function slices(): object[] {
  return [
    slice('web-v4', 'IPv4', v4Endpoints()),
    slice('web-v6', 'IPv6', [
      { addresses: ['2001:db8::a'], conditions: { ready: true }, nodeName: 'node-1', hints: { forZones: [{ name: 'z1' }] } },
      { addresses: ['2001:db8::b'], conditions: { ready: false, serving: true, terminating: true }, nodeName: 'node-2', hints: { forZones: [{ name: 'z2' }] } },
    ]),
    slice('web-fqdn', 'FQDN', [{ addresses: ['web.example'], conditions: { ready: true } }]),
    // What the packing cannot hold: kept as endpoint objects, planned alike.
    slice('web-two', 'IPv4', [{ addresses: ['198.18.2.1', '198.18.2.2'], conditions: { ready: true } }]),
    slice('web-odd', 'IPv4', [{ addresses: ['198.18.3.1'], conditions: { ready: 'yes' } }, { addresses: ['198.18.3.2 x'] }, { addresses: [] }]),
    slice('web-empty', 'IPv4', []),
  ];
}

const fullSlices = () => slices().map((s) => typed<V1EndpointSlice>(s, 'V1EndpointSlice'));
const ctx = () => ({ nodeName: 'node-1', node: pruneNode(typed<V1Node>(node, 'V1Node')) });

describe('compact EndpointSlices in the watch cache', () => {
  test('the slices that pack are packed; the others keep endpoint objects; all are V1EndpointSlices', () => {
    const pruned = fullSlices().map(pruneEndpointSlice);
    assert.deepEqual(
      pruned.map((s) => s instanceof CompactEndpointSlice),
      [true, true, true, false, false, true],
    );
    for (const s of pruned) assert.ok(s instanceof V1EndpointSlice);
  });

  test('every endpoint reads back with the fields the planner uses (address, conditions, nodeName, hints); the rest is gone', () => {
    const full = fullSlices();
    for (const [i, f] of full.entries()) {
      const p = pruneEndpointSlice(f);
      assert.equal(p.addressType, f.addressType);
      assert.deepEqual(
        p.ports?.map((x) => ({ ...x })),
        f.ports?.map((x) => ({ ...x })),
        `ports of ${f.metadata?.name}`,
      );
      assert.equal(p.endpoints.length, f.endpoints.length);
      for (const [j, e] of f.endpoints.entries()) {
        const c = p.endpoints[j];
        const at = `${f.metadata?.name} endpoints[${j}] (slice ${i})`;
        assert.deepEqual(c.addresses, e.addresses, at);
        assert.deepEqual(c.conditions === undefined ? undefined : { ...c.conditions }, e.conditions === undefined ? undefined : { ...e.conditions }, at);
        assert.equal(c.nodeName, e.nodeName, at);
        assert.deepEqual(c.hints, e.hints, at);
        assert.equal(c.targetRef, undefined, at);
        assert.equal(c.zone, undefined, at);
      }
    }
  });

  test('JSON prints the same V1EndpointSlice as the endpoint objects did', () => {
    const f = fullSlices()[0];
    const p = pruneEndpointSlice(f);
    const json = JSON.parse(JSON.stringify(p));
    assert.deepEqual(Object.keys(json), ['metadata', 'addressType', 'endpoints', 'ports']);
    assert.deepEqual(
      json.endpoints,
      JSON.parse(JSON.stringify(f.endpoints.map((e) => ({ addresses: e.addresses, conditions: e.conditions, nodeName: e.nodeName, hints: e.hints })))),
    );
  });

  test('the planner sees the same from compact objects as from the full ones: dual-stack, every condition, hints, local nodes, ports, FQDN and odd slices', () => {
    const full = fullSlices();
    const pruned = full.map(pruneEndpointSlice);
    for (const family of ['IPv4', 'IPv6'] as const) {
      const a = endpointsByServicePort('ns/web', full, 'node-1', family);
      const b = endpointsByServicePort('ns/web', pruned, 'node-1', family);
      assert.ok(
        [...a.byPort.values()].some((l) => l.length > 0),
        family,
      );
      assert.deepEqual(b, a, family);
    }
    const svcFull = typed<V1Service>(service, 'V1Service');
    const planFull = planService(svcFull, full, ctx());
    assert.ok(planFull.frontends.length >= 8, 'dual-stack ClusterIP, NodePort, LB and external frontends');
    assert.deepEqual(planService(pruneService(svcFull), pruned, ctx()), planFull);
    // And one slice alone (the planner's no-copy path).
    assert.deepEqual(planService(pruneService(svcFull), pruned.slice(0, 1), ctx()), planService(svcFull, full.slice(0, 1), ctx()));
  });

  test('a slice of more endpoints than one packing call takes round-trips', () => {
    const eps = Array.from({ length: 5000 }, (_, i) => ({
      addresses: [`198.18.${i >> 8}.${i & 255}`],
      conditions: { ready: i % 2 === 0 },
      nodeName: `node-${i % 3000}`,
    }));
    const f = typed<V1EndpointSlice>(slice('big', 'IPv4', eps), 'V1EndpointSlice');
    const p = pruneEndpointSlice(f);
    assert.ok(!(p instanceof CompactEndpointSlice), 'more distinct nodes than a code unit names: endpoint objects');
    const eps2 = eps.map((e, i) => ({ ...e, nodeName: `node-${i % 7}` }));
    const f2 = typed<V1EndpointSlice>(slice('big', 'IPv4', eps2), 'V1EndpointSlice');
    const p2 = pruneEndpointSlice(f2);
    assert.ok(p2 instanceof CompactEndpointSlice);
    assert.deepEqual(
      p2.endpoints.map((e) => [e.addresses[0], e.conditions?.ready, e.nodeName]),
      eps2.map((e) => [e.addresses[0], e.conditions.ready, e.nodeName]),
    );
    assert.deepEqual(endpointsByServicePort('ns/web', [p2], 'node-1'), endpointsByServicePort('ns/web', [f2], 'node-1'));
  });

  test('a relisted slice whose endpoints changed is an update; one whose resourceVersion alone moved is not', () => {
    const events: string[] = [];
    const cache = new ReflectorCache<V1EndpointSlice>({
      kind: 'EndpointSlice',
      typeName: 'V1EndpointSlice',
      prune: pruneEndpointSlice,
      log: { info() {}, warn() {}, error() {}, debug() {} },
      handlers: { add: () => events.push('add'), update: () => events.push('update'), delete: () => events.push('delete') },
      stopped: () => false,
    });
    const eps = (ready: boolean) => [{ addresses: ['198.18.1.1'], conditions: { ready }, nodeName: 'node-1' }];
    const item = (rv: string, ready: boolean) => {
      const c = cache.convert(
        slice('s', 'IPv4', eps(ready), { metadata: { name: 's', namespace: 'ns', resourceVersion: rv, labels: { 'kubernetes.io/service-name': 'web' } } }),
      );
      assert.ok(c.ok);
      return c.obj;
    };
    assert.deepEqual(cache.replace([item('1', true)], new Set(), false), { added: 1, updated: 0, deleted: 0 });
    assert.deepEqual(cache.replace([item('2', true)], new Set(), false), { added: 0, updated: 0, deleted: 0 });
    assert.equal(cache.get('ns/s')?.metadata?.resourceVersion, '2');
    assert.deepEqual(cache.replace([item('3', false)], new Set(), false), { added: 0, updated: 1, deleted: 0 });
    assert.deepEqual(events, ['add', 'update']);
    assert.equal(cache.get('ns/s')?.endpoints[0].conditions?.ready, false);
  });

  test('Services and slices share their port lists (frozen) and namespaces; clusterIP is clusterIPs[0]', () => {
    const a = pruneService(typed<V1Service>(service, 'V1Service'));
    const b = pruneService(typed<V1Service>({ ...service, metadata: { name: 'other', namespace: 'ns' } }, 'V1Service'));
    assert.equal(a.spec?.ports, b.spec?.ports);
    assert.ok(Object.isFrozen(a.spec?.ports) && Object.isFrozen(a.spec?.ports?.[0]));
    assert.equal(a.spec?.ports?.[1].targetPort, 'dns');
    const c = pruneService(typed<V1Service>({ ...service, spec: { ...service.spec, ports: [{ ...service.spec.ports[0], nodePort: 30081 }] } }, 'V1Service'));
    assert.notEqual(c.spec?.ports, a.spec?.ports);
    assert.equal(c.spec?.ports?.[0].nodePort, 30081);
    assert.equal(a.spec?.clusterIP, '198.19.0.1');
    const [s1, s2] = fullSlices().map(pruneEndpointSlice);
    assert.equal(s1.ports, s2.ports);
    assert.equal(s1.metadata?.namespace, 'ns');
  });
});
