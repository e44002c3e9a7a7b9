import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import YAML from 'yaml';
import { startApiServer, type ApiServer } from '../../sandbox/apiserver.js';
import { loadKubeConfig } from '../../agent/k8s/kubeconfig.js';
import { ClusterWatch, type ClusterChange, type Logger } from '../../agent/k8s/watchers.js';
import { slice, sleep, svc } from '../sandbox/apiserver-helpers.js';
import { V1EndpointSlice, V1Service } from '@kubernetes/client-node';

function recorder(): {
  changes: ClusterChange[];
  seen: (c: Partial<ClusterChange>, timeoutMs?: number) => Promise<ClusterChange>;
  cb: (c: ClusterChange) => void;
} {
  const changes: ClusterChange[] = [];
  const matches = (c: ClusterChange, want: Partial<ClusterChange>): boolean => Object.entries(want).every(([k, v]) => (c as any)[k] === v);
  return {
    changes,
    cb: (c) => changes.push(c),
    async seen(want, timeoutMs = 3000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const hit = changes.find((c) => matches(c, want));
        if (hit) return hit;
        if (Date.now() > end) throw new Error(`no change ${JSON.stringify(want)}; got ${JSON.stringify(changes)}`);
        await sleep(10);
      }
    },
  };
}

const names = (xs: ReadonlyArray<{ metadata?: { namespace?: string; name?: string } }>): string[] =>
  xs.map((x) => `${x.metadata?.namespace ? x.metadata.namespace + '/' : ''}${x.metadata?.name}`);

function testLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, info() {}, debug() {}, error: (m) => warnings.push(m), warn: (m) => warnings.push(m) };
}

