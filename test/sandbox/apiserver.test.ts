import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { startApiServer, type ApiServer } from '../../sandbox/apiserver.js';
import { openWatch, request, slice, sleep, svc } from './apiserver-helpers.js';

const SVC = '/api/v1/namespaces/default/services';

describe('sandbox apiserver: CRUD over HTTP', () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0 });
  });
  after(() => api.close());

  test('create 201, duplicate 409 AlreadyExists, get 200, missing 404 NotFound', async () => {
    const c = await request(api.url, 'POST', SVC, svc('web'));
    assert.equal(c.status, 201);
    assert.equal(c.body.kind, 'Service');
    assert.equal(c.body.metadata.namespace, 'default');
    assert.match(c.body.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.match(c.body.metadata.creationTimestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.match(c.body.metadata.resourceVersion, /^\d+$/);
    assert.match(c.body.spec.clusterIP, /^198\.19\.\d+\.\d+$/, 'a ClusterIP is allocated');

    const dup = await request(api.url, 'POST', SVC, svc('web'));
    assert.equal(dup.status, 409);
    assert.equal(dup.body.kind, 'Status');
    assert.equal(dup.body.reason, 'AlreadyExists');
    assert.equal(dup.body.code, 409);

    const g = await request(api.url, 'GET', `${SVC}/web`);
    assert.equal(g.status, 200);
    assert.equal(g.body.metadata.uid, c.body.metadata.uid);

    const missing = await request(api.url, 'GET', `${SVC}/nope`);
    assert.equal(missing.status, 404);
    assert.deepEqual(
      { kind: missing.body.kind, status: missing.body.status, reason: missing.body.reason, code: missing.body.code },
      { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 },
    );
    assert.equal(missing.body.message, 'services "nope" not found');
  });

  test('update 200 bumps resourceVersion; stale resourceVersion 409 Conflict; no-op keeps it', async () => {
    const cur = (await request(api.url, 'GET', `${SVC}/web`)).body;
    const next = structuredClone(cur);
    next.spec.ports[0].port = 81;
    const u = await request(api.url, 'PUT', `${SVC}/web`, next);
    assert.equal(u.status, 200);
    assert.ok(Number(u.body.metadata.resourceVersion) > Number(cur.metadata.resourceVersion));
    assert.equal(u.body.spec.clusterIP, cur.spec.clusterIP, 'allocated ClusterIP survives');
    assert.equal(u.body.metadata.uid, cur.metadata.uid);

    const stale = await request(api.url, 'PUT', `${SVC}/web`, next); // still carries the old RV
    assert.equal(stale.status, 409);
    assert.equal(stale.body.reason, 'Conflict');

    const same = await request(api.url, 'PUT', `${SVC}/web`, u.body);
    assert.equal(same.status, 200);
    assert.equal(same.body.metadata.resourceVersion, u.body.metadata.resourceVersion);

    const missing = await request(api.url, 'PUT', `${SVC}/ghost`, svc('ghost'));
    assert.equal(missing.status, 404);
  });

  test('merge patch 200; unsupported patch type 415', async () => {
    const p = await request(api.url, 'PATCH', `${SVC}/web`, { metadata: { labels: { tier: 'front' } } }, 'application/merge-patch+json');
    assert.equal(p.status, 200);
    assert.equal(p.body.metadata.labels.tier, 'front');
    assert.equal(p.body.spec.ports[0].port, 81);
    const a = await request(api.url, 'PATCH', `${SVC}/web`, { metadata: {} }, 'application/apply-patch+yaml');
    assert.equal(a.status, 415);
  });

  test('JSON patch (RFC 6902): operations in order; one that cannot apply 422, a patch that is not a list 400', async () => {
    const path = `${SVC}/web`;
    const p = await request(
      api.url,
      'PATCH',
      path,
      [
        { op: 'test', path: '/metadata/labels/tier', value: 'front' },
        { op: 'add', path: '/metadata/labels/a~1b', value: 'x' },
        { op: 'replace', path: '/spec/ports/0/port', value: 82 },
        { op: 'copy', from: '/metadata/labels/tier', path: '/metadata/annotations' },
        { op: 'remove', path: '/metadata/annotations' },
        { op: 'move', from: '/metadata/labels/tier', path: '/metadata/labels/role' },
      ],
      'application/json-patch+json',
    );
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.deepEqual(p.body.metadata.labels, { 'a/b': 'x', role: 'front' });
    assert.equal(p.body.spec.ports[0].port, 82);
    assert.equal(p.body.metadata.annotations, undefined);
    const before = (await request(api.url, 'GET', path)).body;
    for (const bad of [
      [{ op: 'remove', path: '/spec/nope' }],
      [{ op: 'test', path: '/spec/ports/0/port', value: 1 }],
      [{ op: 'add', path: '/spec/ports/9', value: {} }],
    ]) {
      const r = await request(api.url, 'PATCH', path, bad, 'application/json-patch+json');
      assert.equal(r.status, 422, JSON.stringify(bad));
      assert.equal(r.body.reason, 'Invalid');
    }
    assert.equal((await request(api.url, 'PATCH', path, { op: 'remove' }, 'application/json-patch+json')).status, 400);
    assert.equal((await request(api.url, 'GET', path)).body.metadata.resourceVersion, before.metadata.resourceVersion, 'a failed patch changes nothing');
    // Back as the next tests expect it.
    const back = await request(
      api.url,
      'PATCH',
      path,
      [
        { op: 'replace', path: '/spec/ports/0/port', value: 81 },
        { op: 'replace', path: '/metadata/labels', value: { tier: 'front' } },
      ],
      'application/json-patch+json',
    );
    assert.equal(back.status, 200);
  });

  test("metadata.resourceVersion on create: 500 with kube-apiserver's storage error, before AlreadyExists; the server's fields are its own", async () => {
    const ds = {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'copy', resourceVersion: '421', uid: 'u-1', creationTimestamp: '2020-01-01T00:00:00Z', generation: 7 },
      spec: {},
      status: { numberReady: 3 },
    };
    const DS = '/apis/apps/v1/namespaces/default/daemonsets';
    const r = await request(api.url, 'POST', DS, ds);
    assert.equal(r.status, 500);
    assert.deepEqual(
      { ...r.body, metadata: undefined },
      {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: undefined,
        status: 'Failure',
        message: 'resourceVersion should not be set on objects to be created',
        reason: '',
        code: 500,
      },
    );
    delete (ds.metadata as { resourceVersion?: string }).resourceVersion;
    const c = await request(api.url, 'POST', DS, ds);
    assert.equal(c.status, 201);
    assert.notEqual(c.body.metadata.uid, 'u-1');
    assert.notEqual(c.body.metadata.creationTimestamp, '2020-01-01T00:00:00Z');
    assert.equal(c.body.metadata.generation, 1);
    assert.equal(c.body.status, undefined, "a DaemonSet's status is not taken from a create");
    assert.equal(
      (await request(api.url, 'POST', DS, { ...ds, metadata: { ...ds.metadata, resourceVersion: '1' } })).status,
      500,
      'the resourceVersion is refused first',
    );
    assert.equal((await request(api.url, 'POST', DS, ds)).status, 409);
    assert.equal((await request(api.url, 'DELETE', `${DS}/copy`)).status, 200);
  });

  test('ConfigMaps: JSON, and protobuf as kubectl create configmap sends it', async () => {
    const CM = '/api/v1/namespaces/kube-system/configmaps';
    const j = await request(api.url, 'POST', CM, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'j' }, data: { a: '1' } });
    assert.equal(j.status, 201);
    assert.equal(j.body.metadata.namespace, 'kube-system');
    // "k8s\0", runtime.Unknown{typeMeta{v1, ConfigMap}, raw: ConfigMap{metadata{name p, namespace kube-system, selfLink ""}, data{k: v}}}.
    const ld = (num: number, bytes: Buffer) => Buffer.concat([Buffer.from([(num << 3) | 2, bytes.length]), bytes]);
    const s = (t: string) => Buffer.from(t);
    const raw = Buffer.concat([
      ld(1, Buffer.concat([ld(1, s('p')), ld(3, s('kube-system')), ld(4, s(''))])),
      ld(2, Buffer.concat([ld(1, s('kubeconfig.conf')), ld(2, s('apiVersion: v1'))])),
    ]);
    const body = Buffer.concat([s('k8s\0'), ld(1, Buffer.concat([ld(1, s('v1')), ld(2, s('ConfigMap'))])), ld(2, raw)]);
    const res = await fetch(api.url + CM, { method: 'POST', headers: { 'content-type': 'application/vnd.kubernetes.protobuf' }, body });
    assert.equal(res.status, 201);
    const p = (await request(api.url, 'GET', `${CM}/p`)).body;
    assert.deepEqual(p.data, { 'kubeconfig.conf': 'apiVersion: v1' });
    assert.equal(p.metadata.selfLink, undefined, 'an empty scalar is unset');
    const other = Buffer.concat([s('k8s\0'), ld(1, Buffer.concat([ld(1, s('v1')), ld(2, s('Secret'))])), ld(2, Buffer.alloc(0))]);
    assert.equal((await fetch(api.url + CM, { method: 'POST', headers: { 'content-type': 'application/vnd.kubernetes.protobuf' }, body: other })).status, 415);
    assert.deepEqual(
      (await request(api.url, 'GET', CM)).body.items.map((i: { metadata: { name: string } }) => i.metadata.name),
      ['j', 'p'],
    );
    assert.equal((await request(api.url, 'DELETE', `${CM}/j`)).status, 200);
    assert.equal((await request(api.url, 'DELETE', `${CM}/p`)).status, 200);
  });

  test("OpenAPI: the v3 documents list each kind's PATCH with fieldValidation (kubectl validates through the server); v2 is an empty protobuf document", async () => {
    const index = (await request(api.url, 'GET', '/openapi/v3')).body;
    assert.deepEqual(Object.keys(index.paths).sort(), ['api/v1', 'apis/apps/v1', 'apis/discovery.k8s.io/v1', 'apis/networking.k8s.io/v1']);
    const apps = (await request(api.url, 'GET', index.paths['apis/apps/v1'].serverRelativeURL)).body;
    const op = apps.paths['/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}'].patch;
    assert.deepEqual(op['x-kubernetes-group-version-kind'], { group: 'apps', version: 'v1', kind: 'DaemonSet' });
    assert.ok(op.parameters.some((p: { name: string }) => p.name === 'fieldValidation'));
    const core = (await request(api.url, 'GET', '/openapi/v3/api/v1')).body;
    assert.ok(core.paths['/api/v1/nodes/{name}'] && core.paths['/api/v1/namespaces/{namespace}/configmaps/{name}']);
    const v2 = await fetch(`${api.url}/openapi/v2`);
    assert.equal(v2.status, 200);
    assert.deepEqual([...Buffer.from(await v2.arrayBuffer())], [0x0a, 3, ...Buffer.from('2.0')]);
  });

  test('delete 200 returns the object, then 404', async () => {
    const d = await request(api.url, 'DELETE', `${SVC}/web`);
    assert.equal(d.status, 200);
    assert.equal(d.body.metadata.name, 'web');
    assert.equal((await request(api.url, 'GET', `${SVC}/web`)).status, 404);
    assert.equal((await request(api.url, 'DELETE', `${SVC}/web`)).status, 404);
  });

  test('nodes are cluster-scoped; endpointslices live under discovery.k8s.io/v1', async () => {
    const n = await request(api.url, 'POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' } });
    assert.equal(n.status, 201);
    assert.equal(n.body.metadata.namespace, undefined);
    assert.equal((await request(api.url, 'GET', '/api/v1/nodes/node-a')).status, 200);
    const e = await request(api.url, 'POST', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', slice('web-1', 'web', ['10.1.0.1']));
    assert.equal(e.status, 201);
    assert.equal(e.body.apiVersion, 'discovery.k8s.io/v1');
    const l = await request(api.url, 'GET', '/apis/discovery.k8s.io/v1/endpointslices');
    assert.equal(l.body.kind, 'EndpointSliceList');
    assert.deepEqual(
      l.body.items.map((i: any) => i.metadata.name),
      ['web-1'],
    );
    assert.equal((await request(api.url, 'GET', '/api/v1/namespaces/default/secrets')).status, 404);
    // Pods and apps/v1 DaemonSets are stored too (kpr cleanup-nodes' test), apps in the group list.
    const ds = await request(api.url, 'POST', '/apis/apps/v1/namespaces/default/daemonsets', {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'ds' },
      spec: {},
    });
    assert.equal(ds.status, 201);
    assert.equal((await request(api.url, 'DELETE', '/apis/apps/v1/namespaces/default/daemonsets/ds')).status, 200);
    assert.equal((await request(api.url, 'GET', '/api/v1/namespaces/default/pods')).body.kind, 'PodList');
    assert.deepEqual((await request(api.url, 'GET', '/apis')).body.groups.map((g: { name: string }) => g.name).sort(), [
      'apps',
      'discovery.k8s.io',
      'networking.k8s.io',
    ]);
  });
});

