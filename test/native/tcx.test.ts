import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  BpfObject,
  attachTcx,
  currentNetnsCookie,
  detachLinkKeepPin,
  detachPinnedLink,
  ensureBpffs,
  ifIndex,
  listInterfaces,
  pinnedTcxLinkInfo,
  queryTcxPrograms,
  queryTcxProgramsByIndex,
  tcxSupported,
  TCX,
  withNetns,
} from '../../native/index.js';
import { kernelMajorMinor } from '../support/kernel.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

test('tcx: attach through a pinned link inside a namespace, swap the program on re-attach, detach by unpinning', async () => {
  requireRoot();
  const sb = new Sandbox();
  const obj = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: ensureBpffs(path.join(sb.bpffsDir, 'maps')) });
  try {
    obj.load();
    const ns = sb.addNamespace('tcx');
    inNs(ns, 'ip', 'link', 'add', 'kprA', 'type', 'veth', 'peer', 'name', 'kprB');
    const pin = path.join(sb.bpffsDir, 'link-kprA-ingress');
    const [major, minor] = kernelMajorMinor();
    if (major < 6 || (major === 6 && minor < 6)) {
      // Before 6.6 there is no tcx: the probe says so and an attach fails with the kernel's error
      // (the agent attaches clsact filters instead; test/native/tc-classic.test.ts).
      assert.equal(
        withNetns(nsPath(ns), () => tcxSupported()),
        false,
      );
      assert.throws(() => withNetns(nsPath(ns), () => attachTcx(obj.program('kpr_tc_ext'), 'kprA', TCX.INGRESS, pin)), /attach tcx/);
      assert.equal(fs.existsSync(pin), false);
      return;
    }
    assert.equal(
      withNetns(nsPath(ns), () => tcxSupported()),
      true,
    );
    const first = withNetns(nsPath(ns), () => attachTcx(obj.program('kpr_tc_ext'), 'kprA', TCX.INGRESS, pin));
    assert.equal(first.replaced, false);
    assert.ok(fs.existsSync(pin));
    const attached = () => withNetns(nsPath(ns), () => queryTcxPrograms('kprA', TCX.INGRESS));
    assert.deepEqual(attached(), [obj.program('kpr_tc_ext').id]);
    const second = withNetns(nsPath(ns), () => attachTcx(obj.program('kpr_tc_pod'), 'kprA', TCX.INGRESS, pin));
    assert.equal(second.replaced, true, 'the pinned link is reused');
    assert.deepEqual(attached(), [obj.program('kpr_tc_pod').id], 'swapped, not added');
    assert.throws(
      () => attachTcx(obj.program('kpr_tc_ext'), 'kprA', TCX.INGRESS, pin + '-root'),
      /no interface kprA/,
      'ifindex resolves in the current namespace only',
    );
    // Indexes far apart (as veth churn leaves them) are still listed.
    inNs(ns, 'ip', 'link', 'add', 'kprC', 'index', '60000', 'type', 'veth', 'peer', 'name', 'kprD', 'index', '60001');
    const listed = withNetns(nsPath(ns), () => listInterfaces());
    assert.deepEqual(listed.map((i) => i.name).sort(), ['kprA', 'kprB', 'kprC', 'kprD', 'lo']);
    assert.equal(listed.find((i) => i.name === 'kprC')?.index, 60000);
    // Detached behind the agent (bpftool link detach): the pin and the link stay, the link names no
    // interface and the hook runs nothing; attaching again replaces the dead link with a new one.
    const linkId = pinnedTcxLinkInfo(pin)!.id;
    detachLinkKeepPin(pin);
    assert.ok(fs.existsSync(pin));
    assert.deepEqual({ ...pinnedTcxLinkInfo(pin)!, progId: 0 }, { id: linkId, progId: 0, ifindex: 0, attachType: TCX.INGRESS });
    const kprA = withNetns(nsPath(ns), () => ifIndex('kprA'));
    assert.deepEqual(
      withNetns(nsPath(ns), () => queryTcxProgramsByIndex(kprA, TCX.INGRESS)),
      [],
    );
    const third = withNetns(nsPath(ns), () => attachTcx(obj.program('kpr_tc_pod'), 'kprA', TCX.INGRESS, pin));
    assert.equal(third.replaced, false, 'a new link');
    assert.notEqual(pinnedTcxLinkInfo(pin)!.id, linkId);
    assert.deepEqual(
      withNetns(nsPath(ns), () => queryTcxProgramsByIndex(kprA, TCX.INGRESS)),
      [obj.program('kpr_tc_pod').id],
    );
    const inner = withNetns(nsPath(ns), () => currentNetnsCookie());
    assert.notEqual(inner, currentNetnsCookie());
    assert.equal(detachPinnedLink(pin), true);
    assert.deepEqual(attached(), []);
  } finally {
    obj.close();
    await sb.teardown();
  }
});
