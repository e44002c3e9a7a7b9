/**
 * charts/kpr, linted and rendered by the real helm (v4, from the pinned
 * devDependency): least-privilege RBAC, every agent setting reaching the
 * container, the DaemonSet's node-level needs, and the schema rejecting typos
 * and wrong types.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { AGENT_FLAGS, parseAgentArgs, type AgentConfig } from '../../agent/config.js';
import { computeMapSizes } from '../../agent/datapath/map-sizes.js';
import { configFileArgs } from '../../agent/config-file.js';
import { repoRoot } from '../../sandbox/repo.js';
import { helm, helmVersion } from './helm.js';

const CHART = path.join(repoRoot, 'charts', 'kpr');
const schema = JSON.parse(readFileSync(path.join(CHART, 'values.schema.json'), 'utf8'));
const defaults = YAML.parse(readFileSync(path.join(CHART, 'values.yaml'), 'utf8')) as Record<string, any>;
/** Flags the chart sets outside the config file (top-level values) or never. */
const NOT_IN_CONFIG = new Set(['config', 'help', 'k8s-service-host', 'k8s-service-port']);

type K8sObject = { kind: string; metadata: { name: string; annotations?: Record<string, string> }; [k: string]: any };

function render(values: Record<string, unknown> = {}, extra: string[] = []): K8sObject[] {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-chart-'));
  try {
    const file = path.join(dir, 'values.yaml');
    writeFileSync(file, YAML.stringify(values));
    const r = helm('template', 'kpr', CHART, '--namespace', 'kube-system', '-f', file, ...extra);
    assert.equal(r.status, 0, `helm template failed: ${r.stderr}`);
    return YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter(Boolean) as K8sObject[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function one(objs: K8sObject[], kind: string): K8sObject {
  const found = objs.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `${kind}: ${found.length} rendered`);
  return found[0];
}

function renderedConfig(objs: K8sObject[]): Record<string, unknown> {
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'))!;
  return (YAML.parse(cm.data['config.yaml']) ?? {}) as Record<string, unknown>;
}

/** A valid value different from the chart's default, per config key. */
function nonDefault(key: string): unknown {
  const prop = schema.properties.config.properties[key];
  const types: string[] = prop.type;
  if (types.includes('boolean')) return true;
  // The last choice of an enum is never its default (log-level: trace; udp-termination: netlink).
  if (prop.enum) return (prop.enum as unknown[]).filter((v) => v !== null).at(-1);
  if (key.endsWith('-bind-address')) return key.startsWith('healthz') ? '0.0.0.0:20256' : '0.0.0.0:20249';
  if (prop.pattern?.includes('ms|s|m|h')) return '7s';
  if (key === 'v') return '3';
  if (types.includes('integer')) return 4096;
  if (types.includes('number')) return 0.004;
  if (key === 'bpffs') return '/sys/fs/bpf/kpr-test';
  return `/test/${key}`;
}

describe('charts/kpr with the real helm', () => {
  test('helm is v4 and lints the chart with default and non-default values', () => {
    assert.match(helmVersion(), /^v4\./);
    const lint = helm('lint', '--strict', CHART);
    assert.equal(lint.status, 0, lint.stdout + lint.stderr);
    const lint2 = helm('lint', '--strict', CHART, '--set', 'k8sServiceHost=198.18.0.2,securityContext.privileged=true,metrics.serviceMonitor.enabled=true,config.metrics-bind-address=0.0.0.0:10249,cleanupOnUninstall.enabled=true');
    assert.equal(lint2.status, 0, lint2.stdout + lint2.stderr);
  });

  test('RBAC is exactly get/list/watch on services, nodes and endpointslices', () => {
    const objs = render();
    const role = one(objs, 'ClusterRole');
    const grants = new Set<string>();
    for (const rule of role.rules) {
      for (const verb of rule.verbs) assert.notEqual(verb, '*');
      for (const res of rule.resources) assert.notEqual(res, '*');
      for (const g of rule.apiGroups) for (const r of rule.resources) for (const v of rule.verbs) grants.add(`${g || 'core'}/${r}:${v}`);
    }
    const want = ['core/services', 'core/nodes', 'discovery.k8s.io/endpointslices'].flatMap((r) => ['get', 'list', 'watch'].map((v) => `${r}:${v}`));
    assert.deepEqual([...grants].sort(), want.sort());
    const binding = one(objs, 'ClusterRoleBinding');
    assert.equal(binding.roleRef.name, role.metadata.name);
    assert.equal(binding.subjects[0].name, one(objs, 'ServiceAccount').metadata.name);
    assert.equal(binding.subjects[0].namespace, 'kube-system');
  });

  test('the DaemonSet has what the agent needs on a node', () => {
    const objs = render({ k8sServiceHost: '198.18.0.2' });
    const ds = one(objs, 'DaemonSet');
    const pod = ds.spec.template.spec;
    const agent = pod.containers.find((c: { name: string }) => c.name === 'agent');
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.priorityClassName, 'system-node-critical');
    assert.deepEqual(pod.tolerations, [{ operator: 'Exists' }]);
    assert.equal(ds.spec.updateStrategy.type, 'RollingUpdate');
    assert.equal(ds.spec.updateStrategy.rollingUpdate.maxUnavailable, 1);
    assert.ok(pod.terminationGracePeriodSeconds > 0);
    assert.deepEqual(agent.env.find((e: { name: string }) => e.name === 'NODE_NAME').valueFrom, { fieldRef: { fieldPath: 'spec.nodeName' } });
    assert.deepEqual([agent.livenessProbe.httpGet.path, agent.livenessProbe.httpGet.port], ['/livez', 10256]);
    assert.deepEqual([agent.readinessProbe.httpGet.path, agent.readinessProbe.httpGet.port], ['/healthz', 10256]);
    assert.ok(agent.resources.requests.cpu && agent.resources.requests.memory && agent.resources.limits.memory);
    assert.deepEqual(agent.securityContext.capabilities.add, ['BPF', 'NET_ADMIN', 'SYS_ADMIN', 'PERFMON', 'SYS_RESOURCE', 'SYS_PTRACE']);
    assert.equal(agent.securityContext.privileged, false);
    const vol = (name: string) => pod.volumes.find((v: { name: string }) => v.name === name);
    const mount = (name: string) => agent.volumeMounts.find((m: { name: string }) => m.name === name);
    assert.equal(vol('bpffs').hostPath.path, '/sys/fs/bpf');
    assert.equal(mount('bpffs').mountPath, '/sys/fs/bpf');
    assert.equal(mount('bpffs').mountPropagation, 'HostToContainer', 'Bidirectional needs a privileged container');
    assert.equal(pod.initContainers[0].volumeMounts[0].mountPropagation, 'Bidirectional');
    assert.equal(pod.initContainers[0].securityContext.privileged, true);
    assert.equal(vol('cgroup').hostPath.path, '/sys/fs/cgroup');
    assert.equal(mount('cgroup').mountPath, '/sys/fs/cgroup');
    assert.equal(renderedConfig(objs)['cgroup-path'], '/sys/fs/cgroup');
    assert.deepEqual(agent.args, ['--config=/etc/kpr/config.yaml', '--k8s-service-host=198.18.0.2', '--k8s-service-port=6443']);
    assert.equal(agent.volumeMounts.find((m: { mountPath: string }) => m.mountPath === '/etc/kpr').name, 'config');
    // Off by default: metrics Service, ServiceMonitor, dashboard, clean-up hook.
    assert.deepEqual(objs.map((o) => o.kind).sort(), ['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount']);
  });

  test('privileged mode mounts bpffs Bidirectionally, without the init container', () => {
    const pod = one(render({ securityContext: { privileged: true }, mountBpffs: { enabled: false } }), 'DaemonSet').spec.template.spec;
    const agent = pod.containers[0];
    assert.equal(agent.securityContext.privileged, true);
    assert.equal(agent.securityContext.capabilities, undefined);
    assert.equal(agent.volumeMounts.find((m: { name: string }) => m.name === 'bpffs').mountPropagation, 'Bidirectional');
    assert.equal(pod.initContainers, undefined);
  });

  test('every agent flag is a chart setting (values.yaml, schema, README) and every setting is an agent flag', () => {
    const readme = readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const schemaKeys = Object.keys(schema.properties.config.properties).sort();
    const flagKeys = Object.keys(AGENT_FLAGS).filter((k) => !NOT_IN_CONFIG.has(k)).sort();
    for (const k of flagKeys) {
      assert.ok(schemaKeys.includes(k), `agent flag --${k} is missing from charts/kpr: add it to values.yaml (config), values.schema.json and README.md`);
    }
    assert.deepEqual(schemaKeys, flagKeys, 'values.schema.json config keys are the agent flags');
    assert.deepEqual(Object.keys(defaults.config).sort(), flagKeys, 'values.yaml lists every config key');
    for (const k of flagKeys) assert.match(readme, new RegExp(`\`config\\.${k}\``), `README.md documents config.${k}`);
    for (const k of ['k8sServiceHost', 'k8sServicePort']) assert.match(readme, new RegExp(`\`${k}\``));
  });

  test('every config value reaches the agent, and the agent accepts the file', () => {
    const config = Object.fromEntries(Object.keys(schema.properties.config.properties).map((k) => [k, nonDefault(k)]));
    const objs = render({ config, k8sServiceHost: '2001:db8::2', k8sServicePort: 443, extraArgs: ['--v=4'], updateStrategy: { maxUnavailable: '20%' } });
    const rendered = renderedConfig(objs);
    assert.deepEqual(rendered, config);
    // The file parses against the agent's own flag table.
    const args = configFileArgs(YAML.stringify(rendered), AGENT_FLAGS, 'rendered config.yaml');
    assert.ok(args.length >= Object.keys(config).length);
    const ds = one(objs, 'DaemonSet');
    const agent = ds.spec.template.spec.containers[0];
    assert.deepEqual(agent.args, ['--config=/etc/kpr/config.yaml', '--k8s-service-host=2001:db8::2', '--k8s-service-port=443', '--v=4']);
    assert.equal(agent.livenessProbe.httpGet.port, 20256);
    assert.equal(agent.ports.find((p: { name: string }) => p.name === 'metrics').containerPort, 20249);
    assert.equal(ds.spec.updateStrategy.rollingUpdate.maxUnavailable, '20%');
  });

  test('optional objects: metrics Service, ServiceMonitor, dashboard, clean-up hook Jobs', () => {
    const objs = render({
      config: { 'metrics-bind-address': '0.0.0.0:10249' },
      metrics: { service: { enabled: true }, serviceMonitor: { enabled: true }, dashboard: { enabled: true } },
      cleanupOnUninstall: { enabled: true, nodes: ['node-a', 'node-b'] },
    });
    assert.equal(one(objs, 'Service').spec.ports[0].port, 10249);
    assert.equal(one(objs, 'ServiceMonitor').spec.endpoints[0].port, 'metrics');
    assert.equal(one(objs, 'ServiceMonitor').spec.jobLabel, undefined, 'job: the Service name unless metrics.serviceMonitor.job is set');
    const dash = objs.find((o) => o.metadata.name.endsWith('-dashboard'))!;
    const dashboard = JSON.parse(dash.data['kpr.json']);
    const panels = dashboard.panels as Array<{ targets: Array<{ expr: string }> }>;
    const exprs = panels.flatMap((p) => p.targets.map((t) => t.expr)).join('\n');
    assert.match(exprs, /kubeproxy_sync_proxy_rules_duration_seconds/);
    assert.match(exprs, /kubeproxy_network_programming_duration_seconds/);
    // No panel needs a label only the chart's relabelling adds: job and instance come with every scrape.
    assert.doesNotMatch(exprs + JSON.stringify(dashboard.templating), /\bnode\b/);
    for (const p of panels) for (const t of p.targets) assert.match(t.expr, /\{job=~"\$job", instance=~"\$instance"/, t.expr);

    // The drop-in setting: job="kube-proxy", as kubernetes-mixin's KubeProxyDown and Proxy dashboard select.
    const asKubeProxy = render({ config: { 'metrics-bind-address': '0.0.0.0:10249' }, metrics: { serviceMonitor: { enabled: true, job: 'kube-proxy' } } });
    const sm = one(asKubeProxy, 'ServiceMonitor');
    assert.equal(sm.spec.jobLabel, 'jobLabel');
    assert.equal((one(asKubeProxy, 'Service').metadata as { labels?: Record<string, string> }).labels?.[sm.spec.jobLabel], 'kube-proxy');
    const jobs = objs.filter((o) => o.kind === 'Job');
    assert.deepEqual(jobs.map((j) => j.spec.template.spec.nodeName), ['node-a', 'node-b']);
    for (const j of jobs) {
      assert.equal(j.metadata.annotations!['helm.sh/hook'], 'pre-delete');
      assert.deepEqual(j.spec.template.spec.containers[0].command, ['/opt/kpr/bin/kpr', 'cleanup', '--bpffs=/sys/fs/bpf/kpr']);
    }
    // Metrics on loopback cannot be scraped through a Service.
    const bad = helm('template', 'kpr', CHART, '--set', 'metrics.service.enabled=true');
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /metrics-bind-address/);
  });

  test('the PrometheusRule (off by default): kpr\'s alerts, Services over a datapath limit among them', () => {
    assert.equal(render().filter((o) => o.kind === 'PrometheusRule').length, 0);
    const objs = render({ prometheusRule: { enabled: true, overLimitFor: '2m', labels: { release: 'prom' } } });
    const rule = one(objs, 'PrometheusRule');
    assert.equal(rule.apiVersion, 'monitoring.coreos.com/v1');
    assert.equal((rule.metadata as { labels?: Record<string, string> }).labels?.release, 'prom');
    const alert = rule.spec.groups.flatMap((g: { rules: Array<Record<string, any>> }) => g.rules).find((r: Record<string, any>) => r.alert === 'KprServicesOverLimit');
    assert.ok(alert, 'the KprServicesOverLimit alert');
    assert.match(alert.expr, /^max by \(job, instance, namespace, pod, node, limit\) \(kpr_services_over_limit\{job="kpr-metrics"\}\) > 0$/);
    assert.equal(alert.for, '2m');
    assert.equal(alert.labels.severity, 'warning');
    // Prometheus templates survive helm's: the annotations still hold {{ $labels.instance }} and {{ $value }}.
    assert.match(alert.annotations.summary, /\{\{ \$labels\.instance \}\}.*\{\{ \$value \}\}/);
    const names = rule.spec.groups.flatMap((g: { rules: Array<Record<string, any>> }) => g.rules).map((r: Record<string, any>) => r.alert);
    assert.deepEqual(names, [
      'KprAgentDown',
      'KprSyncErrors',
      'KprNetworkProgrammingLatencyHigh',
      'KprMapFillHigh',
      'KprDriftRepaired',
      'KprK8sCacheUnconfirmed',
      'KprDatapathDropsRising',
      'KprServicesOverLimit',
    ]);
    const lint = helm('lint', '--strict', CHART, '--set', 'prometheusRule.enabled=true');
    assert.equal(lint.status, 0, lint.stdout + lint.stderr);
    const bad = helm('template', 'kpr', CHART, '--set', 'prometheusRule.overLimitFor=soon');
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /overLimitFor/);
  });

  test('the schema rejects wrong types and unknown keys', () => {
    const cases: Array<[string[], RegExp]> = [
      [['--set', 'k8sServicePort=https'], /k8sServicePort.*(got string, want integer|string)/],
      [['--set-json', 'config={"sync-period":5}'], /sync-period/],
      [['--set', 'config.sync-perod=1s'], /sync-perod/],
      [['--set', 'config.log-level=loud'], /log-level/],
      [['--set', 'config.map-size-services=0'], /map-size-services/],
      [['--set', 'config.map-size-conntrack=lots'], /map-size-conntrack/],
      [['--set', 'config.bpf-map-dynamic-size-ratio=2'], /bpf-map-dynamic-size-ratio/],
      [['--set', 'tolerations=all'], /tolerations/],
      [['--set', 'hostNetwork=false'], /hostNetwork/],
    ];
    for (const [args, want] of cases) {
      const r = helm('template', 'kpr', CHART, ...args);
      assert.notEqual(r.status, 0, `${args.join(' ')} was accepted`);
      assert.match(r.stderr, want, `${args.join(' ')}: ${r.stderr}`);
    }
  });

  test('map sizes: chart values become the agent\'s map sizes', () => {
    const config = { 'map-size-services': 40000, 'map-size-frontends': 12000, 'map-size-backends': 20000, 'map-size-conntrack': 65536, 'conntrack-min': 1000, 'bpf-map-dynamic-size-ratio': 0.002 };
    const rendered = renderedConfig(render({ config }));
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-chart-sizes-'));
    try {
      const file = path.join(dir, 'config.yaml');
      writeFileSync(file, YAML.stringify(rendered));
      const cfg = parseAgentArgs(['--config', file, '--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1'], {}) as AgentConfig;
      const plan = computeMapSizes(cfg.mapSizeOptions, { totalMemoryBytes: 2 ** 30, cpus: 2, possibleCpus: 2 });
      assert.equal(plan.byMapName.kpr_svc, 40000);
      assert.equal(plan.byMapName.kpr_svc_meta, 12000);
      assert.equal(plan.byMapName.kpr_backend, 20000);
      assert.equal(plan.byMapName.kpr_aff_match, 20000);
      assert.equal(plan.byMapName.kpr_ct, 65536);
      assert.equal(cfg.mapSizeOptions.dynamicSizeRatio, 0.002);
      assert.equal(cfg.mapSizeOptions.conntrackMin, 1000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Unset: nothing in the file, the agent's defaults.
    const none = renderedConfig(render({}));
    for (const k of Object.keys(config)) assert.equal(k in none, false, k);
  });

  test('NOTES warn loudly without k8sServiceHost', () => {
    const r = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /WARNING: k8sServiceHost is not set/);
    const set = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set', 'k8sServiceHost=198.18.0.2');
    assert.doesNotMatch(set.stdout, /WARNING: k8sServiceHost/);
  });
});
