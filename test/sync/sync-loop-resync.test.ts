/**
 * The sliced periodic resync, over the real planner and reconciler with
 * in-memory maps: event syncs run between its slices; a Service deleted
 * meanwhile is removed; drift of each kind is repaired within one resync,
 * with the live-reader invariant checked after every entry written; a slice
 * that fails ends the resync and its retry leaves the maps right.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SyncLoop, type SyncReport } from '../../agent/sync/sync-loop.js';
import { FakeCluster } from './support/fake-cluster.js';
import { READ_BACK_MAPS, Reconciler, type SyncResult } from '../../agent/reconcile/reconciler.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { IPPROTO, SCOPE } from '../../agent/maps/layout.js';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { silentLogger } from '../../agent/log/log.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';
import { copyState, replayViolations, strictViolations } from '../reconcile/support/datapath-state.js';
import { DRIFT_CASES, driftPlans, servedView, sortedDrift } from '../reconcile/support/drift-cases.js';
import { World } from '../reconcile/support/readback-world.js';
import { rng } from '../support/rng.js';
import { quiet } from '../reconcile/support/reconcile-harness.js';

const N = 12;
const key = (i: number) => `a/s${String(i).padStart(2, '0')}`;
const vip = (i: number) => `198.19.1.${i + 1}`;
const TCP = [{ name: 'http', port: 8080, protocol: 'TCP' }];
const webSlice = (k: string, ips: string[]) => slice(`${k}-1`, { ports: TCP, endpoints: ips.map((ip) => ep(ip)) });

function cluster(): FakeCluster {
  const c = new FakeCluster();
  for (let i = 0; i < N; i++) {
    c.svcs.set(key(i), service(key(i), { clusterIP: vip(i), ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    c.slices.set(key(i), [webSlice(key(i), [`198.18.1.${i + 1}`, `198.18.2.${i + 1}`])]);
  }
  return c;
}

/** The backends (addr:port) the maps serve for a frontend, in slot order; undefined without a master. */
function served(maps: MemoryDatapathMaps, addr: string, port = 80): string[] | undefined {
  const entries = [...maps.services.values()];
  const master = entries.find(([k]) => k.addr === addr && k.port === port && k.slot === 0 && k.scope === SCOPE.EXTERNAL);
  if (!master) return undefined;
  const out: string[] = [];
  for (let s = 1; s <= master[1].count; s++) {
    const e = entries.find(([k]) => k.addr === addr && k.port === port && k.slot === s && k.scope === SCOPE.EXTERNAL);
    const b = e && maps.backends.get(e[1].backendId);
    out.push(b ? `${b.addr}:${b.port}` : '<missing>');
  }
  return out;
}

