/**
 * kube-proxy's health rules (pkg/proxy/healthcheck healthcheck_test.go,
 * TestHealthzServer / TestLivezServer / testProxyHealthUpdater), replayed on
 * the pure state with a fake clock: one table, prose case names.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ProxyHealthState, healthzResponse, livezResponse, nodeEligible, type NodeLike } from '../../agent/health/proxy-health.js';
import type { IPFamily } from '../../agent/net/ip.js';

class FakeClock {
  t = Date.parse('2024-05-01T10:00:00Z');
  now = () => new Date(this.t);
  step(ms: number) {
    this.t += ms;
  }
}

const READY_NODE: NodeLike = { metadata: {}, spec: {} };
const DELETING_NODE: NodeLike = { metadata: { deletionTimestamp: new Date('2024-05-01T09:00:00Z') } };
const TAINTED_NODE: NodeLike = { spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler' }] } };

type Step = { queued: IPFamily } | { updated: IPFamily } | { wait: number } | { expect: { healthz: number; livez: number; healthy?: boolean } };

interface Case {
  name: string;
  node?: NodeLike;
  steps: Step[];
}

const TIMEOUT = 10_000;

const cases: Case[] = [
  {
    name: 'nothing ever updated: healthy (a proxy still starting is healthy)',
    node: READY_NODE,
    steps: [{ expect: { healthz: 200, livez: 200, healthy: true } }],
  },
  {
    name: 'updated, then 25 s with nothing queued (timeout 10 s): still healthy — the age of the last sync alone never fails',
    node: READY_NODE,
    steps: [{ updated: 'IPv4' }, { wait: 25_000 }, { expect: { healthz: 200, livez: 200, healthy: true } }],
  },
  {
    name: 'update queued and applied within the timeout: healthy',
    node: READY_NODE,
    steps: [{ updated: 'IPv4' }, { queued: 'IPv4' }, { wait: 5_000 }, { updated: 'IPv4' }, { wait: 20_000 }, { expect: { healthz: 200, livez: 200 } }],
  },
  {
    name: 'update queued and not applied within the timeout: unhealthy (503 on both)',
    node: READY_NODE,
    steps: [
      { updated: 'IPv4' },
      { queued: 'IPv4' },
      { wait: 9_999 },
      { expect: { healthz: 200, livez: 200 } },
      { wait: 1 },
      { expect: { healthz: 503, livez: 503, healthy: false } },
    ],
  },
  {
    name: 'a later queued update does not reset the clock: the oldest pending one counts',
    node: READY_NODE,
    steps: [{ updated: 'IPv4' }, { queued: 'IPv4' }, { wait: 6_000 }, { queued: 'IPv4' }, { wait: 6_000 }, { expect: { healthz: 503, livez: 503 } }],
  },
  {
    name: 'unhealthy, then the sync succeeds: healthy again',
    node: READY_NODE,
    steps: [
      { updated: 'IPv4' },
      { queued: 'IPv4' },
      { wait: 15_000 },
      { expect: { healthz: 503, livez: 503 } },
      { updated: 'IPv4' },
      { expect: { healthz: 200, livez: 200 } },
    ],
  },
  {
    name: 'dual stack: one family stuck makes the proxy unhealthy',
    node: READY_NODE,
    steps: [
      { updated: 'IPv4' },
      { updated: 'IPv6' },
      { queued: 'IPv4' },
      { queued: 'IPv6' },
      { wait: 5_000 },
      { updated: 'IPv4' },
      { wait: 5_000 },
      { expect: { healthz: 503, livez: 503, healthy: false } },
    ],
  },
  {
    name: 'a family that never updated is not considered, even with a queued update',
    node: READY_NODE,
    steps: [{ updated: 'IPv4' }, { queued: 'IPv6' }, { wait: 60_000 }, { expect: { healthz: 200, livez: 200 } }],
  },
  {
    name: 'node unknown (nil): healthz 503 with "healthy": true, livez 200',
    steps: [{ updated: 'IPv4' }, { expect: { healthz: 503, livez: 200, healthy: true } }],
  },
  {
    name: 'node being deleted: healthz 503, livez 200',
    node: DELETING_NODE,
    steps: [{ updated: 'IPv4' }, { expect: { healthz: 503, livez: 200, healthy: true } }],
  },
  {
    name: 'node tainted ToBeDeletedByClusterAutoscaler: healthz 503, livez 200',
    node: TAINTED_NODE,
    steps: [{ updated: 'IPv4' }, { expect: { healthz: 503, livez: 200, healthy: true } }],
  },
  {
    name: 'node ineligible and proxy stuck: both 503',
    node: TAINTED_NODE,
    steps: [{ updated: 'IPv4' }, { queued: 'IPv4' }, { wait: 10_000 }, { expect: { healthz: 503, livez: 503, healthy: false } }],
  },
];

describe('proxy health (kube-proxy healthcheck_test.go cases)', () => {
  for (const c of cases) {
    test(c.name, () => {
      const clock = new FakeClock();
      const state = new ProxyHealthState(TIMEOUT, clock.now);
      for (const s of c.steps) {
        if ('queued' in s) state.queuedUpdate(s.queued);
        else if ('updated' in s) state.updated(s.updated);
        else if ('wait' in s) clock.step(s.wait);
        else {
          const hz = healthzResponse(state, c.node);
          const lz = livezResponse(state);
          assert.equal(hz.statusCode, s.expect.healthz, `healthz ${JSON.stringify(hz.body)}`);
          assert.equal(lz.statusCode, s.expect.livez, `livez ${JSON.stringify(lz.body)}`);
          if (s.expect.healthy !== undefined) {
            assert.equal(hz.body.healthy, s.expect.healthy, 'healthz body "healthy" is the proxier health only');
            assert.equal(lz.body.healthy, s.expect.healthy);
          }
          assert.equal(hz.body.nodeEligible, nodeEligible(c.node));
          assert.equal('nodeEligible' in lz.body, false, 'livez has no nodeEligible');
        }
      }
    });
  }
});

describe('health bodies', () => {
  test('field order, RFC 3339 times, lastUpdated overwritten by the current time on 200 only', () => {
    const clock = new FakeClock();
    const state = new ProxyHealthState(TIMEOUT, clock.now);
    state.updated('IPv4');
    state.updated('IPv6');
    clock.step(3_000);
    const ok = healthzResponse(state, READY_NODE);
    assert.deepEqual(Object.keys(ok.body), ['lastUpdated', 'currentTime', 'nodeEligible', 'healthy', 'status']);
    assert.equal(ok.body.currentTime, '2024-05-01T10:00:03.000Z');
    assert.equal(ok.body.lastUpdated, '2024-05-01T10:00:03.000Z', 'healthy: lastUpdated is "recent"');
    assert.deepEqual(ok.body.status, {
      IPv4: { lastUpdated: '2024-05-01T10:00:00.000Z', healthy: true },
      IPv6: { lastUpdated: '2024-05-01T10:00:00.000Z', healthy: true },
    });
    state.queuedUpdate('IPv4');
    clock.step(10_000);
    const bad = healthzResponse(state, READY_NODE);
    assert.equal(bad.statusCode, 503);
    assert.equal(bad.body.lastUpdated, '2024-05-01T10:00:00.000Z', 'unhealthy: the real last update');
    assert.deepEqual(bad.body.status, {
      IPv4: { lastUpdated: '2024-05-01T10:00:00.000Z', healthy: false },
      IPv6: { lastUpdated: '2024-05-01T10:00:00.000Z', healthy: true },
    });
    const nodeBad = healthzResponse(new ProxyHealthState(TIMEOUT, clock.now), undefined);
    assert.equal(nodeBad.body.lastUpdated, '0001-01-01T00:00:00.000Z', "503 before any update: Go's zero time");
    assert.equal('status' in nodeBad.body, false, 'no family updated yet: status omitted');
  });
});
