/**
 * The kernel feature registry (pure): states from probe results, fallbacks
 * and failures reported by the components, the words the agent logs and
 * preflight prints, the environment hooks; and RetryingTask's capped backoff.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  KERNEL_FEATURE_NAMES,
  KernelFeatures,
  InjectedFeatureFailure,
  formatFeature,
  parseFeatureList,
  recordDatapathFallbacks,
  summarizeFeatures,
  type FeatureStatus,
} from '../../agent/datapath/kernel-features.js';
import { RetryingTask } from '../../agent/runtime/retrying-task.js';
import { silentLogger } from '../../agent/log/log.js';

const allPresent = Object.fromEntries(KERNEL_FEATURE_NAMES.map((f) => [f, { present: true, detail: 'probed' }]));

test('a present feature is active; an absent one is off with what is lost until a component says its fallback is in use', () => {
  const features = new KernelFeatures({ ...allPresent, tcx: { present: false, detail: 'bpf_prog_query tcx: EINVAL (errno 22)' } });
  assert.equal(features.status('netns-cookie-sockopt').state, 'active');
  const tcx = features.status('tcx');
  assert.equal(tcx.state, 'off');
  assert.match(tcx.lost!, /NodePort, LoadBalancer and externalIP/);
  assert.equal(formatFeature(tcx), `tcx: off; lost: ${tcx.lost} [bpf_prog_query tcx: EINVAL (errno 22); kernel 6.6+]`);

  const heard: FeatureStatus[] = [];
  features.onChange((s) => heard.push(s));
  features.useFallback('tcx', 'clsact/cls_bpf');
  assert.deepEqual([features.status('tcx').state, features.status('tcx').fallback], ['fallback', 'clsact/cls_bpf']);
  assert.equal(formatFeature(features.status('tcx')), 'tcx: fallback (clsact/cls_bpf) [bpf_prog_query tcx: EINVAL (errno 22); kernel 6.6+]');
  assert.equal(features.present('tcx'), false, 'a fallback is not the feature');
  features.turnOff('tcx', 'clsact attach failed: EPERM');
  assert.equal(features.status('tcx').state, 'off');
  assert.match(features.status('tcx').detail, /clsact attach failed: EPERM$/);
  assert.deepEqual(
    heard.map((s) => s.state),
    ['fallback', 'off'],
  );
});

test('the one-line summary lists every feature in order; unprobed features are off until recorded', () => {
  const features = new KernelFeatures({ tcx: { present: true, detail: 'ok' } });
  assert.equal(features.probed('bpf-sock-destroy'), false);
  features.record('bpf-sock-destroy', { present: true, detail: 'kpr_sock_term.bpf.o loads' });
  assert.equal(features.probed('bpf-sock-destroy'), true);
  const summary = summarizeFeatures(features.list());
  assert.deepEqual(
    summary.split(' ').map((p) => p.split('=')[0]),
    [...KERNEL_FEATURE_NAMES],
  );
  assert.match(summary, /^netns-cookie-sockopt=off tcx=active bpf-sock-destroy=active /);
  assert.equal(features.status('batch-map-ops').required, true);
});

test('the datapath fallbacks, decided once for the agent and preflight: clsact filters unless --tc-attach tcx; netlink SOCK_DESTROY when it works, off with why when it does not, as probed when nothing is said', () => {
  const absent = { tcx: { present: false, detail: 'no tcx' }, 'bpf-sock-destroy': { present: false, detail: 'no kfunc' } };
  const states = (f: KernelFeatures) => [
    f.status('tcx').state,
    f.status('tcx').fallback,
    f.status('bpf-sock-destroy').state,
    f.status('bpf-sock-destroy').fallback,
  ];

  const auto = new KernelFeatures({ ...allPresent, ...absent });
  let asked = 0;
  recordDatapathFallbacks(auto, { tcAttach: 'auto', sockDestroyNetlink: () => (asked++, null), tcxDetail: 'clsact here' });
  assert.deepEqual(states(auto), ['fallback', 'clsact/cls_bpf', 'fallback', 'netlink SOCK_DESTROY']);
  assert.match(auto.status('tcx').detail, /; clsact here$/);
  assert.equal(asked, 1);

  const tcxOnly = new KernelFeatures({ ...allPresent, ...absent });
  recordDatapathFallbacks(tcxOnly, { tcAttach: 'tcx', sockDestroyNetlink: () => 'EOPNOTSUPP' });
  assert.deepEqual(states(tcxOnly), ['off', undefined, 'off', undefined]);
  assert.match(tcxOnly.status('bpf-sock-destroy').detail, /netlink SOCK_DESTROY unavailable: EOPNOTSUPP$/);

  const silent = new KernelFeatures({ ...allPresent, ...absent });
  recordDatapathFallbacks(silent, { tcAttach: 'tc', sockDestroyNetlink: () => undefined });
  assert.deepEqual(states(silent), ['fallback', 'clsact/cls_bpf', 'off', undefined]);
  assert.equal(silent.status('bpf-sock-destroy').detail, 'no kfunc; kernel 6.5+');

  const present = new KernelFeatures(allPresent);
  recordDatapathFallbacks(present, { tcAttach: 'auto', sockDestroyNetlink: () => assert.fail('not asked when bpf_sock_destroy is there') });
  assert.deepEqual(states(present), ['active', undefined, 'active', undefined]);
});

test('environment lists: known names kept, unknown ones returned; KPR_FAIL_KERNEL_FEATURES makes use() throw', () => {
  const { features, unknown } = parseFeatureList(' tcx, bogus,,netns-cookie-sockopt ');
  assert.deepEqual([...features], ['tcx', 'netns-cookie-sockopt']);
  assert.deepEqual(unknown, ['bogus']);
  const reg = new KernelFeatures(allPresent, new Set(['tcx'] as const));
  assert.throws(() => reg.use('tcx'), InjectedFeatureFailure);
  reg.use('btf');
});

test('RetryingTask: a failure is reported and retried with a doubling delay, capped; success resets it', async () => {
  let calls = 0;
  const failures: string[] = [];
  const task = new RetryingTask(
    'demo',
    () => {
      calls++;
      if (calls < 4) throw new Error(`fail ${calls}`);
    },
    { log: silentLogger, onFailure: (t, e) => failures.push(`${t}: ${e.message}`), minMs: 10, maxMs: 25 },
  );
  const started = Date.now();
  assert.equal(task.run(), false);
  while (calls < 4) await new Promise((r) => setTimeout(r, 5));
  const elapsed = Date.now() - started;
  // Delays 10, 20, then 25 (capped): at least 55 ms.
  assert.ok(elapsed >= 50, `retried after ${elapsed} ms`);
  assert.deepEqual(failures, ['demo: fail 1', 'demo: fail 2', 'demo: fail 3']);
  assert.equal(task.failures, 0);
  task.stop();
  assert.equal(task.run(), false, 'a stopped task runs no more');
  assert.equal(calls, 4);
});
