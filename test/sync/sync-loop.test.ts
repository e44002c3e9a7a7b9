/**
 * SyncLoop: which services a sync covers, and what it reports to its
 * listeners (UDP backends that left a frontend, healthCheckNodePort targets),
 * over the real planner and reconciler with in-memory maps.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SyncLoop } from '../../agent/sync/sync-loop.js';
import { FakeCluster } from './support/fake-cluster.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { silentLogger } from '../../agent/log/log.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

const DNS_PORTS = [{ name: 'dns', port: 53, protocol: 'UDP' }];
const dnsSlice = (key: string, ips: string[]) => slice(key, { ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }], endpoints: ips.map((ip) => ep(ip)) });

function setup() {
  const cluster = new FakeCluster();
  const maps = new MemoryDatapathMaps();
  const reconciler = new Reconciler(maps, silentLogger);
  const left: Array<{ addr: string; port: number; frontendId: number }> = [];
  /** Whether each sync so far succeeded. */
  const results: boolean[] = [];
  const loop = new SyncLoop(cluster, reconciler, {
    nodeName: 'node-1',
    syncPeriodMs: 3_600_000,
    minSyncPeriodMs: 0,
    log: silentLogger,
    onUdpBackendsRemoved: (l) => left.push(...l),
    onSync: (r) => results.push(r.result.ok),
  });
  const settle = () => new Promise((r) => setImmediate(r));
  return { cluster, maps, reconciler, loop, left, results, settle };
}

describe('SyncLoop', () => {
  it("reports a UDP backend that leaves a frontend, with that frontend's id, even when another Service still uses the backend", async () => {
    const { cluster, reconciler, loop, left, settle } = setup();
    cluster.svcs.set('a/dns', service('a/dns', { clusterIP: '198.19.0.53', ports: DNS_PORTS }));
    cluster.svcs.set('a/other', service('a/other', { clusterIP: '198.19.0.54', ports: DNS_PORTS }));
    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.1', '198.18.0.2'])]);
    cluster.slices.set('a/other', [dnsSlice('a/other-1', ['198.18.0.1'])]);
    assert.equal(loop.start().result.ok, true);
    const dnsId = reconciler.frontendIdOf('198.19.0.53', 53, 'UDP')!;
    assert.ok(dnsId > 0);
    assert.deepEqual(left, [], 'nothing left at the first sync');

    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.2'])]);
    loop.serviceChanged('a/dns');
    await settle();
    assert.deepEqual(left, [{ addr: '198.18.0.1', port: 5353, frontendId: dnsId }]);

    cluster.svcs.delete('a/dns');
    loop.serviceChanged('a/dns');
    await settle();
    assert.deepEqual(left.slice(1), [{ addr: '198.18.0.2', port: 5353, frontendId: dnsId }], 'a deleted Service releases its clients too');
    loop.stop();
  });

  it('a failed sync does not record the new UDP view: its retry still reports the backends that left', async () => {
    const { cluster, maps, reconciler, loop, left, results, settle } = setup();
    cluster.svcs.set('a/dns', service('a/dns', { clusterIP: '198.19.0.53', ports: DNS_PORTS }));
    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.1', '198.18.0.2'])]);
    assert.equal(loop.start().result.ok, true);
    const dnsId = reconciler.frontendIdOf('198.19.0.53', 53, 'UDP')!;

    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.2'])]);
    maps.failNextCall();
    loop.serviceChanged('a/dns');
    await settle();
    assert.deepEqual(results.slice(1), [false], "the change's sync failed");
    assert.deepEqual(left, [], 'nothing is reported for a sync that did not apply');
    // The retry (after its backoff) applies the change and reports the backend that left.
    const deadline = Date.now() + 5000;
    while (results.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(results.slice(1), [false, true]);
    assert.deepEqual(left, [{ addr: '198.18.0.1', port: 5353, frontendId: dnsId }]);
    loop.stop();
  });

  it('does not report TCP backends that leave (TCP clients reconnect on their own)', async () => {
    const { cluster, loop, left, settle } = setup();
    cluster.svcs.set('a/web', service('a/web', { clusterIP: '198.19.0.80', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    cluster.slices.set('a/web', [
      slice('a/web-1', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('198.18.0.1'), ep('198.18.0.2')] }),
    ]);
    loop.start();
    cluster.slices.set('a/web', [slice('a/web-1', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('198.18.0.2')] })]);
    loop.serviceChanged('a/web');
    await settle();
    assert.deepEqual(left, []);
    loop.stop();
  });
  it('a sync that throws (here: the reconciler) is a failed sync, retried; the loop keeps programming changes', async () => {
    const cluster = new FakeCluster();
    const maps = new MemoryDatapathMaps();
    const reconciler = new Reconciler(maps, silentLogger);
    let throwOnce = false;
    const sync = reconciler.sync.bind(reconciler);
    reconciler.sync = (...args: Parameters<Reconciler['sync']>) => {
      if (throwOnce) {
        throwOnce = false;
        throw new Error('reconciler blew up');
      }
      return sync(...args);
    };
    const reports: Array<{ trigger: string; ok: boolean; error?: string }> = [];
    const loop = new SyncLoop(cluster, reconciler, {
      nodeName: 'node-1',
      syncPeriodMs: 3_600_000,
      minSyncPeriodMs: 0,
      log: silentLogger,
      onSync: (r) => reports.push({ trigger: r.trigger, ok: r.result.ok, error: r.result.error }),
    });
    cluster.svcs.set('a/dns', service('a/dns', { clusterIP: '198.19.0.53', ports: DNS_PORTS }));
    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.1', '198.18.0.2'])]);
    assert.equal(loop.start().result.ok, true);
    throwOnce = true;
    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.2'])]);
    loop.serviceChanged('a/dns');
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(reports[1], { trigger: 'event', ok: false, error: 'reconciler blew up' });
    // The retry (500 ms) succeeds, and later changes are still programmed.
    const until = Date.now() + 5000;
    while (reports.length < 3 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(reports[2], { trigger: 'retry', ok: true, error: undefined });
    cluster.slices.set('a/dns', [dnsSlice('a/dns-1', ['198.18.0.3'])]);
    loop.serviceChanged('a/dns');
    await new Promise((r) => setImmediate(r));
    assert.equal(reports[3].ok, true);
    assert.ok(
      [...maps.backends.values()].some((b) => b.addr.endsWith('198.18.0.3')),
      'the new backend is in the maps',
    );
    loop.stop();
  });
});
