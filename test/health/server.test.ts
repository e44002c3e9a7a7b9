/**
 * The health and metrics servers over real HTTP on 127.0.0.1 (port 0): any
 * method gets the same answer, kube-proxy's headers, Go's 404 elsewhere, the
 * answers counted, and a busy port retried until it is free.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { buildHealthServer } from '../../agent/health/server.js';
import { ProxyHealthState, type NodeLike } from '../../agent/health/proxy-health.js';
import { listenWithRetry, type Listener } from '../../agent/metrics/http-listen.js';
import { buildMetricsServer } from '../../agent/metrics/server.js';
import type { Logger } from '../../agent/log/log.js';

function recordingLogger(): Logger & { lines: Array<{ level: string; msg: string; fields?: Record<string, unknown> }> } {
  const lines: Array<{ level: string; msg: string; fields?: Record<string, unknown> }> = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, fields });
  const log = { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug'), child: () => log };
  return log;
}

describe('health server over HTTP', () => {
  let t = Date.parse('2024-05-01T10:00:00Z');
  const state = new ProxyHealthState(10_000, () => new Date(t));
  let node: NodeLike | undefined = { metadata: {}, spec: {} };
  const served: string[] = [];
  let listener: Listener;
  let base: string;

  before(async () => {
    const log = recordingLogger();
    listener = listenWithRetry(
      () => buildHealthServer({ state, node: () => node, onServed: (p, c) => served.push(`${p} ${c}`) }),
      { host: '127.0.0.1', port: 0 },
      'health server',
      log,
    );
    const address = await listener.listening;
    assert.match(address, /^127\.0\.0\.1:\d+$/);
    assert.deepEqual(log.lines.find((l) => l.msg === 'health server listening')?.fields, { address });
    base = `http://${address}`;
  });
  after(() => listener?.close());

  test('/healthz and /livez answer every method alike, with kube-proxy headers', async () => {
    state.updated('IPv4');
    for (const path of ['/healthz', '/livez', '/healthz?verbose=1']) {
      for (const method of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
        const r = await fetch(base + path, {
          method,
          ...(method === 'GET' || method === 'OPTIONS' ? {} : { body: 'ignored', headers: { 'content-type': 'application/x-whatever' } }),
        });
        assert.equal(r.status, 200, `${method} ${path}`);
        assert.equal(r.headers.get('content-type'), 'application/json');
        assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
        const body = await r.json();
        assert.equal(body.healthy, true);
        assert.equal(path.startsWith('/healthz') ? body.nodeEligible : 'nodeEligible' in body, path.startsWith('/healthz') ? true : false);
      }
      const head = await fetch(base + path, { method: 'HEAD' });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get('content-type'), 'application/json');
    }
  });

  test('other paths are a plain 404', async () => {
    for (const path of ['/', '/healthz/', '/metrics', '/readyz']) {
      const r = await fetch(base + path);
      assert.equal(r.status, 404, path);
      assert.equal(await r.text(), '404 page not found\n');
    }
  });

  test('node gone: /healthz 503 with "healthy": true, /livez 200; stuck update: both 503', async () => {
    node = undefined;
    const hz = await fetch(base + '/healthz');
    assert.equal(hz.status, 503);
    const body = await hz.json();
    assert.deepEqual({ healthy: body.healthy, nodeEligible: body.nodeEligible }, { healthy: true, nodeEligible: false });
    assert.equal((await fetch(base + '/livez')).status, 200);
    node = { metadata: {}, spec: {} };
    state.queuedUpdate('IPv4');
    t += 10_000;
    assert.equal((await fetch(base + '/healthz')).status, 503);
    const lz = await fetch(base + '/livez');
    assert.equal(lz.status, 503);
    assert.equal((await lz.json()).status.IPv4.healthy, false);
    state.updated('IPv4');
    assert.equal((await fetch(base + '/healthz')).status, 200);
  });

  test('every answer is reported for kubeproxy_proxy_{healthz,livez}_total', () => {
    assert.ok(
      served.includes('healthz 200') && served.includes('healthz 503') && served.includes('livez 200') && served.includes('livez 503'),
      served.join(','),
    );
  });
});

describe('metrics server over HTTP', () => {
  let listener: Listener;
  let base: string;
  before(async () => {
    const source = { contentType: 'text/plain; version=0.0.4; charset=utf-8', text: async () => '# HELP x y\n# TYPE x counter\nx 1\n' };
    listener = listenWithRetry(() => buildMetricsServer(source), { host: '127.0.0.1', port: 0 }, 'metrics server', recordingLogger());
    base = `http://${await listener.listening}`;
  });
  after(() => listener?.close());

  test('/metrics, /healthz ("ok") and /proxyMode ("kpr")', async () => {
    const m = await fetch(base + '/metrics');
    assert.equal(m.status, 200);
    assert.equal(m.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
    assert.equal(await m.text(), '# HELP x y\n# TYPE x counter\nx 1\n');
    assert.equal(await (await fetch(base + '/healthz')).text(), 'ok');
    const mode = await fetch(base + '/proxyMode');
    assert.equal(await mode.text(), 'kpr');
    assert.equal(mode.headers.get('content-type'), 'text/plain; charset=utf-8');
    assert.equal((await fetch(base + '/nope')).status, 404);
    // Without an effective configuration to show, there is no /configz.
    assert.equal((await fetch(base + '/configz')).status, 404);
  });
});

describe('metrics server /configz', () => {
  let listener: Listener;
  let base: string;
  let reads = 0;
  before(async () => {
    const source = { contentType: 'text/plain; version=0.0.4; charset=utf-8', text: async () => '' };
    const configz = () => (reads++, { version: '0.1.0', config: { nodeName: 'n1', podInterfaces: ['veth*', 'eni*'], syncPeriodMs: 30000 } });
    listener = listenWithRetry(() => buildMetricsServer(source, undefined, configz), { host: '127.0.0.1', port: 0 }, 'metrics server', recordingLogger());
    base = `http://${await listener.listening}`;
  });
  after(() => listener?.close());

  test('GET /configz is the effective configuration as JSON, read at each request; other methods are 404', async () => {
    const r = await fetch(base + '/configz');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
    assert.deepEqual(await r.json(), { version: '0.1.0', config: { nodeName: 'n1', podInterfaces: ['veth*', 'eni*'], syncPeriodMs: 30000 } });
    assert.equal(reads, 1);
    // Read-only: nothing can be written through it.
    assert.equal((await fetch(base + '/configz', { method: 'PUT', body: '{}' })).status, 404);
    assert.equal((await fetch(base + '/configz', { method: 'POST', body: '{}' })).status, 404);
  });
});

describe('a busy port', () => {
  test('a port in use is retried until it is free, as kube-proxy does', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    const log = recordingLogger();
    const state = new ProxyHealthState(1000);
    const l = listenWithRetry(() => buildHealthServer({ state, node: () => undefined }), { host: '127.0.0.1', port }, 'health server', log, 50);
    try {
      await new Promise((r) => setTimeout(r, 200));
      assert.ok(log.lines.filter((x) => x.msg === 'health server failed to listen; retrying').length >= 2, JSON.stringify(log.lines));
      await new Promise<void>((r) => blocker.close(() => r()));
      assert.equal(await l.listening, `127.0.0.1:${port}`);
      assert.equal((await fetch(`http://127.0.0.1:${port}/livez`)).status, 200);
    } finally {
      await l.close();
      blocker.close();
    }
  });
});
