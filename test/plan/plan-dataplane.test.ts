/** planDataplane: grouping slices by Service, ordering, and what is (not) reported. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planDataplane } from '../../agent/plan/plan-dataplane.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

const tcp = (name: string, port: number) => ({ name, port, protocol: 'TCP' });

function input() {
  return {
    nodeName: 'node-1',
    services: [
      service('default/web', { clusterIP: '10.96.0.20', ports: [tcp('http', 80), tcp('admin', 81)] }),
      service('default/api', { clusterIP: '10.96.0.30', ports: [tcp('http', 80)] }),
      service('prod/web', { clusterIP: '10.96.0.3', ports: [tcp('http', 80)] }),
      service('default/headless', { clusterIP: 'None', ports: [tcp('http', 80)] }),
    ],
    endpointSlices: [
      slice('default/web-b', { ports: [tcp('http', 8080)], endpoints: [ep('10.0.1.2')] }),
      slice('default/web-a', { ports: [tcp('http', 8080), tcp('admin', 8081)], endpoints: [ep('10.0.1.1')] }),
      slice('default/api-a', { ports: [tcp('http', 9090)], endpoints: [ep('10.0.2.1')] }),
      slice('prod/web-a', { ports: [tcp('http', 8080)], endpoints: [ep('10.0.3.1')] }),
      slice('default/gone-a', { ports: [tcp('http', 8080)], endpoints: [ep('10.0.9.9')] }),
      slice('default/nolabel-a', { serviceName: null, ports: [], endpoints: [] }),
    ],
  };
}

describe('planDataplane', () => {
  it('groups slices by namespace and service-name label and plans every Service', () => {
    const plan = planDataplane(input());
    assert.equal(plan.node, 'node-1');
    assert.deepEqual(
      plan.frontends.map((f) => `${f.service} ${f.address}:${f.port}/${f.protocol} → ${f.backends.map((b) => `${b.address}:${b.port}`).join(',')}`),
      [
        'default/api 10.96.0.30:80/TCP → 10.0.2.1:9090',
        'default/web 10.96.0.20:80/TCP → 10.0.1.1:8080,10.0.1.2:8080',
        'default/web 10.96.0.20:81/TCP → 10.0.1.1:8081',
        'prod/web 10.96.0.3:80/TCP → 10.0.3.1:8080',
      ],
    );
  });

  it('slices of unknown Services and slices without the label are ignored, not reported', () => {
    const plan = planDataplane(input());
    assert.deepEqual(plan.skipped, [{ object: 'Service default/headless', reason: 'headless (no clusterIP) is not proxied' }]);
  });

  it('the same input in any order gives the same plan', () => {
    const a = planDataplane(input());
    const shuffled = input();
    shuffled.services.reverse();
    shuffled.endpointSlices.reverse();
    for (const s of shuffled.endpointSlices) s.endpoints.reverse();
    assert.deepEqual(planDataplane(shuffled), a);
  });

  it('an empty cluster plans nothing', () => {
    assert.deepEqual(planDataplane({ nodeName: 'n', services: [], endpointSlices: [] }), { node: 'n', frontends: [], skipped: [] });
  });
});
