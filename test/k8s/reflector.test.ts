/**
 * "Never trust a watch forever": the reflector relists (and infers the
 * DELETED events it never got) when the API server comes back with another
 * history, when a watch fails, returns stale objects or stops making
 * progress; malformed or rejected objects are absent and block nothing.
 * Against the embedded API server (sandbox/apiserver.ts), except the
 * stale-event case, which needs a server no real one is (a scripted one).
 */
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { startApiServer, type ApiServer } from '../../sandbox/apiserver.js';
import { loadKubeConfig } from '../../agent/k8s/kubeconfig.js';
import { ClusterWatch, type ClusterChange, type ClusterWatchOptions, type RelistReason } from '../../agent/k8s/watchers.js';
import { Reflector, compareResourceVersions, type RelistInfo } from '../../agent/k8s/reflector.js';
import { slice, sleep, svc } from '../sandbox/apiserver-helpers.js';
import type { ApiRequest } from '../../agent/k8s/api-requests.js';

interface LogLine {
  level: string;
  msg: string;
  fields: Record<string, any>;
}

async function until<T>(what: string, check: () => T | undefined | false, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

interface Harness {
  api: ApiServer;
  cw: ClusterWatch;
  changes: ClusterChange[];
  relists: Array<{ kind: string; reason: RelistReason; added: number; updated: number; deleted: number }>;
  rejected: Array<{ kind: string; reason: string }>;
  logs: LogLine[];
  has: (kind: string, type: string, object: string) => boolean;
  close: () => Promise<void>;
}

async function harness(
  seed: (api: ApiServer) => void,
  opts: { bookmarkIntervalMs?: number; cw?: Partial<ClusterWatchOptions>; beforeStart?: (api: ApiServer) => void } = {},
): Promise<Harness> {
  const api = await startApiServer({ bookmarkIntervalMs: opts.bookmarkIntervalMs ?? 50 });
  const dir = await mkdtemp(path.join(tmpdir(), 'kpr-reflector-'));
  seed(api);
  const logs: LogLine[] = [];
  const line =
    (level: string) =>
    (msg: string, fields: Record<string, unknown> = {}) =>
      logs.push({ level, msg, fields });
  const relists: Harness['relists'] = [];
  const rejected: Harness['rejected'] = [];
  const cw = new ClusterWatch({
    kubeConfig: loadKubeConfig({ kubeconfig: await api.writeKubeconfig(path.join(dir, 'kc')) }),
    logger: { info: line('info'), warn: line('warn'), error: line('error'), debug: line('debug') },
    restartBackoffMs: 20,
    onRelist: (kind, reason, c) => relists.push({ kind, reason, ...c }),
    onRejected: (kind, reason) => rejected.push({ kind, reason }),
    ...opts.cw,
  });
  const changes: ClusterChange[] = [];
  cw.onChange((c) => changes.push(c));
  opts.beforeStart?.(api);
  await cw.start();
  return {
    api,
    cw,
    changes,
    relists,
    rejected,
    logs,
    has: (kind, type, object) => changes.some((c) => c.kind === kind && c.type === type && c.object === object),
    async close() {
      await cw.stop();
      await api.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const twoEndpoints = (): any => {
  const s = slice('web-1', 'web', ['10.244.0.1']);
  s.endpoints.push({ addresses: ['10.244.0.2'], conditions: { ready: true } });
  return s;
};

/** web (two endpoints) and old; many updates so the resourceVersions are well above a low base. */
function seedRestart(api: ApiServer): void {
  api.create(svc('web'));
  api.create(svc('old'));
  api.create(twoEndpoints());
  for (let i = 0; i < 30; i++) api.apply(svc('old', 'default', { labels: { round: String(i) } }));
}

async function waitForWatches(api: ApiServer, n: number): Promise<void> {
  await until(`${n} watches`, () => api.watchCount() >= n, 3000);
}

describe('reflector: the API server comes back with another history', () => {
  const cases: Array<{ name: string; base: 'below' | 'above'; close: 'clean' | 'reset'; reason: RelistReason }> = [
    {
      name: 'case A, resourceVersions restart below ours, streams closed cleanly: the bookmarks/events go back',
      base: 'below',
      close: 'clean',
      reason: 'rv_backwards',
    },
    { name: 'case A, resourceVersions restart below ours, streams cut: the broken watch relists', base: 'below', close: 'reset', reason: 'watch_error' },
    {
      name: 'case B, resourceVersions past ours without a DELETED, streams closed cleanly: the resumed watch gets 410',
      base: 'above',
      close: 'clean',
      reason: 'expired',
    },
    {
      name: 'case B, resourceVersions past ours without a DELETED, streams cut: the broken watch relists',
      base: 'above',
      close: 'reset',
      reason: 'watch_error',
    },
  ];
  for (const c of cases) {
    test(`${c.name} (${c.reason}); the removed endpoint, the new and the deleted Service converge`, async () => {
      const h = await harness(seedRestart);
      try {
        await waitForWatches(h.api, 2);
        await sleep(150); // a few bookmarks: the watches are established, not "very short"
        h.changes.length = 0;
        h.relists.length = 0;
        const oldRv = Number(h.api.resourceVersion());
        h.api.replaceHistory({
          resourceVersionBase: c.base === 'below' ? 3 : oldRv + 1000,
          closeWatches: c.close,
          edit: () => {
            h.api.apply(slice('web-1', 'web', ['10.244.0.1']));
            h.api.create(svc('new'));
            h.api.remove('Service', 'default', 'old');
          },
        });
        await until('both kinds relisted', () => ['Service', 'EndpointSlice'].every((k) => h.relists.some((r) => r.kind === k)));
        assert.deepEqual(
          h.relists.map((r) => `${r.kind} ${r.reason}`).sort(),
          [`EndpointSlice ${c.reason}`, `Service ${c.reason}`],
          'one relist each, for the expected reason',
        );
        assert.deepEqual(
          h.relists.find((r) => r.kind === 'Service'),
          { kind: 'Service', reason: c.reason, added: 1, updated: 0, deleted: 1 },
        );
        assert.deepEqual(
          h.relists.find((r) => r.kind === 'EndpointSlice'),
          { kind: 'EndpointSlice', reason: c.reason, added: 0, updated: 1, deleted: 0 },
        );
        assert.ok(h.has('Service', 'delete', 'default/old'), 'the DELETED that never came is inferred');
        assert.ok(h.has('Service', 'add', 'default/new'));
        assert.ok(h.has('EndpointSlice', 'update', 'default/web-1'));
        assert.ok(
          !h.changes.some((c2) => c2.object === 'default/web' && c2.kind === 'Service'),
          'an unchanged Service with a new resourceVersion is not an update',
        );
        assert.deepEqual(
          h.cw.services().map((s) => s.metadata?.name),
          ['new', 'web'],
        );
        assert.deepEqual(
          h.cw.endpointSlicesFor('default', 'web')[0].endpoints.map((e) => e.addresses[0]),
          ['10.244.0.1'],
        );
        const line = h.logs.find((l) => l.msg === 'k8s relist' && l.fields.kind === 'Service');
        assert.ok(line, 'one log line per relist');
        assert.equal(line.level, 'info');
        assert.deepEqual([line.fields.reason, line.fields.added, line.fields.updated, line.fields.deleted], [c.reason, 1, 0, 1]);
        // And the watch is live in the new history.
        const status = h.cw.cacheStatus().find((s) => s.kind === 'Service')!;
        assert.ok(Number(status.resourceVersion) < oldRv === (c.base === 'below'));
        h.api.remove('Service', 'default', 'new');
        await until('the new Service deleted through the watch', () => !h.cw.service('default', 'new'));
      } finally {
        await h.close();
      }
    });
  }
});

describe('reflector: relist reasons', () => {
  test('initial lists are reported as reason "initial"', async () => {
    const h = await harness((api) => api.create(svc('web')));
    try {
      assert.deepEqual(h.relists.map((r) => `${r.kind} ${r.reason} +${r.added}`).sort(), ['EndpointSlice initial +0', 'Service initial +1']);
    } finally {
      await h.close();
    }
  });

  test('no event or bookmark within noProgressTimeoutMs (a watch never answered): relist "no_progress" sees what changed meanwhile', async () => {
    const h = await harness((api) => api.create(svc('web')), {
      bookmarkIntervalMs: 0,
      cw: { noProgressTimeoutMs: 300 },
      beforeStart: (api) => api.pauseWatches(), // every watch request hangs unanswered
    });
    try {
      const confirmed = h.cw.cacheStatus().map((s) => s.lastConfirmed!.getTime());
      h.api.create(svc('meanwhile'));
      h.api.remove('Service', 'default', 'web');
      await until('the changes seen', () => h.has('Service', 'add', 'default/meanwhile') && h.has('Service', 'delete', 'default/web'));
      assert.ok(h.relists.some((r) => r.kind === 'Service' && r.reason === 'no_progress' && r.added === 1 && r.deleted === 1));
      await until('the EndpointSlice informer relisted too', () => h.relists.some((r) => r.kind === 'EndpointSlice' && r.reason === 'no_progress'));
      assert.ok(h.logs.some((l) => l.msg === 'k8s watch no longer trusted; relisting' && l.fields.reason === 'no_progress'));
      const after = h.cw.cacheStatus().map((s) => s.lastConfirmed!.getTime());
      assert.ok(
        after.every((t, i) => t > confirmed[i]),
        'each relist confirms the cache',
      );
    } finally {
      h.api.resumeWatches();
      await h.close();
    }
  });

  test('bookmarks keep the cache confirmed without relisting', async () => {
    const h = await harness((api) => api.create(svc('web')), { bookmarkIntervalMs: 30, cw: { noProgressTimeoutMs: 400 } });
    try {
      const t0 = h.cw.cacheStatus()[0].lastConfirmed!.getTime();
      await sleep(600);
      assert.ok(h.cw.cacheStatus()[0].lastConfirmed!.getTime() > t0);
      assert.deepEqual(
        h.relists.map((r) => r.reason),
        ['initial', 'initial'],
      );
    } finally {
      await h.close();
    }
  });

  test('a failed watch request relists ("watch_error") instead of resuming', async () => {
    const h = await harness((api) => api.create(svc('web')));
    try {
      await waitForWatches(h.api, 2);
      await sleep(150);
      h.api.failRequests(1, { code: 500, match: /^GET \/api\/v1\/services\?.*watch=true/ });
      h.api.dropWatches();
      await until('a watch_error relist', () => h.relists.some((r) => r.kind === 'Service' && r.reason === 'watch_error'));
      assert.ok(h.logs.some((l) => l.msg === 'k8s informer failed; restarting with a relist' && l.fields.status === 500));
    } finally {
      await h.close();
    }
  });
});

describe('reflector: a watch event older than the cached object', () => {
  test('relists with reason "stale_event" (a scripted server)', async () => {
    let lists = 0;
    const server = createServer((req, res) => {
      const url = new URL(req.url!, 'http://x');
      if (url.searchParams.get('watch') !== 'true') {
        lists++;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        // A list at resourceVersion 5 whose item is at 10 (no real server does this).
        res.end(
          JSON.stringify({
            metadata: { resourceVersion: '5' },
            items: [{ metadata: { name: 'a', namespace: 'd', resourceVersion: '10' }, spec: { clusterIP: '198.18.0.1' } }],
          }),
        );
        return;
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write(
        JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'a', namespace: 'd', resourceVersion: '7' }, spec: { clusterIP: '198.18.0.2' } } }) +
          '\n',
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const relists: RelistInfo[] = [];
    const r = new Reflector<any>({
      kind: 'Service',
      kubeConfig: kc,
      path: '/api/v1/services',
      typeName: 'V1Service',
      prune: (o) => o,
      pageSize: 0,
      restartBackoffMs: 20,
      maxRestartBackoffMs: 50,
      noProgressMs: 60_000,
      log: { info() {}, warn() {}, error() {}, debug() {} },
      handlers: { add() {}, update() {}, delete() {} },
      onSynced() {},
      onRelist: (i) => relists.push(i),
    });
    try {
      r.start();
      await until('a stale_event relist', () => relists.some((i) => i.reason === 'stale_event'));
      assert.equal(relists[0].reason, 'initial');
      assert.ok(lists >= 2);
    } finally {
      await r.stop();
      server.closeAllConnections();
      await new Promise<void>((res) => server.close(() => res()));
    }
  });

  test('resourceVersions are compared only when both are non-negative integers', () => {
    assert.equal(compareResourceVersions('9', '10'), -1);
    assert.equal(compareResourceVersions('10', '9'), 1);
    assert.equal(compareResourceVersions('007', '7'), 0);
    assert.equal(compareResourceVersions('18446744073709551617', '18446744073709551616'), 1);
    assert.equal(compareResourceVersions('abc', '10'), undefined);
    assert.equal(compareResourceVersions('-1', '10'), undefined);
    assert.equal(compareResourceVersions('', '10'), undefined);
  });
});

describe('reflector: rejected objects are absent and block nothing', () => {
  test('a Service with spec.ports: 5 (cannot be typed) does not block the sync or other Services; logged once per version', async () => {
    const h = await harness((api) => {
      api.create(svc('web'));
      api.create(svc('bad', 'default', { spec: { ports: 5 } }));
      api.create(svc('db', 'data'));
    });
    try {
      assert.equal(h.cw.synced(), true);
      assert.deepEqual(
        h.cw.services().map((s) => s.metadata?.name),
        ['db', 'web'],
      );
      const warns = () => h.logs.filter((l) => l.msg === 'k8s object rejected; treated as absent');
      assert.equal(warns().length, 1);
      assert.equal(warns()[0].level, 'warn');
      assert.deepEqual([warns()[0].fields.kind, warns()[0].fields.object, warns()[0].fields.field], ['Service', 'default/bad', '?']);
      assert.match(warns()[0].fields.reason, /iterable/);
      assert.equal(warns()[0].fields.resourceVersion, h.api.get('Service', 'default', 'bad')!.metadata!.resourceVersion);
      assert.deepEqual(
        h.rejected.map((r) => r.kind),
        ['Service'],
      );

      // A cached Service that turns malformed is deleted, exactly as a deletion.
      await waitForWatches(h.api, 2);
      const web = h.api.get('Service', 'default', 'web')!;
      web.spec.ports = 5;
      h.api.update(web);
      await until('web deleted', () => h.has('Service', 'delete', 'default/web'));
      assert.equal(h.cw.service('default', 'web'), undefined);
      assert.equal(warns().length, 2);
      // The watch goes on: other changes still arrive.
      h.api.create(svc('later'));
      await until('later added', () => h.has('Service', 'add', 'default/later'));

      // A relist meets the same versions: no new line.
      h.api.pauseWatches();
      h.api.create(svc('while-away'));
      h.api.compactHistory();
      h.api.resumeWatches();
      await until('relisted after 410', () => h.relists.some((r) => r.kind === 'Service' && r.reason === 'expired'));
      assert.equal(warns().length, 2, 'one line per object version');
      assert.equal(h.rejected.length, 2);

      // A new (still bad) version is logged again; a fixed one comes back as an add.
      h.api.apply(svc('bad', 'default', { spec: { ports: 6 }, labels: { v: '2' } }));
      await until('third warning', () => warns().length === 3);
      h.api.apply(svc('bad', 'default', { spec: { ports: [{ port: 80, targetPort: 8080 }] } }));
      await until('bad added once fixed', () => h.has('Service', 'add', 'default/bad'));
    } finally {
      await h.close();
    }
  });

  test('the validate hook sees raw objects; a rejection removes a cached object, truncates long values, blocks no other object', async () => {
    const seen: string[] = [];
    const h = await harness(
      (api) => {
        api.create(svc('web'));
        api.create(slice('web-1', 'web', ['10.244.0.1']));
        api.create(slice('web-2', 'web', ['10.244.0.2'], 'default', { reject: 'yes' }));
      },
      {
        cw: {
          validate: (kind, raw: any) => {
            seen.push(`${kind} ${raw?.metadata?.name} ${raw?.constructor === Object ? 'raw' : 'typed'}`);
            return raw?.metadata?.labels?.reject ? { field: 'metadata.labels.reject', reason: `bad ${'x'.repeat(500)}` } : undefined;
          },
        },
      },
    );
    try {
      assert.ok(seen.includes('EndpointSlice web-2 raw') && seen.includes('Service web raw'), 'called on the raw JSON');
      assert.deepEqual(
        h.cw.endpointSlicesFor('default', 'web').map((s) => s.metadata?.name),
        ['web-1'],
      );
      const w = h.logs.filter((l) => l.msg === 'k8s object rejected; treated as absent');
      assert.equal(w.length, 1);
      assert.equal(w[0].fields.field, 'metadata.labels.reject');
      assert.ok(w[0].fields.reason.length <= 201, 'value truncated');
      assert.deepEqual(h.rejected, [{ kind: 'EndpointSlice', reason: `bad ${'x'.repeat(500)}` }]);

      await waitForWatches(h.api, 2);
      h.api.apply(slice('web-1', 'web', ['10.244.0.1'], 'default', { reject: 'yes' }));
      await until('web-1 deleted', () => h.has('EndpointSlice', 'delete', 'default/web-1'));
      assert.deepEqual(h.cw.endpointSlicesFor('default', 'web'), []);
      h.api.apply(slice('web-2', 'web', ['10.244.0.2']));
      await until('web-2 added', () => h.has('EndpointSlice', 'add', 'default/web-2'));
    } finally {
      await h.close();
    }
  });
});

describe("reflector: every list and watch request reaches client-go's rest_client_* metrics", () => {
  test('lists with their status and time, watches once each when answered; watch ends by reason', async () => {
    const requests: ApiRequest[] = [];
    const ends: Array<{ kind: string; reason: string }> = [];
    const starts: string[] = [];
    const h = await harness((api) => api.create(svc('web')), {
      cw: {
        onApiRequest: (r) => requests.push(r),
        onWatchStart: (kind) => starts.push(kind),
        onWatchEnd: (kind, reason) => ends.push({ kind, reason }),
      },
      beforeStart: (api) => api.failRequests(1, { code: 503, match: /^GET \/api\/v1\/services\?(?!.*watch=true)/ }),
    });
    try {
      const host = new URL(h.api.url).host;
      await waitForWatches(h.api, 2);
      const lists = requests.filter((r) => r.seconds !== undefined);
      assert.ok(
        lists.some((r) => r.code === '503'),
        'the failed Service list, with its status',
      );
      assert.ok(lists.filter((r) => r.code === '200').length >= 2, 'the Service list retried and the EndpointSlice list');
      for (const r of requests) {
        assert.equal(r.method, 'GET');
        assert.equal(r.host, host);
      }
      for (const r of lists) assert.ok(r.seconds! >= 0 && r.seconds! < 30);
      await until('both watches answered', () => requests.filter((r) => r.seconds === undefined && r.code === '200').length >= 2);
      assert.deepEqual([...starts].sort(), ['EndpointSlice', 'Service']);

      // The server ends the watches cleanly: each ends "closed" and is resumed (another watch request).
      // (A watch ended within a second with nothing received is "closed_at_once"; these have lasted longer.)
      await sleep(1100);
      const watchesBefore = requests.filter((r) => r.seconds === undefined).length;
      h.api.dropWatches();
      await until('the watches resumed', () => requests.filter((r) => r.seconds === undefined).length >= watchesBefore + 2);
      assert.deepEqual(ends.map((e) => `${e.kind} ${e.reason}`).sort(), ['EndpointSlice closed', 'Service closed']);

      // A watch request refused: counted with its status, and the watch ends as watch_error.
      h.api.failRequests(1, { code: 500, match: /^GET \/api\/v1\/services\?.*watch=true/ });
      h.api.dropWatches();
      await until('the refused watch', () => requests.some((r) => r.seconds === undefined && r.code === '500'));
      await until('its end', () => ends.some((e) => e.kind === 'Service' && e.reason === 'watch_error'));
    } finally {
      await h.close();
    }
  });
});
