/**
 * Drift repair against the in-memory maps: each change made behind the
 * agent's back is found by ONE read-back full sync, counted by map and kind,
 * and repaired with every intermediate state safe for a live reader (the
 * replay checks after every single entry written).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DRIFT_CASES, driftPlans, servedView, sortedDrift } from './support/drift-cases.js';
import { setup, syncChecked } from './support/reconcile-harness.js';

describe('drift repair (in-memory maps)', () => {
  it('a read-back full sync with no drift counts nothing and writes nothing', () => {
    const { maps, r } = setup();
    assert.equal(syncChecked(maps, r, driftPlans(), true).ok, true);
    const calls = maps.calls.length;
    const res = syncChecked(maps, r, driftPlans(), true, true);
    assert.deepEqual(res.drift, []);
    assert.equal(maps.calls.length, calls, 'no map write');
  });

  it('without read-back a full sync repairs nothing (it trusts its mirror)', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, driftPlans(), true);
    maps.deleteVips(['198.19.0.10']);
    const res = r.sync(driftPlans(), { full: true });
    assert.deepEqual(res.drift, []);
    assert.equal(maps.vips.has('198.19.0.10'), false);
  });

  for (const c of DRIFT_CASES) {
    it(`${c.name}: found and repaired by one read-back sync`, () => {
      const { maps, r } = setup();
      assert.equal(syncChecked(maps, r, driftPlans(), true).ok, true);
      const want = servedView(maps);
      c.corrupt(maps);
      assert.notDeepEqual(servedView(maps), want, 'the corruption changed what the maps serve');
      const res = syncChecked(maps, r, driftPlans(), true, true);
      assert.equal(res.ok, true, res.error);
      assert.deepEqual(sortedDrift(res.drift), sortedDrift(c.drift));
      assert.deepEqual(servedView(maps), want, 'the maps serve what they did before the corruption');
      const again = syncChecked(maps, r, driftPlans(), true, true);
      assert.deepEqual(again.drift, [], 'the next read-back finds nothing');
      assert.equal(again.servicesWritten + again.backendsWritten + again.auxWritten + again.servicesDeleted + again.backendsDeleted + again.auxDeleted, 0);
    });
  }

  it('a deleted master keeps its frontendId (names and pairs stay valid)', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, driftPlans(), true);
    const before = r.frontendIdOf('198.19.0.10', 80, 'TCP');
    DRIFT_CASES[0].corrupt(maps);
    syncChecked(maps, r, driftPlans(), true, true);
    assert.equal(r.frontendIdOf('198.19.0.10', 80, 'TCP'), before);
  });

  it('drift and a pending change in one periodic sync: both applied, only the drift counted', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, driftPlans(), true);
    maps.deleteVips(['198.19.0.10']);
    const p = driftPlans();
    p.get('e2e/web')![0].backends.pop();
    const res = syncChecked(maps, r, p, true, true);
    assert.deepEqual(res.drift, [{ map: 'kpr_vip', kind: 'missing', entries: 1 }]);
    assert.equal(maps.vips.has('198.19.0.10'), true);
    const master = [...maps.services.values()].find(([k]) => k.slot === 0 && k.port === 80 && k.addr === '198.19.0.10');
    assert.equal(master?.[1].count, 2);
  });
});
