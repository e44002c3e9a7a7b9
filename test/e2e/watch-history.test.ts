/**
 * The real agent when the API server comes back with another history (as
 * after a restore from an etcd backup): with resourceVersions restarting
 * below the agent's (case A) and past them (case B), while the server was
 * away one endpoint was removed, a Service added and one deleted, and no
 * watch event tells of it. The agent relists once per cache and the maps
 * converge: the removed pod gets no traffic, the new Service is served, the
 * deleted one is not. The time to converge is printed (bounded generously).
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { BoxCluster, NODE_NAME, waitFor } from '../../sandbox/cluster.js';
import { frontendBackendCount } from '../support/pinned-maps.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { metricValue, metricsUrlOf } from '../support/agent-metrics.js';
import { requireRoot } from '../support/preflight.js';

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
];
const CONVERGE_BOUND_MS = 20_000;

const service = (name: string, clusterIP: string) => httpService('e2e', name, clusterIP);
const slice = (name: string, svc: string, pods: typeof PODS) =>
  httpSlice(
    'e2e',
    name,
    svc,
    pods.map((p) => p.ip),
  );

describe('the API server comes back with another history', { timeout: scaled(180_000) }, () => {
  let box: BoxCluster;
  let metricsUrl: string;

  const relists = (kind: string, reason: string) => metricValue(metricsUrl, 'kpr_k8s_relists_total', { kind, reason });

  /** Backends of a Service's frontend (port 80) in the pinned kpr_svc map; undefined when not programmed. */
  const backendCount = (addr: string) => frontendBackendCount(box.sandbox.bpffsDir, addr);

  async function servedBy(vip: string): Promise<string[]> {
    const rep = await box.client('http', `${vip}:80`, ['--count', '40']);
    assert.equal(rep.failed, 0, `${vip}: ${JSON.stringify(rep.errors)}`);
    return Object.keys(rep.byPod).sort();
  }

  async function notServed(vip: string): Promise<void> {
    const rep = await box.client('once', `${vip}:80`, ['--timeout-ms', '1000']);
    assert.equal(rep.ok, 0, `${vip} still answers: ${JSON.stringify(rep)}`);
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS, apiBookmarkIntervalMs: 200 });
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME } });
    box.api.create(service('web', '198.19.0.10'));
    box.api.create(slice('web-1', 'web', PODS));
    box.api.create(service('gone', '198.19.0.11'));
    box.api.create(slice('gone-1', 'gone', PODS.slice(0, 1)));
    // Enough writes that a low base really is below the agent's resourceVersions.
    for (let i = 0; i < 20; i++)
      box.api.apply({ ...service('gone', '198.19.0.11'), metadata: { name: 'gone', namespace: 'e2e', labels: { round: String(i) } } });
    const agent = await box.startAgent();
    metricsUrl = await metricsUrlOf(agent);
    assert.deepEqual(await servedBy('198.19.0.10'), ['web-a', 'web-b']);
    assert.deepEqual(await servedBy('198.19.0.11'), ['web-a']);
  });

  after(async () => {
    await box?.close();
  });

  const restart = async (
    label: string,
    opts: { base: (current: number) => number; closeWatches: 'clean' | 'reset'; reason: string },
    edit: () => void,
    converged: () => boolean,
  ) => {
    // Watches established for a while (bookmarks seen), as in a cluster that ran for some time.
    await new Promise((r) => setTimeout(r, scaled(1000)));
    const before = { svc: await relists('Service', opts.reason), eps: await relists('EndpointSlice', opts.reason) };
    const from = box.agent!.logs.length;
    const t0 = performance.now();
    box.api.replaceHistory({ resourceVersionBase: opts.base(Number(box.api.resourceVersion())), closeWatches: opts.closeWatches, edit });
    await waitFor(`${label}: the maps to converge`, converged, CONVERGE_BOUND_MS, 5);
    const convergedMs = performance.now() - t0;
    console.log(`# ${label}: maps converged ${convergedMs.toFixed(0)} ms after the server came back (relist reason ${opts.reason})`);
    // The relist lines (the maps are read directly; the log pipe may lag behind them).
    for (const kind of ['Service', 'EndpointSlice']) await box.agent!.waitForLog((l) => l.msg === 'k8s relist' && l.kind === kind, 5000, from);
    const lines = box.agent!.logs.slice(from).filter((l) => l.msg === 'k8s relist');
    assert.deepEqual(
      lines.filter((l) => l.kind === 'Service').map((l) => `${l.reason} +${l.added} ~${l.updated} -${l.deleted}`),
      [`${opts.reason} +1 ~0 -1`],
    );
    assert.deepEqual(
      lines.filter((l) => l.kind === 'EndpointSlice').map((l) => `${l.reason} +${l.added} ~${l.updated} -${l.deleted}`),
      [`${opts.reason} +1 ~1 -1`],
    );
    assert.equal(await relists('Service', opts.reason), before.svc + 1, 'one Service relist');
    assert.equal(await relists('EndpointSlice', opts.reason), before.eps + 1, 'one EndpointSlice relist');
  };

  test("case A: resourceVersions restart below the agent's, no event for the changes: one relist (rv_backwards), the maps converge", async () => {
    await restart(
      'case A',
      { base: () => 3, closeWatches: 'clean', reason: 'rv_backwards' },
      () => {
        box.api.apply(slice('web-1', 'web', PODS.slice(0, 1))); // web-b removed
        box.api.create(service('new', '198.19.0.12'));
        box.api.create(slice('new-1', 'new', PODS.slice(1)));
        box.api.remove('EndpointSlice', 'e2e', 'gone-1');
        box.api.remove('Service', 'e2e', 'gone');
      },
      () => backendCount('198.19.0.10') === 1 && backendCount('198.19.0.12') === 1 && backendCount('198.19.0.11') === undefined,
    );
    assert.deepEqual(await servedBy('198.19.0.10'), ['web-a'], 'the removed pod gets no traffic');
    assert.deepEqual(await servedBy('198.19.0.12'), ['web-b'], 'the new Service is served');
    await notServed('198.19.0.11');
    // The watches run on in the new history.
    box.api.apply(slice('web-1', 'web', PODS));
    await waitFor('a change after the relist', () => backendCount('198.19.0.10') === 2);
  });

  test("case B: resourceVersions past the agent's, no DELETED in the new history, the server crashed: one relist (watch_error), the maps converge", async () => {
    await restart(
      'case B',
      { base: (current) => current + 10_000, closeWatches: 'reset', reason: 'watch_error' },
      () => {
        box.api.apply(slice('web-1', 'web', PODS.slice(1))); // web-a removed
        box.api.create(service('newer', '198.19.0.13'));
        box.api.create(slice('newer-1', 'newer', PODS.slice(0, 1)));
        box.api.remove('EndpointSlice', 'e2e', 'new-1');
        box.api.remove('Service', 'e2e', 'new');
      },
      () => backendCount('198.19.0.10') === 1 && backendCount('198.19.0.13') === 1 && backendCount('198.19.0.12') === undefined,
    );
    assert.deepEqual(await servedBy('198.19.0.10'), ['web-b'], 'the removed pod gets no traffic');
    assert.deepEqual(await servedBy('198.19.0.13'), ['web-a'], 'the new Service is served');
    await notServed('198.19.0.12');
  });
});
