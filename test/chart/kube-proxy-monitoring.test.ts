/**
 * Monitoring across the migration from kube-proxy (docs/install.md,
 * *Monitoring*): kubernetes-mixin's kube-proxy alerts, its Proxy dashboard's
 * queries and the network programming SLI's recording rules
 * (test/fixtures/kube-proxy/kubernetes-mixin.rules.yaml) under the real
 * `promtool test rules`, on a two-node cluster whose nodes move from
 * kube-proxy to kpr one after the other.
 *
 * kpr's series carry the labels Prometheus gives them: the chart's
 * PodMonitor or ServiceMonitor, rendered by the real helm, is turned into the
 * scrape config prometheus-operator generates for it
 * (test/support/prometheus-operator.ts) over the targets Kubernetes discovery
 * would find for the rendered DaemonSet's pods, and a real Prometheus applies
 * that relabelling; the test reads each target's labels back from its API.
 * Nothing here hard-codes kpr's job label. With the documented values (and
 * either monitor with its default job) KubeProxyDown stays quiet and the
 * dashboard has data after the last node moved; with no monitor, or one
 * with prometheus-operator's default job, it fires once the last node has
 * moved (and not before).
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { monitorScrapeConfig, type DiscoveredPod, type ScrapeConfig } from '../support/prometheus-operator.js';
import { promtool, startPrometheus, type PrometheusServer } from '../support/prometheus.js';
import { render, type K8sObject } from './render.js';

const RULES = path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubernetes-mixin.rules.yaml');
const docs = (file: string) => readFileSync(path.join(repoRoot, 'docs', file), 'utf8');

/**
 * The two nodes. Their addresses are loopback ones: the real Prometheus that
 * relabels the targets also scrapes them (nothing answers), and a scrape must
 * not leave this machine.
 */
const PODS: DiscoveredPod[] = [
  { name: 'kpr-n1abc', node: 'node-1', ip: '127.0.0.10' },
  { name: 'kpr-n2def', node: 'node-2', ip: '127.0.0.11' },
];
/** Minutes at which node-1, then node-2 (the last), moves to kpr; the series run for END minutes. */
const MOVES = [20, 40];
const END = 100;

type Labels = Record<string, string>;
type Sample = number | '_' | 'stale';

interface Scenario {
  name: string;
  /** values files, in order */
  values: string[];
  /** the job kpr's series get (what Prometheus' relabelling said), or none when nothing scrapes kpr */
  job: string | undefined;
  kubeProxyDownFires: boolean;
}

/** The ```yaml block of a docs page that starts with `# <title>`, parsed. */
function docsYaml(page: string, title: string): string {
  const m = new RegExp('```yaml\\n# ' + title.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '\\n([\\s\\S]*?)```').exec(docs(page));
  assert.ok(m, `docs/${page} has no yaml block "# ${title}"`);
  return m[1];
}

const VALUES_KUBEADM = docsYaml('platforms.md', 'values-kubeadm.yaml');
const VALUES_MONITORING = docsYaml('install.md', 'values-kubeadm.yaml: Prometheus scrapes kpr as job="kube-proxy"');
const HOST = 'k8sServiceHost: 198.18.0.2\n';
const IPV6 = 'a PodMonitor on an IPv6 node';

const SCENARIOS: Scenario[] = [
  { name: "docs/install.md's values (kubeadm, its monitor)", values: [VALUES_KUBEADM, VALUES_MONITORING], job: 'kube-proxy', kubeProxyDownFires: false },
  {
    name: 'metrics.podMonitor.enabled, chart defaults',
    values: [HOST, 'metrics: {podMonitor: {enabled: true}}'],
    job: 'kube-proxy',
    kubeProxyDownFires: false,
  },
  {
    name: 'metrics.serviceMonitor.enabled, chart defaults',
    values: [HOST, 'metrics: {serviceMonitor: {enabled: true}}'],
    job: 'kube-proxy',
    kubeProxyDownFires: false,
  },
  {
    name: "a ServiceMonitor with prometheus-operator's default job",
    values: [HOST, 'metrics: {serviceMonitor: {enabled: true, job: ""}}'],
    job: 'kpr-metrics',
    kubeProxyDownFires: true,
  },
  {
    name: "a PodMonitor with prometheus-operator's default job",
    values: [HOST, 'metrics: {podMonitor: {enabled: true, job: ""}}'],
    job: 'kube-system/kpr',
    kubeProxyDownFires: true,
  },
  { name: 'no monitor: kpr not scraped', values: [HOST], job: undefined, kubeProxyDownFires: true },
];

