import { test, before, after } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BPF_MAP_TYPE, BPF_NOEXIST, BpfMap, BpfObject, KprBpfError, possibleCpus, sumPerCpuU64 } from '../../native/index.js';
import { BACKEND, REVNAT_KEY, REVNAT_VAL, SVC_KEY, SVC_VAL } from '../../agent/maps/layout.js';

const KS = SVC_KEY.size;
const VS = SVC_VAL.size;
import { bpffsTempDir, objPath, requireBpf, rmrf, svcKey, svcKeyIndex, svcVal, u32 } from '../support/bpf-fixtures.js';

let dir = '';
let obj: BpfObject;

before(() => {
  requireBpf();
  dir = bpffsTempDir();
  obj = BpfObject.open(objPath, { pinMapsDir: dir });
  obj.load();
});

after(() => {
  obj?.close();
  if (dir) rmrf(dir);
});

test('map info: type names, sizes, max entries', () => {
  const expect = [
    { name: 'kpr_svc', typeName: 'hash', keySize: SVC_KEY.size, valueSize: SVC_VAL.size, maxEntries: 262144 },
    { name: 'kpr_backend', typeName: 'hash', keySize: 4, valueSize: BACKEND.size, maxEntries: 262144 },
    { name: 'kpr_revnat', typeName: 'lru_hash', keySize: REVNAT_KEY.size, valueSize: REVNAT_VAL.size, maxEntries: 262144 },
    { name: 'kpr_stats', typeName: 'percpu_array', keySize: 4, valueSize: 8, maxEntries: 32 },
  ];
  for (const e of expect) {
    const m = obj.map(e.name);
    assert.deepEqual({ name: m.name, typeName: m.typeName, keySize: m.keySize, valueSize: m.valueSize, maxEntries: m.maxEntries }, e);
    assert.ok(m.fd > 0);
    assert.ok(m.id > 0);
    const pinned = BpfMap.openPinned(path.join(dir, e.name));
    try {
      assert.equal(pinned.name, e.name);
      assert.equal(pinned.typeName, e.typeName);
      assert.equal(pinned.id, m.id);
      assert.notEqual(pinned.fd, m.fd);
      assert.deepEqual(pinned.info(), m.info());
    } finally {
      pinned.close();
    }
    assert.equal(pinned.closed, true);
  }
  assert.equal(obj.map('kpr_svc').type, BPF_MAP_TYPE.HASH);
  assert.equal(obj.map('kpr_revnat').type, BPF_MAP_TYPE.LRU_HASH);
  assert.equal(obj.map('kpr_stats').type, BPF_MAP_TYPE.PERCPU_ARRAY);
  assert.equal(obj.map('kpr_stats').perCpu, true);
  assert.equal(obj.map('kpr_stats').valueStride, 8 * possibleCpus());
  assert.equal(obj.map('kpr_svc').valueStride, SVC_VAL.size);
});

