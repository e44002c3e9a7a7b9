/**
 * kpr's over-capacity signal on /healthz: the body's "servicesOverLimit"
 * says the node is degraded and names the Services over a datapath limit
 * (the first 20, the rest counted), and the status stays what kube-proxy's
 * rules give: a node that serves what fits stays in load-balancer rotation.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ProxyHealthState, healthzResponse } from '../../agent/health/proxy-health.js';
import { summarizeLimits, type LimitReport } from '../../agent/reconcile/limits.js';

const node = { metadata: {}, spec: {} };

function refused(n: number): LimitReport[] {
  return Array.from({ length: n }, (_, i) => ({
    service: `ns/s${String(i).padStart(3, '0')}`,
    limit: 'svc_map' as const,
    action: 'refused' as const,
    capacity: 100,
    needed: 2,
    free: 0,
  }));
}

describe('/healthz servicesOverLimit', () => {
  test('degraded: named (first 20), counted by limit, and still 200', () => {
    const reports = [
      ...refused(30),
      { service: 'zz/big', limit: 'backends_per_frontend' as const, action: 'truncated' as const, capacity: 65535, needed: 70000 },
    ];
    const sum = summarizeLimits(reports);
    const state = new ProxyHealthState(60_000);
    const r = healthzResponse(state, node, undefined, () => sum as unknown as Record<string, unknown>);
    assert.equal(r.statusCode, 200);
    assert.equal(r.body.healthy, true);
    assert.deepEqual(Object.keys(r.body), ['lastUpdated', 'currentTime', 'nodeEligible', 'healthy', 'servicesOverLimit']);
    const o = JSON.parse(JSON.stringify(r.body.servicesOverLimit));
    assert.equal(o.degraded, true);
    assert.equal(o.services, 31);
    assert.deepEqual(o.byLimit, { svc_map: 30, backends_per_frontend: 1 });
    assert.equal(o.listed.length, 20);
    assert.deepEqual(o.listed[0], { service: 'ns/s000', limit: 'svc_map', action: 'refused' });
    assert.equal(o.notListed, 11);
  });

  test('within every limit: degraded false; before the first sync: no field', () => {
    const state = new ProxyHealthState(60_000);
    const r = healthzResponse(state, node, undefined, () => summarizeLimits([]) as unknown as Record<string, unknown>);
    assert.deepEqual(r.body.servicesOverLimit, { degraded: false, services: 0, byLimit: {}, listed: [], notListed: 0 });
    assert.equal('servicesOverLimit' in healthzResponse(state, node, undefined, () => undefined).body, false);
  });

  test('an unhealthy node stays 503 with the field beside it', () => {
    const r = healthzResponse(new ProxyHealthState(60_000), undefined, undefined, () => summarizeLimits(refused(1)) as unknown as Record<string, unknown>);
    assert.equal(r.statusCode, 503);
    assert.equal((r.body.servicesOverLimit as { degraded: boolean }).degraded, true);
  });
});
