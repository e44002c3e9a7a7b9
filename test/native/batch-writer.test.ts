/**
 * BatchWriter (native/batch_writer.c through koffi) on real kernel maps:
 * queued batches land in submission order, a failure is reported with the
 * map's name and stops every later batch, and the writer carries on after.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BATCH_WRITER_LIBRARY, BPF_MAP_TYPE, BPF_NOEXIST, BatchWriter, BpfMap, KprBpfError } from '../../native/index.js';
import { repoRoot, requireBpf, u32 } from '../support/bpf-fixtures.js';

const libPath = path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY);
let writer: BatchWriter;

before(() => {
  requireBpf();
  writer = BatchWriter.open(libPath);
});

after(() => writer?.close());

/** count u32 keys from `first`, each mapped to key * 10. */
function batch(first: number, count: number): { keys: Buffer; values: Buffer } {
  const keys = Buffer.alloc(count * 4);
  const values = Buffer.alloc(count * 4);
  for (let i = 0; i < count; i++) {
    keys.writeUInt32LE(first + i, i * 4);
    values.writeUInt32LE((first + i) * 10, i * 4);
  }
  return { keys, values };
}

function valueOf(map: BpfMap, key: number): number | null {
  const v = map.lookup(u32(key));
  return v ? v.readUInt32LE(0) : null;
}

test('queued batches reach the kernel in order, and the caller may reuse its buffers at once', () => {
  const map = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 100_000, 'kpr_wr_order');
  try {
    const { keys, values } = batch(0, 50_000);
    map.queueUpdateBatch(writer, keys, values, 50_000);
    // Same keys again with other values, from the same (overwritten) buffers: the later batch wins.
    for (let i = 0; i < 50_000; i++) values.writeUInt32LE(7, i * 4);
    map.queueUpdateBatch(writer, keys, values, 50_000);
    assert.equal(writer.pending, 2);
    writer.wait();
    assert.equal(writer.pending, 0);
    assert.equal(map.lookupBatch().count, 50_000);
    assert.equal(valueOf(map, 0), 7);
    assert.equal(valueOf(map, 49_999), 7);
  } finally {
    map.close();
  }
});

test('a failed batch is thrown by wait() with its map and progress, and later batches are not written', () => {
  const a = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 8, 'kpr_wr_fail');
  const b = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 100, 'kpr_wr_after');
  try {
    const before = batch(1000, 5);
    b.queueUpdateBatch(writer, before.keys, before.values, 5);
    const first = batch(0, 10); // 8 fit: the kernel stops at the 9th with E2BIG
    a.queueUpdateBatch(writer, first.keys, first.values, 10);
    const later = batch(0, 10);
    b.queueUpdateBatch(writer, later.keys, later.values, 10);
    assert.throws(
      () => writer.wait(),
      (err: unknown) => {
        assert.ok(err instanceof KprBpfError);
        assert.equal(err.code, 'E2BIG');
        assert.equal(err.map, 'kpr_wr_fail');
        assert.equal(err.op, 'map update batch');
        assert.equal(err.processed, 8);
        assert.match(err.message, /map is full \(max_entries 8\); 8 element\(s\) processed; 1 later batch\(es\) not written/);
        return true;
      },
    );
    assert.equal(valueOf(a, 7), 70); // the prefix before the failure is written
    assert.equal(valueOf(a, 8), null);
    assert.equal(b.lookupBatch().count, 5, 'the batch before the failure is written, the one after it is not');
    assert.equal(valueOf(b, 0), null);

    // The writer is usable again.
    b.queueUpdateBatch(writer, later.keys, later.values, 10);
    writer.wait();
    assert.equal(b.lookupBatch().count, 15);
  } finally {
    a.close();
    b.close();
  }
});

test('a map type the kernel cannot batch-update (a devmap; 5.10: per-CPU arrays) is written one element at a time, in order, and its failure reported at its element', () => {
  // Devmap: key an index, value an ifindex (1: loopback, which every namespace has; 0x7fffffff: none).
  const dev = BpfMap.create(BPF_MAP_TYPE.DEVMAP, 4, 4, 16, 'kpr_wr_devmap');
  const after = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 100, 'kpr_wr_after_dev');
  const entries = (ifindexes: number[]) => {
    const keys = Buffer.alloc(ifindexes.length * 4);
    const values = Buffer.alloc(ifindexes.length * 4);
    ifindexes.forEach((ifindex, i) => {
      keys.writeUInt32LE(i, i * 4);
      values.writeUInt32LE(ifindex, i * 4);
    });
    return { keys, values };
  };
  try {
    const ok = entries([1, 1, 1]);
    dev.queueUpdateBatch(writer, ok.keys, ok.values, 3);
    const next = batch(0, 4);
    after.queueUpdateBatch(writer, next.keys, next.values, 4);
    writer.wait();
    for (const i of [0, 1, 2]) assert.equal(valueOf(dev, i), 1, `devmap slot ${i}`);
    assert.equal(after.lookupBatch().count, 4, 'the job after it ran');

    const bad = entries([1, 1, 0x7fffffff, 1]); // no such interface at the third element
    dev.queueUpdateBatch(writer, bad.keys, bad.values, 4);
    assert.throws(
      () => writer.wait(),
      (err: unknown) => {
        assert.ok(err instanceof KprBpfError);
        assert.equal(err.map, 'kpr_wr_devmap');
        assert.equal(err.processed, 2, 'the elements before the failing one were written');
        return true;
      },
    );
  } finally {
    dev.close();
    after.close();
  }
});

test('update flags reach the kernel (the batch call accepts only BPF_F_LOCK: anything else is EINVAL)', () => {
  const map = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 100, 'kpr_wr_flags');
  try {
    const { keys, values } = batch(0, 3);
    map.queueUpdateBatch(writer, keys, values, 3, BPF_NOEXIST);
    assert.throws(
      () => writer.wait(),
      (err: unknown) => err instanceof KprBpfError && err.code === 'EINVAL' && err.map === 'kpr_wr_flags',
    );
    assert.throws(
      () => map.updateBatch(keys, values, 3, BPF_NOEXIST),
      (err: unknown) => err instanceof KprBpfError && err.code === 'EINVAL',
    );
    assert.equal(map.lookupBatch().count, 0);
  } finally {
    map.close();
  }
});

test('close() runs what is queued; a closed writer refuses work; a missing library is a clear error', () => {
  const map = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 100, 'kpr_wr_close');
  const w = BatchWriter.open(libPath);
  try {
    const { keys, values } = batch(100, 30);
    map.queueUpdateBatch(w, keys, values, 30);
    w.close();
    assert.equal(map.lookupBatch().count, 30);
    assert.throws(() => map.queueUpdateBatch(w, keys, values, 30), /writer is closed/);
  } finally {
    w.close();
    map.close();
  }
  assert.throws(() => BatchWriter.open('/nonexistent/libkpr_batch_writer.so'), /not found \(make build compiles it\)/);
});
