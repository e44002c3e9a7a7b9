/**
 * Conntrack never loses half a flow below capacity (docs/architecture.md,
 * tc path, conntrack): at 10% to 90% of the conntrack capacity asked for,
 * NodePort flows opened on every CPU at once through the real tc programs,
 * clients reusing their ports, the sweeper deleting expired entries
 * meanwhile; afterwards every live flow has both its kpr_ct entries, and no
 * backend answer missed conntrack. kpr_ct is sized as the agent sizes it
 * (computeMapSizes) for a small capacity, so a run takes seconds.
 * Before 5.14 the sweep deletes by key (no BPF_MAP_LOOKUP_AND_DELETE_ELEM
 * for hash maps): a client reusing its port within the syscall between the
 * sweep's check and its delete may still lose an entry there, so on those
 * kernels only flows lost whole (LRU eviction) are asserted.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import { possibleCpus } from '../../native/index.js';
import { nsPath, Sandbox } from '../../sandbox/netns.js';
import { computeMapSizes } from '../../agent/datapath/map-sizes.js';
import { requireRoot } from '../support/preflight.js';
import { kernelMajorMinor } from '../support/kernel.js';
import { runFill } from '../support/ct-stress.js';

const CAPACITY = 1024;
const FILLS = [0.1, 0.25, 0.5, 0.75, 0.9];

/** The online CPUs ("0-1,4"): one worker pinned to each. */
function onlineCpus(): number[] {
  const out: number[] = [];
  for (const part of fs.readFileSync('/sys/devices/system/cpu/online', 'utf8').trim().split(',')) {
    const [a, b] = part.split('-').map(Number);
    for (let c = a!; c <= (b ?? a!); c++) out.push(c);
  }
  return out;
}

describe('conntrack under load: no half-flow below capacity', { timeout: 120_000 }, () => {
  let sandbox: Sandbox;
  let ns: string;

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
    ns = sandbox.addNamespace('node');
  });

  after(async () => {
    await sandbox?.teardown();
  });

  const maxEntries = () =>
    computeMapSizes(
      { explicit: { conntrack: CAPACITY }, conntrackMaxPerCore: 0, conntrackMin: 0 },
      { totalMemoryBytes: os.totalmem(), cpus: os.availableParallelism(), possibleCpus: possibleCpus() },
    ).byMapName.kpr_ct!;

  for (const fill of FILLS) {
    test(`${fill * 100}% of ${CAPACITY}: every live flow keeps both entries, every answer is reverse-NATed`, async () => {
      const cpus = onlineCpus();
      const r = await runFill({ nsPath: nsPath(ns), capacity: CAPACITY, maxEntries: maxEntries(), fill, cpus });
      console.log(`ct-stress ${JSON.stringify(r)}`);
      assert.ok(r.flows > 0 && r.swept > 0, `the run opened flows and the sweeper deleted closed ones: ${JSON.stringify(r)}`);
      assert.equal(r.notTranslated, 0, `every SYN translated: ${JSON.stringify(r)}`);
      const [major, minor] = kernelMajorMinor();
      if (major < 5 || (major === 5 && minor < 14)) {
        assert.equal(r.lostFlows, 0, `no flow evicted below capacity: ${JSON.stringify(r)}`);
        return;
      }
      const lost = { halfFlows: r.halfFlows, lostFlows: r.lostFlows, repliesMissed: r.repliesMissed, ctLost: r.ctLost };
      assert.deepEqual(lost, { halfFlows: 0, lostFlows: 0, repliesMissed: 0, ctLost: 0 }, JSON.stringify(r));
    });
  }
});
