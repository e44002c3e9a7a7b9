/**
 * The CLI's reading of the agent's /metrics (agent/cli/agent-http.ts) and
 * the status summary made of it (agent/cli/agent-metrics-summary.ts), on the
 * text the agent's own registry writes, and `kpr service list --frontend`'s
 * filter (agent/cli/service-commands.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Gauge, Registry } from 'prom-client';
import { agentUrl, parsePromText } from '../../agent/cli/agent-http.js';
import { formatMetricsSummary, summarizeMetrics } from '../../agent/cli/agent-metrics-summary.js';
import { CliError } from '../../agent/cli/pinned-maps.js';
import { filterFrontend } from '../../agent/cli/service-commands.js';
import type { ServiceView } from '../../agent/cli/service-view.js';

async function exposition(): Promise<string> {
  const registers = [new Registry()];
  new Gauge({ name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', help: 'h', registers }).set(1_800_000_000);
  const syncs = new Counter({ name: 'kpr_syncs_total', help: 'h', labelNames: ['trigger', 'result'], registers });
  syncs.inc({ trigger: 'initial', result: 'ok' });
  syncs.inc({ trigger: 'event', result: 'ok' }, 4);
  syncs.inc({ trigger: 'event', result: 'error' }, 2);
  const rest = new Counter({ name: 'rest_client_requests_total', help: 'h', labelNames: ['code', 'method', 'host'], registers });
  rest.inc({ code: '200', method: 'GET', host: 'a:6443' }, 6);
  rest.inc({ code: '<error>', method: 'GET', host: 'a:6443' });
  new Gauge({ name: 'kpr_k8s_cache_age_seconds', help: 'h', labelNames: ['kind'], registers }).set({ kind: 'Service' }, 1.25);
  new Counter({ name: 'kpr_k8s_relists_total', help: 'h', labelNames: ['kind', 'reason'], registers }).inc({ kind: 'Service', reason: 'initial' });
  const f = new Gauge({ name: 'kpr_kernel_feature', help: 'h', labelNames: ['feature', 'state', 'fallback'], registers });
  f.set({ feature: 'tcx', state: 'fallback', fallback: 'clsact "filter"' }, 1);
  f.set({ feature: 'sock_destroy', state: 'active', fallback: '' }, 1);
  new Gauge({ name: 'kpr_build_info', help: 'h', labelNames: ['version', 'node_version'], registers }).set({ version: '0.1.0', node_version: 'v22.1.0' }, 1);
  return registers[0].metrics();
}

test('parsePromText reads names, escaped labels and values of prom-client output', async () => {
  const samples = parsePromText(await exposition());
  const tcx = samples.find((s) => s.name === 'kpr_kernel_feature' && s.labels.feature === 'tcx');
  assert.deepEqual(tcx, { name: 'kpr_kernel_feature', labels: { feature: 'tcx', state: 'fallback', fallback: 'clsact "filter"' }, value: 1 });
  assert.equal(samples.find((s) => s.name === 'kpr_build_info')?.labels.version, '0.1.0');
  assert.deepEqual(parsePromText('# HELP x y\nnot a sample line at all {\nx 3\n'), [{ name: 'x', labels: {}, value: 3 }]);
});

test('summarizeMetrics: last sync, sync results, API requests, caches, relists, kernel features', async () => {
  const s = summarizeMetrics(parsePromText(await exposition()), new Date(1_800_000_010_000));
  assert.equal(s.lastSync, new Date(1_800_000_000_000).toISOString());
  assert.equal(s.lastSyncAgeSeconds, 10);
  assert.deepEqual(s.syncs, { ok: 5, error: 2 });
  assert.deepEqual(s.syncErrorsByTrigger, { event: 2 });
  assert.deepEqual(s.apiRequestsByCode, { '200': 6, '<error>': 1 });
  assert.deepEqual(s.cacheAgeSeconds, { Service: 1.25 });
  assert.deepEqual(s.relists, { 'Service/initial': 1 });
  assert.deepEqual(s.kernelFeatures, [
    { feature: 'tcx', state: 'fallback', fallback: 'clsact "filter"' },
    { feature: 'sock_destroy', state: 'active' },
  ]);
  const lines = formatMetricsSummary(s).join('\n');
  assert.match(lines, /^last sync .* \(10s ago\); syncs ok 5, failed 2 \(event 2\)$/m);
  assert.match(lines, /^apiserver requests by code: 200 6, <error> 1 \(1 without a good answer\)$/m);
  assert.match(lines, /^kernel    tcx fallback \(clsact "filter"\), sock_destroy active$/m);
});

test('summarizeMetrics of an agent that never synced says so', () => {
  const s = summarizeMetrics([], new Date());
  assert.equal(s.lastSync, undefined);
  assert.match(formatMetricsSummary(s)[0], /^last sync none succeeded yet/);
});

test('agentUrl asks a wildcard bind on loopback and brackets IPv6', () => {
  assert.equal(agentUrl('0.0.0.0:10256', '--healthz-address'), 'http://127.0.0.1:10256');
  assert.equal(agentUrl('[::]:10249', '--metrics-address'), 'http://[::1]:10249');
  assert.throws(() => agentUrl('nope', '--metrics-address'), CliError);
});

const view = (address: string, port: number, protocol = 'TCP'): ServiceView => ({
  protocol,
  address,
  port,
  scope: 'external',
  id: port,
  flags: [],
  backends: [],
});

test('filterFrontend keeps the frontends on an address, and on its port when given', () => {
  const views = [view('198.19.0.10', 80), view('198.19.0.10', 443), view('198.19.0.11', 80), view('2001:db8::a', 53, 'UDP')];
  assert.deepEqual(
    filterFrontend(views, '198.19.0.10').map((v) => v.port),
    [80, 443],
  );
  assert.deepEqual(
    filterFrontend(views, '198.19.0.10:443').map((v) => `${v.address}:${v.port}`),
    ['198.19.0.10:443'],
  );
  assert.deepEqual(
    filterFrontend(views, '[2001:db8:0::a]:53').map((v) => v.address),
    ['2001:db8::a'],
  );
  assert.deepEqual(
    filterFrontend(views, '2001:db8::a').map((v) => v.address),
    ['2001:db8::a'],
  );
  assert.deepEqual(filterFrontend(views, '198.19.0.12'), []);
  assert.throws(() => filterFrontend(views, '198.19.0.300:80'), CliError);
});
