/**
 * Observability end to end: the real agent in the sandbox with its metrics
 * and health servers on 127.0.0.1 (port 0, found from its log), driven
 * through the embedded API server and real client connections. Every
 * assertion is on what an operator sees: an HTTP status, a header, a metric
 * value compared with the map it describes, a log line.
 */
import { scaled, TIME_SCALE } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { cliBin, bpfObjectPath } from '../support/paths.js';
import { agentBpfObjects } from '../../agent/cli/version.js';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME, type AgentProcess } from '../../sandbox/cluster.js';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { MAP_NAMES } from '../../agent/maps/layout.js';
import { countEntries } from '../../agent/metrics/map-stats.js';
import { NETWORK_PROGRAMMING_BUCKETS } from '../../agent/metrics/buckets.js';
import { kprVersion } from '../../agent/metrics/kpr-version.js';
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME } from '../../agent/k8s/labels.js';
import { requireRoot } from '../support/preflight.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { parseProm, valueOf, type Sample } from '../metrics/prom-text.js';
import { expectedRefusal } from '../support/kernel.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'obs-a', ip: '198.18.0.10' },
  { name: 'obs-b', ip: '198.18.0.11' },
];
const SYNC_PERIOD_MS = 300;
const execFileP = promisify(execFile);

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** bin/kpr as a subprocess: exit code and output. */
async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileP(cliBin, args, { maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** Polls an async check until it holds (sandbox waitFor takes synchronous checks only). */
async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const service = (name: string, clusterIP: string) => httpService('obs', name, clusterIP);
const slice = (name: string, svc: string, ips: string[], annotations: Record<string, string> = {}) => httpSlice('obs', name, svc, ips, annotations);

function node(extra: { taints?: Array<{ key: string; effect: string }>; deletionTimestamp?: string } = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE_NAME, ...(extra.deletionTimestamp ? { deletionTimestamp: extra.deletionTimestamp, finalizers: ['kpr.test/hold'] } : {}) },
    spec: extra.taints ? { taints: extra.taints } : {},
  };
}

