/**
 * Ownership checks of the agent's bpffs directories (agent/datapath/pin-dir-ownership.ts),
 * on the real bpffs, each test in its own /sys/fs/bpf/kpr-test-* directory:
 * root-owned directories are accepted, an empty one someone else owns is
 * repaired with a warning, one that holds anything (a planted map pin) is
 * refused naming path, owner and mode, as are symlinks and planted pins;
 * loadDatapath refuses before it reuses a pin, and the pin keeper before it
 * pins again into a re-created directory.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, BPF_MAP_TYPE, DEFAULT_BPFFS_ROOT } from '../../native/index.js';
import { checkPinDirs, PinDirOwnershipError } from '../../agent/datapath/pin-dir-ownership.js';
import { loadDatapath } from '../../agent/datapath/loader.js';
import { PinKeeper } from '../../agent/datapath/pin-keeper.js';
import type { KernelFeatures } from '../../agent/datapath/kernel-features.js';
import type { Logger } from '../../agent/log/log.js';
import { bpffsTempDir, requireBpf, rmrf } from '../support/bpf-fixtures.js';

const NOBODY = 65534;

function recordingLogger(): Logger & { warnings: Array<{ msg: string; fields?: Record<string, unknown> }> } {
  const warnings: Array<{ msg: string; fields?: Record<string, unknown> }> = [];
  const log = {
    warnings,
    error() {},
    warn(msg: string, fields?: Record<string, unknown>) {
      warnings.push({ msg, fields });
    },
    info() {},
    debug() {},
    child: () => log,
  };
  return log;
}

/** A fresh pin directory; removed after fn. */
function withPinDir(fn: (dir: string) => void): void {
  const dir = bpffsTempDir();
  try {
    fn(dir);
  } finally {
    rmrf(dir);
  }
}

const modeOf = (p: string) => fs.lstatSync(p).mode & 0o7777;

function pinMap(pin: string): void {
  const m = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 1, 'kpr_planted');
  try {
    m.pin(pin);
  } finally {
    m.close();
  }
}

test('BPF is permitted (root, bpf() allowed)', () => {
  requireBpf();
});

test('a root-owned 0700 pin directory is accepted; maps/, rings/ and links/ are created 0700', () => {
  withPinDir((dir) => {
    fs.chmodSync(dir, 0o700);
    const log = recordingLogger();
    const r = checkPinDirs(dir, DEFAULT_BPFFS_ROOT, log);
    assert.deepEqual(r.repaired, []);
    assert.deepEqual(log.warnings, []);
    for (const sub of ['', 'maps', 'rings', 'links']) assert.ok(r.checked.includes(path.join(dir, sub)), `${sub || dir} checked`);
    for (const sub of ['maps', 'rings', 'links']) {
      const st = fs.lstatSync(path.join(dir, sub));
      assert.ok(st.isDirectory());
      assert.equal(st.uid, 0);
      assert.equal(st.mode & 0o7777, 0o700);
    }
    // Root's own pins are reused without a word.
    pinMap(path.join(dir, 'maps', 'kpr_svc'));
    assert.deepEqual(checkPinDirs(dir, DEFAULT_BPFFS_ROOT, log).repaired, []);
  });
});

test('an empty pin directory owned by uid 65534 with mode 0777 is repaired (chown root, chmod 0700) with a warning', () => {
  withPinDir((dir) => {
    fs.chownSync(dir, NOBODY, NOBODY);
    fs.chmodSync(dir, 0o777);
    const log = recordingLogger();
    const r = checkPinDirs(dir, DEFAULT_BPFFS_ROOT, log);
    assert.deepEqual(r.repaired, [{ path: dir, was: 'owned by uid 65534 with mode 0777' }]);
    assert.equal(fs.lstatSync(dir).uid, 0);
    assert.equal(modeOf(dir), 0o700);
    assert.equal(log.warnings.length, 1);
    assert.match(log.warnings[0].msg, /it was empty, so it was repaired/);
    assert.deepEqual(log.warnings[0].fields, { path: dir, was: 'owned by uid 65534 with mode 0777', problem: 'not owned by root' });
  });
});

test('a pin directory of uid 65534, mode 0777, holding a planted map pin is refused, naming path, owner and mode', () => {
  withPinDir((dir) => {
    fs.mkdirSync(path.join(dir, 'maps'));
    pinMap(path.join(dir, 'maps', 'kpr_svc'));
    fs.chownSync(dir, NOBODY, NOBODY);
    fs.chmodSync(dir, 0o777);
    assert.throws(
      () => checkPinDirs(dir, DEFAULT_BPFFS_ROOT, recordingLogger()),
      (err: Error) =>
        err instanceof PinDirOwnershipError &&
        err.message.startsWith(
          `bpffs: ${dir} is owned by uid 65534 with mode 0777 (not owned by root) and holds 1 entry (maps) that another user could have planted; refusing to use it`,
        ),
    );
    assert.equal(fs.lstatSync(dir).uid, NOBODY, 'left as it was');
  });
  // Root-owned but writable by others, with something in it: refused too.
  withPinDir((dir) => {
    fs.mkdirSync(path.join(dir, 'links'));
    fs.chmodSync(dir, 0o757);
    assert.throws(
      () => checkPinDirs(dir, DEFAULT_BPFFS_ROOT, recordingLogger()),
      new RegExp(`bpffs: ${dir} is owned by uid 0 with mode 0757 \\(writable by group or others\\) and holds 1 entry \\(links\\)`),
    );
  });
});