describe('sandbox apiserver: ServiceCIDR, served or not (a cluster before Kubernetes 1.33)', () => {
  let api: ApiServer;
  const PATH = '/apis/networking.k8s.io/v1/servicecidrs';
  const sc = (name: string, cidrs: string[]) => ({ apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name }, spec: { cidrs } });
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0, unservedKinds: ['ServiceCIDR'] });
  });
  after(() => api.close());

  test('unserved: 404 on its paths, absent from discovery; then served: list and watch as any kind', async () => {
    assert.equal((await request(api.url, 'GET', PATH)).status, 404);
    assert.equal((await request(api.url, 'POST', PATH, sc('kubernetes', ['198.19.0.0/16']))).status, 404);
    assert.equal((await request(api.url, 'GET', '/apis/networking.k8s.io/v1')).status, 404);
    assert.ok(!(await request(api.url, 'GET', '/apis')).body.groups.some((g: { name: string }) => g.name === 'networking.k8s.io'));

    api.setUnservedKinds([]);
    const c = await request(api.url, 'POST', PATH, sc('kubernetes', ['198.19.0.0/16']));
    assert.equal(c.status, 201);
    assert.equal(c.body.metadata.namespace, undefined, 'cluster-scoped');
    const l = await request(api.url, 'GET', PATH);
    assert.equal(l.body.kind, 'ServiceCIDRList');
    assert.deepEqual(
      l.body.items.map((i: any) => [i.metadata.name, i.spec.cidrs]),
      [['kubernetes', ['198.19.0.0/16']]],
    );
    const w = await openWatch(api.url, `${PATH}?watch=1&resourceVersion=${l.body.metadata.resourceVersion}`);
    try {
      api.create(sc('extra', ['198.18.240.0/20']));
      const ev = await w.waitFor((e) => e.type === 'ADDED');
      assert.deepEqual([ev.type, ev.object.kind, ev.object.metadata.name], ['ADDED', 'ServiceCIDR', 'extra']);
    } finally {
      w.close();
    }
    const resources = (await request(api.url, 'GET', '/apis/networking.k8s.io/v1')).body.resources.map((r: { name: string }) => r.name);
    assert.deepEqual(resources, ['servicecidrs']);
  });
});