/** `helm template` of the chart with these values files, by the real helm. */
function renderWith(values: string[], dir: string): K8sObject[] {
  const files = values.map((v, i) => {
    const f = path.join(dir, `values-${i}.yaml`);
    writeFileSync(f, v);
    return f;
  });
  return render(
    {},
    files.flatMap((f) => ['-f', f]),
  );
}

/** One value per minute from 0 to END. */
function seriesValues(at: (minute: number) => Sample): string {
  return Array.from({ length: END + 1 }, (_, t) => String(at(t))).join(' ');
}

function selector(name: string, labels: Labels): string {
  const inner = Object.entries(labels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(',');
  return `${name}{${inner}}`;
}

/**
 * kube-proxy on node i until it moves (its series end with a staleness
 * marker, as when its pod is deleted), labelled as kube-prometheus-stack's
 * kube-proxy ServiceMonitor labels them; then kpr's, with `kpr` labels from
 * the chart's relabelling (none: not scraped). Counters grow 6 per minute
 * (0.1/s); every sync under 1 ms, every network programming 1-2 s.
 */
function inputSeries(kpr: Labels[] | undefined): Array<{ series: string; values: string }> {
  const out: Array<{ series: string; values: string }> = [];
  PODS.forEach((pod, i) => {
    const move = MOVES[i];
    const kubeProxy: Labels = {
      job: 'kube-proxy',
      instance: `${pod.ip}:10249`,
      namespace: 'kube-system',
      pod: `kube-proxy-${pod.node}`,
      service: 'kube-prometheus-stack-kube-proxy',
      endpoint: 'http-metrics',
    };
    const before = (v: (t: number) => number) => seriesValues((t) => (t < move ? v(t) : t === move ? 'stale' : '_'));
    const afterMove = (v: (t: number) => number) => seriesValues((t) => (t > move ? v(t - move) : '_'));
    const histograms = (labels: Labels, values: (v: (t: number) => number) => string) => [
      { series: selector('up', labels), values: values(() => 1) },
      { series: selector('kubeproxy_sync_proxy_rules_duration_seconds_bucket', { ...labels, le: '0.001' }), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_sync_proxy_rules_duration_seconds_bucket', { ...labels, le: '0.002' }), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_sync_proxy_rules_duration_seconds_bucket', { ...labels, le: '+Inf' }), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_sync_proxy_rules_duration_seconds_count', labels), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_network_programming_duration_seconds_bucket', { ...labels, le: '1' }), values: values(() => 0) },
      { series: selector('kubeproxy_network_programming_duration_seconds_bucket', { ...labels, le: '2' }), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_network_programming_duration_seconds_bucket', { ...labels, le: '+Inf' }), values: values((t) => 6 * t) },
      { series: selector('kubeproxy_network_programming_duration_seconds_count', labels), values: values((t) => 6 * t) },
      { series: selector('rest_client_requests_total', { ...labels, code: '200', method: 'GET', host: '198.18.0.2:6443' }), values: values((t) => 6 * t) },
      { series: selector('process_resident_memory_bytes', labels), values: values(() => 400_000_000) },
    ];
    out.push(...histograms(kubeProxy, before));
    if (kpr) out.push(...histograms(kpr[i], afterMove));
  });
  return out;
}

