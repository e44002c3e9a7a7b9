/**
 * The reconciler over real kernel maps with and without the batch writer
 * thread: the same sync programs the same entries either way, and a queued
 * batch that fails (a full map) fails the sync like a synchronous write
 * would, leaving the kernel in a state a live reader can use and the mirror
 * equal to it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BATCH_WRITER_LIBRARY, BatchWriter, BpfMap, BPF_MAP_TYPE, possibleCpus } from '../../native/index.js';
import { SVC_STAT, type Backend } from '../../agent/maps/layout.js';
import { BpfDatapathMaps, QUEUE_MIN_ENTRIES } from '../../agent/maps/bpf-datapath-maps.js';
import { Reconciler, type PlanSource } from '../../agent/reconcile/reconciler.js';
import { instrumentMapErrors } from '../../agent/metrics/instrument-maps.js';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { liveViolations, programmed } from '../reconcile/support/datapath-state.js';
import { closeMapSet, kernelState, repoRoot, requireBpf, standaloneMapSet } from '../support/bpf-fixtures.js';

const quiet = { info() {}, warn() {}, error() {} };
let writer: BatchWriter;

before(() => {
  requireBpf();
  writer = BatchWriter.open(path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY));
});

after(() => writer?.close());

/** n ClusterIP Services with `per` backends each (distinct ip:port per backend). */
function plans(n: number, per: number): Map<string, PlanFrontend[]> {
  const out = new Map<string, PlanFrontend[]>();
  for (let i = 0; i < n; i++) {
    const backends = [];
    for (let j = 0; j < per; j++) {
      const k = i * per + j;
      backends.push({ address: `198.18.${128 + (k >> 8)}.${k & 0xff}`, port: 8080 });
    }
    const service = `ns/svc-${String(i).padStart(4, '0')}`;
    out.set(service, [
      {
        service,
        portName: 'http',
        type: 'ClusterIP',
        address: `198.19.${1 + (i >> 8)}.${i & 0xff}`,
        port: 80,
        protocol: 'TCP',
        backends,
        trafficPolicy: 'Cluster',
        affinityTimeoutSeconds: 0,
        sourceRanges: [],
      },
    ]);
  }
  return out;
}

function source(p: Map<string, PlanFrontend[]>): PlanSource {
  return { keys: () => p.keys(), get: (k) => p.get(k) };
}

test('a large sync writes the same entries through the writer thread as synchronously', () => {
  // 22,000 service entries and 20,000 backends: several write rounds (the reconciler
  // writes every 16,384 queued entries, reusing its queues), each above QUEUE_MIN_ENTRIES.
  const p = plans(2000, 10);
  assert.ok(20000 / 3 >= QUEUE_MIN_ENTRIES);
  const syncMaps = standaloneMapSet(65536);
  const queuedMaps = standaloneMapSet(65536);
  try {
    const direct = new BpfDatapathMaps(syncMaps);
    const queued = new BpfDatapathMaps({ ...queuedMaps, writer });
    const r1 = new Reconciler(direct, quiet);
    const r2 = new Reconciler(queued, quiet);
    r1.adopt();
    r2.adopt();
    const a = r1.sync(source(p), { full: true });
    const b = r2.sync(source(p), { full: true });
    assert.equal(a.ok, true);
    assert.equal(b.ok, true);
    assert.equal(writer.pending, 0, 'the sync waits for its queued batches');
    assert.deepEqual({ ...b, skipped: [] }, { ...a, skipped: [] });
    const sa = kernelState(direct);
    const sb = kernelState(queued);
    assert.deepEqual(programmed(sb), programmed(sa));
    const want: Record<string, string[]> = {};
    for (const [, [f]] of p) want[`${f.address}:80/TCP`] = f.backends.map((b) => `${b.address}:${b.port}`);
    assert.deepEqual(programmed(sb), want, 'every frontend holds exactly its planned backends, in order');
    assert.deepEqual([...sb.services.entries()].sort(), [...sa.services.entries()].sort());
    assert.deepEqual(
      [...sb.backends.entries()].sort((x, y) => x[0] - y[0]),
      [...sa.backends.entries()].sort((x, y) => x[0] - y[0]),
    );
    assert.deepEqual(liveViolations(sb), []);

    // A small event sync afterwards is written at once (nothing is queued) and lands too.
    const one = new Map([['ns/svc-0007', p.get('ns/svc-0007')!.map((f) => ({ ...f, backends: f.backends.slice(0, 3) }))]]);
    assert.equal(r2.sync(source(one), { full: false }).ok, true);
    assert.equal(programmed(kernelState(queued))['198.19.1.7:80/TCP'].length, 3);
  } finally {
    closeMapSet(syncMaps);
    closeMapSet(queuedMaps);
  }
});

