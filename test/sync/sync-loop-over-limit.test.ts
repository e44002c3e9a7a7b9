/**
 * The sync loop over capacity (issue 22): the event-style summary of the
 * Services over a datapath limit is logged when that set changes, never
 * while it stays the same (changes to a refused Service, syncs of others),
 * and a refusal is not a failed sync, so nothing is retried on a timer.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SyncLoop, type SyncReport } from '../../agent/sync/sync-loop.js';
import { FakeCluster } from './support/fake-cluster.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import type { Logger } from '../../agent/log/log.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

interface Line {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

function recorder(): Logger & { lines: Line[] } {
  const lines: Line[] = [];
  const at =
    (level: string) =>
    (msg: string, fields: Record<string, unknown> = {}) =>
      void lines.push({ level, msg, fields });
  const l = { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug'), trace: at('trace'), child: () => l, enabled: () => true };
  return l as unknown as Logger & { lines: Line[] };
}

function add(cluster: FakeCluster, i: number, backends = 1): void {
  const key = `ns/s${i}`;
  cluster.svcs.set(key, service(key, { clusterIP: `198.19.0.${i + 1}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
  cluster.slices.set(key, [
    slice(`${key}-1`, {
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: Array.from({ length: backends }, (_, j) => ep(`198.18.${i}.${j + 1}`)),
    }),
  ]);
}

describe('SyncLoop over capacity', () => {
  it('one summary per change of the set of Services over a limit; none for changes that leave it as it is', async () => {
    const cluster = new FakeCluster();
    const maps = new MemoryDatapathMaps({ maxServices: 8 });
    const log = recorder();
    const syncs: Array<{ trigger: string; ok: boolean; over: number }> = [];
    const loop = new SyncLoop(cluster, new Reconciler(maps, log), {
      nodeName: 'node-1',
      syncPeriodMs: 3_600_000,
      minSyncPeriodMs: 0,
      log,
      onSync: (r) => syncs.push({ trigger: r.trigger, ok: r.result.ok, over: r.result.limits?.length ?? 0 }),
    });
    const settle = () => new Promise((r) => setTimeout(r, 5));
    for (let i = 0; i < 6; i++) add(cluster, i); // 2 entries each: 4 fit in 8
    const first = loop.start();
    assert.equal(first.result.ok, true);
    const summaries = () => log.lines.filter((l) => l.fields.event === 'ServicesOverLimit');
    assert.equal(summaries().length, 1);
    assert.deepEqual(
      {
        services: summaries()[0].fields.services,
        byLimit: summaries()[0].fields.byLimit,
        newly: summaries()[0].fields.newlyOverLimit,
        first: summaries()[0].fields.first,
      },
      { services: 2, byLimit: { svc_map: 2 }, newly: 2, first: ['ns/s4', 'ns/s5'] },
    );
    assert.match(String(summaries()[0].fields.message), /^2 Services over a datapath limit \(svc_map 2\) are not served on this node/);

    // A refused Service changes (still does not fit), another Service changes: no new summary, no new refusal line, no retry.
    add(cluster, 5, 3);
    loop.serviceChanged('ns/s5');
    add(cluster, 0, 1);
    loop.serviceChanged('ns/s0');
    await settle();
    assert.equal(summaries().length, 1);
    assert.equal(log.lines.filter((l) => l.msg === 'Service refused: over a datapath limit').length, 2);
    await new Promise((r) => setTimeout(r, 700)); // past the first retry's delay, had there been one
    assert.ok(
      syncs.every((s) => s.ok && s.trigger !== 'retry'),
      JSON.stringify(syncs),
    );

    // Room made: s4 is programmed in the deletion's sync; one summary says so.
    cluster.svcs.delete('ns/s1');
    loop.serviceChanged('ns/s1');
    await settle();
    assert.equal(syncs.at(-1)!.over, 1);
    assert.equal(summaries().length, 2);
    assert.deepEqual([summaries()[1].fields.services, summaries()[1].fields.backWithinLimits, summaries()[1].fields.newlyOverLimit], [1, 1, 0]);

    // Everything fits: the all-clear line.
    cluster.svcs.delete('ns/s2');
    cluster.svcs.delete('ns/s3');
    loop.serviceChanged('ns/s2');
    loop.serviceChanged('ns/s3');
    await settle();
    const clear = log.lines.filter((l) => l.fields.event === 'ServicesWithinLimits');
    assert.equal(clear.length, 1);
    assert.equal(syncs.at(-1)!.over, 0);
    loop.stop();
  });

  it('a periodic resync does not re-plan Services refused for want of room while none is made; room made programs them at once; after a node change they are re-planned', async () => {
    const cluster = new FakeCluster();
    const maps = new MemoryDatapathMaps({ maxServices: 8 });
    const log = recorder();
    const reconciler = new Reconciler(maps, log);
    /** The Services each resync re-planned (its chunks' syncs), by resync: `current` until its sweep begins. */
    const replanned: string[][] = [];
    let current: string[] | undefined;
    const sync = reconciler.sync.bind(reconciler);
    reconciler.sync = (plans, opts) => {
      if (!opts.full && !opts.sweep && resyncing()) (current ??= []).push(...plans.keys());
      return sync(plans, opts);
    };
    // A resync's chunks end where its sweep begins.
    const sweepScan = reconciler.sweepScan.bind(reconciler);
    reconciler.sweepScan = () => {
      if (current) replanned.push(current);
      current = undefined;
      return sweepScan();
    };
    /** A resync is under way (the loop's own state): the incremental syncs now are its chunks (an event sync between two slices would count too; the resyncs checked below begin after the test's changes were synced). */
    const resyncing = () => (loop as unknown as { resync?: unknown }).resync !== undefined;
    const resyncs: SyncReport[] = [];
    const loop = new SyncLoop(cluster, reconciler, {
      nodeName: 'node-1',
      syncPeriodMs: 30,
      minSyncPeriodMs: 0,
      resyncChunk: 1,
      log,
      onSync: (r) => {
        if (r.full && r.trigger !== 'initial') resyncs.push(r);
      },
    });
    const until = async (what: string, cond: () => boolean) => {
      const deadline = Date.now() + 5000;
      while (!cond()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    };
    for (let i = 0; i < 6; i++) add(cluster, i); // 2 entries each: 4 fit in 8, ns/s4 and ns/s5 are refused
    assert.equal(loop.start().result.limits?.length, 2);
    try {
      await until('a resync', () => resyncs.length >= 1);
      assert.deepEqual(replanned[0].sort(), ['ns/s0', 'ns/s1', 'ns/s2', 'ns/s3']);
      assert.equal(resyncs[0].overLimitKept, 2);
      assert.equal(resyncs[0].result.limits?.length, 2, 'still refused, still reported');
      assert.equal(log.lines.filter((l) => l.msg === 'Service refused: over a datapath limit').length, 2, 'no new refusal line');

      // Room made (a Service deleted): its own sync programs ns/s4 at once; ns/s5 is refused again there.
      cluster.svcs.delete('ns/s1');
      loop.serviceChanged('ns/s1');
      await until('s4 programmed', () => maps.dumpServices().some(([k]) => k.addr === '198.19.0.5'));
      const next = resyncs.length + 1; // the resync after the one under way, if any, begins after s4 is programmed
      await until('a resync begun after that', () => resyncs.length > next);
      assert.deepEqual(replanned[next].sort(), ['ns/s0', 'ns/s2', 'ns/s3', 'ns/s4']);
      assert.equal(resyncs[next].overLimitKept, 1);

      // The node changed: the next resync begun re-plans every Service, the refused one too (one under way may finish first).
      const finished = resyncs.length;
      loop.serviceChanged(null);
      await until('two resyncs after the node change', () => resyncs.length >= finished + 2);
      const i = replanned.findIndex((keys, j) => j >= finished && keys.includes('ns/s5'));
      assert.ok(i >= 0, JSON.stringify(replanned.slice(finished)));
      assert.deepEqual(replanned[i].sort(), ['ns/s0', 'ns/s2', 'ns/s3', 'ns/s4', 'ns/s5']);
      assert.equal(resyncs[i].overLimitKept, 0);
    } finally {
      loop.stop();
    }
  });
});
