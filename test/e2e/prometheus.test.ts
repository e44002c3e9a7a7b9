/**
 * kpr in a real Prometheus: Debian's prometheus server (127.0.0.1, a free
 * port, a temporary directory, stopped in `after`) scrapes the sandbox
 * agent every second with the scrape config prometheus-operator makes of the
 * chart's PodMonitor (rendered by the real helm with the agent's metrics port;
 * test/support/prometheus-operator.ts), whose relabelling gives its series
 * job "kube-proxy", with the chart's alerting rules (rendered likewise) loaded. Service and EndpointSlice changes are
 * driven through the embedded API server; Prometheus' HTTP API then answers
 * kube-proxy's sync-latency and network-programming SLI queries, every
 * dashboard panel's expression and every alert's, with data wherever the
 * sandbox produces it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME } from '../../sandbox/cluster.js';
import { repoRoot } from '../../sandbox/repo.js';
import { scaled } from '../../sandbox/time-scale.js';
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME } from '../../agent/k8s/labels.js';
import { requireRoot } from '../support/preflight.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { renderedRuleGroups, ruleFile, startPrometheus, type PrometheusServer, type PromResult, type RuleGroup } from '../support/prometheus.js';
import { podMonitorScrapeConfig } from '../support/prometheus-operator.js';
import { one, render } from '../chart/render.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';

const JOB = 'kube-proxy';
const PODS = [
  { name: 'prom-a', ip: '198.18.0.10' },
  { name: 'prom-b', ip: '198.18.0.11' },
];
/** Expressions (dashboard targets, alert left-hand sides) whose series the sandbox never creates, and why. */
const NO_DATA_HERE: Array<[RegExp, string]> = [
  [/kpr_map_operation_errors_total/, 'no map operation fails'],
  [/kpr_drift_repaired_entries_total/, 'nothing changes the maps behind the agent'],
  [/kpr_syncs_total\{[^}]*result="error"/, 'no sync fails'],
];

async function until(what: string, check: () => Promise<boolean>, timeoutMs = scaled(30_000)): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const service = (name: string, clusterIP: string, spec: Record<string, unknown> = {}) => httpService('prom', name, clusterIP, spec);

const slice = (name: string, svc: string, eps: Array<{ ip: string; node: string }>, annotations: Record<string, string> = {}) =>
  httpSlice('prom', name, svc, eps, annotations);

const here = (ips: string[]) => ips.map((ip) => ({ ip, node: NODE_NAME }));

/** A dashboard expression with its template variables set as "All" would (job and instance: any). */
function concrete(expr: string): string {
  return expr.replaceAll('$job', JOB).replaceAll('$instance', '.+');
}

function noDataReason(expr: string): string | undefined {
  return NO_DATA_HERE.find(([re]) => re.test(expr))?.[1];
}

/** The left-hand side of an alert's final comparison ("… > 0.9" → "…"). */
function lhs(expr: string): string {
  const m = /^([\s\S]*\S)\s+(?:>|<|==|>=|<=|!=)\s+[0-9.e+-]+$/.exec(expr.trim());
  assert.ok(m, `alert expression ends with a comparison to a number: ${expr}`);
  return m[1];
}