/** The promtool unit test of one scenario: `kpr` is each node's kpr target labels (undefined: not scraped). */
function unitTest(s: Scenario, kpr: Labels[] | undefined): Record<string, unknown> {
  const down = (fires: boolean) => (fires ? [{ exp_labels: { severity: 'critical' } }] : []);
  const asKubeProxy = s.job === 'kube-proxy';
  // promtool compares values exactly: scaled to integers and rounded.
  const scaled = (expr: string, by: number) => `round(${expr} * ${by})`;
  const up = (n: number) => ({ eval_time: '', expr: 'proxy_dashboard:up', exp_samples: n ? [{ labels: 'proxy_dashboard:up', value: n }] : [] });
  const kprLabels = kpr ?? [];
  return {
    name: s.name,
    interval: '1m',
    input_series: inputSeries(kpr),
    alert_rule_test: [
      // Before any move, and with node-1 moved: node-2's kube-proxy is up either way.
      { eval_time: '15m', alertname: 'KubeProxyDown', exp_alerts: [] },
      { eval_time: '35m', alertname: 'KubeProxyDown', exp_alerts: [] },
      // The last node moved at 40m: absent from then on, pending for 15 minutes.
      { eval_time: '50m', alertname: 'KubeProxyDown', exp_alerts: [] },
      { eval_time: '60m', alertname: 'KubeProxyDown', exp_alerts: down(s.kubeProxyDownFires) },
      { eval_time: `${END}m`, alertname: 'KubeProxyDown', exp_alerts: down(s.kubeProxyDownFires) },
      { eval_time: `${END}m`, alertname: 'KubeProxyInstanceUnreachable', exp_alerts: [] },
    ],
    promql_expr_test: [
      // The dashboard's Up panel: kube-proxy's two targets, then one of each, then kpr's two (or none).
      { ...up(2), eval_time: '15m' },
      { ...up(asKubeProxy ? 2 : 1), eval_time: '35m' },
      { ...up(asKubeProxy ? 2 : 0), eval_time: `${END}m` },
      ...(asKubeProxy
        ? [
            { eval_time: `${END}m`, expr: scaled('proxy_dashboard:rules_sync_rate', 10), exp_samples: [{ labels: '{}', value: 2 }] },
            {
              eval_time: `${END}m`,
              expr: scaled('proxy_dashboard:rule_sync_latency_99th_quantile', 100000),
              exp_samples: kprLabels.map((l) => ({ labels: selector('', l), value: 99 })),
            },
            { eval_time: `${END}m`, expr: scaled('proxy_dashboard:network_programming_rate', 10), exp_samples: [{ labels: '{}', value: 2 }] },
            {
              eval_time: `${END}m`,
              expr: scaled('proxy_dashboard:network_programming_latency_99th_quantile', 100),
              exp_samples: kprLabels.map((l) => ({ labels: selector('', { instance: l.instance }), value: 199 })),
            },
            { eval_time: `${END}m`, expr: scaled('proxy_dashboard:kube_api_request_rate_2xx', 10), exp_samples: [{ labels: '{}', value: 2 }] },
            {
              eval_time: `${END}m`,
              expr: 'proxy_dashboard:memory',
              exp_samples: kprLabels.map((l) => ({ labels: selector('proxy_dashboard:memory', l), value: 400_000_000 })),
            },
          ]
        : [{ eval_time: `${END}m`, expr: 'proxy_dashboard:rules_sync_rate', exp_samples: [] }]),
      // The SLI's recording rules select no job: they go on whoever is scraped.
      {
        eval_time: `${END}m`,
        expr: scaled('kubeproxy:kubeproxy_network_programming_duration:histogram_quantile{quantile="0.99"}', 100),
        exp_samples: kpr ? [{ labels: '{quantile="0.99"}', value: 199 }] : [],
      },
    ],
  };
}