describe('sandbox apiserver: list and selectors', () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0 });
    api.create(svc('a'));
    api.create(svc('b', 'other'));
    api.create(svc('headless', 'default', { spec: { clusterIP: 'None' } }));
    api.create(svc('foreign', 'default', { labels: { 'service.kubernetes.io/service-proxy-name': 'other-proxy' } }));
  });
  after(() => api.close());

  test('list returns items and the current resourceVersion', async () => {
    const l = await request(api.url, 'GET', '/api/v1/services');
    assert.equal(l.status, 200);
    assert.equal(l.body.kind, 'ServiceList');
    assert.equal(l.body.apiVersion, 'v1');
    assert.equal(l.body.metadata.resourceVersion, api.resourceVersion());
    assert.deepEqual(
      l.body.items.map((i: any) => `${i.metadata.namespace}/${i.metadata.name}`),
      ['default/a', 'default/foreign', 'default/headless', 'other/b'],
    );
    const ns = await request(api.url, 'GET', '/api/v1/namespaces/other/services');
    assert.deepEqual(
      ns.body.items.map((i: any) => i.metadata.name),
      ['b'],
    );
  });

  test("kube-proxy's selectors filter lists", async () => {
    const q = new URLSearchParams({ labelSelector: '!service.kubernetes.io/service-proxy-name', fieldSelector: 'spec.clusterIP!=None' });
    const l = await request(api.url, 'GET', `/api/v1/services?${q}`);
    assert.deepEqual(
      l.body.items.map((i: any) => i.metadata.name),
      ['a', 'b'],
    );
    const byName = await request(api.url, 'GET', `/api/v1/services?${new URLSearchParams({ fieldSelector: 'metadata.name=b' })}`);
    assert.deepEqual(
      byName.body.items.map((i: any) => i.metadata.name),
      ['b'],
    );
    const hasLabel = await request(api.url, 'GET', `/api/v1/services?${new URLSearchParams({ labelSelector: 'service.kubernetes.io/service-proxy-name' })}`);
    assert.deepEqual(
      hasLabel.body.items.map((i: any) => i.metadata.name),
      ['foreign'],
    );
    const eq = await request(
      api.url,
      'GET',
      `/api/v1/services?${new URLSearchParams({ labelSelector: 'service.kubernetes.io/service-proxy-name=other-proxy' })}`,
    );
    assert.deepEqual(
      eq.body.items.map((i: any) => i.metadata.name),
      ['foreign'],
    );
    const neq = await request(
      api.url,
      'GET',
      `/api/v1/services?${new URLSearchParams({ labelSelector: 'service.kubernetes.io/service-proxy-name!=other-proxy' })}`,
    );
    assert.deepEqual(
      neq.body.items.map((i: any) => i.metadata.name),
      ['a', 'headless', 'b'],
    );
    const bad = await request(api.url, 'GET', `/api/v1/services?${new URLSearchParams({ fieldSelector: 'nonsense' })}`);
    assert.equal(bad.status, 400);
  });

  test('a watch with a selector sees objects enter (ADDED) and leave (DELETED) it', async () => {
    const q = new URLSearchParams({ watch: 'true', resourceVersion: api.resourceVersion(), labelSelector: '!service.kubernetes.io/service-proxy-name' });
    const w = await openWatch(api.url, `/api/v1/services?${q}`);
    const a = api.get('Service', 'default', 'a')!;
    a.metadata!.labels = { 'service.kubernetes.io/service-proxy-name': 'x' };
    api.update(a); // leaves the selector
    const f = api.get('Service', 'default', 'foreign')!;
    f.metadata!.labels = {};
    api.update(f); // enters the selector
    api.create(svc('ignored', 'default', { labels: { 'service.kubernetes.io/service-proxy-name': 'x' } }));
    api.create(svc('c'));
    const evs = await w.waitForCount(3);
    assert.deepEqual(
      evs.map((e) => `${e.type} ${e.object.metadata.name}`),
      ['DELETED a', 'ADDED foreign', 'ADDED c'],
    );
    w.close();
  });
});