describe('ClusterWatch over the sandbox apiserver (client-node through a kubeconfig file)', () => {
  let api: ApiServer;
  let dir: string;
  let kubeconfig: string;
  let cw: ClusterWatch;
  const rec = recorder();
  const log = testLogger();

  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 100 });
    dir = await mkdtemp(path.join(tmpdir(), 'kpr-k8s-'));
    const docs = [
      svc('web'),
      svc('db', 'data'),
      svc('headless', 'default', { spec: { clusterIP: 'None' } }),
      svc('not-ours', 'default', { labels: { 'service.kubernetes.io/service-proxy-name': 'someone-else' } }),
      slice('web-aaaaa', 'web', ['10.244.0.5']),
      slice('db-bbbbb', 'db', ['10.244.0.6'], 'data'),
      slice('orphan', undefined, ['10.244.0.7']),
      slice('headless-ccccc', 'headless', ['10.244.0.8'], 'default', { 'service.kubernetes.io/headless': '' }),
      { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a', labels: { zone: 'z1' } } },
      { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-b' } },
    ];
    await writeFile(path.join(dir, 'cluster.yaml'), docs.map((d) => YAML.stringify(d)).join('---\n'));
    await api.loadManifests(dir);
    kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
    cw = new ClusterWatch({ kubeConfig: loadKubeConfig({ kubeconfig }), nodeName: 'node-a', logger: log, restartBackoffMs: 50 });
    cw.onChange(rec.cb);
    await cw.start();
  });
  after(async () => {
    await cw.stop();
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('initial sync sees the manifests, filtered like kube-proxy', async () => {
    assert.equal(cw.synced(), true);
    assert.deepEqual(names(cw.services()), ['data/db', 'default/web']);
    assert.deepEqual(names(cw.endpointSlicesFor('default', 'web')), ['default/web-aaaaa']);
    assert.deepEqual(names(cw.endpointSlicesFor('data', 'db')), ['data/db-bbbbb']);
    assert.deepEqual(cw.endpointSlicesFor('default', 'headless'), []);
    assert.deepEqual(names(cw.endpointSlices()), ['data/db-bbbbb', 'default/web-aaaaa'], 'slice without service-name label ignored');
    assert.equal(cw.node()?.metadata?.name, 'node-a');
    assert.equal(cw.node()?.metadata?.labels?.zone, 'z1');
    // Objects are typed like client-node list results.
    assert.ok(cw.services()[0] instanceof V1Service);
    assert.ok(cw.endpointSlices()[0] instanceof V1EndpointSlice);
    assert.match(cw.service('default', 'web')?.spec?.clusterIP ?? '', /^198\.19\./);
    assert.deepEqual(rec.changes.map((c) => `${c.kind} ${c.type} ${c.key}`).sort(), [
      'EndpointSlice add data/db',
      'EndpointSlice add default/web',
      'Node add node-a',
      'Service add data/db',
      'Service add default/web',
    ]);
  });

  test('Service create/update/delete arrive as changes keyed by ns/name', async () => {
    rec.changes.length = 0;
    api.create(svc('api', 'prod'));
    await rec.seen({ kind: 'Service', type: 'add', key: 'prod/api' });
    assert.equal(cw.service('prod', 'api')?.spec?.ports?.[0]?.port, 80);
    assert.ok(cw.service('prod', 'api') instanceof V1Service, 'watch objects are typed too');

    const cur = api.get('Service', 'prod', 'api')!;
    cur.spec.ports[0].port = 8443;
    api.update(cur);
    await rec.seen({ kind: 'Service', type: 'update', key: 'prod/api' });
    assert.equal(cw.service('prod', 'api')?.spec?.ports?.[0]?.port, 8443);

    const web = api.get('Service', 'default', 'web')!;
    api.remove('Service', 'default', 'web');
    await rec.seen({ kind: 'Service', type: 'delete', key: 'default/web' });
    assert.equal(cw.service('default', 'web'), undefined);
    delete web.metadata!.resourceVersion;
    api.create(web);
    await rec.seen({ kind: 'Service', type: 'add', key: 'default/web' });

    api.remove('Service', 'prod', 'api');
    await rec.seen({ kind: 'Service', type: 'delete', key: 'prod/api' });
    assert.deepEqual(names(cw.services()), ['data/db', 'default/web']);
  });

  test('EndpointSlice create/update/delete arrive keyed by ns/<service-name label>', async () => {
    rec.changes.length = 0;
    api.create(slice('web-zzzzz', 'web', ['10.244.9.1']));
    const add = await rec.seen({ kind: 'EndpointSlice', type: 'add', key: 'default/web' });
    assert.equal(add.object, 'default/web-zzzzz');
    assert.deepEqual(names(cw.endpointSlicesFor('default', 'web')), ['default/web-aaaaa', 'default/web-zzzzz']);

    const s = api.get('EndpointSlice', 'default', 'web-zzzzz')!;
    s.endpoints.push({ addresses: ['10.244.9.2'], conditions: { ready: true } });
    api.update(s);
    await rec.seen({ kind: 'EndpointSlice', type: 'update', key: 'default/web' });
    const updated = cw.endpointSlicesFor('default', 'web').find((x) => x.metadata?.name === 'web-zzzzz');
    assert.deepEqual(
      updated?.endpoints.map((e) => e.addresses[0]),
      ['10.244.9.1', '10.244.9.2'],
    );

    api.remove('EndpointSlice', 'default', 'web-zzzzz');
    await rec.seen({ kind: 'EndpointSlice', type: 'delete', key: 'default/web', object: 'default/web-zzzzz' });
    assert.deepEqual(names(cw.endpointSlicesFor('default', 'web')), ['default/web-aaaaa']);

    // A slice without the label is ignored entirely.
    rec.changes.length = 0;
    api.create(slice('unlabelled', undefined, ['10.244.9.3']));
    api.create(slice('marker', 'marker', ['10.244.9.4']));
    await rec.seen({ kind: 'EndpointSlice', key: 'default/marker' });
    assert.equal(rec.changes.filter((c) => c.object === 'default/unlabelled').length, 0);
  });

  test('a slice relabelled to another Service is a delete for the old one and an add for the new one', async () => {
    rec.changes.length = 0;
    const s = api.get('EndpointSlice', 'default', 'marker')!;
    s.metadata!.labels!['kubernetes.io/service-name'] = 'marker2';
    api.update(s);
    await rec.seen({ kind: 'EndpointSlice', type: 'add', key: 'default/marker2' });
    await rec.seen({ kind: 'EndpointSlice', type: 'delete', key: 'default/marker' });
    assert.deepEqual(cw.endpointSlicesFor('default', 'marker'), []);
    assert.deepEqual(names(cw.endpointSlicesFor('default', 'marker2')), ['default/marker']);
  });

  test('only this node is watched', async () => {
    rec.changes.length = 0;
    const b = api.get('Node', undefined, 'node-b')!;
    b.metadata!.labels = { touched: 'yes' };
    api.update(b);
    const a = api.get('Node', undefined, 'node-a')!;
    a.metadata!.labels = { zone: 'z2' };
    api.update(a);
    await rec.seen({ kind: 'Node', type: 'update', key: 'node-a' });
    assert.equal(cw.node()?.metadata?.labels?.zone, 'z2');
    assert.equal(rec.changes.filter((c) => c.key === 'node-b').length, 0);
  });

  test('dropped watches resume from their resourceVersion without losing events', async () => {
    rec.changes.length = 0;
    await waitForWatches(api, 3);
    assert.equal(api.dropWatches(), 3);
    api.create(svc('during-drop'));
    await rec.seen({ kind: 'Service', type: 'add', key: 'default/during-drop' });
    await waitForWatches(api, 3);
    assert.equal(rec.changes.filter((c) => c.key === 'default/during-drop').length, 1);
  });

  test('after compaction and a broken watch, the informer relists and sees adds, updates and deletes made meanwhile', async () => {
    await waitForWatches(api, 3);
    rec.changes.length = 0;
    api.pauseWatches(); // breaks the watches; reconnects are held (a partition)
    api.failRequests(1_000_000, { code: 503, match: /^GET [^?]*\?(?!.*watch=true)/ }); // and lists fail
    api.remove('Service', 'default', 'during-drop');
    api.remove('EndpointSlice', 'data', 'db-bbbbb');
    api.create(svc('while-away', 'prod'));
    const db = api.get('Service', 'data', 'db')!;
    db.spec.ports[0].port = 5432;
    api.update(db);
    api.compactHistory(); // the informers' resourceVersions are now too old
    await sleep(100);
    assert.equal(rec.changes.length, 0, 'nothing seen while partitioned');
    api.failRequests(0);
    api.resumeWatches(); // held watches get 410 Expired -> relist
    await rec.seen({ kind: 'Service', type: 'delete', key: 'default/during-drop' });
    await rec.seen({ kind: 'EndpointSlice', type: 'delete', key: 'data/db', object: 'data/db-bbbbb' });
    await rec.seen({ kind: 'Service', type: 'add', key: 'prod/while-away' });
    await rec.seen({ kind: 'Service', type: 'update', key: 'data/db' });
    assert.deepEqual(names(cw.services()), ['data/db', 'default/web', 'prod/while-away']);
    assert.equal(cw.service('data', 'db')?.spec?.ports?.[0]?.port, 5432);
    assert.deepEqual(cw.endpointSlicesFor('data', 'db'), []);
    // The relist reports only what changed: unchanged objects produce no update.
    assert.equal(rec.changes.filter((c) => c.key === 'default/web').length, 0);
    // And the watches are live again afterwards.
    await waitForWatches(api, 3);
    api.create(svc('after-relist'));
    await rec.seen({ kind: 'Service', type: 'add', key: 'default/after-relist' });
  });

  test('informer errors (failed watch requests) are retried with backoff', async () => {
    await waitForWatches(api, 3);
    rec.changes.length = 0;
    log.warnings.length = 0;
    api.failRequests(4, { code: 500, match: /^GET \/api\/v1\/services\?.*watch=true/ });
    api.dropWatches();
    api.create(svc('after-errors'));
    await rec.seen({ kind: 'Service', type: 'add', key: 'default/after-errors' }, 5000);
    assert.ok(
      log.warnings.some((w) => w.includes('restarting')),
      'the failure was logged',
    );
  });
});