/** A loop with a short period and one-Service slices; `onChunk(n)` runs before the nth chunk sync of a resync (1-based). */
function setup(c: FakeCluster, onChunk?: (n: number, maps: MemoryDatapathMaps) => void) {
  const maps = new MemoryDatapathMaps();
  const reconciler = new Reconciler(maps, silentLogger);
  const sync = reconciler.sync.bind(reconciler);
  let chunks = 0;
  reconciler.sync = (plans, opts) => {
    if (!opts.full && !opts.sweep && [...plans.keys()].length > 0 && resyncing) onChunk?.(++chunks, maps);
    return sync(plans, opts);
  };
  const reports: SyncReport[] = [];
  /** Set between a periodic resync's first slice and its report. */
  let resyncing = false;
  const loop = new SyncLoop(c, reconciler, {
    nodeName: 'node-1',
    syncPeriodMs: 40,
    minSyncPeriodMs: 0,
    resyncChunk: 1,
    resyncSliceMs: 0,
    log: silentLogger,
    onSync: (r) => {
      reports.push(r);
      if (r.full) resyncing = false;
    },
  });
  const origRead = reconciler.readBackMatches.bind(reconciler);
  reconciler.readBackMatches = (m) => {
    resyncing = true;
    chunks = 0;
    return origRead(m);
  };
  const until = async (what: string, cond: () => boolean) => {
    const deadline = Date.now() + 5000;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  return { maps, reconciler, loop, reports, until };
}

describe('sliced periodic resync', () => {
  it('a change queued during a resync is synced between its slices, before the resync ends', async () => {
    const c = cluster();
    let changedAt = -1;
    const { maps, loop, reports, until } = setup(c, (n) => {
      if (n !== 3 || changedAt >= 0) return;
      // As a watch event would: arrives while the resync runs, between two slices.
      setImmediate(() => {
        c.slices.set(key(10), [webSlice(key(10), ['198.18.9.9'])]);
        changedAt = reports.length;
        loop.serviceChanged(key(10));
      });
    });
    assert.equal(loop.start().result.ok, true);
    await until('the resync with the change', () => reports.some((r, i) => r.trigger === 'periodic' && i > changedAt && changedAt >= 0));
    loop.stop();
    const ev = reports.findIndex((r, i) => i >= changedAt && r.trigger === 'event');
    const periodic = reports.findIndex((r, i) => i >= changedAt && r.trigger === 'periodic');
    assert.ok(ev >= 0 && ev < periodic, `the event sync (#${ev}) reported before the resync it interrupted (#${periodic})`);
    const servedAtEvent = served(maps, vip(10));
    assert.deepEqual(servedAtEvent, ['198.18.9.9:8080']);
    const rs = reports[periodic];
    assert.equal(rs.full, true);
    assert.equal(rs.result.ok, true);
    assert.equal(rs.services, N);
    assert.ok((rs.slices ?? 0) >= N + READ_BACK_MAPS.length + 2, `sliced: ${rs.slices} slices`);
    assert.ok(rs.busyMs! <= rs.durationMs + 1e-6);
    assert.equal(reports[ev].full, false);
  });

  it('a Service deleted mid-resync is removed: before its chunk (no event needed) and after it (by its event)', async () => {
    const c = cluster();
    let done = false;
    const { maps, loop, reports, until } = setup(c, (n) => {
      if (n !== 4 || done) return;
      done = true;
      setImmediate(() => {
        c.svcs.delete(key(1)); // its chunk already ran: its event removes it
        c.slices.delete(key(1));
        loop.serviceChanged(key(1));
        c.svcs.delete(key(9)); // its chunk is still to come: no event delivered yet
        c.slices.delete(key(9));
      });
    });
    assert.equal(loop.start().result.ok, true);
    assert.ok(served(maps, vip(1)) && served(maps, vip(9)));
    await until('the resync', () => done && reports.some((r) => r.trigger === 'periodic'));
    loop.stop();
    assert.equal(served(maps, vip(1)), undefined);
    assert.equal(served(maps, vip(9)), undefined);
    assert.equal(maps.vips.has(vip(1)), false);
    assert.equal(maps.vips.has(vip(9)), false);
    assert.deepEqual(served(maps, vip(2)), ['198.18.1.3:8080', '198.18.2.3:8080']);
    assert.deepEqual(strictViolations(copyState(maps)), []);
  });

  it("drift found by the loop's resync (a bogus frontend inserted, a master deleted) is repaired and reported once", async () => {
    const c = cluster();
    const { maps, loop, reports, until } = setup(c);
    assert.equal(loop.start().result.ok, true);
    const want = servedView(maps);
    const m0 = [...maps.services.values()].find(([k]) => k.addr === vip(5) && k.slot === 0)![0];
    maps.deleteServices([m0]);
    const someBackend = [...maps.backends.keys()][0];
    const bogus = { addr: '198.19.9.9', port: 80, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL };
    maps.updateServices([
      [
        { ...bogus, slot: 1 },
        { backendId: someBackend, count: 0, frontendId: 0, flags: 0 },
      ],
      [bogus, { backendId: 0, count: 1, frontendId: 4000, flags: 0 }],
    ]);
    await until('a resync', () => reports.some((r) => r.trigger === 'periodic'));
    loop.stop();
    const rs = reports.find((r) => r.trigger === 'periodic')!;
    assert.equal(rs.result.ok, true, rs.result.error);
    assert.equal(rs.result.readBackDecoded, true);
    assert.deepEqual(sortedDrift(rs.result.drift), [
      { map: 'kpr_svc', kind: 'extra', entries: 2 },
      { map: 'kpr_svc', kind: 'missing', entries: 1 },
    ]);
    assert.deepEqual(servedView(maps), want);
    const next = reports.filter((r) => r.trigger === 'periodic')[1];
    if (next) assert.deepEqual(next.result.drift, [], 'the next resync finds nothing');
  });

  it('a chunk that fails ends the resync as a failed sync; its retry (a new resync) leaves the maps right', async () => {
    const c = cluster();
    let failed = false;
    const { maps, loop, reports, until } = setup(c, (n, m) => {
      if (n !== 5 || failed) return;
      failed = true;
      c.slices.set(key(4), [webSlice(key(4), ['198.18.7.7'])]); // this chunk's Service changed (its event missed)
      m.failNextCall();
    });
    assert.equal(loop.start().result.ok, true);
    await until('a failed resync and a successful one after it', () => {
      const i = reports.findIndex((r) => r.full && !r.result.ok);
      return i >= 0 && reports.slice(i + 1).some((r) => r.full && r.result.ok);
    });
    loop.stop();
    const bad = reports.find((r) => r.full && !r.result.ok)!;
    assert.equal(bad.trigger, 'periodic');
    const retry = reports.find((r, i) => i > reports.indexOf(bad) && r.full && r.result.ok)!;
    assert.equal(retry.trigger, 'retry');
    assert.deepEqual(served(maps, vip(4)), ['198.18.7.7:8080']);
    assert.deepEqual(strictViolations(copyState(maps)), []);
    for (let i = 0; i < N; i++) if (i !== 4) assert.equal(served(maps, vip(i))?.length, 2);
  });
});

/**
 * A sliced resync as the loop runs it, step by step on the reconciler, the
 * live-reader replay checked after every entry of every step.
 */
function slicedResync(maps: MemoryDatapathMaps, r: Reconciler, p: Map<string, PlanFrontend[]>): SyncResult[] {
  const out: SyncResult[] = [];
  const checked = (f: () => SyncResult) => {
    const before = copyState(maps);
    const from = maps.ops.length;
    const res = f();
    assert.deepEqual(replayViolations(before, maps.ops.slice(from)), [], 'live invariant during the step');
    out.push(res);
    return res;
  };
  for (const m of READ_BACK_MAPS) {
    const v = readBack(r, m);
    if (v === 'drift') {
      checked(() => r.repairDrift());
      break;
    }
  }
  const keys = [...new Set([...p.keys(), ...r.desiredServices()])].sort();
  for (const k of keys) checked(() => r.sync(new Map([[k, p.get(k) ?? []]]), { full: false }));
  while (!r.sweepScan());
  checked(() => r.sync(new Map(), { full: false, sweep: 'scanned' }));
  return out;
}

/** A map's read-back, step after step until it is decided. */
function readBack(r: Reconciler, map: string): string {
  let v: string;
  do v = r.readBackMatches(map);
  while (v === 'pending');
  return v;
}

describe('sliced resync on the reconciler (in-memory maps)', () => {
  it('with no drift: every map matches and nothing is written', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    assert.equal(r.sync(driftPlans(), { full: true }).ok, true);
    for (const m of READ_BACK_MAPS) assert.equal(readBack(r, m), 'match', m);
    const calls = maps.calls.length;
    slicedResync(maps, r, driftPlans());
    assert.equal(maps.calls.length, calls, 'no map write');
  });

  for (const c of DRIFT_CASES) {
    it(`${c.name}: found by its map's step, repaired within the resync`, () => {
      const maps = new MemoryDatapathMaps();
      const r = new Reconciler(maps, quiet);
      assert.equal(r.sync(driftPlans(), { full: true }).ok, true);
      const want = servedView(maps);
      c.corrupt(maps);
      const steps = slicedResync(maps, r, driftPlans());
      assert.ok(steps.every((s) => s.ok));
      assert.deepEqual(sortedDrift(steps.flatMap((s) => s.drift)), sortedDrift(c.drift));
      assert.deepEqual(servedView(maps), want);
      assert.deepEqual(strictViolations(copyState(maps)), []);
      for (const m of READ_BACK_MAPS) assert.equal(readBack(r, m), 'match', `${m} after the repair`);
    });
  }

  it('a frontend no Service claims (adopted from an earlier run) goes at the sweep, not before', () => {
    const maps = new MemoryDatapathMaps();
    const first = new Reconciler(maps, quiet);
    const p = driftPlans();
    first.sync(p, { full: true });
    const only = new Map([...p].filter(([k]) => k === 'e2e/web'));
    const r2 = new Reconciler(maps, quiet);
    r2.adopt();
    r2.sync(only, { full: false });
    assert.equal(
      [...maps.services.keys()].some((k) => k.includes('198.18.200.1')),
      true,
      'an incremental sync keeps an adopted frontend',
    );
    slicedResync(maps, r2, only);
    assert.equal(
      [...maps.services.keys()].some((k) => k.includes('198.18.200.1')),
      false,
      'the sweep removes it',
    );
    assert.deepEqual(strictViolations(copyState(maps)), []);
  });
  it('the sweep walked a batch at a time with event syncs between: an unclaimed frontend goes, one claimed before the last step stays', () => {
    const maps = new MemoryDatapathMaps();
    const world = new World(rng(5));
    assert.equal(new Reconciler(maps, quiet).sync(world.plans(), { full: true }).ok, true);
    // A new agent adopts the maps; only the fillers are claimed: e2e/lb and e2e/web are adopted, unclaimed.
    const r = new Reconciler(maps, quiet, { sweepScanBatch: 1 });
    r.adopt();
    const fillersOnly = () => new Map([...world.plans()].filter(([k]) => k.startsWith('f/')));
    assert.equal(r.sync(fillersOnly(), { full: false }).ok, true);
    let steps = 0;
    while (!r.sweepScan()) {
      if (++steps % 3 === 0) world.mutate(r); // event syncs between the walk's batches
      assert.ok(steps < 100_000);
    }
    assert.ok(steps > 50, `${steps} steps`);
    // Claimed after the walk found it unclaimed, before the sweep's sync: it stays.
    const web = driftPlans().get('e2e/web')!;
    assert.equal(r.sync(new Map([['e2e/web', web]]), { full: false }).ok, true);
    const before = copyState(maps);
    const from = maps.ops.length;
    const res = r.sync(new Map(), { full: false, sweep: 'scanned' });
    assert.equal(res.ok, true, res.error);
    assert.deepEqual(replayViolations(before, maps.ops.slice(from)), [], 'live invariant during the sweep');
    assert.ok(res.servicesDeleted > 0, 'the LoadBalancer frontend removed');
    const want = new MemoryDatapathMaps();
    assert.equal(new Reconciler(want, quiet).sync(new Map([...fillersOnly(), ['e2e/web', web]]), { full: true }).ok, true);
    assert.deepEqual(servedView(maps), servedView(want));
    assert.deepEqual(strictViolations(copyState(maps)), []);
    for (const m of READ_BACK_MAPS) assert.equal(readBack(r, m), 'match', m);
  });

  it('a same-class claim keeps its owner (the oldest Service) through every slice of a resync', async () => {
    const c = new FakeCluster();
    const ext = '198.19.9.9';
    const add = (k: string, created: string, ip: string) => {
      const svc = service(k, { clusterIP: k === 'a/aaa-young' ? vip(1) : vip(2), externalIPs: [ext], ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
      svc.metadata!.creationTimestamp = new Date(created);
      c.svcs.set(k, svc);
      c.slices.set(k, [webSlice(k, [ip])]);
    };
    add('a/aaa-young', '2024-01-01T00:00:00Z', '198.18.1.1'); // the lower key, the younger Service
    add('a/zzz-old', '2020-01-01T00:00:00Z', '198.18.2.2');
    const { maps, loop, reports, until } = setup(c);
    assert.equal(loop.start().result.ok, true);
    assert.deepEqual(served(maps, ext), ['198.18.2.2:8080']);
    const seen: Array<string[] | undefined> = [];
    const sync = (loop as unknown as { reconciler: Reconciler }).reconciler;
    const inner = sync.sync.bind(sync);
    sync.sync = (plans, opts) => {
      const r = inner(plans, opts);
      seen.push(served(maps, ext));
      return r;
    };
    await until('a resync', () => reports.some((r) => r.trigger === 'periodic'));
    loop.stop();
    assert.ok(seen.length >= 3, `${seen.length} passes: two chunks and the sweep`);
    for (const v of seen) assert.deepEqual(v, ['198.18.2.2:8080']);
  });
});