describe('kpr scraped by a real Prometheus', { timeout: scaled(240_000) }, () => {
  let box: BoxCluster;
  let prom: PrometheusServer | undefined;
  let metricsAddress: string;
  let groups: RuleGroup[];

  async function vector(expr: string): Promise<PromResult[]> {
    const r = await prom!.query(expr);
    assert.equal(r.status, 'success', `${expr}: ${r.status === 'error' ? r.error : ''}`);
    return r.status === 'success' ? r.result : [];
  }

  async function scalarOf(expr: string): Promise<number> {
    const v = await vector(expr);
    assert.equal(v.length, 1, `${expr}: one series, got ${JSON.stringify(v)}`);
    return Number(v[0].value[1]);
  }

  async function agentMetric(name: string, labels: Record<string, string> = {}): Promise<number> {
    const r = await fetch(`http://${metricsAddress}/metrics`);
    return valueOf(parseProm(await r.text()), name, labels) ?? 0;
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, spec: {} });
    box.api.create(service('web', '198.19.0.10'));
    box.api.create(slice('web-1', 'web', here(PODS.map((p) => p.ip))));
    // internalTrafficPolicy Local with its only endpoint on another node: kube-proxy's "no local endpoints".
    box.api.create(service('elsewhere', '198.19.0.30', { internalTrafficPolicy: 'Local' }));
    box.api.create(slice('elsewhere-1', 'elsewhere', [{ ip: '198.18.0.50', node: 'another-node' }]));
    const agent = await box.startAgent(['--sync-period', '1s']);
    metricsAddress = (await agent.waitForLog('metrics server listening')).address as string;
    groups = renderedRuleGroups(['metrics.podMonitor.enabled=true']);
    // The chart's PodMonitor with its defaults, but for the agent's port (the sandbox's is a free one), as the
    // operator turns it into a scrape config; the agent's pod is on 127.0.0.1 (its metrics address).
    const [host, port] = [metricsAddress.slice(0, metricsAddress.lastIndexOf(':')), metricsAddress.slice(metricsAddress.lastIndexOf(':') + 1)];
    const chart = render({ k8sServiceHost: '198.18.0.2', config: { 'metrics-bind-address': `0.0.0.0:${port}` }, metrics: { podMonitor: { enabled: true } } });
    const scrape = podMonitorScrapeConfig(one(chart, 'PodMonitor'), one(chart, 'DaemonSet'), [{ name: 'kpr-sandbox', node: NODE_NAME, ip: host }]);
    prom = await startPrometheus({
      job: JOB,
      targets: [],
      scrapeConfigs: [{ ...scrape, scrape_interval: '1s' }],
      scrapeIntervalSeconds: 1,
      rules: ruleFile(groups),
    });
  });

  after(async () => {
    try {
      await prom?.stop();
    } finally {
      await box?.close();
    }
  });

  test("Service changes show up in kube-proxy's sync and network programming SLIs", async () => {
    await until('Prometheus to scrape the agent', async () => (await vector(`up{job="${JOB}"} == 1`)).length === 1);
    // kubernetes-mixin's KubeProxyDown is quiet: the PodMonitor's relabelling named the agent's series job="kube-proxy".
    assert.deepEqual(await vector(`absent(up{job="kube-proxy"} == 1)`), []);
    const [up] = await vector(`up{job="kube-proxy"}`);
    assert.equal(up.metric.instance, metricsAddress);
    assert.equal(up.metric.node, NODE_NAME);
    assert.equal(up.metric.container, 'agent');
    const programmedBefore = await agentMetric('kubeproxy_network_programming_duration_seconds_count');
    const sets = [[PODS[0].ip], PODS.map((p) => p.ip), [PODS[1].ip], PODS.map((p) => p.ip)];
    for (const ips of sets) {
      box.api.apply(slice('web-1', 'web', here(ips), { [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: new Date().toISOString() }));
      await until(
        `the slice change to ${ips.join(',')} programmed`,
        async () => (await agentMetric('kubeproxy_sync_proxy_rules_endpoint_changes_pending')) === 0,
      );
    }
    box.api.create(service('extra', '198.19.0.40'));
    box.api.remove('Service', 'prom', 'extra');
    // A watch the server ends cleanly: kpr_k8s_watch_ends_total{reason="closed"} (resumed).
    box.api.dropWatches();
    await until(
      'the programming latencies observed',
      async () => (await agentMetric('kubeproxy_network_programming_duration_seconds_count')) >= programmedBefore + sets.length,
    );
    const want = await agentMetric('kubeproxy_network_programming_duration_seconds_count');
    // Two scrapes after the last change, so rate() over the window sees the increase.
    await until('Prometheus to hold the observations', async () => {
      const v = await vector(`kubeproxy_network_programming_duration_seconds_count{job="${JOB}"}`);
      return v.length === 1 && Number(v[0].value[1]) >= want;
    });
    await new Promise((r) => setTimeout(r, 2500));

    const syncP99 = await scalarOf('histogram_quantile(0.99, sum by (le) (rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket[1m])))');
    assert.ok(Number.isFinite(syncP99) && syncP99 > 0, `sync p99 ${syncP99}`);
    // The network programming latency SLI (kube-proxy's own histogram, its buckets).
    const npP99 = await scalarOf('histogram_quantile(0.99, sum by (le) (rate(kubeproxy_network_programming_duration_seconds_bucket[1m])))');
    assert.ok(Number.isFinite(npP99) && npP99 > 0, `network programming p99 ${npP99}`);
    const buckets = await vector(`count(kubeproxy_network_programming_duration_seconds_bucket{job="${JOB}"})`);
    assert.equal(Number(buckets[0].value[1]), 82, "kube-proxy's 81 buckets and +Inf");

    assert.equal(
      await scalarOf(`kubeproxy_sync_proxy_rules_no_local_endpoints_total{job="${JOB}",traffic_policy="internal"}`),
      1,
      'elsewhere: iTP=Local, endpoint on another node',
    );
    assert.equal(await scalarOf(`kubeproxy_sync_proxy_rules_no_local_endpoints_total{job="${JOB}",traffic_policy="external"}`), 0);
    // client-go's names for the agent's API requests: the lists and watches, answered 200, to the sandbox API server.
    const apiHost = new URL(box.api.url).host;
    assert.ok(
      (await scalarOf(`sum(rest_client_requests_total{job="${JOB}",code="200",method="GET",host="${apiHost}"})`)) >= 6,
      'three lists and three watches at least',
    );
    assert.ok((await scalarOf(`sum(rest_client_request_duration_seconds_count{job="${JOB}",verb="GET",host="${apiHost}"})`)) >= 3, 'the lists are timed');
    assert.ok((await scalarOf(`sum(kpr_k8s_watch_ends_total{job="${JOB}",reason="closed"})`)) >= 3, 'the dropped watches ended "closed"');
    assert.ok((await scalarOf(`process_resident_memory_bytes{job="${JOB}"}`)) > 0);
  });

  test("every dashboard panel's expression parses and, where the sandbox has the series, returns data", async () => {
    const dashboard = JSON.parse(readFileSync(path.join(repoRoot, 'charts', 'kpr', 'dashboards', 'kpr.json'), 'utf8')) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    };
    let checked = 0;
    for (const panel of dashboard.panels) {
      for (const t of panel.targets) {
        const expr = concrete(t.expr);
        assert.doesNotMatch(expr, /\$/, `${panel.title}: every variable is substituted`);
        const v = await vector(expr);
        const why = noDataReason(expr);
        if (!why) assert.ok(v.length > 0, `${panel.title}: ${expr} returns data`);
        checked++;
      }
    }
    assert.ok(checked >= dashboard.panels.length);
    // The template variables' own queries.
    assert.ok((await vector(`count by (job) (kubeproxy_sync_proxy_rules_duration_seconds_count)`)).some((s) => s.metric.job === JOB));
    assert.ok(
      (await vector(`count by (instance) (kubeproxy_sync_proxy_rules_duration_seconds_count{job=~"${JOB}"})`)).some(
        (s) => s.metric.instance === metricsAddress,
      ),
    );
  });

  test('every alert is loaded, evaluates without error, and its measured side returns data', async () => {
    const rules = groups.flatMap((g) => g.rules);
    assert.equal(rules.length, 8);
    await until('every rule evaluated', async () => {
      const body = await prom!.get('/api/v1/rules');
      const loaded = (body.data.groups as Array<{ rules: Array<{ name: string; health: string; lastEvaluation: string }> }>).flatMap((g) => g.rules);
      return loaded.length === rules.length && loaded.every((r) => r.health === 'ok' && !r.lastEvaluation.startsWith('0001-'));
    });
    const body = await prom!.get('/api/v1/rules');
    for (const r of body.data.groups.flatMap((g: { rules: unknown[] }) => g.rules) as Array<{ name: string; health: string; lastError?: string }>) {
      assert.equal(r.health, 'ok', `${r.name}: ${r.lastError}`);
    }
    for (const rule of rules) {
      await vector(rule.expr); // parses and evaluates
      const side = lhs(rule.expr);
      const v = await vector(side);
      if (!noDataReason(side)) assert.ok(v.length > 0, `${rule.alert}: ${side} returns data`);
    }
    // A healthy sandbox has no alert firing, nor even pending.
    const alerts = (await prom!.get('/api/v1/alerts')).data.alerts as Array<{ labels: { alertname: string }; state: string }>;
    assert.deepEqual(
      alerts.map((a) => `${a.labels.alertname} ${a.state}`),
      [],
    );
  });
});