test('a queued batch that fails fails the sync: nothing after it is written, the kernel stays usable, the mirror is re-read', () => {
  const p = plans(300, 10);
  const small = standaloneMapSet(2000); // room for 2,000 of the 3,300 service entries
  const failures: string[] = [];
  try {
    const d = new BpfDatapathMaps({ ...small, writer });
    // Capacities hidden from the reconciler (it would refuse what does not fit: test/reconcile/map-limits.test.ts), so the kernel's E2BIG is what stops it.
    const r = new Reconciler(
      instrumentMapErrors(d, (map, op) => failures.push(`${map} ${op}`)),
      quiet,
      { capacities: { svc: Infinity } },
    );
    r.adopt();
    const res = r.sync(source(p), { full: true });
    assert.equal(res.ok, false);
    assert.match(res.error ?? '', /kpr_svc: E2BIG/);
    assert.deepEqual(failures, ['kpr_svc map update batch'], 'the failure is counted against the map that failed');
    const state = kernelState(d);
    assert.deepEqual(liveViolations(state), []);
    // The slots went first and filled the map: no master (which comes after them) reached the kernel.
    assert.equal([...state.services.values()].filter(([k]) => k.slot === 0).length, 0);
    assert.equal(state.services.size, 2000);
    assert.equal(r.frontendCount, 0, 'the mirror was re-read from the kernel');
    assert.equal(writer.pending, 0);
  } finally {
    closeMapSet(small);
  }
});

test("a frontend's counters restart behind its name in the writer's queue: the names do not wait for the writes queued before them", () => {
  const set = standaloneMapSet(65536);
  const cpus = possibleCpus();
  const stats = BpfMap.create(BPF_MAP_TYPE.PERCPU_ARRAY, 4, SVC_STAT.size, 64, 'kpr_svc_stats');
  try {
    // Counts left in slots 1–3 by a previous owner of those ids.
    const key = (id: number) => {
      const k = Buffer.alloc(4);
      k.writeUInt32LE(id);
      return k;
    };
    const counted = Buffer.alloc(stats.valueStride, 0x11);
    for (const id of [1, 2, 3]) stats.update(key(id), counted);
    const d = new BpfDatapathMaps({ ...set, svcStats: stats, writer });
    // A cold sync's backends, queued on the writer's thread: ~50,000, tens of ms of kernel work, so
    // they are still queued when the names come microseconds later.
    const backends: Array<[number, Backend]> = Array.from({ length: 48 * QUEUE_MIN_ENTRIES }, (_, i) => [
      i + 1,
      { addr: `198.${18 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`, port: 8080, proto: 6, flags: 0 },
    ]);
    d.updateBackends(backends);
    assert.ok(writer.pending > 0, 'the backends are queued');
    // New names for ids 1 and 2: their counters restart; id 3 keeps its owner's counts.
    d.updateSvcMeta([
      [1, { name: 'ns/a', portName: 'http', type: 1, proto: 6 }],
      [2, { name: 'ns/b', portName: 'http', type: 1, proto: 6 }],
    ]);
    assert.ok(writer.pending > 0, 'naming a frontend did not wait for the queued backends');
    d.flush();
    assert.equal(writer.pending, 0);
    const zero = Buffer.alloc(stats.valueStride);
    assert.deepEqual(stats.lookup(key(1)), zero, 'id 1: counters restart on every CPU');
    assert.deepEqual(stats.lookup(key(2)), zero, 'id 2: counters restart');
    assert.deepEqual(stats.lookup(key(3)), counted, 'id 3 not renamed: its counts stay');
    assert.equal(stats.valueStride, cpus * 40, 'one 40-byte kpr_svc_stat per possible CPU');
    assert.equal(d.dumpBackends().length, backends.length, 'the queued backends reached the kernel');
    assert.deepEqual(
      d
        .dumpSvcMeta()
        .map(([id, m]) => [id, m.name])
        .sort(),
      [
        [1, 'ns/a'],
        [2, 'ns/b'],
      ],
    );
  } finally {
    stats.close();
    closeMapSet(set);
  }
});