async function waitForWatches(api: ApiServer, n: number, timeoutMs = 3000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (api.watchCount() < n) {
    if (Date.now() > end) throw new Error(`only ${api.watchCount()} watches open`);
    await sleep(10);
  }
}

describe('ClusterWatch lifecycle', () => {
  test('start() waits for a failing initial list to succeed on retry', async () => {
    const api = await startApiServer({ bookmarkIntervalMs: 0 });
    api.create(svc('web'));
    api.failRequests(2, { code: 503, match: /^GET \/api\/v1\/services\?(?!.*watch=)/ });
    const dir = await mkdtemp(path.join(tmpdir(), 'kpr-k8s-'));
    const cw = new ClusterWatch({ kubeConfig: loadKubeConfig({ kubeconfig: await api.writeKubeconfig(path.join(dir, 'kc')) }), restartBackoffMs: 20 });
    try {
      await cw.start();
      assert.deepEqual(names(cw.services()), ['default/web']);
      assert.equal(cw.node(), undefined, 'no nodeName: no Node watch');
    } finally {
      await cw.stop();
      await api.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('stop() closes every watch connection (also one still waiting for its response) and emits nothing more', async () => {
    const api = await startApiServer({ bookmarkIntervalMs: 0 });
    const dir = await mkdtemp(path.join(tmpdir(), 'kpr-k8s-'));
    const cw = new ClusterWatch({ kubeConfig: loadKubeConfig({ kubeconfig: await api.writeKubeconfig(path.join(dir, 'kc')) }), nodeName: 'n' });
    const rec = recorder();
    cw.onChange(rec.cb);
    await cw.start();
    await waitForWatches(api, 3);
    api.pauseWatches(); // reconnects now hang waiting for response headers
    for (let i = 0; i < 100 && api.heldWatchCount() < 3; i++) await sleep(10);
    assert.equal(api.heldWatchCount(), 3);
    await cw.stop();
    for (let i = 0; i < 100 && api.heldWatchCount() > 0; i++) await sleep(10);
    assert.equal(api.heldWatchCount(), 0, 'the client gave up its pending watch requests');
    api.resumeWatches();
    api.create(svc('late'));
    await sleep(100);
    assert.equal(api.watchCount(), 0);
    assert.equal(rec.changes.length, 0);
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });
});

describe('loadKubeConfig', () => {
  test('an explicit kubeconfig wins; server, host and port can be overridden', async () => {
    const api = await startApiServer();
    const dir = await mkdtemp(path.join(tmpdir(), 'kpr-k8s-'));
    const saved = { h: process.env.KUBERNETES_SERVICE_HOST, p: process.env.KUBERNETES_SERVICE_PORT };
    try {
      const file = await api.writeKubeconfig(path.join(dir, 'kc'));
      process.env.KUBERNETES_SERVICE_HOST = '198.18.0.1';
      process.env.KUBERNETES_SERVICE_PORT = '443';
      assert.equal(loadKubeConfig({ kubeconfig: file }).getCurrentCluster()?.server, api.url);
      assert.equal(loadKubeConfig({ kubeconfig: file, server: 'https://1.2.3.4:6443' }).getCurrentCluster()?.server, 'https://1.2.3.4:6443');
      assert.equal(loadKubeConfig({ kubeconfig: file, servicePort: 9999 }).getCurrentCluster()?.server, 'http://127.0.0.1:9999');
      assert.equal(loadKubeConfig({ kubeconfig: file, serviceHost: 'fd00::1' }).getCurrentCluster()?.server, `http://[fd00::1]:${api.port}`);
      // Without a file: in-cluster configuration from the service environment.
      const inCluster = loadKubeConfig();
      assert.equal(inCluster.getCurrentCluster()?.server, 'https://198.18.0.1:443');
      assert.equal(loadKubeConfig({ serviceHost: '10.9.9.9' }).getCurrentCluster()?.server, 'https://10.9.9.9');
    } finally {
      if (saved.h === undefined) delete process.env.KUBERNETES_SERVICE_HOST;
      else process.env.KUBERNETES_SERVICE_HOST = saved.h;
      if (saved.p === undefined) delete process.env.KUBERNETES_SERVICE_PORT;
      else process.env.KUBERNETES_SERVICE_PORT = saved.p;
      await api.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('ClusterWatch: paged lists and slim cached objects', () => {
  const TRIGGER = 'endpoints.kubernetes.io/last-change-trigger-time';
  const fat = (o: any, i: number): any => ({
    ...o,
    metadata: {
      ...o.metadata,
      annotations: {
        'kubectl.kubernetes.io/last-applied-configuration': 'x'.repeat(200),
        ...(o.kind === 'EndpointSlice' ? { [TRIGGER]: `2024-01-01T00:00:0${i % 10}Z` } : {}),
      },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: o.metadata.name, uid: '00000000-0000-0000-0000-000000000000' }],
      managedFields: [{ manager: 'kubectl', operation: 'Update', apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:spec': {} } }],
    },
    ...(o.kind === 'EndpointSlice'
      ? {
          endpoints: o.endpoints.map((e: any) => ({
            ...e,
            nodeName: 'node-a',
            zone: 'z1',
            hints: { forZones: [{ name: 'z1' }] },
            targetRef: { kind: 'Pod', name: `p${i}`, namespace: 'default' },
          })),
        }
      : {}),
  });

  test('lists are fetched in pages (the same objects as one list); cached objects keep only what kpr reads', async () => {
    const api = await startApiServer({ bookmarkIntervalMs: 0 });
    const dir = await mkdtemp(path.join(tmpdir(), 'kpr-k8s-'));
    const seenQueries: string[] = [];
    let cw: ClusterWatch | undefined;
    try {
      for (let i = 0; i < 7; i++) {
        api.create(fat(svc(`s${i}`, i % 2 ? 'a' : 'b', { spec: { type: 'LoadBalancer' } }), i));
        api.create(fat(slice(`s${i}-x`, `s${i}`, [`10.0.0.${i}`], i % 2 ? 'a' : 'b'), i));
      }
      api.create({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'node-a', labels: { zone: 'z1' } },
        status: { addresses: [{ type: 'InternalIP', address: '10.1.0.1' }], images: [{ names: ['big'], sizeBytes: 1 }] },
      });
      const kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
      const kc = loadKubeConfig({ kubeconfig });
      cw = new ClusterWatch({
        kubeConfig: kc,
        nodeName: 'node-a',
        listPageSize: 3,
        logger: { ...nullLog, debug: (m, f) => m === 'k8s paged list' && seenQueries.push(`${f?.kind}:${f?.pages}`) },
      });
      const changes: ClusterChange[] = [];
      cw.onChange((c) => changes.push(c));
      await cw.start();
      assert.deepEqual(seenQueries.sort(), ['EndpointSlice:3', 'Service:3'], '7 objects in pages of 3');
      assert.deepEqual(names(cw.services()), ['a/s1', 'a/s3', 'a/s5', 'b/s0', 'b/s2', 'b/s4', 'b/s6']);
      assert.equal(cw.endpointSlices().length, 7);
      assert.equal(changes.filter((c) => c.type === 'add').length, 15);

      const s = cw.service('a', 's1')!;
      // creationTimestamp: the oldest Service wins a same-class claim on a frontend.
      assert.deepEqual(
        Object.keys(s.metadata!)
          .filter((k) => (s.metadata as any)[k] !== undefined)
          .sort(),
        ['creationTimestamp', 'name', 'namespace', 'resourceVersion'],
      );
      assert.ok(s.metadata!.creationTimestamp instanceof Date);
      assert.equal(s.spec?.type, 'LoadBalancer');
      const e = cw.endpointSlicesFor('a', 's1')[0];
      assert.deepEqual(e.metadata?.annotations, { [TRIGGER]: '2024-01-01T00:00:01Z' });
      assert.equal(e.metadata?.labels?.['kubernetes.io/service-name'], 's1');
      assert.equal(e.metadata?.managedFields, undefined);
      assert.equal(e.metadata?.ownerReferences, undefined);
      assert.deepEqual(e.endpoints?.[0].addresses, ['10.0.0.1']);
      assert.equal(e.endpoints?.[0].nodeName, 'node-a');
      assert.equal(e.endpoints?.[0].hints?.forZones?.[0].name, 'z1');
      assert.equal(e.endpoints?.[0].targetRef, undefined);
      assert.equal(e.ports?.[0].port, 8080);
      assert.deepEqual(
        cw.node()?.status?.addresses?.map((a) => `${a.type}=${a.address}`),
        ['InternalIP=10.1.0.1'],
      );
      assert.equal(cw.node()?.status?.images, undefined);

      // Watch events are slimmed (and typed) the same way; the change carries the annotation.
      changes.length = 0;
      api.apply(fat(slice('s1-x', 's1', ['10.0.0.99'], 'a'), 3));
      api.apply({
        ...fat(svc('s1', 'a', { spec: { type: 'LoadBalancer' } }), 1),
        status: { loadBalancer: { ingress: [{ ip: '192.0.2.1' }] }, conditions: [] },
      });
      const end = Date.now() + 3000;
      while (changes.length < 2 && Date.now() < end) await sleep(10);
      const sc = changes.find((c) => c.kind === 'EndpointSlice')!;
      assert.equal(sc.resource?.metadata?.annotations?.[TRIGGER], '2024-01-01T00:00:03Z');
      const e2 = cw.endpointSlicesFor('a', 's1')[0];
      assert.ok(e2 instanceof V1EndpointSlice);
      assert.deepEqual(e2.endpoints?.[0].addresses, ['10.0.0.99']);
      assert.equal(e2.endpoints?.[0].targetRef, undefined);
      assert.equal(e2.metadata?.managedFields, undefined);
      const s2 = cw.service('a', 's1')!;
      assert.ok(s2 instanceof V1Service);
      assert.equal(s2.metadata?.annotations, undefined);
      assert.deepEqual(
        s2.status?.loadBalancer?.ingress?.map((i) => i.ip),
        ['192.0.2.1'],
      );
      assert.equal((s2.status as any)?.conditions, undefined);
    } finally {
      await cw?.stop();
      await api.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const nullLog: Logger = { info() {}, warn() {}, error() {}, debug() {} };