describe('observability end to end', { timeout: scaled(180_000) }, () => {
  let box: BoxCluster;
  let metricsUrl: string;
  let healthUrl: string;
  let agentProc: AgentProcess;

  async function scrape(): Promise<Sample[]> {
    const r = await fetch(`${metricsUrl}/metrics`);
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return parseProm(await r.text());
  }

  async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    return valueOf(await scrape(), name, labels) ?? 0;
  }

  async function health(path: '/healthz' | '/livez'): Promise<{ status: number; body: Record<string, any>; headers: Headers }> {
    const r = await fetch(healthUrl + path);
    return { status: r.status, body: await r.json(), headers: r.headers };
  }

  function entries(name: string): number {
    const m = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, name));
    try {
      return countEntries(m) ?? 0;
    } finally {
      m.close();
    }
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    box.api.create(node());
    box.api.create(service('web', '198.19.0.10'));
    box.api.create(
      slice(
        'web-1',
        'web',
        PODS.map((p) => p.ip),
      ),
    );
    box.api.create(service('empty', '198.19.0.20'));
    const agent = (agentProc = await box.startAgent([
      '--metrics-bind-address',
      '127.0.0.1:0',
      '--healthz-bind-address',
      '127.0.0.1:0',
      '--sync-period',
      `${SYNC_PERIOD_MS}ms`,
    ]));
    metricsUrl = `http://${(await agent.waitForLog('metrics server listening')).address}`;
    healthUrl = `http://${(await agent.waitForLog('health server listening')).address}`;
  });

  after(async () => {
    await box?.close();
  });

  test('map gauges equal what the pinned maps hold; capacity is max_entries', async () => {
    const s = await scrape();
    for (const name of [MAP_NAMES.svc, MAP_NAMES.backend, MAP_NAMES.stats, MAP_NAMES.svcMeta]) {
      assert.equal(valueOf(s, 'kpr_bpf_map_entries', { map: name }), entries(name), name);
      const m = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, name));
      assert.equal(valueOf(s, 'kpr_bpf_map_capacity', { map: name }), m.maxEntries, name);
      m.close();
    }
    // web: master + 2 slots; empty: master only.
    assert.equal(valueOf(s, 'kpr_bpf_map_entries', { map: MAP_NAMES.svc }), 4);
    assert.equal(valueOf(s, 'kpr_frontends_programmed'), 2);
    assert.equal(valueOf(s, 'kpr_backends_programmed'), 2);
    assert.equal(valueOf(s, 'kpr_build_info', { node_version: process.version }), 1);
    assert.ok((valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_count') ?? 0) >= 1);
    assert.ok((valueOf(s, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds') ?? 0) > Date.now() / 1000 - 60);
  });

  test('the metrics server also answers /healthz "ok" and /proxyMode "kpr"', async () => {
    assert.equal(await (await fetch(`${metricsUrl}/healthz`)).text(), 'ok');
    assert.equal(await (await fetch(`${metricsUrl}/proxyMode`)).text(), 'kpr');
  });

  test('/configz on the metrics server is the effective configuration, read-only', async () => {
    const r = await fetch(`${metricsUrl}/configz`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'application/json');
    const body = (await r.json()) as { version: string; config: Record<string, any> };
    assert.equal(body.version, kprVersion());
    assert.equal(body.config.nodeName, NODE_NAME);
    assert.equal(body.config.bpffsDir, box.sandbox.bpffsDir);
    assert.equal(body.config.syncPeriodMs, SYNC_PERIOD_MS);
    assert.equal(body.config.metricsBindAddress, '127.0.0.1:0');
    assert.ok(Array.isArray(body.config.podInterfaces) && body.config.podInterfaces.length > 0, JSON.stringify(body.config.podInterfaces));
    assert.equal((await fetch(`${metricsUrl}/configz`, { method: 'POST', body: '{}' })).status, 404);
  });

  test('kpr status shows the last sync, API server and watch state, kernel features and the config, as the agent exports them', async () => {
    const hostPort = (url: string) => url.replace(/^http:\/\//, '');
    // Under TCG (the kernel matrix) a scrape can take seconds: a generous --timeout keeps slowness from reading as absence.
    const args = [
      'status',
      '--healthz-address',
      hostPort(healthUrl),
      '--metrics-address',
      hostPort(metricsUrl),
      '--bpffs',
      box.sandbox.bpffsDir,
      '--timeout',
      '60s',
    ];
    const json = await kpr(...args, '-o', 'json');
    assert.equal(json.code, 0, json.stderr + json.stdout);
    const r = JSON.parse(json.stdout) as Record<string, any>;
    const m = r.metrics.summary;
    assert.ok(m, JSON.stringify(r.metrics));
    const s = await scrape();
    // The last sync is the gauge's (to the second), and recent.
    assert.ok(Math.abs(Date.parse(m.lastSync) / 1000 - valueOf(s, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds')!) < 60);
    assert.ok(Date.parse(m.lastSync) > Date.now() - 60_000, m.lastSync);
    const failedSyncs = agentProc.logs.filter((l) => Number(l.level) >= 40); // pino: 40 warn, 50 error
    assert.ok(m.syncs.ok >= 1 && m.syncs.error === 0, `${JSON.stringify(m.syncs)}; warnings and failed syncs: ${JSON.stringify(failedSyncs)}`);
    assert.ok(m.apiRequestsByCode['200'] >= 1, JSON.stringify(m.apiRequestsByCode));
    assert.deepEqual(
      Object.keys(m.cacheAgeSeconds).sort(),
      s
        .filter((x) => x.name === 'kpr_k8s_cache_age_seconds')
        .map((x) => x.labels.kind)
        .sort(),
    );
    assert.ok(Object.keys(m.cacheAgeSeconds).includes('Service'), JSON.stringify(m.cacheAgeSeconds));
    const features = s
      .filter((x) => x.name === 'kpr_kernel_feature')
      .map((x) => `${x.labels.feature}=${x.labels.state}`)
      .sort();
    assert.ok(features.length > 0);
    assert.deepEqual(m.kernelFeatures.map((f: { feature: string; state: string }) => `${f.feature}=${f.state}`).sort(), features);
    assert.equal(r.metrics.config.config.nodeName, NODE_NAME);
    const table = await kpr(...args);
    assert.equal(table.code, 0, table.stderr + table.stdout);
    assert.match(table.stdout, /^last sync \S+ \(\d+s ago\); syncs ok \d+, failed 0$/m);
    assert.match(table.stdout, /^apiserver requests by code: .*200 \d+/m);
    assert.match(table.stdout, /^watch     caches confirmed: .*Service \d+\.\d+s/m);
    assert.match(table.stdout, /^kernel    \S+ (active|fallback|off)/m);
    assert.match(table.stdout, /^attach    every attachment in place \(cgroup \d+, tcx? \d+; checked [\d.]+s ago\)$/m);
    assert.match(table.stdout, new RegExp(`^config    nodeName=${NODE_NAME} bpffsDir=${box.sandbox.bpffsDir} `, 'm'));
    const all = await kpr(...args, '--show-config');
    assert.match(all.stdout, /^config    every setting in effect \(\/configz\):$/m);
    assert.match(all.stdout, /^ {2}ctUdpTimeoutS=\d+$/m);
    assert.match(all.stdout, new RegExp(`^ {2}bpffsDir=${box.sandbox.bpffsDir}$`, 'm'));
    // An agent without a metrics server: status says so and still answers the rest.
    const port = await closedPort();
    const noMetrics = await kpr('status', '--healthz-address', hostPort(healthUrl), '--metrics-address', `127.0.0.1:${port}`, '--bpffs', box.sandbox.bpffsDir);
    assert.equal(noMetrics.code, 0, noMetrics.stderr);
    assert.ok(
      noMetrics.stdout
        .split('\n')
        .includes(`metrics   127.0.0.1:${port}: ECONNREFUSED; is the kpr agent running with --metrics-bind-address 127.0.0.1:${port}?`),
      noMetrics.stdout,
    );
    assert.match(noMetrics.stdout, /^kpr_svc /m);
  });

  test("kpr version: the CLI, its BPF objects by SHA-256, and the running agent's kpr_build_info", async () => {
    const r = await kpr('version', '--metrics-address', metricsUrl.replace(/^http:\/\//, ''), '--timeout', '1m', '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const v = JSON.parse(r.stdout) as Record<string, any>;
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(v.version, pkg.version);
    assert.equal(v.agent.version, pkg.version, JSON.stringify(v.agent));
    assert.equal(v.agent.nodeVersion, process.version);
    assert.match(v.commit, /^([0-9a-f]{40,64}|unknown)$/);
    const objects = agentBpfObjects(bpfObjectPath);
    assert.deepEqual(
      v.bpfObjects.map((o: { path: string }) => o.path),
      objects,
    );
    for (const o of v.bpfObjects as Array<{ path: string; sha256: string }>)
      assert.equal(o.sha256, createHash('sha256').update(readFileSync(o.path)).digest('hex'), o.path);
    const port = await closedPort();
    const down = await kpr('version', '--metrics-address', `127.0.0.1:${port}`);
    assert.equal(down.code, 0, down.stderr);
    assert.ok(down.stdout.split('\n').includes(`agent     not reachable at 127.0.0.1:${port} (ECONNREFUSED)`), down.stdout);
    const badTimeout = await kpr('version', '--metrics-address', `127.0.0.1:${port}`, '--timeout', 'soon');
    assert.notEqual(badTimeout.code, 0);
    assert.match(badTimeout.stderr, /--timeout/);
  });

  test('kpr service list --frontend keeps the frontends on one address (and port)', async () => {
    const all = JSON.parse((await kpr('service', 'list', '--bpffs', box.sandbox.bpffsDir, '-o', 'json')).stdout) as Array<Record<string, any>>;
    assert.ok(
      all.some((v) => v.address !== '198.19.0.10'),
      'the unfiltered list has other frontends',
    );
    const r = await kpr('service', 'list', '--bpffs', box.sandbox.bpffsDir, '--frontend', '198.19.0.10:80', '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const views = JSON.parse(r.stdout) as Array<Record<string, any>>;
    assert.deepEqual(
      views.map((v) => `${v.service} ${v.address}:${v.port}`),
      ['obs/web 198.19.0.10:80'],
    );
    assert.equal(views[0].backends.length, PODS.length);
    const otherPort = JSON.parse((await kpr('service', 'list', '--bpffs', box.sandbox.bpffsDir, '--frontend', '198.19.0.10:81', '-o', 'json')).stdout);
    assert.deepEqual(otherPort, []);
    const bad = await kpr('service', 'list', '--bpffs', box.sandbox.bpffsDir, '--frontend', 'web');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /invalid --frontend "web"/);
  });

  test('endpoint changes are counted one per slice update, and programming latency is observed from the trigger annotation', async () => {
    const changesBefore = await metric('kubeproxy_sync_proxy_rules_endpoint_changes_total');
    const latencyBefore = await metric('kubeproxy_network_programming_duration_seconds_count');
    const svcChangesBefore = await metric('kubeproxy_sync_proxy_rules_service_changes_total');
    const sets = [[PODS[0].ip], PODS.map((p) => p.ip), [PODS[1].ip]];
    for (const ips of sets) {
      box.api.apply(slice('web-1', 'web', ips, { [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: new Date().toISOString() }));
      await until(`web to have ${ips.length} backends`, async () => valueOf(await scrape(), 'kpr_bpf_map_entries', { map: MAP_NAMES.svc }) === 2 + ips.length);
    }
    const s = await scrape();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_total'), changesBefore + sets.length);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending'), 0);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_service_changes_total'), svcChangesBefore);
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_count'), latencyBefore + sets.length);
    // The annotation has millisecond precision and the path is local: well under a second each
    // (kube-proxy's bucket at or above 1.6 s × the sandbox's time scale).
    const le = String(NETWORK_PROGRAMMING_BUCKETS.find((b) => b >= 1.6 * TIME_SCALE) ?? '+Inf');
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_bucket', { le }), latencyBefore + sets.length);
    assert.ok((valueOf(s, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds') ?? 0) > Date.now() / 1000 - 30);

    box.api.apply({ ...service('web', '198.19.0.10'), metadata: { name: 'web', namespace: 'obs', labels: { touched: 'yes' } } });
    await until('the service change to be counted', async () => (await metric('kubeproxy_sync_proxy_rules_service_changes_total')) === svcChangesBefore + 1);
  });

  test('datapath counters grow with real connections and refusals', async () => {
    const connectBefore = await metric('kpr_datapath_translations_total', { path: 'connect' });
    const refusedBefore = await metric('kpr_datapath_refusals_total', { reason: 'no_backend' });
    const rep = await box.client('http', '198.19.0.10:80', ['--count', '40']);
    assert.equal(rep.ok, 40, JSON.stringify(rep.errors));
    const refused = await box.client('once', '198.19.0.20:80', ['--timeout-ms', '2000']);
    assert.deepEqual(refused.errors, { [REFUSED]: 1 });
    const s = await scrape();
    assert.ok((valueOf(s, 'kpr_datapath_translations_total', { path: 'connect' }) ?? 0) >= connectBefore + 40);
    assert.equal(valueOf(s, 'kpr_datapath_refusals_total', { reason: 'no_backend' }), refusedBefore + 1);
    // The node's own processes are never masqueraded by kpr (rule 35): both series exported, at 0.
    for (const action of ['socket_divert', 'tc_snat']) assert.equal(valueOf(s, 'kpr_datapath_masquerade_total', { action }), 0, action);
  });

  test('/healthz follows the Node (unknown, tainted ToBeDeleted, being deleted); /livez ignores it', async () => {
    let hz = await health('/healthz');
    assert.equal(hz.status, 200, JSON.stringify(hz.body));
    assert.equal(hz.headers.get('content-type'), 'application/json');
    assert.equal(hz.headers.get('x-content-type-options'), 'nosniff');
    assert.deepEqual(Object.keys(hz.body), [
      'lastUpdated',
      'currentTime',
      'nodeEligible',
      'healthy',
      'status',
      'k8sCaches',
      'servicesOverLimit',
      'mapSizes',
      'attachments',
    ]);
    assert.deepEqual(Object.keys(hz.body.status), ['IPv4', 'IPv6']);
    // kpr's additions, last: the k8s caches synced and recently confirmed; every Service within the datapath limits.
    assert.equal(hz.body.k8sCaches.healthy, true, JSON.stringify(hz.body.k8sCaches));
    assert.deepEqual(hz.body.servicesOverLimit, { degraded: false, services: 0, byLimit: {}, listed: [], notListed: 0 });
    // The map sizes: default, as configured; no migration at this start.
    assert.equal(hz.body.mapSizes.configured.kpr_svc, 262144);
    assert.deepEqual(hz.body.mapSizes.inUse, hz.body.mapSizes.configured);
    // Every attachment in place (agent/health/attachment-health.ts; test/e2e/attachment-repair.test.ts breaks them).
    assert.equal(hz.body.attachments.healthy, true, JSON.stringify(hz.body.attachments));
    assert.equal(hz.body.mapSizes.migration, undefined);
    assert.deepEqual(Object.keys(hz.body.k8sCaches.caches).sort(), ['EndpointSlice', 'Node', 'Service']);
    assert.equal(hz.body.lastUpdated, hz.body.currentTime, 'healthy: lastUpdated is the current time');
    assert.ok(Math.abs(Date.parse(hz.body.currentTime) - Date.now()) < 5000);
    const healthz503Before = await metric('kubeproxy_proxy_healthz_total', { code: '503' });

    box.api.apply(node({ taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] }));
    await until('healthz 503 for the tainted node', async () => (await health('/healthz')).status === 503);
    assert.equal((await health('/livez')).status, 200);

    box.api.apply(node());
    await until('healthz 200 once the taint is gone', async () => (await health('/healthz')).status === 200);

    box.api.remove('Node', undefined, NODE_NAME);
    await until('healthz 503 for the deleted node', async () => (await health('/healthz')).status === 503);
    hz = await health('/healthz');
    assert.equal(hz.body.nodeEligible, false);
    assert.equal(hz.body.healthy, true, 'the proxy itself is healthy');
    const lz = await health('/livez');
    assert.equal(lz.status, 200);
    assert.equal('nodeEligible' in lz.body, false);

    box.api.create(node());
    await until('healthz 200 once the node is back', async () => (await health('/healthz')).status === 200);

    const stored = box.api.get('Node', undefined, NODE_NAME)!;
    box.api.update({ ...stored, metadata: { ...stored.metadata, deletionTimestamp: new Date().toISOString(), resourceVersion: undefined } });
    assert.ok(box.api.get('Node', undefined, NODE_NAME)?.metadata?.deletionTimestamp, 'the API server keeps deletionTimestamp');
    await until('healthz 503 for the node being deleted', async () => (await health('/healthz')).status === 503);
    box.api.remove('Node', undefined, NODE_NAME);
    box.api.create(node());
    await until('healthz 200 again', async () => (await health('/healthz')).status === 200);

    assert.ok((await metric('kubeproxy_proxy_healthz_total', { code: '503' })) > healthz503Before);
    assert.ok((await metric('kubeproxy_proxy_livez_total', { code: '200' })) >= 2);
  });

  test('an invalid object is warned about once, not on every periodic resync', async () => {
    const agent = box.agent!;
    const from = agent.logs.length;
    const periodicBefore = await metric('kpr_syncs_total', { trigger: 'periodic', result: 'ok' });
    box.api.create(service('bad', '198.19.0.30'));
    box.api.create({ ...slice('bad-1', 'bad', ['198.18.0.300']) });
    // The watch layer rejects the slice (an address the API server would refuse); the planner skips the
    // Service's externalIP frontend that duplicates its ClusterIP one. Each is warned about once, however many resyncs follow.
    const dup = service('dup-only', '198.19.0.31');
    box.api.create({ ...dup, spec: { ...dup.spec, externalIPs: ['198.19.0.31'] } });
    await agent.waitForLog('k8s object rejected; treated as absent', 10_000, from);
    await agent.waitForLog('skipped invalid or unsupported input', 10_000, from);
    await new Promise((r) => setTimeout(r, 5 * SYNC_PERIOD_MS));
    const periodic = (await metric('kpr_syncs_total', { trigger: 'periodic', result: 'ok' })) - periodicBefore;
    assert.ok(periodic >= 3, `only ${periodic} periodic resyncs ran`);
    const rejections = agent.logs.slice(from).filter((l) => l.msg === 'k8s object rejected; treated as absent' && l.object === 'obs/bad-1');
    assert.equal(rejections.length, 1, JSON.stringify(rejections));
    assert.equal(rejections[0].level, 40, 'a warning');
    assert.equal(rejections[0].kind, 'EndpointSlice');
    const skips = agent.logs.slice(from).filter((l) => l.msg === 'skipped invalid or unsupported input' && String(l.object).includes('dup-only'));
    assert.equal(skips.length, 1, JSON.stringify(skips));
    assert.equal(skips[0].level, 40, 'a warning');
    // The per-sync info line carries counts and duration.
    const sync = agent.logs.slice(from).find((l) => l.msg === 'sync');
    assert.ok(sync && typeof sync.durationMs === 'number' && typeof sync.frontends === 'number', JSON.stringify(sync));
  });
});
