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
import { BpfObject } from '../../native/index.js';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { AgentMetrics } from '../../agent/metrics/metrics.js';
import { silentLogger } from '../../agent/log.js';
import { liveViolations } from '../unit/support/datapath-state.js';
import { DRIFT_CASES, driftPlans, servedView, sortedDrift } from '../unit/support/drift-cases.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';
import { bpffsTempDir, objPath, requireBpf, rmrf } from './helpers.js';
import { openPinnedMapSet } from '../support/pinned-maps.js';

const quiet = { info() {}, warn() {}, error() {} };

before(() => requireBpf());

/** The object's maps, pinned in a fresh directory and opened again by pin. */
function pinnedMaps(): { maps: BpfDatapathMaps; close(): void } {
  const dir = bpffsTempDir();
  const obj = BpfObject.open(objPath, { pinMapsDir: dir });
  obj.load();
  const pins = openPinnedMapSet(dir);
  return {
    maps: new BpfDatapathMaps(pins.set),
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
    affinityMatches: new Map(m.dumpAffinityMatches().map((a) => [`${a.backendId}|${a.revNatId}`, a])),
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
