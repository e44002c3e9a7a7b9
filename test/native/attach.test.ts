import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  BPF_ATTACH_TYPE,
  BpfObject,
  KprBpfError,
  cgroupId,
  detachLinkKeepPin,
  detachPinnedLink,
  pinnedLinkInfo,
  queryCgroupPrograms,
} from '../../native/index.js';
import { bpffsTempDir, cgroup2Mount, objPath, requireBpf, rmrf, unique } from '../support/bpf-fixtures.js';

const CONNECT4 = BPF_ATTACH_TYPE.CGROUP_INET4_CONNECT;

test('cgroup attach through a pinned link survives close and is swapped on re-attach', () => {
  requireBpf();
  const cgRoot = cgroup2Mount();
  const cg = path.join(cgRoot, unique());
  assert.notEqual(path.resolve(cg), path.resolve(cgRoot), 'never the root cgroup');
  const pinDir = bpffsTempDir();
  const linkPin = path.join(pinDir, 'link_connect4');
  fs.mkdirSync(cg);
  let obj: BpfObject | null = null;
  try {
    obj = BpfObject.open(objPath, { pinMapsDir: pinDir });
    obj.load();
    const first = obj.attachCgroup('kpr_connect4', cg, linkPin);
    assert.equal(first.replaced, false);
    assert.equal(first.cgroupId, cgroupId(cg));
    assert.ok(fs.existsSync(linkPin), 'link pin exists');
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [first.progId]);
    const info = pinnedLinkInfo(linkPin)!;
    assert.equal(info.typeName, 'cgroup');
    assert.equal(info.id, first.linkId);
    assert.equal(info.progId, first.progId);
    assert.equal(info.attachType, CONNECT4);

    // the pinned link keeps the program attached without the object
    obj.close();
    obj = null;
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [first.progId]);

    // "agent restart": new object, same link, new program swapped in
    obj = BpfObject.open(objPath, { pinMapsDir: pinDir });
    obj.load();
    const second = obj.attachCgroup('kpr_connect4', cg, linkPin);
    assert.equal(second.replaced, true);
    assert.equal(second.linkId, first.linkId, 'same link');
    assert.notEqual(second.progId, first.progId, 'new program');
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [second.progId], 'exactly one attachment');
    assert.equal(pinnedLinkInfo(linkPin)!.progId, second.progId);

    // idempotent when the same program is attached again
    const third = obj.attachCgroup('kpr_connect4', cg, linkPin);
    assert.equal(third.replaced, true);
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [second.progId]);

    // a program of another attach type cannot take over this link
    assert.throws(
      () => obj!.attachCgroup('kpr_sendmsg4', cg, linkPin),
      (e: unknown) => e instanceof KprBpfError && /attach type cgroup_inet4_connect/.test(e.message),
    );
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [second.progId]);

    assert.equal(detachPinnedLink(linkPin), true);
    assert.equal(fs.existsSync(linkPin), false);
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), []);
    assert.equal(detachPinnedLink(linkPin), false);
  } finally {
    obj?.close();
    try {
      detachPinnedLink(linkPin);
    } finally {
      fs.rmdirSync(cg);
      rmrf(pinDir);
    }
  }
});

test('a pinned cgroup link detached behind the agent (bpftool link detach): the pin stays, the link names no cgroup, the query shows nothing; attaching again makes a new link', () => {
  requireBpf();
  const cg = path.join(cgroup2Mount(), unique());
  const pinDir = bpffsTempDir();
  const linkPin = path.join(pinDir, 'link_connect4');
  fs.mkdirSync(cg);
  const obj = BpfObject.open(objPath, { pinMapsDir: pinDir });
  try {
    obj.load();
    const first = obj.attachCgroup('kpr_connect4', cg, linkPin);
    assert.equal(first.attachType, CONNECT4);
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [first.progId]);

    detachLinkKeepPin(linkPin);
    assert.ok(fs.existsSync(linkPin), 'the pin stays');
    const info = pinnedLinkInfo(linkPin)!;
    assert.equal(info.id, first.linkId, 'the same link object');
    assert.equal(info.cgroupId, 0n, 'a detached cgroup link names no cgroup (5.9+)');
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [], 'the program runs nowhere');

    // What the agent's repair does: the dead link is unpinned and a new one attached and pinned.
    const again = obj.attachCgroup('kpr_connect4', cg, linkPin);
    assert.equal(again.replaced, false, 'a new link, not the detached one');
    assert.notEqual(again.linkId, first.linkId);
    assert.deepEqual(queryCgroupPrograms(cg, CONNECT4), [first.progId]);
    assert.equal(pinnedLinkInfo(linkPin)!.cgroupId, cgroupId(cg));
  } finally {
    obj.close();
    try {
      detachPinnedLink(linkPin);
    } finally {
      fs.rmdirSync(cg);
      rmrf(pinDir);
    }
  }
});

test('a pinned link of another cgroup is not hijacked', () => {
  requireBpf();
  const cgRoot = cgroup2Mount();
  const cgA = path.join(cgRoot, unique());
  const cgB = path.join(cgRoot, unique());
  const pinDir = bpffsTempDir();
  const linkPin = path.join(pinDir, 'link');
  fs.mkdirSync(cgA);
  fs.mkdirSync(cgB);
  const obj = BpfObject.open(objPath);
  try {
    obj.load();
    obj.attachCgroup('kpr_connect4', cgA, linkPin);
    assert.throws(() => obj.attachCgroup('kpr_connect4', cgB, linkPin), /is attached to cgroup id \d+, not/);
    assert.deepEqual(queryCgroupPrograms(cgB, CONNECT4), []);
    assert.equal(queryCgroupPrograms(cgA, CONNECT4).length, 1);
  } finally {
    obj.close();
    try {
      detachPinnedLink(linkPin);
    } finally {
      fs.rmdirSync(cgA);
      fs.rmdirSync(cgB);
      rmrf(pinDir);
    }
  }
});

test('attach errors are clear', () => {
  requireBpf();
  const pinDir = bpffsTempDir();
  const obj = BpfObject.open(objPath, { pinMapsDir: pinDir });
  try {
    assert.throws(() => obj.attachCgroup('kpr_connect4', '/sys/fs/cgroup/unified', path.join(pinDir, 'l')), /not loaded/);
    obj.load();
    assert.throws(() => obj.attachCgroup('kpr_connect4', '/nonexistent-cgroup', path.join(pinDir, 'l')), /ENOENT/);
    // a pinned map is not a link
    assert.throws(
      () => obj.attachCgroup('kpr_connect4', cgroup2Mount(), path.join(pinDir, 'kpr_svc')),
      (e: unknown) => e instanceof KprBpfError && e.op === 'link open' && /not a bpf link/.test(e.message),
    );
  } finally {
    obj.close();
    rmrf(pinDir);
  }
});
