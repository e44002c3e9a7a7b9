/**
 * What a starting agent does with the pins it finds (agent/datapath/
 * migration-plan.ts, pure) and the pin names it reads them by
 * (agent/datapath/pins.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { describeRefusal, planPins, type FoundPin, type PinnedMapInfo, type WantedMap } from '../../agent/datapath/migration-plan.js';
import { mapPinName, parseMapPinName } from '../../agent/datapath/pins.js';

const HASH = 1;
const LRU = 9;

function want(name: string, version: number, o: Partial<WantedMap> = {}): WantedMap {
  return {
    name,
    version,
    type: HASH,
    keySize: 8,
    valueSize: 12,
    maxEntries: 100,
    flags: 0,
    older: new Map(version > 1 ? [[1, { keySize: 8, valueSize: 10 }]] : []),
    ...o,
  };
}

let nextId = 1;
function pin(name: string, version: number, dir: 'maps' | 'staging' = 'maps', info: Partial<PinnedMapInfo> = {}): FoundPin {
  return {
    file: mapPinName(name, version),
    dir,
    name,
    version,
    info: { id: nextId++, type: HASH, keySize: 8, valueSize: version > 1 ? 12 : 10, maxEntries: 100, flags: 0, ...info },
  };
}

const WANTED = [want('kpr_svc', 2), want('kpr_vip', 1, { valueSize: 10 }), want('kpr_ct', 2, { type: LRU })];
const NONE = new Set<number>();

describe('pin names carry the layout version', () => {
  it('version 1 is the bare name (what releases before versioned pins left), later ones @v<N>', () => {
    assert.equal(mapPinName('kpr_ct', 1), 'kpr_ct');
    assert.equal(mapPinName('kpr_ct', 2), 'kpr_ct@v2');
    assert.deepEqual(parseMapPinName('kpr_ct'), { name: 'kpr_ct', version: 1 });
    assert.deepEqual(parseMapPinName('kpr_ct@v12'), { name: 'kpr_ct', version: 12 });
    for (const bad of ['kpr_ct@v1', 'kpr_ct@v0', 'kpr_ct@2', 'kpr_ct@v', '.kpr', 'kpr ct', 'kpr_ct@v02']) assert.equal(parseMapPinName(bad), null, bad);
  });
});

describe('planPins', () => {
  it('nothing pinned, or every map at this layout and size: adopt', () => {
    assert.deepEqual(planPins([], WANTED, NONE), { mode: 'adopt', remove: [] });
    const found = [pin('kpr_svc', 2), pin('kpr_vip', 1, 'maps', { valueSize: 10 }), pin('kpr_ct', 2, 'maps', { type: LRU })];
    assert.deepEqual(planPins(found, WANTED, NONE), { mode: 'adopt', remove: [] });
  });

  it('v1 pins (a release before versioned pins): the whole set migrates, each map from its v1 pin', () => {
    const found = [pin('kpr_svc', 1), pin('kpr_vip', 1, 'maps', { valueSize: 10 }), pin('kpr_ct', 1, 'maps', { type: LRU })];
    const plan = planPins(found, WANTED, NONE);
    assert.equal(plan.mode, 'migrate');
    if (plan.mode !== 'migrate') return;
    assert.deepEqual(
      plan.maps.map((m) => [m.name, m.reason, m.detail, m.source?.file, m.reuseStaged]),
      [
        ['kpr_svc', 'layout', 'layout v1 -> v2', 'kpr_svc', false],
        ['kpr_vip', undefined, undefined, 'kpr_vip', false],
        ['kpr_ct', 'layout', 'layout v1 -> v2', 'kpr_ct', false],
      ],
    );
  });

  it('a size other than configured migrates the set too', () => {
    const found = [pin('kpr_svc', 2, 'maps', { maxEntries: 40 }), pin('kpr_vip', 1, 'maps', { valueSize: 10 })];
    const plan = planPins(found, WANTED, NONE);
    assert.equal(plan.mode, 'migrate');
    if (plan.mode === 'migrate')
      assert.deepEqual(
        plan.maps.filter((m) => m.reason).map((m) => [m.name, m.reason, m.detail]),
        [['kpr_svc', 'size', '40 -> 100 entries']],
      );
  });

  it('a pin that is not the map its name says (another value size, not a map): foreign, the new map starts empty', () => {
    const notAMap: FoundPin = { file: 'kpr_vip', dir: 'maps', name: 'kpr_vip', version: 1, info: null, error: 'pinned object is not a map' };
    const plan = planPins([pin('kpr_svc', 2, 'maps', { valueSize: 4 }), notAMap], WANTED, NONE);
    assert.equal(plan.mode, 'migrate');
    if (plan.mode !== 'migrate') return;
    assert.deepEqual(
      plan.maps.slice(0, 2).map((m) => [m.name, m.reason, m.detail, m.source]),
      [
        ['kpr_svc', 'foreign', 'kpr_svc@v2: value_size 4 != 12', undefined],
        ['kpr_vip', 'foreign', 'kpr_vip: pinned object is not a map', undefined],
      ],
    );
  });

  it('a pin of a newer layout anywhere: refuse, naming map, found and known versions', () => {
    const found = [pin('kpr_svc', 2), pin('kpr_ct', 3, 'maps', { type: LRU }), pin('kpr_vip', 2, 'staging')];
    const plan = planPins(found, WANTED, NONE);
    assert.deepEqual(plan, {
      mode: 'refuse',
      newer: [
        { map: 'kpr_ct', file: 'kpr_ct@v3', dir: 'maps', version: 3, known: 2 },
        { map: 'kpr_vip', file: 'kpr_vip@v2', dir: 'staging', version: 2, known: 1 },
      ],
    });
    if (plan.mode === 'refuse')
      assert.match(
        describeRefusal(plan.newer, '/sys/fs/bpf/kpr'),
        /kpr_ct pinned at layout v3 \(maps\/kpr_ct@v3\), this agent knows up to v2; kpr_vip pinned at layout v2 .*The datapath is left as it is/,
      );
  });

  it("two versions of a map pinned: the one the attached programs use is the old set's, the other a leftover", () => {
    // A rollback to a release without versioned pins recreated kpr_svc (v1, in use); the v2 pin is stale.
    const stale = pin('kpr_svc', 2);
    const live = pin('kpr_svc', 1);
    const plan = planPins([stale, live, pin('kpr_vip', 1, 'maps', { valueSize: 10 })], WANTED, new Set([live.info!.id]));
    assert.equal(plan.mode, 'migrate');
    if (plan.mode !== 'migrate') return;
    assert.deepEqual(plan.maps[0]!.source?.file, 'kpr_svc');
    assert.deepEqual(plan.remove, [{ dir: 'maps', file: 'kpr_svc@v2' }]);
    // Nothing attached: the newest version is taken.
    const adopt = planPins([stale, live, pin('kpr_vip', 1, 'maps', { valueSize: 10 })], WANTED, NONE);
    assert.deepEqual(adopt, { mode: 'adopt', remove: [{ dir: 'maps', file: 'kpr_svc' }] });
  });

  it('staged maps of an interrupted migration: reused when they fit and the set still migrates; removed otherwise', () => {
    const stagedSvc = pin('kpr_svc', 2, 'staging');
    const stagedCt = pin('kpr_ct', 2, 'staging', { type: LRU, maxEntries: 7 });
    const found = [pin('kpr_svc', 1), stagedSvc, stagedCt];
    const plan = planPins(found, WANTED, NONE);
    assert.equal(plan.mode, 'migrate');
    if (plan.mode !== 'migrate') return;
    assert.deepEqual(
      plan.maps.map((m) => [m.name, m.reuseStaged]),
      [
        ['kpr_svc', true],
        ['kpr_vip', false],
        ['kpr_ct', false],
      ],
    );
    assert.deepEqual(plan.remove, [{ dir: 'staging', file: 'kpr_ct@v2' }]);
    // Programs already run on a staged map (the swap happened): the migration resumes even if maps/ looks current.
    const current = [pin('kpr_svc', 2), pin('kpr_vip', 1, 'maps', { valueSize: 10 }), pin('kpr_ct', 2, 'maps', { type: LRU })];
    const staged = pin('kpr_ct', 2, 'staging', { type: LRU });
    assert.equal(planPins([...current, staged], WANTED, new Set([staged.info!.id])).mode, 'migrate');
    // Nothing uses them and maps/ is current: a migration that never swapped; staged pins go.
    assert.deepEqual(planPins([...current, staged], WANTED, NONE), { mode: 'adopt', remove: [{ dir: 'staging', file: 'kpr_ct@v2' }] });
  });

  it('pins of maps this release does not define are not its to judge', () => {
    assert.deepEqual(planPins([pin('kpr_events', 4)], WANTED, NONE), { mode: 'adopt', remove: [] });
  });
});
