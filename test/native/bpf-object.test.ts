import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, BpfObject, KprBpfError, setLibbpfLogger, type LibbpfLogLevel } from '../../native/index.js';
import { bpffsTempDir, objPath, requireBpf, rmrf, svcKey, svcVal } from '../support/bpf-fixtures.js';
import { SOCK_PROGRAMS } from '../../agent/datapath/loader.js';
import { PREV_MAPS } from '../../agent/datapath/migration.js';
import { BACKEND, MAP_NAMES, SVC_KEY, SVC_VAL } from '../../agent/maps/layout.js';

/** The socket object's maps: the registry's and the read-through placeholders of a migration. */
const MAPS = [...Object.values(MAP_NAMES), ...Object.values(PREV_MAPS)];
const PROGS = [...SOCK_PROGRAMS];

test('open + load with a pin dir pins every map as a file', () => {
  requireBpf();
  const dir = bpffsTempDir();
  const obj = BpfObject.open(objPath, { pinMapsDir: dir });
  try {
    assert.deepEqual(obj.mapNames().sort(), [...MAPS].sort());
    assert.deepEqual(obj.programNames().sort(), [...PROGS].sort());
    assert.equal(obj.loaded, false);
    obj.load();
    assert.equal(obj.loaded, true);
    for (const m of MAPS) {
      assert.ok(fs.existsSync(path.join(dir, m)), `pin ${m} missing`);
      assert.equal(obj.pinPathOf(m), path.join(dir, m));
    }
    const prog = obj.program('kpr_connect4');
    assert.equal(prog.typeName, 'cgroup_sock_addr');
    assert.equal(prog.attachTypeName, 'cgroup_inet4_connect');
    assert.ok(prog.fd > 0);
    assert.ok(prog.id > 0);
  } finally {
    obj.close();
    rmrf(dir);
  }
});

test("pins left by a version without kpr monitor's maps: the load adopts them and adds those two", () => {
  requireBpf();
  const dir = bpffsTempDir();
  let obj = BpfObject.open(objPath, { pinMapsDir: dir });
  try {
    obj.load();
    const svcId = obj.map(MAP_NAMES.svc).id;
    obj.close();
    for (const m of [MAP_NAMES.monitor, MAP_NAMES.events]) fs.rmSync(path.join(dir, m)); // as the older version pinned them: not at all
    obj = BpfObject.open(objPath, { pinMapsDir: dir });
    assert.deepEqual(obj.incompatiblePins(), []);
    obj.load();
    assert.equal(obj.map(MAP_NAMES.svc).id, svcId, 'the older maps adopted');
    for (const m of [MAP_NAMES.monitor, MAP_NAMES.events]) assert.ok(fs.existsSync(path.join(dir, m)), `${m} created and pinned`);
    assert.equal(obj.map(MAP_NAMES.events).typeName, 'ringbuf');
  } finally {
    obj.close();
    rmrf(dir);
  }
});

test('a second open of the object adopts the pinned maps', () => {
  requireBpf();
  const dir = bpffsTempDir();
  const first = BpfObject.open(objPath, { pinMapsDir: dir });
  let second: BpfObject | null = null;
  try {
    first.load();
    const k = svcKey(7);
    first.map('kpr_svc').update(k, svcVal(42, 3));
    const firstId = first.map('kpr_svc').id;

    // while the first is still open
    second = BpfObject.open(objPath, { pinMapsDir: dir });
    second.load();
    assert.equal(second.map('kpr_svc').id, firstId, 'same kernel map');
    assert.deepEqual(second.map('kpr_svc').lookup(k), svcVal(42, 3));
    second.close();

    // and across a "restart": the first object is gone, the pin keeps the map
    first.close();
    second = BpfObject.open(objPath, { pinMapsDir: dir });
    second.load();
    assert.equal(second.map('kpr_svc').id, firstId);
    assert.deepEqual(second.map('kpr_svc').lookup(k), svcVal(42, 3));

    // and through the pin directly
    const pinned = BpfMap.openPinned(path.join(dir, 'kpr_svc'));
    try {
      assert.equal(pinned.id, firstId);
      assert.deepEqual(pinned.lookup(k), svcVal(42, 3));
    } finally {
      pinned.close();
    }
  } finally {
    first.close();
    second?.close();
    rmrf(dir);
  }
});

test('an incompatible pinned map fails the load clearly, and libbpf warns', () => {
  requireBpf();
  const good = bpffsTempDir();
  const bad = bpffsTempDir();
  const logs: Array<[LibbpfLogLevel, string]> = [];
  const donor = BpfObject.open(objPath, { pinMapsDir: good });
  try {
    donor.load();
    // kpr_backend (u32 -> struct kpr_backend) pinned where kpr_svc is expected
    donor.map('kpr_backend').pin(path.join(bad, 'kpr_svc'));

    setLibbpfLogger((level, msg) => logs.push([level, msg]));
    const obj = BpfObject.open(objPath, { pinMapsDir: bad });
    let caught: unknown;
    try {
      obj.load();
    } catch (err) {
      caught = err;
    }
    assert.ok(caught instanceof KprBpfError, `expected KprBpfError, got ${String(caught)}`);
    assert.equal(caught.op, 'object load');
    assert.equal(caught.map, 'kpr_svc');
    assert.match(caught.message, /^bpf object load kpr_svc: E\w+ \(errno \d+\): pinned map .*kpr_svc is incompatible/);
    assert.match(caught.message, new RegExp(`key_size 4 != ${SVC_KEY.size}`));
    assert.match(caught.message, new RegExp(`value_size ${BACKEND.size} != ${SVC_VAL.size}`));
    assert.equal(obj.closed, true, 'a failed load closes the object');
    // the maps libbpf created for this failed load are not left pinned
    assert.deepEqual(fs.readdirSync(bad), ['kpr_svc']);
    assert.ok(
      logs.some(([level, msg]) => level === 'warn' && /reuse pinned map/.test(msg)),
      `no libbpf warning: ${JSON.stringify(logs.filter(([l]) => l === 'warn'))}`,
    );
  } finally {
    setLibbpfLogger(null);
    donor.close();
    rmrf(good);
    rmrf(bad);
  }
});

test('open errors are clear', () => {
  assert.throws(
    () => BpfObject.open('/nonexistent/kpr.bpf.o'),
    (err: unknown) =>
      err instanceof KprBpfError &&
      err.code === 'ENOENT' &&
      err.op === 'object open' &&
      /^bpf object open \/nonexistent\/kpr.bpf.o: ENOENT \(errno 2\)/.test(err.message),
  );
  const obj = BpfObject.open(objPath);
  try {
    assert.throws(() => obj.map('kpr_svc'), /object is not loaded/);
    assert.throws(() => obj.map('nope'), /no map nope/);
    assert.throws(() => obj.program('nope'), /no program nope/);
  } finally {
    obj.close();
  }
  assert.throws(() => obj.load(), /object is closed/);
});

test('closing the object invalidates its map handles', () => {
  requireBpf();
  const obj = BpfObject.open(objPath);
  obj.load();
  const m = obj.map('kpr_backend');
  obj.close();
  assert.equal(m.closed, true);
  assert.throws(
    () => m.lookup(Buffer.alloc(4)),
    (err: unknown) => err instanceof KprBpfError && err.code === 'EBADF',
  );
});