test('update / lookup / delete / iterate', () => {
  const m = obj.map('kpr_backend');
  const val = (i: number) => {
    const b = Buffer.alloc(BACKEND.size);
    b.writeUInt32BE(0x0a000000 + i, 0);
    b.writeUInt16BE(8080, 4);
    b[6] = 6;
    return b;
  };
  for (let i = 1; i <= 10; i++) m.update(u32(i), val(i));
  assert.deepEqual(m.lookup(u32(3)), val(3));
  assert.equal(m.lookup(u32(999)), null, 'missing key -> null');

  const keys = [...m.keys()].map((k) => k.readUInt32LE(0)).sort((a, b) => a - b);
  assert.deepEqual(keys, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const entries = [...m.entries()];
  assert.equal(entries.length, 10);
  for (const [k, v] of entries) assert.deepEqual(v, val(k.readUInt32LE(0)));

  assert.throws(
    () => m.update(u32(3), val(33), BPF_NOEXIST),
    (e: unknown) => e instanceof KprBpfError && e.code === 'EEXIST',
  );
  m.update(u32(3), val(33));
  assert.deepEqual(m.lookup(u32(3)), val(33));

  assert.equal(m.delete(u32(3)), true);
  assert.equal(m.delete(u32(3)), false, 'second delete reports absence');
  assert.equal(m.lookup(u32(3)), null);
  for (const k of [...m.keys()]) m.delete(k);
  assert.equal([...m.keys()].length, 0);
});

test('batch: 50,000 entries in, all back out, all deleted', () => {
  const m = obj.map('kpr_svc');
  const N = 50_000;
  const keys = Buffer.alloc(N * KS);
  const values = Buffer.alloc(N * VS);
  for (let i = 0; i < N; i++) {
    svcKey(i).copy(keys, i * KS);
    svcVal(i + 1, i % 7).copy(values, i * VS);
  }
  m.updateBatch(keys, values, N);
  assert.deepEqual(m.lookup(svcKey(12345)), svcVal(12346, 12345 % 7));

  const all = m.lookupBatch();
  assert.equal(all.count, N);
  assert.equal(all.keys.length, N * KS);
  assert.equal(all.values.length, N * VS);
  const seen = new Set<number>();
  for (let i = 0; i < all.count; i++) {
    const k = all.keys.subarray(i * KS, i * KS + KS);
    const idx = svcKeyIndex(k);
    assert.deepEqual(all.values.subarray(i * VS, i * VS + VS), svcVal(idx + 1, idx % 7));
    seen.add(idx);
  }
  assert.equal(seen.size, N);
  // With room for max_entries from the start (one call), or for 1 (grown as the kernel needs): the same records.
  for (const room of [m.maxEntries, 1]) {
    const again = m.lookupBatch(room);
    assert.equal(again.count, N, `room ${room}`);
    assert.ok(again.keys.equals(all.keys) && again.values.equals(all.values), `room ${room}: the same records in the same order`);
  }

  assert.equal(m.deleteBatch(keys, N), N);
  assert.equal(m.lookupBatch().count, 0);
  assert.equal(m.lookup(svcKey(0)), null);
});

test('batch: deleteBatch with missing keys', () => {
  const m = obj.map('kpr_backend');
  const keys = Buffer.concat([u32(1), u32(2), u32(3), u32(4)]);
  const values = Buffer.alloc(4 * BACKEND.size, 1);
  m.updateBatch(keys.subarray(0, 8), values, 2); // only 1 and 2 exist
  assert.throws(
    () => m.deleteBatch(keys, 4),
    (e: unknown) => e instanceof KprBpfError && e.code === 'ENOENT' && e.op === 'map delete batch' && e.processed === 2,
  );
  m.updateBatch(keys.subarray(0, 8), values, 2);
  const toDelete = Buffer.concat([u32(1), u32(3), u32(2), u32(4)]);
  assert.equal(m.deleteBatch(toDelete, 4, { ignoreMissing: true }), 2);
  assert.equal(m.lookupBatch().count, 0);
});

test('batch sizes are validated before any native call', () => {
  const m = obj.map('kpr_svc');
  assert.throws(() => m.updateBatch(Buffer.alloc(KS * 2), Buffer.alloc(VS * 3), 3), new RegExp(`keys buffer is ${KS * 2} bytes, 3 keys need ${KS * 3}`));
  assert.throws(() => m.updateBatch(Buffer.alloc(KS * 3), Buffer.alloc(VS), 3), new RegExp(`values buffer is ${VS} bytes, 3 values need ${VS * 3}`));
  assert.throws(() => m.deleteBatch(Buffer.alloc(11), 1), /keys buffer is 11 bytes/);
  m.updateBatch(Buffer.alloc(0), Buffer.alloc(0), 0); // no-op
});

test('per-CPU stats map: read, write, sum', () => {
  const m = obj.map('kpr_stats');
  const cpus = possibleCpus();
  assert.equal(m.possibleCpus(), cpus);
  const v = m.lookup(u32(0));
  assert.ok(v);
  assert.equal(v.length, 8 * cpus);
  assert.equal(sumPerCpuU64(v), 0n);

  const w = Buffer.alloc(8 * cpus);
  for (let c = 0; c < cpus; c++) w.writeBigUInt64LE(BigInt(c + 1), c * 8);
  m.update(u32(5), w);
  assert.equal(sumPerCpuU64(m.lookup(u32(5))!), BigInt((cpus * (cpus + 1)) / 2));

  const all = m.lookupBatch();
  assert.equal(all.count, 32, 'an array has every index');
  assert.equal(all.values.length, 32 * 8 * cpus);
  const idx5 = [...Array(all.count).keys()].find((i) => all.keys.readUInt32LE(i * 4) === 5)!;
  assert.equal(sumPerCpuU64(all.values.subarray(idx5 * 8 * cpus, (idx5 + 1) * 8 * cpus)), BigInt((cpus * (cpus + 1)) / 2));

  // updateBatch zeroes slots whatever the kernel (per-CPU arrays have no batch update before 5.13: one by one there).
  const keys = Buffer.concat([u32(5), u32(6)]);
  m.update(u32(6), w);
  m.updateBatch(keys, Buffer.alloc(2 * 8 * cpus), 2);
  assert.equal(sumPerCpuU64(m.lookup(u32(5))!), 0n);
  assert.equal(sumPerCpuU64(m.lookup(u32(6))!), 0n);
  assert.throws(() => m.updateBatch(Buffer.concat([u32(7), u32(32)]), Buffer.alloc(2 * 8 * cpus), 2), /map update.*(E2BIG|ENOENT|EINVAL)/);

  assert.equal(m.lookup(u32(32)), null, 'out-of-range array index');
  assert.throws(() => m.update(u32(0), Buffer.alloc(8)), new RegExp(`value is 8 bytes, map needs ${8 * cpus}`));
});

test('errors: wrong sizes, full map, missing pins', () => {
  const svc = obj.map('kpr_svc');
  assert.throws(
    () => svc.update(Buffer.alloc(3), Buffer.alloc(VS)),
    (e: unknown) =>
      e instanceof KprBpfError &&
      e.op === 'map update' &&
      e.map === 'kpr_svc' &&
      e.code === 'EINVAL' &&
      new RegExp(`^bpf map update kpr_svc: EINVAL \\(errno 22\\): key is 3 bytes, map needs ${KS}$`).test(e.message),
  );
  assert.throws(
    () => svc.update(Buffer.alloc(KS), Buffer.alloc(VS + 1)),
    new RegExp(`bpf map update kpr_svc: EINVAL \\(errno 22\\): value is ${VS + 1} bytes`),
  );
  assert.throws(() => svc.lookup(Buffer.alloc(4)), /bpf map lookup kpr_svc: EINVAL/);
  assert.throws(() => svc.delete(Buffer.alloc(4)), /bpf map delete kpr_svc: EINVAL/);

  const small = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 2, 'kpr_small');
  try {
    small.update(u32(1), u32(1));
    small.update(u32(2), u32(2));
    assert.throws(
      () => small.update(u32(3), u32(3)),
      (e: unknown) => e instanceof KprBpfError && e.errno === 7 && /^bpf map update kpr_small: E2BIG \(errno 7\)/.test(e.message),
    );
    const keys = Buffer.concat([u32(3), u32(4)]);
    assert.throws(
      () => small.updateBatch(keys, Buffer.alloc(8), 2),
      (e: unknown) => e instanceof KprBpfError && e.code === 'E2BIG' && e.op === 'map update batch' && e.processed === 0,
    );
  } finally {
    small.close();
  }

  const missing = path.join(dir, 'does-not-exist');
  assert.throws(
    () => BpfMap.openPinned(missing),
    (e: unknown) => e instanceof KprBpfError && e.code === 'ENOENT' && e.message.includes(missing) && /no pinned object/.test(e.message),
  );
});

