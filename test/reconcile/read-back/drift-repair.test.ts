/**
 * Drift repair on real kernel maps: the datapath object's own maps (pinned
 * in a throwaway bpffs directory, opened again through their pins as any
 * other process would), programmed by the reconciler, then changed behind
 * its back. ONE read-back full sync must find each change, count it by map
 * and kind in the metrics, and leave the kernel serving what it served
 * before, with a reader-safe state after every batch call.
 */
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { BpfObject, type BpfMap } from '../../../native/index.js';
import { BpfDatapathMaps, type DatapathMapSet } from '../../../agent/maps/bpf-datapath-maps.js';
import { decodeSrcRangeKey, encodeSrcRangeKey } from '../../../agent/maps/layout.js';
import { Reconciler } from '../../../agent/reconcile/reconciler.js';
import { AgentMetrics } from '../../../agent/metrics/metrics.js';
import { silentLogger } from '../../../agent/log/log.js';
import { liveViolations } from '../support/datapath-state.js';
import { DRIFT_CASES, driftPlans, servedView, sortedDrift } from '../support/drift-cases.js';
import { SLICED, SMALL_MAP_DRIFT_CASES, World, readBack } from '../support/readback-world.js';
import { rng } from '../../support/rng.js';
import { parseProm, valueOf } from '../../metrics/prom-text.js';
import { bpffsTempDir, objPath, requireBpf, rmrf } from '../../support/bpf-fixtures.js';
import { openPinnedMapSet } from '../../support/pinned-maps.js';
import { mapPinPathsIn } from '../../../agent/datapath/pins.js';

const quiet = { info() {}, warn() {}, error() {} };

before(() => requireBpf());

/** The object's maps, pinned in a fresh directory and opened again by pin. */
function pinnedMaps(): { maps: BpfDatapathMaps; set: Omit<DatapathMapSet, 'writer'>; close(): void } {
  const dir = bpffsTempDir();
  const obj = BpfObject.open(objPath, { pinPaths: mapPinPathsIn(dir) });
  obj.load();
  const pins = openPinnedMapSet(dir);
  return {
    maps: new BpfDatapathMaps(pins.set),
    set: pins.set,
    close: () => {
      pins.close();
      obj.close();
      rmrf(dir);
    },
  };
}

/** What a reader of the kernel maps sees, in the state-check shape. */
function kernelState(m: BpfDatapathMaps) {
  const services = new Map(m.dumpServices().map(([k, v]) => [`${k.addr}|${k.port}|${k.slot}|${k.proto}|${k.scope}`, [k, v] as const]));
  return {
    services: services as never,
    backends: new Map(m.dumpBackends()),
    vips: new Map(m.dumpVips()),
    affinityMatches: new Map(m.dumpAffinityMatches().map((a) => [`${a.backendId}|${a.frontendId}`, a])),
    svcMeta: new Map(m.dumpSvcMeta()),
  };
}

