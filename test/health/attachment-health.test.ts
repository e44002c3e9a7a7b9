/**
 * kpr's attachment rule on /healthz (agent/health/attachment-health.ts): no
 * field before the first check; 200 with the counts while every attachment
 * is in place; 503 with the reason and each missing one when one could not
 * be attached again; /livez unchanged. The kernel side is
 * test/e2e/attachment-repair.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { attachmentHealth, withAttachments, type AttachmentStateLike } from '../../agent/health/attachment-health.js';
import { ProxyHealthState, healthzResponse, livezResponse } from '../../agent/health/proxy-health.js';

const T0 = Date.parse('2024-05-01T10:00:00Z');
const at = (ms: number) => new Date(T0 + ms);
const NODE = { metadata: {}, spec: {} };

const inPlace: AttachmentStateLike = { checkedAt: at(0), trigger: 'probe', attached: { cgroup: 8, tcx: 3 }, repaired: { cgroup: 8 }, missing: [] };
const gone = (n: number): AttachmentStateLike => ({
  checkedAt: at(0),
  trigger: 'probe',
  attached: { cgroup: 0, tcx: 3 },
  repaired: {},
  missing: Array.from({ length: n }, (_, i) => ({
    hook: 'cgroup',
    target: '/sys/fs/cgroup/x',
    program: `kpr_prog${i}`,
    found: 'cgroup /sys/fs/cgroup/x does not exist',
    error: 'attached again once it is back',
  })),
});

test("before the first check: nothing is said and the status is kube-proxy's", () => {
  assert.equal(attachmentHealth(undefined, at(0)), undefined);
  const state = new ProxyHealthState(60_000, () => at(0));
  const r = healthzResponse(state, NODE);
  assert.deepEqual(withAttachments(r, undefined), r);
});

test('every attachment in place: 200, the counts and the age of the check', () => {
  const a = attachmentHealth(inPlace, at(1234))!;
  assert.deepEqual(a, { healthy: true, checkedSecondsAgo: 1.2, attached: { cgroup: 8, tcx: 3 }, repaired: { cgroup: 8 }, missing: [] });
  const state = new ProxyHealthState(60_000, () => at(2000));
  const r = withAttachments(healthzResponse(state, NODE), a);
  assert.equal(r.statusCode, 200);
  assert.equal(Object.keys(r.body).at(-1), 'attachments', "kpr's field comes last; kube-proxy's keep their order");
});

test('an attachment missing and not attached again: 503 with the reason naming it; /livez unaffected', () => {
  const one = attachmentHealth(gone(1), at(0))!;
  assert.equal(one.healthy, false);
  assert.equal(
    one.reason,
    '1 attachment missing and not attached again: kpr_prog0 on cgroup /sys/fs/cgroup/x: cgroup /sys/fs/cgroup/x does not exist; attached again once it is back',
  );
  const eight = attachmentHealth(gone(8), at(0))!;
  assert.match(eight.reason!, /^8 attachments missing and not attached again: kpr_prog0 on cgroup .* \(and 7 more\)$/);
  assert.equal(eight.missing.length, 8);
  const state = new ProxyHealthState(60_000, () => at(0));
  const r = withAttachments(healthzResponse(state, NODE), eight);
  assert.equal(r.statusCode, 503);
  assert.equal(r.body.healthy, true, 'the proxy itself is healthy');
  assert.deepEqual(r.body.attachments, eight);
  assert.equal(livezResponse(state).statusCode, 200);
  // A node already 503 for another reason stays 503.
  const ineligible = withAttachments(healthzResponse(state, undefined), attachmentHealth(inPlace, at(0)));
  assert.equal(ineligible.statusCode, 503);
});
