import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BpfObject, ensureBpffs, isBpffs, setLibbpfLogger, unmountBpffs, type LibbpfLogLevel } from '../../native/index.js';
import { objPath, requireBpf, rmrf, unique } from '../support/bpf-fixtures.js';

test('BPF is permitted (root, bpf() allowed)', () => {
  requireBpf();
});

test('isBpffs tells bpffs from other filesystems', () => {
  assert.equal(isBpffs('/sys/fs/bpf'), true);
  assert.equal(isBpffs('/proc'), false);
  assert.equal(isBpffs(os.tmpdir()), false);
  assert.throws(() => isBpffs('/nonexistent-kpr-path'), /bpf statfs \/nonexistent-kpr-path: ENOENT \(errno 2\)/);
});

test('ensureBpffs creates nested directories on /sys/fs/bpf', () => {
  const top = path.join('/sys/fs/bpf', unique());
  try {
    const dir = ensureBpffs(path.join(top, 'a', 'b'));
    assert.equal(dir, path.join(top, 'a', 'b'));
    assert.ok(fs.statSync(dir).isDirectory());
    assert.equal(isBpffs(dir), true);
    // idempotent
    ensureBpffs(dir);
  } finally {
    rmrf(top);
  }
});

test('ensureBpffs rejects a directory outside the root', () => {
  assert.throws(() => ensureBpffs('/tmp/kpr-not-bpffs'), /not inside the bpf filesystem root/);
});

test('ensureBpffs mounts bpffs on a root that is not one', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kpr-bpffs-'));
  try {
    assert.equal(isBpffs(root), false);
    const dir = ensureBpffs(path.join(root, 'kpr', 'maps'), { root });
    assert.equal(isBpffs(root), true);
    assert.ok(fs.statSync(dir).isDirectory());
  } finally {
    if (isBpffs(root)) unmountBpffs(root);
    rmrf(root);
  }
});

test('libbpf log messages reach the logger, formatted', () => {
  requireBpf();
  const logs: Array<[LibbpfLogLevel, string]> = [];
  setLibbpfLogger((level, msg) => logs.push([level, msg]));
  const obj = BpfObject.open(objPath);
  try {
    obj.load();
  } finally {
    obj.close();
    setLibbpfLogger(null);
  }
  assert.ok(logs.length > 0, 'no libbpf messages');
  const opening = logs.find(([, m]) => m.includes(`loading object from ${objPath}`));
  assert.ok(opening, `no "loading object" message in ${JSON.stringify(logs.slice(0, 5))}`);
  assert.equal(opening[0], 'debug');
  assert.ok(
    logs.every(([, m]) => !m.endsWith('\n')),
    'trailing newlines are trimmed',
  );
  assert.ok(
    logs.some(([, m]) => /found program 'kpr_connect4'/.test(m)),
    '%s arguments are formatted',
  );
});

test('a throwing logger does not break libbpf calls', () => {
  requireBpf();
  setLibbpfLogger(() => {
    throw new Error('boom');
  });
  const obj = BpfObject.open(objPath);
  try {
    obj.load();
    assert.equal(obj.loaded, true);
  } finally {
    obj.close();
    setLibbpfLogger(null);
  }
});
