/**
 * The benchmark's change measurements: kpr changes split by the idle time
 * before them, and the kube-proxy partial-sync inputs built once per shape.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PAUSE_MS, splitByPause } from '../../bench/control-plane.js';
import { IptablesChanger } from '../../bench/iptables.js';
import { partialRestore, sepChainName } from '../../bench/kube-proxy-rules.js';
import { makeScenario } from '../../bench/scenario.js';

test('changes are split by the idle time before them: back to back below the pause, after a pause from it on', () => {
  const split = splitByPause({ eventToMapsMs: [0.1, 0.9, 0.2, 1.1, 0.3], idleBeforeMs: [2, PAUSE_MS, 3, 400, PAUSE_MS - 0.01] });
  assert.deepEqual(split.backToBack, [0.1, 0.2, 0.3]);
  assert.deepEqual(split.afterPause, [0.9, 1.1]);
  assert.deepEqual(splitByPause({ eventToMapsMs: [], idleBeforeMs: [] }), { backToBack: [], afterPause: [] });
});

test("the partial-sync inputs are the generator's, one per mode and endpoint state, built once", () => {
  const { services } = makeScenario(50, 3);
  const target = services[20];
  const changer = new IptablesChanger('not-used-without-change', services, target);
  const gone = { ...target, endpoints: target.endpoints.slice(1) };
  const stale = [sepChainName(target, target.endpoints[0])];
  const expected = {
    'minimal|true': partialRestore([gone], { mode: 'minimal', staleSepChains: stale }),
    'minimal|false': partialRestore([target], { mode: 'minimal', staleSepChains: [] }),
    'exact|true': partialRestore([gone], { mode: 'exact', all: services.map((s) => (s === target ? gone : s)), staleSepChains: stale }),
    'exact|false': partialRestore([target], { mode: 'exact', all: services, staleSepChains: [] }),
  };
  const inputs = (): string[] =>
    Object.keys(expected).map((key) => {
      const [mode, state] = key.split('|') as ['exact' | 'minimal', string];
      return changer.input(mode, state === 'true');
    });
  assert.deepEqual(inputs(), Object.values(expected));
  // Built once: a Service added afterwards (the changer holds the same list) is not in a later exact input.
  services.push({ ...services[0], name: 'added-later', clusterIP: '198.19.200.1' });
  assert.ok(partialRestore([target], { mode: 'exact', all: services }).includes('added-later'));
  assert.deepEqual(inputs(), Object.values(expected));
  assert.match(expected['minimal|true'], new RegExp(`^-X ${stale[0]}$`, 'm'), 'the endpoint that left has its chain deleted');
  assert.notEqual(expected['exact|true'], expected['exact|false']);
});
