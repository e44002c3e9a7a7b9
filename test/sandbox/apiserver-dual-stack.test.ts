/**
 * The sandbox API server's IP families, as kube-apiserver's allocator does
 * them (pkg/registry/core/service/storage/alloc.go): ipFamilyPolicy inferred,
 * ipFamilies defaulted, a ClusterIP per family from --service-cluster-ip-range,
 * and what a single- or dual-stack cluster refuses, over HTTP as a client sees it.
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startApiServer, type ApiServer } from '../../sandbox/apiserver.js';
import { request } from './apiserver-helpers.js';

const SVC = '/api/v1/namespaces/default/services';
const service = (name: string, spec: Record<string, unknown> = {}) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name },
  spec: { ports: [{ port: 80 }], selector: { app: name }, ...spec },
});
const V4 = /^198\.19\.\d+\.\d+$/;
const V6 = /^2001:db8:19::[0-9a-f]+$/;

describe('sandbox apiserver: dual-stack cluster (198.19.0.0/16,2001:db8:19::/112)', () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0, serviceCIDR: '198.19.0.0/16,2001:db8:19::/112' });
  });
  after(() => api.close());

  test('no policy: SingleStack of the primary family', async () => {
    const r = await request(api.url, 'POST', SVC, service('plain'));
    assert.equal(r.status, 201);
    assert.equal(r.body.spec.ipFamilyPolicy, 'SingleStack');
    assert.deepEqual(r.body.spec.ipFamilies, ['IPv4']);
    assert.equal(r.body.spec.clusterIPs.length, 1);
    assert.match(r.body.spec.clusterIP, V4);
  });

  test('RequireDualStack and PreferDualStack get both families, primary first; ipFamilies [IPv6] first puts IPv6 first', async () => {
    for (const policy of ['RequireDualStack', 'PreferDualStack']) {
      const r = await request(api.url, 'POST', SVC, service(policy.toLowerCase(), { ipFamilyPolicy: policy }));
      assert.equal(r.status, 201, JSON.stringify(r.body));
      assert.deepEqual(r.body.spec.ipFamilies, ['IPv4', 'IPv6']);
      assert.match(r.body.spec.clusterIPs[0], V4);
      assert.match(r.body.spec.clusterIPs[1], V6);
      assert.equal(r.body.spec.clusterIP, r.body.spec.clusterIPs[0]);
    }
    const r = await request(api.url, 'POST', SVC, service('v6first', { ipFamilyPolicy: 'RequireDualStack', ipFamilies: ['IPv6'] }));
    assert.deepEqual(r.body.spec.ipFamilies, ['IPv6', 'IPv4']);
    assert.match(r.body.spec.clusterIP, V6);
    assert.match(r.body.spec.clusterIPs[1], V4);
    const single6 = await request(api.url, 'POST', SVC, service('single6', { ipFamilies: ['IPv6'] }));
    assert.equal(single6.body.spec.ipFamilyPolicy, 'SingleStack');
    assert.deepEqual(single6.body.spec.ipFamilies, ['IPv6']);
    assert.match(single6.body.spec.clusterIP, V6);
  });

  test('two families or two IPs with no policy infer RequireDualStack; the families follow the IPs given', async () => {
    const r = await request(api.url, 'POST', SVC, service('two', { ipFamilies: ['IPv4', 'IPv6'] }));
    assert.equal(r.body.spec.ipFamilyPolicy, 'RequireDualStack');
    assert.equal(r.body.spec.clusterIPs.length, 2);
    const ips = await request(api.url, 'POST', SVC, service('two-ips', { clusterIPs: ['2001:db8:19::99', '198.19.99.99'] }));
    assert.equal(ips.status, 201, JSON.stringify(ips.body));
    assert.equal(ips.body.spec.ipFamilyPolicy, 'RequireDualStack');
    assert.deepEqual(ips.body.spec.ipFamilies, ['IPv6', 'IPv4']);
    assert.equal(ips.body.spec.clusterIP, '2001:db8:19::99');
  });

  test('allocated IPs are unique across Services of both families', async () => {
    const all = (await request(api.url, 'GET', SVC)).body.items.flatMap((s: any) => s.spec.clusterIPs);
    assert.equal(new Set(all).size, all.length, JSON.stringify(all));
  });

  test('refused with 422: SingleStack with two families, the same family twice', async () => {
    const single = await request(api.url, 'POST', SVC, service('bad-single', { ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv4', 'IPv6'] }));
    assert.equal(single.status, 422);
    assert.match(single.body.message, /spec\.ipFamilyPolicy.*must be RequireDualStack or PreferDualStack/);
    const dup = await request(api.url, 'POST', SVC, service('bad-dup', { ipFamilyPolicy: 'RequireDualStack', ipFamilies: ['IPv4', 'IPv4'] }));
    assert.equal(dup.status, 422);
    assert.match(dup.body.message, /spec\.ipFamilies\[1\]: Duplicate value/);
  });

  test('update: SingleStack to RequireDualStack adds the secondary IP; back to SingleStack releases it; dropping it without SingleStack is refused', async () => {
    const created = (await request(api.url, 'POST', SVC, service('upgrade'))).body;
    const up = await request(api.url, 'PUT', `${SVC}/upgrade`, { ...created, spec: { ...created.spec, ipFamilyPolicy: 'RequireDualStack' } });
    assert.equal(up.status, 200, JSON.stringify(up.body));
    assert.equal(up.body.spec.clusterIPs[0], created.spec.clusterIP, 'the primary IP is kept');
    assert.match(up.body.spec.clusterIPs[1], V6);
    assert.deepEqual(up.body.spec.ipFamilies, ['IPv4', 'IPv6']);
    const drop = await request(api.url, 'PUT', `${SVC}/upgrade`, {
      ...up.body,
      spec: { ...up.body.spec, clusterIPs: [up.body.spec.clusterIP], ipFamilies: ['IPv4'] },
    });
    assert.equal(drop.status, 422);
    assert.match(drop.body.message, /must be 'SingleStack' to release the secondary cluster IP/);
    const down = await request(api.url, 'PUT', `${SVC}/upgrade`, { ...up.body, spec: { ...up.body.spec, ipFamilyPolicy: 'SingleStack' } });
    assert.equal(down.status, 200, JSON.stringify(down.body));
    assert.deepEqual(down.body.spec.clusterIPs, [created.spec.clusterIP]);
    assert.deepEqual(down.body.spec.ipFamilies, ['IPv4']);
  });
});

describe('sandbox apiserver: single-stack cluster (198.19.0.0/16)', () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer({ bookmarkIntervalMs: 0 });
  });
  after(() => api.close());

  test('RequireDualStack is refused; PreferDualStack gets the one family; IPv6 has no range to allocate from', async () => {
    const req = await request(api.url, 'POST', SVC, service('req', { ipFamilyPolicy: 'RequireDualStack' }));
    assert.equal(req.status, 422);
    assert.match(req.body.message, /spec\.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services/);
    const pref = await request(api.url, 'POST', SVC, service('pref', { ipFamilyPolicy: 'PreferDualStack' }));
    assert.equal(pref.status, 201);
    assert.deepEqual(pref.body.spec.ipFamilies, ['IPv4']);
    assert.equal(pref.body.spec.clusterIPs.length, 1);
    const v6 = await request(api.url, 'POST', SVC, service('v6', { ipFamilies: ['IPv6'] }));
    assert.equal(v6.status, 422);
    assert.match(v6.body.message, /spec\.ipFamilies\[0\]: Invalid value: "IPv6": not configured on this cluster/);
  });
});
