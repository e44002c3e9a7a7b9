/**
 * Classic tc attachment (clsact + cls_bpf, for kernels without tcx) against
 * the real kernel, inside a namespace the test creates: the filter appears
 * at kpr's handle/priority with our program id, a re-attach swaps the
 * program of the same filter (never absent in between), detach removes only
 * kpr's filter, and filters of others on the same hook are left alone.
 * tc(8) is used here, by the test only, to see the hook as an administrator
 * would and to put a foreign filter on it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  BpfObject,
  BPF_TC,
  KPR_TC_FILTER,
  attachTcFilter,
  detachTcFilter,
  ensureBpffs,
  ifIndex,
  progNameById,
  queryTcFilter,
  withNetns,
} from '../../native/index.js';
import { libbpfTc } from '../../native/libbpf.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const OTHER_PRIO = { handle: 7, priority: 100 };
const SAME_PRIO = { handle: 1, priority: KPR_TC_FILTER.priority };

test('tc-classic: koffi lays out bpf_tc_hook and bpf_tc_opts as libbpf 1.1 does (24 and 32 bytes, sz first)', () => {
  assert.deepEqual(libbpfTc().sizes, { hook: 24, opts: 32 });
});

test("tc-classic: attach on clsact inside a namespace, query our program id, replace in place, detach only kpr's filter", async () => {
  requireRoot();
  const sb = new Sandbox();
  const obj = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: ensureBpffs(path.join(sb.bpffsDir, 'maps')) });
  try {
    obj.load();
    const ext = obj.program('kpr_tc_ext');
    const pod = obj.program('kpr_tc_pod');
    const ns = sb.addNamespace('tcc');
    inNs(ns, 'ip', 'link', 'add', 'kprA', 'type', 'veth', 'peer', 'name', 'kprB');
    const inside = <T>(fn: () => T): T => withNetns(nsPath(ns), fn);
    const tcShow = () => inNs(ns, 'tc', 'filter', 'show', 'dev', 'kprA', 'ingress');

    assert.equal(
      inside(() => queryTcFilter('kprA')),
      null,
      'no clsact qdisc yet: nothing to find',
    );
    assert.throws(() => attachTcFilter(ext, 'kprA'), /no interface kprA/, 'ifindex resolves in the current namespace only');

    const first = inside(() => attachTcFilter(ext, 'kprA'));
    assert.equal(first.qdiscCreated, true);
    assert.equal(first.replaced, false);
    assert.equal(first.progId, ext.id);
    assert.deepEqual([first.handle, first.priority], [KPR_TC_FILTER.handle, KPR_TC_FILTER.priority]);
    assert.equal(
      inside(() => queryTcFilter('kprA')),
      ext.id,
      'query shows our program id',
    );
    assert.equal(progNameById(ext.id), 'kpr_tc_ext');
    assert.match(inNs(ns, 'tc', 'qdisc', 'show', 'dev', 'kprA'), /qdisc clsact ffff:/);
    const shown = tcShow();
    assert.match(shown, new RegExp(`pref ${KPR_TC_FILTER.priority} bpf .*handle 0x${KPR_TC_FILTER.handle.toString(16)} kpr_tc_ext.* direct-action`), shown);
    assert.equal(
      inside(() => queryTcFilter('kprA', BPF_TC.EGRESS)),
      null,
      'egress untouched',
    );

    // Filters of someone else on the same hook: another priority, and kpr's priority with another handle.
    inside(() => attachTcFilter(pod, 'kprA', BPF_TC.INGRESS, OTHER_PRIO));
    inside(() => attachTcFilter(pod, 'kprA', BPF_TC.INGRESS, SAME_PRIO));

    // Re-attach (what a restarting agent does): the same filter gets the new program.
    const second = inside(() => attachTcFilter(pod, 'kprA'));
    assert.equal(second.replaced, true, 'the existing filter was replaced');
    assert.equal(second.qdiscCreated, false, 'the qdisc existed');
    assert.equal(second.progId, pod.id);
    assert.equal(
      inside(() => queryTcFilter('kprA')),
      pod.id,
      'same handle/priority, new program',
    );
    const after = tcShow();
    assert.equal((after.match(/handle 0x6b7072/g) ?? []).length, 1, `one kpr filter, not two: ${after}`);
    assert.doesNotMatch(after, /kpr_tc_ext/);
    assert.equal(
      inside(() => queryTcFilter('kprA', BPF_TC.INGRESS, OTHER_PRIO)),
      pod.id,
      'the other filters are still there',
    );
    assert.equal(
      inside(() => queryTcFilter('kprA', BPF_TC.INGRESS, SAME_PRIO)),
      pod.id,
    );

    // Re-attaching in a tight loop never leaves the hook without kpr's filter.
    for (let i = 0; i < 20; i++) {
      inside(() => attachTcFilter(i % 2 ? pod : ext, 'kprA'));
      assert.notEqual(
        inside(() => queryTcFilter('kprA')),
        null,
      );
    }

    assert.equal(
      inside(() => detachTcFilter('kprA')),
      true,
    );
    assert.equal(
      inside(() => queryTcFilter('kprA')),
      null,
    );
    assert.equal(
      inside(() => detachTcFilter('kprA')),
      false,
      'a second detach finds nothing',
    );
    const left = tcShow();
    assert.doesNotMatch(left, /handle 0x6b7072/);
    assert.match(left, /pref 100 bpf .*handle 0x7 /, `the other filters survive kpr's detach: ${left}`);
    assert.match(left, new RegExp(`pref ${KPR_TC_FILTER.priority} bpf .*handle 0x1 `));
    assert.equal(
      inside(() => queryTcFilter('kprA', BPF_TC.INGRESS, OTHER_PRIO)),
      pod.id,
    );
    assert.match(inNs(ns, 'tc', 'qdisc', 'show', 'dev', 'kprA'), /qdisc clsact/, "the qdisc stays (it is not only kpr's)");
    assert.ok(inside(() => ifIndex('kprA')) > 0);
  } finally {
    obj.close();
    await sb.teardown();
  }
});