test('batch performance: 200,000 entries in one updateBatch', (t) => {
  const m = obj.map('kpr_svc');
  const N = 200_000;
  const keys = Buffer.alloc(N * KS);
  const values = Buffer.alloc(N * VS);
  for (let i = 0; i < N; i++) {
    keys.writeUInt32LE(i, i * KS);
    values.writeUInt32LE(i, i * VS);
  }
  const t0 = process.hrtime.bigint();
  m.updateBatch(keys, values, N);
  const updateMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const t1 = process.hrtime.bigint();
  const all = m.lookupBatch();
  const lookupMs = Number(process.hrtime.bigint() - t1) / 1e6;
  const t2 = process.hrtime.bigint();
  assert.equal(m.deleteBatch(keys, N), N);
  const deleteMs = Number(process.hrtime.bigint() - t2) / 1e6;
  t.diagnostic(`200k: updateBatch ${updateMs.toFixed(1)} ms, lookupBatch ${lookupMs.toFixed(1)} ms, deleteBatch ${deleteMs.toFixed(1)} ms`);
  assert.equal(all.count, N);
  // The target is 0.2 s for a whole sync; allow slack for loaded test machines.
  assert.ok(updateMs < scaled(1000), `updateBatch of 200k took ${updateMs} ms`);
});
