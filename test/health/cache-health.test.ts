/**
 * kpr's k8s-cache rule on /healthz (agent/health/cache-health.ts): 503 with a
 * reason when the caches never synced within the bound after the start, or a
 * synced cache was not confirmed by the API server for too long; /livez and
 * kube-proxy's fields unchanged. Pure cases with a fake clock, then over HTTP.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { cacheHealth, type CacheState } from '../../agent/health/cache-health.js';
import { ProxyHealthState, healthzResponse } from '../../agent/health/proxy-health.js';
import { buildHealthServer } from '../../agent/health/server.js';
import { listenWithRetry, type Listener } from '../../agent/metrics/http-listen.js';
import type { Logger } from '../../agent/log/log.js';

const T0 = Date.parse('2024-05-01T10:00:00Z');
const at = (ms: number) => new Date(T0 + ms);
const bounds = { startedAt: at(0), syncBoundMs: 60_000, staleBoundMs: 600_000 };

describe('cacheHealth', () => {
  test('not synced yet: healthy until the sync bound, then unhealthy naming the kinds', () => {
    const caches: CacheState[] = [
      { kind: 'Service', synced: true, lastConfirmed: at(1000) },
      { kind: 'EndpointSlice', synced: false, lastConfirmed: undefined },
    ];
    assert.equal(cacheHealth(caches, at(59_000), bounds).healthy, true);
    const h = cacheHealth(caches, at(61_000), bounds);
    assert.equal(h.healthy, false);
    assert.equal(h.reason, 'k8s caches not synced 61s after start: EndpointSlice');
    assert.deepEqual(h.caches, { Service: { synced: true, ageSeconds: 60 }, EndpointSlice: { synced: false, ageSeconds: null } });
    // The watch not even created yet counts as not synced.
    assert.equal(cacheHealth(undefined, at(61_000), bounds).healthy, false);
    assert.equal(cacheHealth(undefined, at(1000), bounds).healthy, true);
  });

  test('synced: unhealthy only once a cache is unconfirmed for longer than the stale bound', () => {
    const caches = (confirmed: number): CacheState[] => [
      { kind: 'Service', synced: true, lastConfirmed: at(confirmed) },
      { kind: 'Node', synced: true, lastConfirmed: at(700_000) },
    ];
    assert.equal(cacheHealth(caches(100_000), at(700_000), bounds).healthy, true);
    const h = cacheHealth(caches(99_000), at(700_000), bounds);
    assert.equal(h.healthy, false);
    assert.equal(h.reason, 'k8s caches not confirmed by the API server for over 600s: Service');
  });

  test("healthzResponse: the cache verdict turns 200 into 503 and is the body's last field; kube-proxy's fields stay", () => {
    const state = new ProxyHealthState(60_000, () => at(700_000));
    const node = { metadata: {}, spec: {} };
    const stale = (now: Date) => cacheHealth([{ kind: 'Service', synced: true, lastConfirmed: at(0) }], now, bounds);
    const r = healthzResponse(state, node, stale);
    assert.equal(r.statusCode, 503);
    assert.deepEqual(Object.keys(r.body), ['lastUpdated', 'currentTime', 'nodeEligible', 'healthy', 'k8sCaches']);
    assert.equal(r.body.healthy, true, 'the proxy itself is healthy');
    assert.equal((r.body.k8sCaches as any).reason, 'k8s caches not confirmed by the API server for over 600s: Service');
    assert.equal(healthzResponse(state, node).statusCode, 200, "without the cache verdict: kube-proxy's answer");
  });
});

describe('health server: the cache verdict over HTTP', () => {
  let t = T0 + 1000;
  const state = new ProxyHealthState(60_000, () => new Date(t));
  let caches: CacheState[] = [{ kind: 'Service', synced: false, lastConfirmed: undefined }];
  let listener: Listener;
  let base: string;
  const noLog: Logger = { error() {}, warn() {}, info() {}, debug() {}, child: () => noLog } as unknown as Logger;

  before(async () => {
    listener = listenWithRetry(
      () => buildHealthServer({ state, node: () => ({ metadata: {}, spec: {} }), caches: (now) => cacheHealth(caches, now, bounds) }),
      { host: '127.0.0.1', port: 0 },
      'health server',
      noLog,
    );
    base = `http://${await listener.listening}`;
  });
  after(() => listener?.close());

  test('/healthz 503 with the reason when the caches never synced; /livez 200; 200 again once synced and confirmed', async () => {
    const get = async (p: string) => {
      const r = await fetch(base + p);
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    };
    assert.equal((await get('/healthz')).status, 200, 'still within the sync bound');
    t = T0 + 90_000;
    const h = await get('/healthz');
    assert.equal(h.status, 503);
    assert.equal(h.body.k8sCaches.reason, 'k8s caches not synced 90s after start: Service');
    assert.equal((await get('/livez')).status, 200);
    caches = [{ kind: 'Service', synced: true, lastConfirmed: new Date(t - 5000) }];
    const ok = await get('/healthz');
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.body.k8sCaches, { healthy: true, caches: { Service: { synced: true, ageSeconds: 5 } } });
  });
});
