/**
 * The sliced read-back of every map the reconciler owns (Reconciler.readBackMatches
 * answering 'pending' until its last slice) with event syncs writing between
 * its batches, on the in-memory maps, whose raw cursors walk hash buckets as
 * the kernel's batch lookup does: inserts, deletes and changes of the keys
 * the syncs touch never look like drift, while real drift on keys no sync
 * touches (missing, changed, extra) is still found, and repaired within the
 * same resync.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MAP_NAMES, SVC_KEY } from '../../../agent/maps/layout.js';
import { MemoryDatapathMaps, svcKeyId } from '../../../agent/maps/memory-datapath-maps.js';
import { RAW_BUCKETS } from '../../../agent/maps/memory-raw-cursor.js';
import { Reconciler, type ReadBackVerdict } from '../../../agent/reconcile/reconciler.js';
import type { PlanFrontend } from '../../../agent/plan/types.js';
import { decodeSvcKey } from '../../../agent/maps/layout.js';
import { DRIFT_CASES, servedView, sortedDrift } from '../support/drift-cases.js';
import { SLICED, SMALL_MAP_DRIFT_CASES, World, filler, readBack } from '../support/readback-world.js';
import { rng } from '../../support/rng.js';
import { quiet } from '../support/reconcile-harness.js';
import { strictViolations, copyState } from '../support/datapath-state.js';

/** What a fresh agent programming `plans` would serve (ids aside). */
function servedFresh(plans: Map<string, PlanFrontend[]>): unknown {
  const maps = new MemoryDatapathMaps();
  assert.equal(new Reconciler(maps, quiet).sync(plans, { full: true }).ok, true);
  return servedView(maps);
}

describe('sliced read-back with syncs between its batches (in-memory maps)', () => {
  it('the raw cursor returns every entry no one touches exactly once while others are inserted and deleted between batches', () => {
    const maps = new MemoryDatapathMaps();
    const k = (i: number) => ({ addr: '198.19.3.1', port: 80, slot: i, proto: 6, scope: 0 });
    const v = { backendId: 1, count: 0, frontendId: 0, flags: 0 };
    maps.updateServices(Array.from({ length: 400 }, (_, i): [ReturnType<typeof k>, typeof v] => [k(i), v]));
    const stable = new Set(Array.from({ length: 200 }, (_, i) => svcKeyId(k(i)))); // never touched
    const seen = new Map<string, number>();
    const cursor = maps.servicesRawCursor(7);
    let batches = 0;
    let churn = 1000;
    for (let b = cursor.next(); b; b = cursor.next()) {
      batches++;
      for (let i = 0; i < b.count; i++) {
        const id = svcKeyId(decodeSvcKey(b.keys, i * SVC_KEY.size));
        seen.set(id, (seen.get(id) ?? 0) + 1);
      }
      // Between batches: delete some untouched-so-far entries of the second half, insert new ones.
      maps.deleteServices([k(200 + (batches % 200))].filter((x) => maps.services.has(svcKeyId(x))));
      maps.updateServices([[k(churn++), v]]);
    }
    assert.ok(batches > 10, `${batches} batches over ${RAW_BUCKETS} buckets`);
    for (const id of stable) assert.equal(seen.get(id), 1, id);
    for (const [id, n] of seen) assert.equal(n, 1, `${id} returned ${n} times`);
  });

  for (let seed = 1; seed <= 12; seed++) {
    it(`inserts, deletes and changes of the keys event syncs touch between batches find no drift (seed ${seed})`, () => {
      const maps = new MemoryDatapathMaps();
      const r = new Reconciler(maps, quiet, { readBackBatch: 3 });
      const world = new World(rng(seed));
      assert.equal(r.sync(world.plans(), { full: true }).ok, true);
      let syncs = 0;
      for (const map of SLICED) {
        const { verdict, slices } = readBack(r, map, () => {
          world.mutate(r);
          world.mutate(r); // a key touched twice in one window (changed, then changed back or removed)
          syncs += 2;
        });
        assert.equal(verdict, 'match', `${map}: no false drift`);
        assert.ok(slices > 5, `${map} read back in ${slices} slices`);
      }
      assert.ok(syncs > 20, `${syncs} event syncs between batches`);
      assert.ok(world.done.add > 0 && world.done.remove > 0 && world.done.change > 0, JSON.stringify(world.done));
      // The decoded compare agrees: nothing differs, nothing is written.
      const calls = maps.calls.length;
      const repair = r.repairDrift();
      assert.deepEqual(repair.drift, []);
      assert.equal(maps.calls.length, calls);
      assert.deepEqual(servedView(maps), servedFresh(world.plans()));
    });
  }

  // (Not 'every kpr_svc_meta entry deleted': it deletes the fillers' names too, keys the event syncs touch.)
  const untouchedCases = [...DRIFT_CASES, ...SMALL_MAP_DRIFT_CASES].filter(
    (d) => d.name !== 'every kpr_svc_meta entry deleted' && d.drift.every((x) => SLICED.includes(x.map)),
  );
  assert.ok(untouchedCases.filter((d) => d.drift.some((x) => x.map === MAP_NAMES.vip || x.map === MAP_NAMES.svcMeta)).length >= 5);
  assert.equal(untouchedCases.filter((d) => d.drift.some((x) => x.map === MAP_NAMES.affinityMatch)).length, 2);
  assert.equal(untouchedCases.filter((d) => d.drift.some((x) => x.map === MAP_NAMES.srcRange)).length, 2);
  for (const c of untouchedCases) {
    it(`${c.name} (a key no sync touches): found by the sliced read-back with syncs between its batches, repaired within the resync`, () => {
      const maps = new MemoryDatapathMaps();
      const r = new Reconciler(maps, quiet, { readBackBatch: 3 });
      const world = new World(rng(c.name.length));
      assert.equal(r.sync(world.plans(), { full: true }).ok, true);
      c.corrupt(maps);
      const verdicts: Record<string, ReadBackVerdict> = {};
      for (const map of SLICED) verdicts[map] = readBack(r, map, () => world.mutate(r)).verdict;
      for (const map of SLICED) assert.equal(verdicts[map], c.drift.some((d) => d.map === map) ? 'drift' : 'match', map);
      const repair = r.repairDrift();
      assert.equal(repair.ok, true, repair.error);
      assert.deepEqual(sortedDrift(repair.drift), sortedDrift(c.drift));
      assert.deepEqual(servedView(maps), servedFresh(world.plans()));
      assert.deepEqual(strictViolations(copyState(maps)), []);
      for (const map of SLICED) assert.equal(readBack(r, map, () => world.mutate(r)).verdict, 'match', `${map} after the repair`);
    });
  }

  it('a mirror rebuilt from the kernel mid-window (a failed sync) restarts the read-back, which then matches', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet, { readBackBatch: 3 });
    const world = new World(rng(99));
    assert.equal(r.sync(world.plans(), { full: true }).ok, true);
    assert.equal(r.readBackMatches(MAP_NAMES.svc), 'pending');
    maps.failNextCall(1);
    const failed = r.sync(new Map([['f/s0', filler(0, 4, 7)]]), { full: false });
    assert.equal(failed.ok, false);
    assert.equal(readBack(r, MAP_NAMES.svc, () => world.mutate(r)).verdict, 'match');
  });
});