describe("kubernetes-mixin's kube-proxy alerts and dashboard across the migration, on the chart's relabelled series", () => {
  let dir: string;
  let prom: PrometheusServer | undefined;
  /** Per scenario with a monitor: its scrape config and each pod's target labels as Prometheus relabelled them. */
  const scraped = new Map<string, { config: ScrapeConfig; targets: Labels[]; dropped: Labels[] }>();

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-kube-proxy-monitoring-'));
    const configs = new Map<string, ScrapeConfig>();
    for (const s of SCENARIOS) {
      const objs = renderWith(s.values, dir);
      if (s.job === undefined) {
        assert.deepEqual(
          objs.filter((o) => /Monitor$/.test(o.kind)),
          [],
          `${s.name}: no monitor rendered`,
        );
        continue;
      }
      const config = monitorScrapeConfig(objs, PODS);
      configs.set(s.name, { ...config, job_name: `${config.job_name}/${configs.size}` });
    }
    // An IPv6 node: the PodMonitor brackets the address.
    const v6 = monitorScrapeConfig(renderWith([HOST, "config: {metrics-bind-address: '[::]:10249'}", 'metrics: {podMonitor: {enabled: true}}'], dir), [
      { name: 'kpr-v6', node: 'node-6', ip: '::1' },
    ]);
    configs.set(IPV6, { ...v6, job_name: `${v6.job_name}/ipv6` });
    prom = await startPrometheus({ job: 'unused', targets: [], scrapeConfigs: [...configs.values()] });
    const deadline = Date.now() + 30_000;
    for (;;) {
      const body = (await prom.get('/api/v1/targets?state=any')) as {
        data: { activeTargets: Array<{ scrapePool: string; labels: Labels }>; droppedTargets: Array<{ discoveredLabels: Labels }> };
      };
      const byPool = (pool: string) => body.data.activeTargets.filter((t) => t.scrapePool === pool).map((t) => t.labels);
      if ([...configs.values()].every((c) => byPool(c.job_name).length > 0)) {
        for (const [name, c] of configs) {
          // Prometheus 2.42 lists a dropped target's labels as relabelled up to the rule that dropped it: the job is in __tmp_prometheus_job_name by then.
          const dropped = body.data.droppedTargets.map((t) => t.discoveredLabels).filter((l) => (l.job ?? l.__tmp_prometheus_job_name) === c.job_name);
          scraped.set(name, { config: c, targets: byPool(c.job_name).sort((a, b) => a.instance.localeCompare(b.instance)), dropped });
        }
        break;
      }
      assert.ok(Date.now() < deadline, `Prometheus did not list the targets:\n${prom.log().slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });

  after(async () => {
    await prom?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("Prometheus relabels each agent to one target at <node IP>:10249 with the monitor's job", () => {
    assert.deepEqual(
      scraped.get(IPV6)!.targets.map((t) => [t.instance, t.job]),
      [['[::1]:10249', 'kube-proxy']],
    );
    for (const s of SCENARIOS.filter((x) => x.job !== undefined)) {
      const { config, targets, dropped } = scraped.get(s.name)!;
      assert.equal(targets.length, PODS.length, `${s.name}: one target per agent: ${JSON.stringify(targets)}`);
      targets.forEach((t, i) => {
        assert.equal(t.job, s.job, `${s.name}: job`);
        assert.equal(t.instance, `${PODS[i].ip}:10249`, `${s.name}: instance`);
        assert.equal(t.node, PODS[i].node, `${s.name}: node`);
        assert.equal(t.namespace, 'kube-system');
        assert.equal(t.pod, PODS[i].name);
      });
      if (config.job_name.startsWith('podMonitor/')) {
        // The pod declares no ports: every container is a port-free target; only the agent's is kept (its init containers are dropped).
        const droppedNames = dropped.map((l) => l.__meta_kubernetes_pod_container_name);
        assert.equal(droppedNames.filter((n) => n === 'mount-bpffs').length, PODS.length, `${s.name}: ${droppedNames.join(', ')}`);
        assert.ok(!droppedNames.includes('agent'), `${s.name}: the agent's target is kept`);
        for (const t of targets) assert.equal(t.container, 'agent');
      } else {
        assert.deepEqual(dropped, []);
        for (const t of targets) assert.equal(t.service, 'kpr-metrics');
      }
    }
  });

  for (const s of SCENARIOS) {
    test(`${s.name}: KubeProxyDown ${s.kubeProxyDownFires ? 'fires once the last node moved' : 'stays quiet, the Proxy dashboard has data'}`, () => {
      const kpr = s.job === undefined ? undefined : scraped.get(s.name)!.targets;
      const work = mkdtempSync(path.join(os.tmpdir(), 'kpr-promtool-'));
      try {
        copyFileSync(RULES, path.join(work, 'kube-proxy.rules.yaml'));
        writeFileSync(
          path.join(work, 'test.yaml'),
          YAML.stringify({ rule_files: ['kube-proxy.rules.yaml'], evaluation_interval: '1m', tests: [unitTest(s, kpr)] }),
        );
        const r = promtool(['test', 'rules', 'test.yaml'], work);
        assert.equal(r.status, 0, r.stdout + r.stderr);
        assert.match(r.stdout, /SUCCESS/);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });
  }

  test('the unit tests can fail: kpr scraped as job="kube-proxy" but expected to fire', () => {
    const s = SCENARIOS[0];
    const work = mkdtempSync(path.join(os.tmpdir(), 'kpr-promtool-'));
    try {
      copyFileSync(RULES, path.join(work, 'kube-proxy.rules.yaml'));
      writeFileSync(
        path.join(work, 'test.yaml'),
        YAML.stringify({
          rule_files: ['kube-proxy.rules.yaml'],
          evaluation_interval: '1m',
          tests: [unitTest({ ...s, kubeProxyDownFires: true }, scraped.get(s.name)!.targets)],
        }),
      );
      const r = promtool(['test', 'rules', 'test.yaml'], work);
      assert.notEqual(r.status, 0);
      assert.match(r.stdout + r.stderr, /KubeProxyDown/);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});