describe('sandbox apiserver: watch protocol', () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 50, historyLimit: 50 });
  });
  after(() => api.close());

  test('watch from a resourceVersion replays later events in order, then streams', async () => {
    api.create(svc('before'));
    const from = api.resourceVersion();
    api.create(svc('x'));
    const x = api.get('Service', 'default', 'x')!;
    x.spec.ports[0].port = 90;
    api.update(x);
    api.remove('Service', 'default', 'x');
    api.create(slice('x-1', 'x', ['198.18.0.1'])); // other resource: not on a services watch

    const w = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${from}`);
    assert.equal(w.status, 200);
    assert.match(String(w.headers['content-type']), /application\/json/);
    assert.equal(w.headers['transfer-encoding'], 'chunked');
    api.create(svc('live'));
    const evs = await w.waitForCount(4);
    assert.deepEqual(
      evs.map((e) => `${e.type} ${e.object.metadata.name}`),
      ['ADDED x', 'MODIFIED x', 'DELETED x', 'ADDED live'],
    );
    const rvs = evs.map((e) => Number(e.object.metadata.resourceVersion));
    assert.deepEqual(
      [...rvs].sort((a, b) => a - b),
      rvs,
      'resourceVersions increase',
    );
    assert.ok(rvs[0] > Number(from));
    assert.equal(evs[0].object.kind, 'Service');
    assert.equal(evs[1].object.spec.ports[0].port, 90);
    assert.equal(evs[2].object.spec.ports[0].port, 90, 'DELETED carries the last state');
    assert.ok(rvs[2] > rvs[1], 'DELETED carries a new resourceVersion');
    w.close();
  });

  test('watch without a resourceVersion starts with synthetic ADDED events for the current state', async () => {
    const w = await openWatch(api.url, '/api/v1/namespaces/default/services?watch=1');
    const evs = await w.waitForCount(2);
    assert.deepEqual(evs.map((e) => `${e.type} ${e.object.metadata.name}`).sort(), ['ADDED before', 'ADDED live']);
    w.close();
  });

  test('BOOKMARK events arrive only when allowWatchBookmarks=true', async () => {
    const rv = api.resourceVersion();
    const w = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${rv}&allowWatchBookmarks=true`);
    const plain = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${rv}`);
    const b = await w.waitFor((e) => e.type === 'BOOKMARK', 1000);
    assert.deepEqual(b.object, { kind: 'Service', apiVersion: 'v1', metadata: { resourceVersion: rv } });
    await sleep(120);
    assert.equal(plain.events.length, 0);
    w.close();
    plain.close();
  });

  test('a resourceVersion older than the retained history gets a 410 Expired ERROR event and the stream ends', async () => {
    const old = api.resourceVersion();
    api.create(svc('after-old'));
    api.compactHistory();
    const w = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${old}`);
    assert.equal(w.status, 200);
    await w.ended;
    assert.equal(w.events.length, 1);
    const e = w.events[0];
    assert.equal(e.type, 'ERROR');
    assert.equal(e.object.kind, 'Status');
    assert.equal(e.object.status, 'Failure');
    assert.equal(e.object.reason, 'Expired');
    assert.equal(e.object.code, 410);
    assert.match(e.object.message, new RegExp(`^too old resource version: ${old} \\(\\d+\\)$`));

    // The current resourceVersion is still resumable.
    const ok = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${api.resourceVersion()}`);
    api.create(svc('fresh'));
    assert.equal((await ok.waitForCount(1))[0].object.metadata.name, 'fresh');
    ok.close();
  });

  test('history is bounded by historyLimit', async () => {
    const small = await startApiServer({ historyLimit: 3, bookmarkIntervalMs: 0 });
    try {
      small.create(svc('s1'));
      const rv1 = small.resourceVersion();
      for (const n of ['s2', 's3', 's4', 's5']) small.create(svc(n));
      const expired = await openWatch(small.url, `/api/v1/services?watch=true&resourceVersion=${rv1}`);
      await expired.ended;
      assert.equal(expired.events[0].object.code, 410);
      const recent = await openWatch(small.url, `/api/v1/services?watch=true&resourceVersion=${Number(small.resourceVersion()) - 3}`);
      const evs = await recent.waitForCount(3);
      assert.deepEqual(
        evs.map((e) => e.object.metadata.name),
        ['s3', 's4', 's5'],
      );
      recent.close();
    } finally {
      await small.close();
    }
  });

  test('timeoutSeconds ends the stream; dropWatches ends all streams', async () => {
    const t0 = Date.now();
    const w = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${api.resourceVersion()}&timeoutSeconds=1`);
    await w.ended;
    const took = Date.now() - t0;
    assert.ok(took >= 900 && took < 3000, `ended after ${took}ms`);

    const a = await openWatch(api.url, `/api/v1/services?watch=true&resourceVersion=${api.resourceVersion()}`);
    const b = await openWatch(api.url, `/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion=${api.resourceVersion()}`);
    assert.equal(api.watchCount(), 2);
    assert.equal(api.dropWatches(), 2);
    await Promise.all([a.ended, b.ended]);
    assert.equal(api.watchCount(), 0);
  });

  test('replaceHistory: watches are cut, objects get resourceVersions from the base, edits send no event, old resourceVersions below the base get 410', async () => {
    const srv = await startApiServer({ bookmarkIntervalMs: 0 });
    try {
      for (const n of ['a', 'b', 'c']) srv.create(svc(n));
      for (let i = 0; i < 20; i++) srv.apply(svc('a', 'default', { labels: { n: String(i) } }));
      const oldRv = srv.resourceVersion();
      const reset = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=${oldRv}`);
      const resetEnd = new Promise<string>((r) => void reset.ended.then(() => r('ended')));
      // Below the old resourceVersions, destroying the streams (a crash).
      srv.replaceHistory({
        resourceVersionBase: 5,
        edit: () => {
          srv.remove('Service', 'default', 'b');
          srv.create(svc('d'));
        },
      });
      assert.equal(await resetEnd, 'ended');
      assert.equal(reset.events.length, 0, 'no event for the edits');
      assert.equal(srv.watchCount(), 0);
      assert.deepEqual(
        srv.list('Service').map((o) => `${o.metadata!.name}@${o.metadata!.resourceVersion}`),
        ['a@6', 'c@8', 'd@10'],
      );
      assert.equal(srv.resourceVersion(), '10');
      const list = await request(srv.url, 'GET', '/api/v1/services');
      assert.equal(list.body.metadata.resourceVersion, '10');
      // The old history's (higher) resourceVersion is served as if valid: only new events come.
      const stale = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=${oldRv}`);
      srv.create(svc('e'));
      assert.deepEqual(
        (await stale.waitForCount(1)).map((e) => `${e.type} ${e.object.metadata.name}@${e.object.metadata.resourceVersion}`),
        ['ADDED e@11'],
      );
      stale.close();
      // Above: the old resourceVersions are below the new history's start, 410; clean close.
      const w = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=11`);
      srv.replaceHistory({ resourceVersionBase: 1000, closeWatches: 'clean', edit: () => void srv.remove('Service', 'default', 'c') });
      await w.ended;
      assert.equal(w.events.length, 0);
      const expired = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=11`);
      await expired.ended;
      assert.equal(expired.events[0]?.object.code, 410);
      assert.deepEqual(
        srv.list('Service').map((o) => o.metadata!.name),
        ['a', 'd', 'e'],
      );
      const from = srv.resourceVersion();
      const fresh = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=${from}`);
      srv.remove('Service', 'default', 'e');
      assert.deepEqual(
        (await fresh.waitForCount(1)).map((e) => e.type),
        ['DELETED'],
      );
      assert.ok(Number(fresh.events[0].object.metadata.resourceVersion) > 1000);
      fresh.close();
    } finally {
      await srv.close();
    }
  });

  test('stop() and start(): watches broken and the port refused while stopped; same address, objects and resourceVersions after', async () => {
    const srv = await startApiServer({ bookmarkIntervalMs: 0 });
    try {
      const before = srv.create(svc('kept'));
      const rv = srv.resourceVersion();
      const w = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=${rv}`);
      await srv.stop();
      await w.ended;
      assert.equal(w.events.length, 0);
      await assert.rejects(request(srv.url, 'GET', `${SVC}/kept`), (err: Error) => (err.cause as NodeJS.ErrnoException | undefined)?.code === 'ECONNREFUSED');
      await srv.start();
      const g = await request(srv.url, 'GET', `${SVC}/kept`);
      assert.equal(g.status, 200);
      assert.equal(g.body.metadata.resourceVersion, before.metadata!.resourceVersion);
      // A watch resumes from the last resourceVersion seen before the restart; new objects continue the sequence.
      const resumed = await openWatch(srv.url, `/api/v1/services?watch=true&resourceVersion=${rv}`);
      const created = await request(srv.url, 'POST', SVC, svc('after'));
      assert.ok(Number(created.body.metadata.resourceVersion) > Number(rv));
      assert.deepEqual(
        (await resumed.waitForCount(1)).map((e) => `${e.type} ${e.object.metadata.name}`),
        ['ADDED after'],
      );
      assert.notEqual(created.body.spec.clusterIP, before.spec.clusterIP);
      resumed.close();
    } finally {
      await srv.close();
    }
  });

  test('close() ends open watch streams', async () => {
    const other = await startApiServer({ bookmarkIntervalMs: 10 });
    const w = await openWatch(other.url, '/api/v1/nodes?watch=true&allowWatchBookmarks=true');
    await other.close();
    await w.ended;
  });
});

