import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { CachedEndpoint, internConditions, pruneEndpointSlice, pruneNode, pruneService } from '../../agent/k8s/prune.js';
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME } from '../../agent/k8s/labels.js';
import { planService } from '../../agent/plan/index.js';
import { creationMs } from '../../agent/sync/service-plans.js';

/** What the watch layer caches: the raw JSON typed by the deserializer, then pruned. */
function typedSlice(raw: object): V1EndpointSlice {
  return pruneEndpointSlice(ObjectSerializer.deserialize(raw, 'V1EndpointSlice', '') as V1EndpointSlice);
}
function typedService(raw: object): V1Service {
  return pruneService(ObjectSerializer.deserialize(raw, 'V1Service', '') as V1Service);
}

const rawSlice = (name: string, ready: boolean, node: string) => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: {
    name,
    namespace: 'ns',
    resourceVersion: '7',
    labels: { 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
    annotations: { [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: '2026-12-02T10:00:00Z', other: 'x' },
    managedFields: [{ manager: 'kube-controller-manager' }],
  },
  addressType: 'IPv4',
  endpoints: [
    {
      addresses: ['198.18.0.10'],
      conditions: { ready, serving: ready, terminating: false },
      nodeName: node,
      targetRef: { kind: 'Pod', name: 'p' },
      zone: 'z1',
    },
    { addresses: ['198.18.0.11'], conditions: { ready: true }, nodeName: node, hints: { forZones: [{ name: 'z1' }] } },
  ],
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
});

const rawService = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web', namespace: 'ns', resourceVersion: '5', labels: { app: 'web', 'service.kubernetes.io/headless': 'x' }, annotations: { a: 'b' } },
  spec: {
    type: 'NodePort',
    clusterIP: '198.19.0.1',
    clusterIPs: ['198.19.0.1'],
    ipFamilies: ['IPv4'],
    ipFamilyPolicy: 'SingleStack',
    selector: { app: 'web' },
    ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080, nodePort: 30080 }],
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: 32000,
    sessionAffinity: 'ClientIP',
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
  },
  status: { loadBalancer: {} },
};

