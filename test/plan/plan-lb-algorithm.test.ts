/**
 * Rule 40 of docs/semantics.md: which backend selection algorithm a
 * Service's frontends get: its annotation (kpr.dev/lb-algorithm, or
 * Cilium's service.cilium.io/lb-algorithm), else the node's --lb-algorithm;
 * an unknown value is reported and the node default used.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planService } from '../../agent/plan/plan-service.js';
import { lbAlgorithmOf } from '../../agent/plan/lb-algorithm.js';
import type { SkippedObject } from '../../agent/plan/types.js';
import { ANNOTATION_CILIUM_LB_ALGORITHM, ANNOTATION_LB_ALGORITHM } from '../../agent/k8s/labels.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

const web = 'default/web';
const ports = [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }];
const slices = [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] })];
const node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } };

function annotated(annotations?: Record<string, string>) {
  const s = service(web, { type: 'NodePort', ports });
  if (annotations) s.metadata!.annotations = annotations;
  return s;
}

function plan(annotations: Record<string, string> | undefined, lbAlgorithm?: 'random' | 'maglev') {
  return planService(annotated(annotations), slices, { nodeName: 'node-1', node, ...(lbAlgorithm ? { lbAlgorithm } : {}) });
}

describe('the backend selection algorithm (rule 40 of docs/semantics.md)', () => {
  it('random by default: no frontend says otherwise', () => {
    const p = plan(undefined);
    assert.equal(p.frontends.length, 2, 'ClusterIP and NodePort');
    for (const f of p.frontends) assert.equal(f.lbAlgorithm, undefined);
  });

  it('--lb-algorithm maglev: every frontend of the Service (ClusterIP, NodePort) is Maglev', () => {
    const p = plan(undefined, 'maglev');
    assert.deepEqual(
      p.frontends.map((f) => [f.type, f.lbAlgorithm]),
      [
        ['ClusterIP', 'maglev'],
        ['NodePort', 'maglev'],
      ],
    );
    assert.deepEqual(p.skipped, []);
  });

  it('the annotation overrides the node default, either way', () => {
    assert.ok(plan({ [ANNOTATION_LB_ALGORITHM]: 'maglev' }).frontends.every((f) => f.lbAlgorithm === 'maglev'));
    assert.ok(plan({ [ANNOTATION_LB_ALGORITHM]: 'random' }, 'maglev').frontends.every((f) => f.lbAlgorithm === undefined));
  });

  it("Cilium's annotation is an alias; kpr's wins when both are set", () => {
    assert.ok(plan({ [ANNOTATION_CILIUM_LB_ALGORITHM]: 'maglev' }).frontends.every((f) => f.lbAlgorithm === 'maglev'));
    assert.ok(plan({ [ANNOTATION_CILIUM_LB_ALGORITHM]: 'maglev', [ANNOTATION_LB_ALGORITHM]: 'random' }).frontends.every((f) => f.lbAlgorithm === undefined));
  });

  it('an unknown value is reported and the node default used; the Service stays served', () => {
    const p = plan({ [ANNOTATION_LB_ALGORITHM]: 'round-robin' }, 'maglev');
    assert.ok(p.frontends.length === 2 && p.frontends.every((f) => f.lbAlgorithm === 'maglev'));
    assert.equal(p.skipped.length, 1);
    assert.equal(p.skipped[0].object, 'Service default/web');
    assert.match(
      p.skipped[0].reason,
      /annotation kpr\.dev\/lb-algorithm: "round-robin" is not an algorithm \(random or maglev\); the node's default maglev is used/,
    );
    const q = plan({ [ANNOTATION_CILIUM_LB_ALGORITHM]: 'Maglev' });
    assert.ok(q.frontends.every((f) => f.lbAlgorithm === undefined));
    assert.match(q.skipped[0].reason, /service\.cilium\.io\/lb-algorithm: "Maglev"/);
  });

  it('lbAlgorithmOf: surrounding blanks are ignored, other annotations are not read, a long value is cut in the report', () => {
    const skipped: SkippedObject[] = [];
    assert.equal(lbAlgorithmOf('a/b', { [ANNOTATION_LB_ALGORITHM]: ' maglev\n' }, 'random', skipped), 'maglev');
    assert.equal(lbAlgorithmOf('a/b', { 'example.com/lb-algorithm': 'maglev' }, 'random', skipped), 'random');
    assert.equal(lbAlgorithmOf('a/b', { [ANNOTATION_LB_ALGORITHM]: 'x'.repeat(1000) }, 'random', skipped), 'random');
    assert.equal(skipped.length, 1);
    assert.ok(skipped[0].reason.length < 200);
  });
});
