/**
 * --external-ip-cidrs in the planner (agent/plan/external-ips.ts): only
 * externalIPs inside the allow-list get frontends; the others are skipped
 * with a reason, and nothing else of the Service changes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Service } from '@kubernetes/client-node';
import { planService } from '../../agent/plan/plan-service.js';
import { planDataplane } from '../../agent/plan/plan-dataplane.js';
import { planJson } from '../../agent/cli/plan.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

function svc(spec: Record<string, unknown>): V1Service {
  return {
    metadata: { namespace: 'default', name: 'web' },
    spec: { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, protocol: 'TCP' }], ...spec },
  } as V1Service;
}

const frontends = (s: V1Service, cidrs?: string[]) =>
  planService(s, [], { nodeName: 'node-1', externalIPCidrs: cidrs }).frontends.map((f) => `${f.type} ${f.address}`);

describe('--external-ip-cidrs', () => {
  const dual = svc({
    ipFamilies: ['IPv4', 'IPv6'],
    clusterIPs: ['10.96.0.10', 'fd00::10'],
    externalIPs: ['203.0.113.7', '198.51.100.9', '2001:db8:1::7', '2001:db8:2::7'],
  });

  it('unset or empty: every externalIP is programmed, as kube-proxy does', () => {
    const all = [
      'ClusterIP 10.96.0.10',
      'ExternalIP 203.0.113.7',
      'ExternalIP 198.51.100.9',
      'ClusterIP fd00::10',
      'ExternalIP 2001:db8:1::7',
      'ExternalIP 2001:db8:2::7',
    ];
    assert.deepEqual(frontends(dual), all);
    assert.deepEqual(frontends(dual, []), all);
  });

  it('only externalIPs inside the CIDRs (either family) are programmed; the others are skipped with a reason', () => {
    const plan = planService(dual, [], { nodeName: 'node-1', externalIPCidrs: ['203.0.113.0/24', '2001:db8:1::/48'] });
    assert.deepEqual(
      plan.frontends.map((f) => `${f.type} ${f.address}`),
      ['ClusterIP 10.96.0.10', 'ExternalIP 203.0.113.7', 'ClusterIP fd00::10', 'ExternalIP 2001:db8:1::7'],
    );
    assert.deepEqual(plan.skipped, [
      { object: 'Service default/web', reason: 'externalIP "198.51.100.9" is outside --external-ip-cidrs; not programmed' },
      { object: 'Service default/web', reason: 'externalIP "2001:db8:2::7" is outside --external-ip-cidrs; not programmed' },
    ]);
  });

  it('a Service whose every externalIP is denied is a plain ClusterIP (eTP=Local has nothing external to apply to); LB IPs are not filtered', () => {
    const s = svc({ externalIPs: ['198.51.100.9'], externalTrafficPolicy: 'Local' });
    const plan = planService(s, [], { nodeName: 'node-1', externalIPCidrs: ['203.0.113.0/24'] });
    assert.deepEqual(
      plan.frontends.map((f) => [f.type, f.trafficPolicy]),
      [['ClusterIP', 'Cluster']],
    );
    const lb = {
      ...svc({ type: 'LoadBalancer', externalIPs: ['198.51.100.9'] }),
      status: { loadBalancer: { ingress: [{ ip: '198.51.100.20' }] } },
    } as V1Service;
    assert.deepEqual(frontends(lb, ['203.0.113.0/24']), ['ClusterIP 10.96.0.10', 'LoadBalancer 198.51.100.20']);
  });

  it('planDataplane and `kpr plan` pass the setting through', () => {
    assert.deepEqual(
      planDataplane({ nodeName: 'node-1', services: [dual], endpointSlices: [], externalIPCidrs: ['198.51.100.0/24'] })
        .frontends.filter((f) => f.type === 'ExternalIP')
        .map((f) => f.address),
      ['198.51.100.9'],
    );
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-'));
    try {
      const file = path.join(dir, 'svc.json');
      writeFileSync(file, JSON.stringify({ apiVersion: 'v1', kind: 'Service', ...dual }));
      const p = planJson({ nodeName: 'node-1', files: [file], externalIPCidrs: ['2001:db8:2::/48'] });
      assert.deepEqual(
        p.frontends.filter((f) => f.type === 'ExternalIP').map((f) => f.address),
        ['2001:db8:2::7'],
      );
      assert.equal(p.skipped.filter((s) => /outside --external-ip-cidrs/.test(s.reason)).length, 3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