describe('pruned, compact cache objects', () => {
  test('endpoint conditions are shared frozen instances per (ready, serving, terminating), values intact', () => {
    const a = typedSlice(rawSlice('a', true, 'node-1'));
    const b = typedSlice(rawSlice('b', true, 'node-2'));
    const c = typedSlice(rawSlice('c', false, 'node-1'));
    assert.equal(a.endpoints[0].conditions, b.endpoints[0].conditions);
    assert.notEqual(a.endpoints[0].conditions, c.endpoints[0].conditions);
    assert.ok(Object.isFrozen(a.endpoints[0].conditions));
    assert.deepEqual({ ...a.endpoints[0].conditions }, { ready: true, serving: true, terminating: false });
    assert.deepEqual({ ...c.endpoints[0].conditions }, { ready: false, serving: false, terminating: false });
    // Absent conditions stay absent (ready: nil means ready for kube-proxy; serving nil means serving).
    assert.deepEqual({ ...a.endpoints[1].conditions }, { ready: true });
  });

  test('conditions that are not booleans are kept as sent, not shared', () => {
    const odd = { ready: 'yes' } as never;
    assert.equal(internConditions(odd), odd);
  });

  test('node names are one string instance; addresses, hints and ports survive; targetRef, zone and managedFields do not', () => {
    const a = typedSlice(rawSlice('a', true, 'node-7'));
    const b = typedSlice(rawSlice('b', true, 'node-7'));
    assert.equal(a.endpoints[0].nodeName, 'node-7');
    assert.deepEqual(
      a.endpoints.map((e) => e.addresses),
      [['198.18.0.10'], ['198.18.0.11']],
    );
    assert.deepEqual(
      a.endpoints[1].hints?.forZones?.map((z) => z.name),
      ['z1'],
    );
    assert.equal(a.endpoints[0].targetRef, undefined);
    assert.equal(a.endpoints[0].zone, undefined);
    assert.deepEqual(
      a.ports?.map((p) => [p.name, p.port, p.protocol]),
      [['http', 8080, 'TCP']],
    );
    assert.equal(a.metadata?.managedFields, undefined);
    assert.deepEqual(a.metadata?.labels, { 'kubernetes.io/service-name': 'web' });
    assert.deepEqual(a.metadata?.annotations, { [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: '2026-12-02T10:00:00Z' });
    assert.equal(a.metadata?.resourceVersion, '7');
    assert.equal(b.endpoints[0].nodeName, a.endpoints[0].nodeName);
  });

  test('a one-address endpoint holds its address without an array; JSON still prints a V1Endpoint', () => {
    const a = typedSlice(rawSlice('a', true, 'node-1'));
    assert.ok(a.endpoints[0] instanceof CachedEndpoint);
    assert.deepEqual(a.endpoints[0].addresses, ['198.18.0.10']);
    assert.equal((a.endpoints[0] as CachedEndpoint).firstAddress, '198.18.0.10', 'what the planner reads, without an array');
    assert.deepEqual(JSON.parse(JSON.stringify(a.endpoints[0])), {
      addresses: ['198.18.0.10'],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: 'node-1',
    });
    const two = typedSlice({ ...rawSlice('t', true, 'node-1'), endpoints: [{ addresses: ['198.18.0.20', '198.18.0.21'], conditions: { ready: true } }] });
    assert.deepEqual(two.endpoints[0].addresses, ['198.18.0.20', '198.18.0.21']);
    assert.ok(!(two.endpoints[0] instanceof CachedEndpoint));
  });

  test('a Service keeps the spec fields the plan reads and drops the rest', () => {
    const s = typedService(rawService);
    assert.equal(s.spec?.selector, undefined);
    assert.equal(s.spec?.ipFamilyPolicy, undefined);
    assert.deepEqual(s.metadata?.labels, { 'service.kubernetes.io/headless': 'x' });
    assert.equal(s.metadata?.annotations, undefined);
    assert.equal(s.spec?.type, 'NodePort');
    assert.deepEqual(s.spec?.clusterIPs, ['198.19.0.1']);
    assert.deepEqual(s.spec?.ipFamilies, ['IPv4']);
    assert.equal(s.spec?.ports?.[0].nodePort, 30080);
    assert.equal(s.spec?.ports?.[0].targetPort, 8080);
    assert.equal(s.spec?.externalTrafficPolicy, 'Local');
    assert.equal(s.spec?.healthCheckNodePort, 32000);
    assert.equal(s.spec?.sessionAffinityConfig?.clientIP?.timeoutSeconds, 60);
    assert.ok(s.status?.loadBalancer);
  });

  test('a Service keeps its creationTimestamp (the oldest Service wins a same-class claim); a slice does not', () => {
    const s = typedService({ ...rawService, metadata: { ...rawService.metadata, creationTimestamp: '2020-01-02T03:04:05Z' } });
    assert.equal(creationMs(s), Date.parse('2020-01-02T03:04:05Z'));
    assert.equal(creationMs(typedService(rawService)), undefined);
    const slice = typedSlice({
      ...rawSlice('a', true, 'node-1'),
      metadata: { ...rawSlice('a', true, 'node-1').metadata, creationTimestamp: '2020-01-02T03:04:05Z' },
    });
    assert.equal(slice.metadata?.creationTimestamp, undefined);
  });

  test('the pruned objects plan exactly like the full ones', () => {
    const svcFull = ObjectSerializer.deserialize(rawService, 'V1Service', '') as V1Service;
    const slicesFull = ['a', 'b'].map((n, i) => ObjectSerializer.deserialize(rawSlice(n, i === 0, 'node-1'), 'V1EndpointSlice', '') as V1EndpointSlice);
    const ctx = { nodeName: 'node-1', node: pruneNode(ObjectSerializer.deserialize(nodeRaw, 'V1Node', '') as V1Node) };
    const full = planService(svcFull, slicesFull, ctx);
    const pruned = planService(pruneService(svcFull), slicesFull.map(pruneEndpointSlice), ctx);
    assert.ok(full.frontends.length >= 2);
    assert.deepEqual(pruned, full);
    // One slice (the planner's no-copy path) too.
    const one = planService(svcFull, slicesFull.slice(0, 1), ctx);
    assert.ok(one.frontends.some((f) => f.backends.length > 0));
    assert.deepEqual(planService(pruneService(svcFull), slicesFull.slice(0, 1).map(pruneEndpointSlice), ctx), one);
  });

  test('the Node keeps every label (its zone feeds topology hints) and its deletionTimestamp', () => {
    const n = pruneNode(ObjectSerializer.deserialize(nodeRaw, 'V1Node', '') as V1Node);
    assert.deepEqual(n.metadata?.labels, nodeRaw.metadata.labels);
    assert.ok(n.metadata?.deletionTimestamp instanceof Date);
    assert.equal(n.status?.images, undefined);
  });
});

const nodeRaw = {
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: 'node-1', labels: { 'topology.kubernetes.io/zone': 'z1', 'kubernetes.io/hostname': 'node-1' }, deletionTimestamp: '2026-12-02T10:00:00Z' },
  status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }], images: [{ names: ['x'], sizeBytes: 1 }] },
};

test("a Service keeps its lb-algorithm annotations (kpr's and Cilium's, rule 40 of docs/semantics.md) and no other", () => {
  const s = typedService({
    ...rawService,
    metadata: {
      ...rawService.metadata,
      annotations: { 'kpr.dev/lb-algorithm': 'maglev', 'service.cilium.io/lb-algorithm': 'random', 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
    },
  });
  assert.deepEqual(s.metadata?.annotations, { 'kpr.dev/lb-algorithm': 'maglev', 'service.cilium.io/lb-algorithm': 'random' });
});
