/**
 * The real agent against faults from outside: its pinned maps changed behind
 * its back (repaired by the next periodic resync, which reads the kernel)
 * and the node network namespace it was given disappearing and coming back
 * (the agent stays up, keeps programming Services, and recovers).
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BoxCluster, waitFor } from '../../sandbox/cluster.js';
import { nsPath } from '../../sandbox/netns.js';
import { BpfMap } from '../../native/index.js';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import { IPPROTO, MAP_NAMES, SCOPE, decodeConfig, encodeConfig } from '../../agent/maps/layout.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { requireRoot } from '../support/preflight.js';
import { frontendBackendCount, withPinnedMaps as withPinnedMapsUnder } from '../support/pinned-maps.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { metricValue, metricsUrlOf } from '../support/agent-metrics.js';
import { expectedRefusal } from '../support/kernel.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
  { name: 'web-c', ip: '198.18.0.12' },
];
const SYNC_PERIOD_MS = 3000;

const service = (name: string, clusterIP: string) => httpService('e2e', name, clusterIP);
const slice = (name: string, svc: string) =>
  httpSlice(
    'e2e',
    name,
    svc,
    PODS.map((p) => p.ip),
  );

describe('drift repair and node faults end to end', { timeout: scaled(180_000) }, () => {
  let box: BoxCluster;
  let metricsUrl: string;
  /** The agent's --netns: a bind mount of the sandbox's node namespace, which the test takes away. */
  let netnsDir: string;
  let netnsAlias: string;
  let mounted = false;

  const mount = () => {
    writeFileSync(netnsAlias, '');
    execFileSync('mount', ['--bind', nsPath(box.topo.nodeNs), netnsAlias]);
    mounted = true;
  };
  const unmount = () => {
    execFileSync('umount', [netnsAlias]);
    mounted = false;
    rmSync(netnsAlias, { force: true });
  };

  const metric = (name: string, labels: Record<string, string> = {}) => metricValue(metricsUrl, name, labels);

  /** The kernel's maps through their pins, as any other process (bpftool) would change them. */
  const withPinnedMaps = <T>(fn: (m: BpfDatapathMaps) => T): T => withPinnedMapsUnder(box.sandbox.bpffsDir, fn);

  const masterCount = (addr: string) => frontendBackendCount(box.sandbox.bpffsDir, addr);

  const alive = () => box.agent!.child.exitCode === null && box.agent!.child.signalCode === null;

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    netnsDir = mkdtempSync(path.join(os.tmpdir(), `${box.sandbox.runId}-netns-`));
    netnsAlias = path.join(netnsDir, 'node');
    mount();
    box.api.create(service('web', '198.19.0.10'));
    box.api.create(slice('web-1', 'web'));
    const agent = await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`, '--netns', netnsAlias]);
    metricsUrl = await metricsUrlOf(agent);
  });

  after(async () => {
    try {
      if (mounted) execFileSync('umount', [netnsAlias]);
    } catch {
      /* already gone */
    }
    if (netnsDir) rmSync(netnsDir, { recursive: true, force: true });
    await box?.close();
  });

  test('a deleted master and a backend port changed behind the agent: connections fail, then succeed again within one sync period, and /metrics shows the repair', async () => {
    const before = await box.client('http', '198.19.0.10:80', ['--count', '60']);
    assert.equal(before.failed, 0, JSON.stringify(before.errors));
    // Right after a periodic resync, so the next one is a whole period away.
    await box.agent!.waitForLog((l) => l.msg === 'sync' && l.trigger === 'periodic', SYNC_PERIOD_MS + 3000, box.agent!.logs.length);
    const from = box.agent!.logs.length;

    // What the fault-injection run did with bpftool, through the pins.
    const corruptedAt = performance.now();
    withPinnedMaps((m) => {
      const [master] = m.dumpServices().find(([k]) => k.addr === '198.19.0.10' && k.port === 80 && k.slot === 0 && k.scope === SCOPE.EXTERNAL)!;
      const [id, b] = m.dumpBackends().find(([, v]) => v.addr === PODS[1].ip && v.proto === IPPROTO.TCP)!;
      m.updateBackends([[id, { ...b, port: 9999 }]]);
      m.deleteServices([master]);
    });
    // And the node-wide settings the tc path reads.
    const cfgMap = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.config));
    const cfgKey = Buffer.alloc(4);
    const cfgBefore = cfgMap.lookup(cfgKey)!;
    cfgMap.update(cfgKey, encodeConfig({ ...decodeConfig(cfgBefore), udpTimeoutS: 1 }));
    // The master is gone: a new connection is refused at once (the address still refuses unknown ports).
    const broken = await box.client('once', '198.19.0.10:80', ['--timeout-ms', '1000']);
    const stillBroken = box.agent!.logs.slice(from).every((l) => l.msg !== 'drift repaired');
    if (stillBroken) assert.deepEqual(broken.errors, { [REFUSED]: 1 }, `the corruption broke the service: ${JSON.stringify(broken)}`);

    const line = await box.agent!.waitForLog('drift repaired', SYNC_PERIOD_MS + 3000, from);
    const repairedMs = performance.now() - corruptedAt;
    assert.ok(repairedMs <= scaled(SYNC_PERIOD_MS + 1500), `repaired ${repairedMs.toFixed(0)} ms after the corruption`);
    assert.deepEqual(line.maps, { kpr_svc: { missing: 1 }, kpr_backend: { changed: 1 }, kpr_config: { changed: 1 } });
    try {
      assert.deepEqual(cfgMap.lookup(cfgKey), cfgBefore, "kpr_config holds the agent's settings again");
    } finally {
      cfgMap.close();
    }

    const rep = await box.client('http', '198.19.0.10:80', ['--count', '300']);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.deepEqual(Object.keys(rep.byPod).sort(), ['web-a', 'web-b', 'web-c']);
    for (const [pod, n] of Object.entries(rep.byPod)) assert.ok(n >= 60, `${pod} got only ${n} of 300`);

    assert.equal(await metric('kpr_drift_repaired_entries_total', { map: 'kpr_svc', kind: 'missing' }), 1);
    assert.equal(await metric('kpr_drift_repaired_entries_total', { map: 'kpr_backend', kind: 'changed' }), 1);
    assert.equal(await metric('kpr_drift_repaired_entries_total', { map: 'kpr_config', kind: 'changed' }), 1);
    assert.equal(await metric('kpr_drift_repair_syncs_total'), 1);
    // Later periodic syncs find nothing: no second repair.
    await box.agent!.waitForLog((l) => l.msg === 'sync' && l.trigger === 'periodic', SYNC_PERIOD_MS + 3000, box.agent!.logs.length);
    assert.equal(await metric('kpr_drift_repair_syncs_total'), 1);
  });

  test('the --netns path disappears under the running agent: it stays alive, keeps programming Services, logs once, counts, and recovers when the path returns', async () => {
    const from = box.agent!.logs.length;
    unmount();
    const failed = await box.agent!.waitForLog((l) => l.msg === 'node datapath timer failed; retrying every tick', 10_000, from);
    assert.equal(failed.op, 'interface_rescan');

    // A Service created while the namespace path is gone is still programmed and served.
    box.api.create(service('late', '198.19.0.30'));
    box.api.create(slice('late-1', 'late'));
    await waitFor('the new Service to be programmed', () => masterCount('198.19.0.30') === 3);
    const rep = await box.client('http', '198.19.0.30:80', ['--count', '30']);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));

    // Several rescans fail (every 2 s): counted each time, logged once.
    await new Promise((r) => setTimeout(r, scaled(5000)));
    assert.ok(alive(), 'the agent is still running');
    assert.ok((await metric('kpr_node_datapath_errors_total', { op: 'interface_rescan' })) >= 2);
    const failures = box.agent!.logs.slice(from).filter((l) => l.msg === 'node datapath timer failed; retrying every tick');
    // Each distinct error once (the first failing rescan may meet the namespace half gone and say
    // something else than the next ones: that is a second distinct error, logged once too).
    const distinct = new Set(failures.map((l) => `${l.op}|${l.error}`));
    assert.ok(failures.length >= 1 && distinct.size === failures.length, `one log line per distinct error: ${JSON.stringify(failures.map((l) => l.error))}`);

    const back = box.agent!.logs.length;
    mount();
    const recovered = await box.agent!.waitForLog('node datapath timer recovered', 10_000, back);
    assert.equal(recovered.op, 'interface_rescan');
    assert.ok(alive(), 'the agent is still running');
    box.api.apply({ ...slice('late-1', 'late'), endpoints: slice('late-1', 'late').endpoints.slice(0, 2) });
    await waitFor('the Service change after the recovery to be programmed', () => masterCount('198.19.0.30') === 2);
  });
});