describe('sandbox apiserver: manifests, kubeconfig, CLI', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kpr-apiserver-'));
    const docs = [
      svc('web'),
      slice('web-abc', 'web', ['10.244.1.5', '10.244.2.7']),
      { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'web', namespace: 'default' } },
    ];
    await writeFile(path.join(dir, 'web.yaml'), docs.map((d) => YAML.stringify(d)).join('---\n'));
    await writeFile(
      path.join(dir, 'list.json'),
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [{ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1' } }] }),
    );
  });
  after(() => rm(dir, { recursive: true, force: true }));

  test('loadManifests reads multi-document YAML, List kinds and skips unserved kinds', async () => {
    const api = await startApiServer();
    try {
      const r = await api.loadManifests(dir);
      assert.deepEqual(r.objects.map((o) => `${o.kind}/${o.metadata?.name}`).sort(), ['EndpointSlice/web-abc', 'Node/node-1', 'Service/web']);
      assert.equal(r.skipped.length, 1);
      assert.match(r.skipped[0], /^Deployment default\/web/);
      // Loading again is an update (create-or-replace), not an error.
      const again = await api.loadManifests([path.join(dir, 'web.yaml')]);
      assert.equal(again.objects.length, 2);
      const l = await request(api.url, 'GET', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices');
      assert.deepEqual(
        l.body.items[0].endpoints.map((e: any) => e.addresses[0]),
        ['10.244.1.5', '10.244.2.7'],
      );
    } finally {
      await api.close();
    }
  });

  test('writeKubeconfig writes an ordinary kubeconfig pointing at the server', async () => {
    const api = await startApiServer();
    try {
      const file = await api.writeKubeconfig(path.join(dir, 'kube', 'config'));
      const kc: any = YAML.parse(await readFile(file, 'utf8'));
      assert.equal(kc.kind, 'Config');
      const ctx = kc.contexts.find((c: any) => c.name === kc['current-context']);
      const cluster = kc.clusters.find((c: any) => c.name === ctx.context.cluster);
      assert.equal(cluster.cluster.server, api.url);
      assert.equal(cluster.cluster['insecure-skip-tls-verify'], true);
      assert.ok(kc.users.find((u: any) => u.name === ctx.context.user).user.token);
    } finally {
      await api.close();
    }
  });

  test('CLI serves manifests, writes the kubeconfig, prints the URL and exits on SIGTERM', async () => {
    const script = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../sandbox/apiserver.js');
    const kubeconfig = path.join(dir, 'cli-kubeconfig');
    const child = spawn(process.execPath, [script, '--port', '0', '--manifests', dir, '--kubeconfig', kubeconfig], { stdio: ['ignore', 'pipe', 'pipe'] });
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('\n')) resolve(out.trim());
      });
      child.on('exit', (code) => reject(new Error(`exited early: ${code}`)));
    });
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const l = await request(url, 'GET', '/api/v1/services');
    assert.deepEqual(
      l.body.items.map((i: any) => i.metadata.name),
      ['web'],
    );
    const kc: any = YAML.parse(await readFile(kubeconfig, 'utf8'));
    assert.equal(kc.clusters[0].cluster.server, url);
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
  });
});