/** Every batch call of `maps` checks, just before it runs, that the kernel state is reader-safe (beyond what was already broken). */
function checkedBetweenCalls(maps: BpfDatapathMaps, baseline: Set<string>, seen: string[], calls: { n: number; decodedDumps: number }): BpfDatapathMaps {
  return new Proxy(maps, {
    get(target, prop, recv) {
      const v = Reflect.get(target, prop, recv);
      if (prop === 'dumpServices' || prop === 'dumpBackends') calls.decodedDumps++;
      if (typeof v !== 'function' || !/^(update|delete)/.test(String(prop))) return typeof v === 'function' ? v.bind(target) : v;
      return (...args: unknown[]) => {
        calls.n++;
        for (const e of liveViolations(kernelState(target))) if (!baseline.has(e)) seen.push(`before ${String(prop)}: ${e}`);
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

for (const c of DRIFT_CASES) {
  test(`kernel maps: ${c.name} is repaired by one periodic read-back sync, and counted`, async () => {
    const { maps, close } = pinnedMaps();
    try {
      const seen: string[] = [];
      const baseline = new Set<string>();
      const calls = { n: 0, decodedDumps: 0 };
      const r = new Reconciler(checkedBetweenCalls(maps, baseline, seen, calls), quiet);
      const first = r.sync(driftPlans(), { full: true });
      assert.equal(first.ok, true, first.error);
      const want = servedView(maps);

      c.corrupt(maps); // straight into the kernel, behind the reconciler
      assert.notDeepEqual(servedView(maps), want, 'the corruption changed what the kernel serves');
      for (const e of liveViolations(kernelState(maps))) baseline.add(e);
      seen.length = 0;
      calls.n = 0;

      const started = performance.now();
      const res = r.sync(driftPlans(), { full: true, readBack: true });
      const ms = performance.now() - started;
      assert.equal(res.ok, true, res.error);
      assert.deepEqual(sortedDrift(res.drift), sortedDrift(c.drift));
      assert.ok(calls.n > 0, 'the repair wrote through the checked maps');
      assert.deepEqual(seen, [], 'no new reader-visible inconsistency between the repair calls');
      assert.deepEqual(liveViolations(kernelState(maps)), [], 'reader-safe after the repair');
      assert.deepEqual(servedView(maps), want, 'the kernel serves what it did before the corruption');

      const metrics = new AgentMetrics({ bpffsDir: '/nonexistent/kpr', log: silentLogger });
      metrics.syncDone({ trigger: 'periodic', full: true, services: 2, durationMs: ms, result: res });
      calls.decodedDumps = 0;
      const again = r.sync(driftPlans(), { full: true, readBack: true });
      assert.deepEqual(again.drift, [], 'the next read-back finds nothing');
      assert.equal(calls.decodedDumps, 0, 'a read-back without drift compares fingerprints of the raw dumps, decoding neither large map');
      metrics.syncDone({ trigger: 'periodic', full: true, services: 2, durationMs: 1, result: again });
      const s = parseProm(await metrics.text());
      assert.equal(valueOf(s, 'kpr_drift_repair_syncs_total'), 1);
      for (const d of c.drift) assert.equal(valueOf(s, 'kpr_drift_repaired_entries_total', { map: d.map, kind: d.kind }), d.entries, `${d.map} ${d.kind}`);
    } finally {
      close();
    }
  });
}

/** A kernel batch walk: the keys no one touches come back once each, while others are inserted and deleted between batches. */
test('kernel maps: lookupBatchCursor returns each untouched entry exactly once with writes between its batches', () => {
  const { set, close } = pinnedMaps();
  try {
    const be = set.backend as BpfMap; // kpr_backend: a BPF_MAP_TYPE_HASH with u32 keys
    const key = (id: number) => {
      const k = Buffer.alloc(4);
      k.writeUInt32LE(id, 0);
      return k;
    };
    const val = Buffer.alloc(be.valueStride);
    for (let id = 1; id <= 3000; id++) be.update(key(id), val);
    const seen = new Map<number, number>();
    const cursor = be.lookupBatchCursor(64);
    let batches = 0;
    let fresh = 100_000;
    for (let b = cursor.next(); b; b = cursor.next()) {
      batches++;
      for (let i = 0; i < b.count; i++) {
        const id = b.keys.readUInt32LE(i * 4);
        seen.set(id, (seen.get(id) ?? 0) + 1);
      }
      be.delete(key(1500 + batches)); // ids 1501.. are deleted as the walk goes on
      for (let j = 0; j < 5; j++) be.update(key(fresh++), val);
    }
    assert.ok(batches > 20, `${batches} batches`);
    for (let id = 1; id <= 1500; id++) assert.equal(seen.get(id), 1, `untouched id ${id}`);
    for (const [id, n] of seen) assert.equal(n, 1, `id ${id} returned ${n} times`);
  } finally {
    close();
  }
});

/**
 * The LPM trie's walk by key (kpr_src_range has no batch lookup): ranges no
 * one touches come back once each while others are inserted and deleted
 * between calls; when the key the walk would resume from is deleted, it says so.
 */
test('kernel maps: keyWalkCursor on an LPM trie returns each untouched key exactly once with writes between its calls, and asks for a restart when its resume key goes', () => {
  const { maps, set, close } = pinnedMaps();
  try {
    const trie = set.srcRange as BpfMap;
    const range = (rn: number, i: number) => ({ frontendId: rn, cidr: `198.${18 + (i & 1)}.${(i >> 8) & 255}.${i & 255}/32` });
    const id = (k: Buffer) => {
      const r = decodeSrcRangeKey(k);
      return `${r.frontendId}|${r.cidr}`;
    };
    const stable = Array.from({ length: 600 }, (_, i) => range(7, i)); // never touched
    const churn = Array.from({ length: 600 }, (_, i) => range(9, i));
    maps.updateSrcRanges([...stable, ...churn]);
    const seen = new Map<string, number>();
    const cursor = trie.keyWalkCursor(32);
    let calls = 0;
    let fresh = 1000;
    let last: Buffer | undefined;
    for (let b = cursor.next(); b; b = cursor.next()) {
      calls++;
      assert.equal(b.restart, undefined, 'no restart while the resume key stays');
      for (let i = 0; i < b.count; i++) {
        const k = b.keys.subarray(i * trie.keySize, (i + 1) * trie.keySize);
        seen.set(id(k), (seen.get(id(k)) ?? 0) + 1);
        last = Buffer.from(k);
      }
      // Between calls: delete a range of the other frontendId that is not where the walk resumes, insert new ones.
      const gone = churn[(calls * 7) % churn.length];
      if (last && id(last) !== `${gone.frontendId}|${gone.cidr}`) maps.deleteSrcRanges([gone].filter((g) => trie.lookup(encodeSrcRangeKey(g))));
      maps.updateSrcRanges([range(11, fresh++), range(5, fresh++)]);
    }
    assert.ok(calls > 20, `${calls} calls`);
    for (const r of stable) assert.equal(seen.get(`${r.frontendId}|${r.cidr}`), 1, `untouched ${r.cidr}`);
    for (const [k, n] of seen) assert.equal(n, 1, `${k} returned ${n} times`);

    // The key the walk resumes from deleted: the next call asks for a restart.
    const again = trie.keyWalkCursor(4);
    const first = again.next()!;
    assert.equal(first.count, 4);
    trie.delete(Buffer.from(first.keys.subarray(3 * trie.keySize, 4 * trie.keySize)));
    assert.equal(again.next()!.restart, true);
  } finally {
    close();
  }
});

test('kernel maps: the sliced read-back with event syncs writing between its batches finds no false drift, and finds real drift', () => {
  const { maps, close } = pinnedMaps();
  try {
    const r = new Reconciler(maps, quiet, { readBackBatch: 4 });
    const world = new World(rng(7));
    assert.equal(r.sync(world.plans(), { full: true }).ok, true);
    for (const map of SLICED) {
      const { verdict, slices } = readBack(r, map, () => world.mutate(r));
      assert.equal(verdict, 'match', `${map}: no false drift`);
      assert.ok(slices > 5, `${map} read back in ${slices} slices`);
    }
    assert.deepEqual(r.repairDrift().drift, [], 'the decoded compare agrees');
    assert.ok(world.done.add + world.done.remove + world.done.change > 10);

    // Real drift on keys no sync touches, injected straight into the kernel: found despite the syncs between batches.
    const changed = DRIFT_CASES.find((c) => c.name === 'a slot re-pointed at a UDP backend')!;
    const port = DRIFT_CASES.find((c) => c.name === 'a backend port changed to 9999')!;
    const vip = SMALL_MAP_DRIFT_CASES.find((c) => c.name === "the kpr_vip entry's flags cleared")!;
    const meta = SMALL_MAP_DRIFT_CASES.find((c) => c.name === 'a kpr_svc_meta port name changed')!;
    const pair = SMALL_MAP_DRIFT_CASES.find((c) => c.name === 'a bogus kpr_aff_match pair inserted')!;
    const range = DRIFT_CASES.find((c) => c.name === 'a source-range entry added')!;
    for (const c of [changed, port, vip, meta, pair, range]) c.corrupt(maps);
    for (const map of SLICED) assert.equal(readBack(r, map, () => world.mutate(r)).verdict, 'drift', map);
    const repair = r.repairDrift();
    assert.equal(repair.ok, true, repair.error);
    assert.deepEqual(sortedDrift(repair.drift), sortedDrift([...changed.drift, ...port.drift, ...vip.drift, ...meta.drift, ...pair.drift, ...range.drift]));
    assert.deepEqual(liveViolations(kernelState(maps)), [], 'reader-safe after the repair');
    for (const map of SLICED) assert.equal(readBack(r, map, () => world.mutate(r)).verdict, 'match', `${map} after the repair`);
  } finally {
    close();
  }
});
