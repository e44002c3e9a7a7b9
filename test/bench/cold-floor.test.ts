/**
 * bench/cold-floor.ts is the bound the cold path is measured against, so it
 * must write what the agent writes: the floor and the agent's first sync
 * (SyncLoop over the Reconciler and the batch writer) program two sets of
 * real kernel maps from the same cached scenario, and the maps come out
 * byte for byte the same.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BATCH_WRITER_LIBRARY, BatchWriter, type BpfMap } from '../../native/index.js';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import { BACKEND, SVC_KEY, SVC_META, SVC_VAL, VIP_KEY, VIP_VAL } from '../../agent/maps/layout.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { SyncLoop } from '../../agent/sync/sync-loop.js';
import { cachedScenario } from '../../bench/cached-scenario.js';
import { floorSync } from '../../bench/cold-floor.js';
import { NODE_NAME } from '../../bench/scenario.js';
import { closeMapSet, repoRoot, requireBpf, standaloneMapSet } from '../support/bpf-fixtures.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet };
let writer: BatchWriter;

before(() => {
  requireBpf();
  writer = BatchWriter.open(path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY));
});

after(() => writer?.close());

/** A map's entries as sorted "key=value" hex lines. */
function contents(map: BpfMap, keySize: number, valueSize: number): string[] {
  const { count, keys, values } = map.lookupBatch();
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    out.push(`${keys.subarray(i * keySize, (i + 1) * keySize).toString('hex')}=${values.subarray(i * valueSize, (i + 1) * valueSize).toString('hex')}`);
  }
  return out.sort();
}

test('the floor writes exactly the entries the agent writes for the bench scenario', () => {
  // 3,000 Services × 6: more than one batch round (8,192 entries) of service entries and of backends.
  const source = cachedScenario(3000, 6);
  const agentMaps = standaloneMapSet(65536);
  const floorMaps = standaloneMapSet(65536);
  try {
    const reconciler = new Reconciler(new BpfDatapathMaps({ ...agentMaps, writer }), quiet);
    reconciler.adopt();
    const loop = new SyncLoop(source, reconciler, { nodeName: NODE_NAME, syncPeriodMs: 1e9, minSyncPeriodMs: 0, log: quiet as never });
    const agent = loop.start().result;
    loop.stop();
    assert.ok(agent.ok, agent.error);

    const floor = floorSync(source, floorMaps, writer, NODE_NAME);
    assert.deepEqual({ frontends: floor.frontends, backends: floor.backends }, { frontends: agent.frontends, backends: agent.backends });
    assert.equal(floor.frontends, 3001); // the scenario's echo Service too
    assert.equal(floor.backends, 3000 * 6 + 1);
    assert.equal(floor.svcEntries, agent.servicesWritten);

    const sizes: Array<['svc' | 'backend' | 'vip' | 'svcMeta', number, number]> = [
      ['svc', SVC_KEY.size, SVC_VAL.size],
      ['backend', 4, BACKEND.size],
      ['vip', VIP_KEY.size, VIP_VAL.size],
      ['svcMeta', 4, SVC_META.size],
    ];
    for (const [name, k, v] of sizes) {
      const want = contents(agentMaps[name], k, v);
      assert.ok(want.length > 0, `${name}: the agent wrote entries`);
      assert.deepEqual(contents(floorMaps[name], k, v), want, `${name}: same entries`);
    }
    // The echo Service's pod is on this node: its backend carries the LOCAL flag in both.
    assert.ok(contents(floorMaps.backend, 4, BACKEND.size).some((e) => e.endsWith('01')));
  } finally {
    closeMapSet(agentMaps);
    closeMapSet(floorMaps);
  }
});