describe('sandbox apiserver: paginated lists (limit/continue)', () => {
  let api: ApiServer;
  const SVCS = '/api/v1/services';
  const key = (i: any): string => `${i.metadata.namespace}/${i.metadata.name}`;
  const pages = async (path: string, limit: number): Promise<any[]> => {
    const out: any[] = [];
    let cont = '';
    for (;;) {
      const q = new URLSearchParams({ limit: String(limit), ...(cont ? { continue: cont } : {}) });
      const r = await request(api.url, 'GET', `${path}${path.includes('?') ? '&' : '?'}${q}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(r.body);
      cont = r.body.metadata.continue ?? '';
      if (!cont) return out;
    }
  };
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0 });
    for (let i = 0; i < 7; i++) api.create(svc(`s${i}`));
    api.create(svc('x', 'other'));
    api.create(svc('headless', 'default', { spec: { clusterIP: 'None' } }));
  });
  after(() => api.close());

  test('limit pages follow metadata.continue; together they are the unpaginated list, all at one resourceVersion', async () => {
    const full = await request(api.url, 'GET', SVCS);
    for (const limit of [1, 2, 3, 9, 100]) {
      const ps = await pages(SVCS, limit);
      assert.deepEqual(
        ps.flatMap((p) => p.items.map(key)),
        full.body.items.map(key),
        `limit ${limit}`,
      );
      for (const p of ps) {
        assert.equal(p.kind, 'ServiceList');
        assert.ok(p.items.length <= limit);
        assert.equal(p.metadata.resourceVersion, full.body.metadata.resourceVersion);
      }
      assert.equal(ps.at(-1).metadata.continue, undefined, 'the last page has no continue token');
    }
    assert.equal((await pages(SVCS, 3)).length, 3, '9 items in pages of 3');
    // Namespaced and selector-filtered lists page over the matching objects only.
    const ns = await pages('/api/v1/namespaces/default/services', 4);
    assert.deepEqual(
      ns.flatMap((p) => p.items.map((i: any) => i.metadata.name)),
      ['headless', 's0', 's1', 's2', 's3', 's4', 's5', 's6'],
    );
    const sel = await pages(`${SVCS}?${new URLSearchParams({ fieldSelector: 'spec.clusterIP!=None' })}`, 3);
    assert.deepEqual(
      sel.flatMap((p) => p.items.map(key)),
      [...Array.from({ length: 7 }, (_, i) => `default/s${i}`), 'other/x'],
    );
    assert.ok(sel.every((p) => p.items.length <= 3));
  });

  test('later pages come from the first page’s snapshot, whatever changed meanwhile', async () => {
    const first = await request(api.url, 'GET', `${SVCS}?limit=3`);
    const rv = first.body.metadata.resourceVersion;
    const s5 = (await request(api.url, 'GET', `${SVC}/s5`)).body;
    api.create(svc('s55'));
    api.remove('Service', 'default', 's6');
    api.apply({ ...svc('s5'), metadata: { name: 's5', namespace: 'default', labels: { changed: 'yes' } } });
    api.remove('Service', 'default', 's0'); // already served: no effect on the rest
    const rest: any[] = [];
    let cont = first.body.metadata.continue;
    while (cont) {
      const r = await request(api.url, 'GET', `${SVCS}?${new URLSearchParams({ limit: '3', continue: cont })}`);
      assert.equal(r.status, 200);
      assert.equal(r.body.metadata.resourceVersion, rv);
      rest.push(...r.body.items);
      cont = r.body.metadata.continue;
    }
    const all = [...first.body.items, ...rest];
    assert.deepEqual(all.map(key), [
      'default/headless',
      'default/s0',
      'default/s1',
      'default/s2',
      'default/s3',
      'default/s4',
      'default/s5',
      'default/s6',
      'other/x',
    ]);
    const oldS5 = all.find((i) => i.metadata.name === 's5');
    assert.equal(oldS5.metadata.resourceVersion, s5.metadata.resourceVersion, 's5 as it was');
    assert.equal(oldS5.metadata.labels?.changed, undefined);
    const now = await pages(SVCS, 4);
    assert.deepEqual(
      now.flatMap((p) => p.items.map(key)),
      ['default/headless', 'default/s1', 'default/s2', 'default/s3', 'default/s4', 'default/s5', 'default/s55', 'other/x'],
    );
    assert.equal(now.flatMap((p) => p.items).find((i: any) => i.metadata.name === 's5').metadata.labels.changed, 'yes');
  });

  test('a continue token past the retained history gets 410 Expired; a bad token or one with a resourceVersion gets 400', async () => {
    const first = await request(api.url, 'GET', `${SVCS}?limit=2`);
    const cont = first.body.metadata.continue;
    assert.ok(cont);
    const ok = await request(api.url, 'GET', `${SVCS}?${new URLSearchParams({ limit: '2', continue: cont })}`);
    assert.equal(ok.status, 200, 'still valid while nothing changed');
    api.create(svc('later'));
    api.compactHistory();
    const gone = await request(api.url, 'GET', `${SVCS}?${new URLSearchParams({ limit: '2', continue: cont })}`);
    assert.equal(gone.status, 410);
    assert.equal(gone.body.kind, 'Status');
    assert.equal(gone.body.reason, 'Expired');
    const bad = await request(api.url, 'GET', `${SVCS}?${new URLSearchParams({ limit: '2', continue: 'garbage' })}`);
    assert.equal(bad.status, 400);
    const fresh = (await request(api.url, 'GET', `${SVCS}?limit=2`)).body.metadata.continue;
    const withRv = await request(api.url, 'GET', `${SVCS}?${new URLSearchParams({ limit: '2', continue: fresh, resourceVersion: '5' })}`);
    assert.equal(withRv.status, 400);
  });
});