test('a planted pin in a root-owned maps/, a symlink as pin directory, and a foreign directory on the way are refused', () => {
  withPinDir((dir) => {
    fs.mkdirSync(path.join(dir, 'maps'), { mode: 0o700 });
    const pin = path.join(dir, 'maps', 'kpr_backend');
    pinMap(pin);
    fs.chownSync(pin, NOBODY, NOBODY);
    assert.throws(
      () => checkPinDirs(dir, DEFAULT_BPFFS_ROOT, recordingLogger()),
      new RegExp(`bpffs: pin ${pin} is owned by uid 65534 with mode 0600 \\(not owned by root\\); refusing to reuse it`),
    );
  });
  withPinDir((dir) => {
    const real = path.join(dir, 'real');
    fs.mkdirSync(real, { mode: 0o700 });
    const link = path.join(dir, 'pins');
    fs.symlinkSync(real, link);
    assert.throws(
      () => checkPinDirs(link, DEFAULT_BPFFS_ROOT, recordingLogger()),
      new RegExp(`bpffs: ${link} is a symbolic link \\(owned by uid 0 with mode 0777\\); refusing to use it`),
    );
  });
  withPinDir((dir) => {
    // --bpffs DIR/kpr where DIR (on the way from /sys/fs/bpf) belongs to someone else.
    const inner = path.join(dir, 'kpr');
    fs.mkdirSync(inner, { mode: 0o700 });
    fs.chownSync(dir, NOBODY, NOBODY);
    assert.throws(
      () => checkPinDirs(inner, DEFAULT_BPFFS_ROOT, recordingLogger()),
      new RegExp(`bpffs: ${dir} is owned by uid 65534 with mode 0\\d{3} \\(not owned by root\\) and holds 1 entry \\(kpr\\)`),
    );
  });
});

test('loadDatapath refuses a foreign pin directory before it opens or reuses anything', () => {
  withPinDir((dir) => {
    fs.mkdirSync(path.join(dir, 'maps'));
    pinMap(path.join(dir, 'maps', 'kpr_svc'));
    fs.chownSync(dir, NOBODY, NOBODY);
    fs.chmodSync(dir, 0o777);
    const features = {} as KernelFeatures; // not reached: the check comes first
    assert.throws(
      () => loadDatapath({ bpfObject: '/nonexistent/kpr_sock.bpf.o', bpffsDir: dir, cgroupPath: '/nonexistent' }, recordingLogger(), features),
      new RegExp(`bpffs: ${dir} is owned by uid 65534 with mode 0777`),
    );
  });
});

test('the pin keeper re-pins only into directories that pass the same checks', () => {
  withPinDir((dir) => {
    checkPinDirs(dir, DEFAULT_BPFFS_ROOT, recordingLogger());
    const map = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 1, 'kpr_kept');
    const keeper = new PinKeeper(dir, recordingLogger());
    try {
      const pin = path.join(dir, 'maps', 'kpr_kept');
      map.pin(pin);
      keeper.keepMap(pin, map);
      // The pin directory removed and made again by someone else, with something planted in it: refused, nothing pinned.
      rmrf(dir);
      fs.mkdirSync(path.join(dir, 'maps'), { recursive: true });
      pinMap(path.join(dir, 'maps', 'planted'));
      fs.chownSync(dir, NOBODY, NOBODY);
      fs.chmodSync(dir, 0o777);
      assert.throws(
        () => keeper.check(),
        new RegExp(`bpffs: ${dir} is owned by uid 65534 with mode 0777 \\(not owned by root\\) and holds 1 entry \\(maps\\)`),
      );
      assert.equal(fs.existsSync(pin), false);
      // Made again by someone else but empty: taken over, then the map is pinned again.
      rmrf(dir);
      fs.mkdirSync(dir);
      fs.chownSync(dir, NOBODY, NOBODY);
      fs.chmodSync(dir, 0o777);
      const log = recordingLogger();
      const k2 = new PinKeeper(dir, log);
      k2.keepMap(pin, map);
      assert.deepEqual(
        k2.check().map((r) => [r.pin, r.reason]),
        [[pin, 'missing']],
      );
      assert.equal(fs.lstatSync(dir).uid, 0);
      assert.equal(modeOf(dir), 0o700);
      assert.ok(log.warnings.some((w) => /it was empty, so it was repaired/.test(w.msg)));
      assert.equal(fs.lstatSync(pin).uid, 0);
    } finally {
      keeper.close();
      map.close();
    }
  });
});
