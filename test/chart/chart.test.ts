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
import { AGENT_FLAGS, parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { computeMapSizes } from '../../agent/datapath/map-sizes.js';
import { configFileArgs } from '../../agent/config/config-file.js';
import { conntrackSysctlsArgs } from '../../agent/config/conntrack-sysctl-settings.js';
import { repoRoot } from '../support/paths.js';
import { helm, helmVersion } from './helm.js';
import { CHART, one, render, type K8sObject } from './render.js';

const schema = JSON.parse(readFileSync(path.join(CHART, 'values.schema.json'), 'utf8'));
const defaults = YAML.parse(readFileSync(path.join(CHART, 'values.yaml'), 'utf8')) as Record<string, any>;
/** Flags the chart sets outside the config file (top-level values) or never. */
const NOT_IN_CONFIG = new Set(['config', 'help', 'k8s-service-host', 'k8s-service-port']);

function renderedConfig(objs: K8sObject[]): Record<string, unknown> {
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'))!;
  return (YAML.parse(cm.data['config.yaml']) ?? {}) as Record<string, unknown>;
}

/** A valid value different from the chart's default, per config key. */
function nonDefault(key: string): unknown {
  const prop = schema.properties.config.properties[key];
  if (key.endsWith('-bind-address')) return key.startsWith('healthz') ? '0.0.0.0:20256' : '0.0.0.0:20249';
  const types: string[] = prop.type;
  if (types.includes('boolean')) return true;
  // The last choice of an enum is never its default (log-level: trace; udp-termination: netlink).
  if (prop.enum) return (prop.enum as unknown[]).filter((v) => v !== null).at(-1);
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
    const lint2 = helm(
      'lint',
      '--strict',
      CHART,
      '--set',
      'k8sServiceHost=198.18.0.2,securityContext.privileged=true,metrics.serviceMonitor.enabled=true,config.metrics-bind-address=0.0.0.0:10249,cleanupOnUninstall.enabled=true',
    );
    assert.equal(lint2.status, 0, lint2.stdout + lint2.stderr);
    const lint3 = helm(
      'lint',
      '--strict',
      CHART,
      '--kube-version',
      '1.29.0',
      '--set',
      'kubeconfigFromConfigMap.enabled=true,migration.enabled=true,cleanupOnUninstall.enabled=true,dnsPolicy=ClusterFirstWithHostNet,updateStrategy.rollingUpdate.maxUnavailable=0,updateStrategy.rollingUpdate.maxSurge=1',
      '--set-json',
      'extraVolumes=[{"name":"x","emptyDir":{}}]',
      '--set-json',
      'extraVolumeMounts=[{"name":"x","mountPath":"/x"}]',
    );
    assert.equal(lint3.status, 0, lint3.stdout + lint3.stderr);
  });

  test('RBAC is exactly get/list/watch on services, nodes, endpointslices and servicecidrs', () => {
    const objs = render();
    const role = one(objs, 'ClusterRole');
    const grants = new Set<string>();
    for (const rule of role.rules) {
      for (const verb of rule.verbs) assert.notEqual(verb, '*');
      for (const res of rule.resources) assert.notEqual(res, '*');
      for (const g of rule.apiGroups) for (const r of rule.resources) for (const v of rule.verbs) grants.add(`${g || 'core'}/${r}:${v}`);
    }
    const want = ['core/services', 'core/nodes', 'discovery.k8s.io/endpointslices', 'networking.k8s.io/servicecidrs'].flatMap((r) =>
      ['get', 'list', 'watch'].map((v) => `${r}:${v}`),
    );
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

  test("the node's xtables lock is mounted as kube-proxy's DaemonSet mounts it (kpr cleanup-kube-proxy runs in the agent container)", () => {
    const pod = one(render({ k8sServiceHost: '198.18.0.2' }), 'DaemonSet').spec.template.spec;
    const agent = pod.containers.find((c: { name: string }) => c.name === 'agent');
    const kubeProxy = YAML.parse(readFileSync(path.join(repoRoot, 'test/fixtures/kube-proxy/kubeadm-daemonset.yaml'), 'utf8')).spec.template.spec;
    const lockMount = (c: { volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }> }) =>
      c.volumeMounts.find((m) => m.mountPath === '/run/xtables.lock');
    const volume = (spec: { volumes: Array<{ name: string }> }, name: string) =>
      spec.volumes.find((v) => v.name === name) as { hostPath?: unknown } | undefined;
    const ours = lockMount(agent);
    assert.ok(ours, 'the agent container mounts /run/xtables.lock');
    assert.notEqual(ours.readOnly, true, 'iptables opens the lock for flock; it must be writable');
    assert.equal(agent.securityContext.readOnlyRootFilesystem, true, 'the root stays read-only: the mount is what makes the lock openable');
    const theirs = lockMount(kubeProxy.containers[0])!;
    assert.deepEqual(volume(pod, ours.name)?.hostPath, volume(kubeProxy, theirs.name)?.hostPath);
    assert.deepEqual(volume(pod, ours.name)?.hostPath, { path: '/run/xtables.lock', type: 'FileOrCreate' });
  });

  test('privileged mode mounts bpffs Bidirectionally, without the init container', () => {
    const pod = one(render({ securityContext: { privileged: true }, mountBpffs: { enabled: false } }), 'DaemonSet').spec.template.spec;
    const agent = pod.containers[0];
    assert.equal(agent.securityContext.privileged, true);
    assert.equal(agent.securityContext.capabilities, undefined);
    assert.equal(agent.volumeMounts.find((m: { name: string }) => m.name === 'bpffs').mountPropagation, 'Bidirectional');
    assert.equal(pod.initContainers, undefined);
  });

  test('every agent flag is a chart setting (values.yaml, schema, charts/kpr/README.md) and every setting is an agent flag', () => {
    const readme = readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const schemaKeys = Object.keys(schema.properties.config.properties).sort();
    const flagKeys = Object.keys(AGENT_FLAGS)
      .filter((k) => !NOT_IN_CONFIG.has(k))
      .sort();
    for (const k of flagKeys) {
      assert.ok(
        schemaKeys.includes(k),
        `agent flag --${k} is missing from charts/kpr: add it to values.yaml (config), values.schema.json and charts/kpr/README.md`,
      );
    }
    assert.deepEqual(schemaKeys, flagKeys, 'values.schema.json config keys are the agent flags');
    assert.deepEqual(Object.keys(defaults.config).sort(), flagKeys, 'values.yaml lists every config key');
    for (const k of flagKeys) assert.match(readme, new RegExp(`\`config\\.${k}\``), `charts/kpr/README.md documents config.${k}`);
    for (const k of ['k8sServiceHost', 'k8sServicePort']) assert.match(readme, new RegExp(`\`${k}\``));
  });

  test('charts/kpr/README.md documents every value of values.yaml', () => {
    const readme = readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const lines = readme.split('\n').filter((l) => l.startsWith('| `'));
    const leaves = (obj: Record<string, unknown>, prefix: string): string[] =>
      Object.entries(obj).flatMap(([k, v]) =>
        v !== null &&
        typeof v === 'object' &&
        !Array.isArray(v) &&
        Object.keys(v).length > 0 &&
        !['resources', 'labels', 'seLinuxOptions', 'nodeSelector'].includes(k)
          ? leaves(v as Record<string, unknown>, `${prefix}${k}.`)
          : [`${prefix}${k}`],
      );
    const undocumented = leaves(defaults, '').filter((key) => {
      if (key.startsWith('config.') || key.startsWith('prometheusRule.')) return false; // their own tables, checked elsewhere
      const parent = key.slice(0, key.lastIndexOf('.') + 1);
      const last = key.slice(key.lastIndexOf('.'));
      // Named itself, as `.last` in its parent's row, or through a documented parent object (`probes.startup`).
      const ancestors = key
        .split('.')
        .map((_, i, parts) => parts.slice(0, i + 1).join('.'))
        .slice(1, -1);
      return !lines.some(
        (l) => l.includes(`\`${key}\``) || (parent && l.includes(`\`${parent}`) && l.includes(`\`${last}\``)) || ancestors.some((a) => l.includes(`\`${a}\``)),
      );
    });
    assert.deepEqual(undocumented, []);
  });

  test('every config value reaches the agent, and the agent accepts the file', () => {
    const config = Object.fromEntries(Object.keys(schema.properties.config.properties).map((k) => [k, nonDefault(k)]));
    const objs = render({
      config,
      k8sServiceHost: '2001:db8::2',
      k8sServicePort: 443,
      extraArgs: ['--v=4'],
      updateStrategy: { rollingUpdate: { maxUnavailable: '20%' } },
    });
    const rendered = renderedConfig(objs);
    assert.deepEqual(rendered, config);
    // The file parses against the agent's own flag table.
    const args = configFileArgs(YAML.stringify(rendered), AGENT_FLAGS, 'rendered config.yaml');
    assert.ok(args.length >= Object.keys(config).length);
    const ds = one(objs, 'DaemonSet');
    const agent = ds.spec.template.spec.containers[0];
    assert.deepEqual(agent.args, ['--config=/etc/kpr/config.yaml', '--k8s-service-host=2001:db8::2', '--k8s-service-port=443', '--v=4']);
    assert.equal(agent.livenessProbe.httpGet.port, 20256);
    assert.equal(agent.startupProbe.httpGet.port, 20256);
    assert.equal(ds.spec.updateStrategy.rollingUpdate.maxUnavailable, '20%');
  });

  test('optional objects: metrics Service, ServiceMonitor, dashboard', () => {
    const objs = render({
      config: { 'metrics-bind-address': '0.0.0.0:10249' },
      metrics: { service: { enabled: true }, serviceMonitor: { enabled: true }, dashboard: { enabled: true } },
    });
    assert.equal(one(objs, 'Service').spec.ports[0].port, 10249);
    // A number: the agent's pod declares no container ports (so a surge pod can be scheduled beside the old one).
    assert.equal(one(objs, 'Service').spec.ports[0].targetPort, 10249);
    assert.equal(one(objs, 'DaemonSet').spec.template.spec.containers[0].ports, undefined);
    assert.equal(one(objs, 'ServiceMonitor').spec.endpoints[0].port, 'metrics');
    const dash = objs.find((o) => o.metadata.name.endsWith('-dashboard'))!;
    const dashboard = JSON.parse(dash.data['kpr.json']);
    const panels = dashboard.panels as Array<{ targets: Array<{ expr: string }> }>;
    const exprs = panels.flatMap((p) => p.targets.map((t) => t.expr)).join('\n');
    assert.match(exprs, /kubeproxy_sync_proxy_rules_duration_seconds/);
    assert.match(exprs, /kubeproxy_network_programming_duration_seconds/);
    // No panel needs a label only the chart's relabelling adds: job and instance come with every scrape.
    assert.doesNotMatch(exprs + JSON.stringify(dashboard.templating), /\bnode\b/);
    for (const p of panels) for (const t of p.targets) assert.match(t.expr, /\{job=~"\$job", instance=~"\$instance"/, t.expr);

    // By default job="kube-proxy", as kubernetes-mixin's KubeProxyDown and Proxy dashboard select
    // (what Prometheus makes of it: test/chart/kube-proxy-monitoring.test.ts).
    const sm = one(objs, 'ServiceMonitor');
    assert.equal(sm.spec.jobLabel, 'jobLabel');
    assert.equal((one(objs, 'Service').metadata as { labels?: Record<string, string> }).labels?.[sm.spec.jobLabel], 'kube-proxy');
    // job "": prometheus-operator's default, the Service's name.
    const operatorJob = render({ metrics: { serviceMonitor: { enabled: true, job: '' } } });
    assert.equal(one(operatorJob, 'ServiceMonitor').spec.jobLabel, undefined);
    assert.equal((one(operatorJob, 'Service').metadata as { labels?: Record<string, string> }).labels?.jobLabel, undefined);
    // Metrics on loopback cannot be scraped through a Service.
    const bad = helm('template', 'kpr', CHART, '--set', 'metrics.service.enabled=true', '--set', 'config.metrics-bind-address=127.0.0.1:10249');
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /metrics-bind-address/);
  });

  test('metrics on every node address by default; the PodMonitor keeps the agent container, at its pod IP and the metrics port, as job kube-proxy', () => {
    assert.equal(renderedConfig(render())['metrics-bind-address'], '0.0.0.0:10249');
    const objs = render({
      config: { 'metrics-bind-address': '[::]:19249' },
      metrics: { podMonitor: { enabled: true, interval: '15s', labels: { release: 'prom' } } },
      prometheusRule: { enabled: true },
    });
    const pm = one(objs, 'PodMonitor');
    const ds = one(objs, 'DaemonSet');
    assert.equal(pm.apiVersion, 'monitoring.coreos.com/v1');
    assert.equal((pm.metadata.labels ?? {}).release, 'prom');
    assert.deepEqual(pm.spec.selector.matchLabels, ds.spec.selector.matchLabels);
    assert.deepEqual(
      objs.filter((o) => o.kind === 'Service' || o.kind === 'ServiceMonitor'),
      [],
      'no Service needed',
    );
    const [ep] = pm.spec.podMetricsEndpoints;
    assert.equal(ep.interval, '15s');
    assert.equal(ep.port, undefined, 'the pod declares no ports');
    const r = ep.relabelings as Array<Record<string, any>>;
    assert.deepEqual(r[0], { sourceLabels: ['__meta_kubernetes_pod_container_name'], regex: ds.spec.template.spec.containers[0].name, action: 'keep' });
    assert.deepEqual(
      r.filter((x) => x.targetLabel === '__address__').map((x) => x.replacement),
      ['${1}:19249', '[${1}]:19249'],
    );
    assert.deepEqual(r.at(-1), { targetLabel: 'job', replacement: 'kube-proxy' });
    assert.match(one(objs, 'PrometheusRule').spec.groups[0].rules[0].expr, /^up\{job="kube-proxy"\} == 0$/);
    // job "": no relabelling, prometheus-operator's "<namespace>/<name>", which the alerts then select.
    const operatorJob = render({ metrics: { podMonitor: { enabled: true, job: '' } }, prometheusRule: { enabled: true } });
    assert.equal(
      (one(operatorJob, 'PodMonitor').spec.podMetricsEndpoints[0].relabelings as Array<{ targetLabel?: string }>).some((x) => x.targetLabel === 'job'),
      false,
    );
    assert.match(one(operatorJob, 'PrometheusRule').spec.groups[0].rules[0].expr, /^up\{job="kube-system\/kpr"\} == 0$/);
  });

  test('NOTES of a migration without a monitor say KubeProxyDown will fire', () => {
    const notes = (...set: string[]) =>
      helm(
        'install',
        'kpr',
        CHART,
        '--dry-run=client',
        '--namespace',
        'kube-system',
        '--set',
        'k8sServiceHost=198.18.0.2',
        ...set.flatMap((x) => ['--set', x]),
      ).stdout.split('NOTES:')[1];
    assert.match(notes('migration.enabled=true'), /KubeProxyDown fires once the last one has moved[\s\S]*metrics\.podMonitor\.enabled=true/);
    assert.doesNotMatch(notes('migration.enabled=true', 'metrics.podMonitor.enabled=true'), /KubeProxyDown/);
    assert.doesNotMatch(notes('migration.enabled=true', 'metrics.serviceMonitor.enabled=true'), /KubeProxyDown/);
    assert.doesNotMatch(notes(), /KubeProxyDown/);
  });

  test("the PrometheusRule (off by default): kpr's alerts, Services over a datapath limit among them", () => {
    assert.equal(render().filter((o) => o.kind === 'PrometheusRule').length, 0);
    const objs = render({ prometheusRule: { enabled: true, overLimitFor: '2m', labels: { release: 'prom' } } });
    const rule = one(objs, 'PrometheusRule');
    assert.equal(rule.apiVersion, 'monitoring.coreos.com/v1');
    assert.equal((rule.metadata as { labels?: Record<string, string> }).labels?.release, 'prom');
    const alert = rule.spec.groups
      .flatMap((g: { rules: Array<Record<string, any>> }) => g.rules)
      .find((r: Record<string, any>) => r.alert === 'KprServicesOverLimit');
    assert.ok(alert, 'the KprServicesOverLimit alert');
    assert.match(alert.expr, /^max by \(job, instance, namespace, pod, node, limit\) \(kpr_services_over_limit\{job="kube-proxy"\}\) > 0$/);
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

  test("map sizes: chart values become the agent's map sizes", () => {
    const config = {
      'map-size-services': 40000,
      'map-size-frontends': 12000,
      'map-size-backends': 20000,
      'map-size-conntrack': 65536,
      'conntrack-min': 1000,
      'bpf-map-dynamic-size-ratio': 0.002,
    };
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
      assert.equal(plan.settings.conntrack.entries, 65536, 'the conntrack capacity (kpr_ct adds the LRU headroom)');
      assert.equal(cfg.mapSizeOptions.dynamicSizeRatio, 0.002);
      assert.equal(cfg.mapSizeOptions.conntrackMin, 1000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Unset: nothing in the file, the agent's defaults.
    const none = renderedConfig(render({}));
    for (const k of Object.keys(config)) assert.equal(k in none, false, k);
  });

  test("the API server without a Service proxy: dnsPolicy Default; kubeadm's kube-proxy kubeconfig mounted and passed as --kubeconfig", () => {
    const pod = (objs: K8sObject[]) => one(objs, 'DaemonSet').spec.template.spec;
    assert.equal(pod(render()).dnsPolicy, 'Default', 'the node resolver: no cluster DNS before kpr programs its ClusterIP');
    assert.equal(pod(render({ dnsPolicy: 'ClusterFirstWithHostNet' })).dnsPolicy, 'ClusterFirstWithHostNet');
    const objs = render({ kubeconfigFromConfigMap: { enabled: true } });
    const agent = pod(objs).containers[0];
    assert.deepEqual(agent.args, ['--config=/etc/kpr/config.yaml', '--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf']);
    assert.deepEqual(
      agent.volumeMounts.find((m: { mountPath: string }) => m.mountPath === '/var/lib/kube-proxy'),
      { name: 'api-server-kubeconfig', mountPath: '/var/lib/kube-proxy', readOnly: true },
    );
    assert.deepEqual(pod(objs).volumes.find((v: { name: string }) => v.name === 'api-server-kubeconfig').configMap, {
      name: 'kube-proxy',
      items: [{ key: 'kubeconfig.conf', path: 'kubeconfig.conf' }],
    });
    // The service account token and CA the kubeconfig names are the pod's own.
    assert.notEqual(pod(objs).automountServiceAccountToken, false);
    assert.equal(one(objs, 'ServiceAccount').automountServiceAccountToken, true);
    const copy = pod(render({ kubeconfigFromConfigMap: { enabled: true, name: 'kpr-kubeconfig', key: 'admin.conf' } }));
    assert.equal(copy.containers[0].args[1], '--kubeconfig=/var/lib/kube-proxy/admin.conf');
    assert.equal(copy.volumes.find((v: { name: string }) => v.name === 'api-server-kubeconfig').configMap.name, 'kpr-kubeconfig');
    const install = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set', 'kubeconfigFromConfigMap.enabled=true');
    assert.equal(install.status, 0, install.stderr);
    assert.doesNotMatch(install.stdout, /WARNING: k8sServiceHost/);
  });

  test('AppArmor unconfined: the pod field from Kubernetes 1.30, annotations before, for the agent, its init container and the clean-up pods', () => {
    const values = { cleanupOnUninstall: { enabled: true } };
    const agentPod = (objs: K8sObject[]) => one(objs, 'DaemonSet').spec.template;
    const cleanupPod = (objs: K8sObject[]) => (YAML.parse(one(objs, 'ConfigMap', 'kpr-cleanup').data['daemonset.yaml']) as K8sObject).spec.template;
    const annotations = (t: { metadata: { annotations?: Record<string, string> } }) =>
      Object.entries(t.metadata.annotations ?? {})
        .filter(([k]) => k.startsWith('container.apparmor.security.beta.kubernetes.io/'))
        .sort();
    for (const kube of ['1.30.0', '1.33.2']) {
      const objs = render(values, ['--kube-version', kube]);
      for (const t of [agentPod(objs), cleanupPod(objs)]) {
        assert.deepEqual(t.spec.securityContext, { appArmorProfile: { type: 'Unconfined' } }, kube);
        assert.deepEqual(annotations(t), [], kube);
      }
    }
    const old = render(values, ['--kube-version', '1.29.5']);
    assert.equal(agentPod(old).spec.securityContext, undefined);
    assert.deepEqual(annotations(agentPod(old)), [
      ['container.apparmor.security.beta.kubernetes.io/agent', 'unconfined'],
      ['container.apparmor.security.beta.kubernetes.io/mount-bpffs', 'unconfined'],
    ]);
    assert.deepEqual(annotations(cleanupPod(old)), [
      ['container.apparmor.security.beta.kubernetes.io/cleanup', 'unconfined'],
      ['container.apparmor.security.beta.kubernetes.io/done', 'unconfined'],
    ]);
    // The mode wins over the version; no init container, no annotation for it; off: neither form.
    assert.deepEqual(annotations(agentPod(render({ appArmor: { mode: 'annotation' }, mountBpffs: { enabled: false } }, ['--kube-version', '1.31.0']))), [
      ['container.apparmor.security.beta.kubernetes.io/agent', 'unconfined'],
    ]);
    assert.deepEqual(agentPod(render({ appArmor: { mode: 'field' } }, ['--kube-version', '1.29.0'])).spec.securityContext, {
      appArmorProfile: { type: 'Unconfined' },
    });
    const off = agentPod(render({ appArmor: { unconfined: false } }, ['--kube-version', '1.29.0']));
    assert.equal(off.spec.securityContext, undefined);
    assert.deepEqual(annotations(off), []);
  });

  test('updateStrategy as Kubernetes has it, a startupProbe, extra volumes and mounts, no container ports', () => {
    const ds = (values: Record<string, unknown>) => one(render(values), 'DaemonSet');
    assert.deepEqual(ds({}).spec.updateStrategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } });
    assert.deepEqual(ds({ updateStrategy: { rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } } }).spec.updateStrategy, {
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 0, maxSurge: 1 },
    });
    assert.deepEqual(ds({ updateStrategy: { type: 'OnDelete' } }).spec.updateStrategy, { type: 'OnDelete' }, 'rollingUpdate only with RollingUpdate');
    const d = ds({
      probes: { startup: { periodSeconds: 3, failureThreshold: 40 } },
      extraVolumes: [{ name: 'extra', hostPath: { path: '/etc/extra', type: 'Directory' } }],
      extraVolumeMounts: [{ name: 'extra', mountPath: '/etc/extra', readOnly: true }],
    });
    const agent = d.spec.template.spec.containers[0];
    assert.deepEqual(agent.startupProbe, {
      httpGet: { path: '/livez', port: 10256, host: '127.0.0.1' },
      periodSeconds: 3,
      failureThreshold: 40,
      timeoutSeconds: 5,
    });
    assert.equal(agent.livenessProbe.initialDelaySeconds, undefined, 'the startup probe holds liveness back instead');
    assert.deepEqual(agent.volumeMounts.at(-1), { name: 'extra', mountPath: '/etc/extra', readOnly: true });
    assert.deepEqual(d.spec.template.spec.volumes.at(-1), { name: 'extra', hostPath: { path: '/etc/extra', type: 'Directory' } });
    assert.equal(agent.ports, undefined, 'host ports would keep a surge pod off its node');
  });

  test('migration: kpr only on labelled nodes, ANDed with the nodeSelector and into every affinity term; off: no label logic at all', () => {
    const aff = (values: Record<string, unknown>) => one(render(values), 'DaemonSet').spec.template.spec.affinity;
    const req = { key: 'kpr.io/proxy', operator: 'In', values: ['kpr'] };
    assert.equal(aff({}), undefined);
    assert.deepEqual(aff({ migration: { enabled: true } }), {
      nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [req] }] } },
    });
    const user = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: 'pool', operator: 'In', values: ['a'] }] },
            { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] },
          ],
        },
        preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, preference: { matchExpressions: [{ key: 'x', operator: 'Exists' }] } }],
      },
    };
    assert.deepEqual(aff({ affinity: user }), user);
    const both = aff({ affinity: user, migration: { enabled: true } });
    assert.deepEqual(both.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms, [
      { matchExpressions: [{ key: 'pool', operator: 'In', values: ['a'] }, req] },
      { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }], matchExpressions: [req] },
    ]);
    assert.deepEqual(both.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution, user.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution);
    assert.deepEqual(
      aff({ migration: { enabled: true, label: 'example.com/proxy', value: 'ebpf' } }).nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        .nodeSelectorTerms[0].matchExpressions,
      [{ key: 'example.com/proxy', operator: 'In', values: ['ebpf'] }],
    );
  });

  test("clean-up on uninstall: renders under helm template (nothing looked up), ordered hooks, least-privilege RBAC, the agent's nodes", () => {
    const values = {
      cleanupOnUninstall: { enabled: true, timeoutSeconds: 300 },
      migration: { enabled: true },
      k8sServiceHost: '198.18.0.2',
      nodeSelector: { 'kubernetes.io/os': 'linux', pool: 'a' },
    };
    const objs = render(values);
    const hooks = objs.filter((o) => o.metadata.annotations?.['helm.sh/hook']);
    assert.deepEqual(hooks.map((h) => [h.kind, h.metadata.annotations!['helm.sh/hook'], h.metadata.annotations!['helm.sh/hook-weight'] ?? '0']).sort(), [
      ['ConfigMap', 'pre-delete', '-5'],
      ['Job', 'pre-delete', '0'],
      ['Role', 'pre-delete', '-10'],
      ['RoleBinding', 'pre-delete', '-10'],
      ['ServiceAccount', 'pre-delete', '-10'],
    ]);
    for (const h of hooks) assert.equal(h.metadata.annotations!['helm.sh/hook-delete-policy'], 'before-hook-creation,hook-succeeded');
    const role = one(objs, 'Role');
    assert.deepEqual(role.rules, [
      { apiGroups: ['apps'], resources: ['daemonsets'], resourceNames: ['kpr', 'kpr-cleanup'], verbs: ['get', 'delete'] },
      { apiGroups: ['apps'], resources: ['daemonsets'], verbs: ['create'] },
      { apiGroups: [''], resources: ['pods'], verbs: ['list'] },
    ]);
    const job = one(objs, 'Job').spec.template.spec;
    assert.equal(job.serviceAccountName, 'kpr-cleanup');
    assert.equal(job.dnsPolicy, 'Default');
    assert.deepEqual(job.containers[0].args, [
      '--namespace=kube-system',
      '--agent-daemonset=kpr',
      '--agent-selector=app.kubernetes.io/name=kpr,app.kubernetes.io/instance=kpr',
      '--cleanup-daemonset=/etc/kpr-cleanup/daemonset.yaml',
      '--timeout=300s',
      '--k8s-service-host=198.18.0.2',
      '--k8s-service-port=6443',
    ]);
    assert.equal(one(objs, 'Job').spec.activeDeadlineSeconds, 360);
    const cleanup = YAML.parse(one(objs, 'ConfigMap', 'kpr-cleanup').data['daemonset.yaml']) as K8sObject;
    const agentPod = one(objs, 'DaemonSet').spec.template.spec;
    assert.equal(cleanup.kind, 'DaemonSet');
    for (const k of ['nodeSelector', 'affinity', 'tolerations', 'priorityClassName']) assert.deepEqual(cleanup.spec.template.spec[k], agentPod[k], k);
    assert.deepEqual(cleanup.spec.template.spec.initContainers[0].command, ['/opt/kpr/bin/kpr', 'cleanup', '--bpffs=/sys/fs/bpf/kpr']);
    assert.deepEqual(cleanup.spec.selector.matchLabels, {
      'app.kubernetes.io/name': 'kpr',
      'app.kubernetes.io/instance': 'kpr',
      'app.kubernetes.io/component': 'cleanup',
    });
    // With kubeadm's kubeconfig, the Job reaches the API server that way too.
    const viaConfigMap = one(render({ cleanupOnUninstall: { enabled: true }, kubeconfigFromConfigMap: { enabled: true } }), 'Job').spec.template.spec;
    assert.equal(viaConfigMap.containers[0].args.at(-1), '--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf');
    assert.equal(viaConfigMap.volumes.find((v: { name: string }) => v.name === 'api-server-kubeconfig').configMap.name, 'kube-proxy');
    assert.equal(render({}).filter((o) => o.kind === 'Job').length, 0, 'off by default');
  });

  test("kubeProxyConfigMap: kube-proxy's ConfigMap mounted where kube-proxy had it and its command line first; config.conf's settings reach the agent, set config values win; conntrack-sysctls runs with the same arguments", () => {
    const kubeadmDs = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-daemonset.yaml'), 'utf8')) as K8sObject;
    const kubeadmPod = kubeadmDs.spec.template.spec;
    const kubeProxyArgs: string[] = kubeadmPod.containers[0].command.slice(1);
    const objs = render({ kubeProxyConfigMap: { enabled: true }, config: { 'sync-period': '45s' } });
    const pod = one(objs, 'DaemonSet').spec.template.spec;
    const agent = pod.containers.find((c: { name: string }) => c.name === 'agent');
    // kube-proxy's own command line, as kubeadm's DaemonSet runs it, then kpr's config file.
    assert.deepEqual(defaults.kubeProxyConfigMap.args, kubeProxyArgs);
    assert.deepEqual(agent.args, [...kubeProxyArgs, '--config=/etc/kpr/config.yaml']);
    // The whole ConfigMap (config.conf and kubeconfig.conf) at kubeadm's mount path; no kubeconfigFromConfigMap volume.
    const kubeProxyMount = kubeadmPod.containers[0].volumeMounts.find((m: { name: string }) => m.name === 'kube-proxy');
    assert.deepEqual(
      pod.volumes.find((v: { name: string }) => v.name === 'kube-proxy'),
      { name: 'kube-proxy', configMap: { name: 'kube-proxy' } },
    );
    assert.deepEqual(
      agent.volumeMounts.find((m: { name: string }) => m.name === 'kube-proxy'),
      { name: 'kube-proxy', mountPath: kubeProxyMount.mountPath, readOnly: true },
    );
    assert.equal(
      pod.volumes.find((v: { name: string }) => v.name === 'api-server-kubeconfig'),
      undefined,
    );
    // Only set keys in kpr's file: config.conf's syncPeriod etc. are not shadowed by chart defaults.
    const rendered = renderedConfig(objs);
    for (const k of ['min-sync-period', 'log-level', 'node-port-addresses', 'ct-tcp-timeout']) assert.equal(rendered[k], undefined, k);
    // The one default that is set: metrics where Prometheus scraped kube-proxy (the monitors need it), over config.conf's.
    assert.equal(rendered['metrics-bind-address'], '0.0.0.0:10249');
    assert.equal(rendered['sync-period'], '45s');

    // The agent with these very arguments, the paths pointing at kubeadm's ConfigMap (with operator settings) and the rendered file.
    const configMap = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));
    const configConf = (configMap.data['config.conf'] as string)
      .replace('metricsBindAddress: ""', 'metricsBindAddress: 0.0.0.0:10249')
      .replace('nodePortAddresses: null', 'nodePortAddresses: [198.18.0.0/15]')
      .replace(/(iptables:[\s\S]*?)minSyncPeriod: 0s\n(\s+)syncPeriod: 0s/, '$1minSyncPeriod: 2s\n$2syncPeriod: 1m0s')
      .replace('maxPerCore: null', 'maxPerCore: 65536')
      .replace('tcpCloseWaitTimeout: null', 'tcpCloseWaitTimeout: 20m0s')
      .concat('\nnewKubeProxyField: 1\n');
    assert.match(configConf, /minSyncPeriod: 2s\n\s+syncPeriod: 1m0s/);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-chart-kp-'));
    try {
      writeFileSync(path.join(dir, 'config.conf'), configConf);
      writeFileSync(path.join(dir, 'config.yaml'), one(objs, 'ConfigMap', 'kpr-config').data['config.yaml']);
      const local = (args: string[]) =>
        args.map((a) => a.replace('/var/lib/kube-proxy/', `${dir}/`).replace('/etc/kpr/', `${dir}/`).replace('$(NODE_NAME)', 'node-7'));
      const cfg = parseAgentArgs(local(agent.args), {}) as AgentConfig;
      assert.equal(cfg.nodeName, 'node-7', '--hostname-override');
      assert.equal(cfg.kubeconfig, '/var/lib/kube-proxy/kubeconfig.conf', "config.conf's clientConnection.kubeconfig");
      assert.equal(cfg.metricsBindAddress, '0.0.0.0:10249', "the chart's metrics-bind-address");
      assert.deepEqual(cfg.nodePortAddresses, ['198.18.0.0/15']);
      assert.equal(cfg.minSyncPeriodMs, 2000, "config.conf's iptables.minSyncPeriod");
      assert.equal(cfg.syncPeriodMs, 45_000, 'a set config value wins over config.conf');
      assert.equal(cfg.healthzBindAddress, '0.0.0.0:10256', "the chart's health port (the probes')");
      assert.deepEqual(cfg.unknownKubeProxyFields, [{ file: path.join(dir, 'config.conf'), fields: ['newKubeProxyField'] }]);
      // The init container: kpr conntrack-sysctls, the agent's arguments, the same mounts, privileged.
      const init = pod.initContainers.find((c: { name: string }) => c.name === 'conntrack-sysctls');
      assert.deepEqual(init.command, ['/opt/kpr/bin/kpr', 'conntrack-sysctls']);
      assert.deepEqual(init.args, agent.args);
      assert.equal(init.securityContext.privileged, true);
      assert.deepEqual(
        init.volumeMounts.map((m: { mountPath: string }) => m.mountPath),
        ['/etc/kpr', '/var/lib/kube-proxy'],
      );
      assert.deepEqual(
        init.env,
        agent.env.filter((e: { name: string }) => e.name === 'NODE_NAME'),
        '$(NODE_NAME) expands there too',
      );
      const sysctls = conntrackSysctlsArgs(local(init.args)).settings;
      assert.deepEqual(
        [sysctls.maxPerCore.value, sysctls.min.value, sysctls.tcpCloseWaitTimeoutS.value, sysctls.tcpEstablishedTimeoutS.value],
        [65536, 131072, 1200, 86400],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    // conntrackSysctls: null follows kubeProxyConfigMap; true/false force it.
    const inits = (values: Record<string, unknown>) =>
      (one(render(values), 'DaemonSet').spec.template.spec.initContainers ?? []).map((c: { name: string }) => c.name);
    assert.deepEqual(inits({}), ['mount-bpffs']);
    assert.deepEqual(inits({ kubeProxyConfigMap: { enabled: true }, conntrackSysctls: { enabled: false } }), ['mount-bpffs']);
    assert.deepEqual(inits({ conntrackSysctls: { enabled: true }, mountBpffs: { enabled: false } }), ['conntrack-sysctls']);
    // snatPorts.initContainer: kpr's SNAT range merged into the reserved ports, privileged, last before the agent.
    assert.deepEqual(inits({ snatPorts: { initContainer: true } }), ['mount-bpffs', 'snat-ports']);
    assert.deepEqual(inits({ snatPorts: { initContainer: true }, mountBpffs: { enabled: false } }), ['snat-ports']);
    const snatInit = one(render({ snatPorts: { initContainer: true } }), 'DaemonSet').spec.template.spec.initContainers[1];
    assert.equal(snatInit.securityContext.privileged, true);
    assert.match(snatInit.command.join(' '), /ip_local_reserved_ports.*\$\{r:\+\$r,\}61000-65535/);
    assert.deepEqual(
      one(render({ conntrackSysctls: { enabled: true }, k8sServiceHost: '198.18.0.2' }), 'DaemonSet').spec.template.spec.initContainers[1].args,
      ['--config=/etc/kpr/config.yaml', '--k8s-service-host=198.18.0.2', '--k8s-service-port=6443'],
    );
    // The uninstall hook's Job reaches the API server through kube-proxy's kubeconfig.conf.
    const job = one(render({ kubeProxyConfigMap: { enabled: true }, cleanupOnUninstall: { enabled: true } }), 'Job').spec.template.spec;
    assert.equal(job.containers[0].args.at(-1), '--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf');
    assert.equal(job.volumes.find((v: { name: string }) => v.name === 'kube-proxy').configMap.name, 'kube-proxy');
    const lint = helm('lint', '--strict', CHART, '--kube-version', '1.29.0', '--set', 'kubeProxyConfigMap.enabled=true,cleanupOnUninstall.enabled=true');
    assert.equal(lint.status, 0, lint.stdout + lint.stderr);
  });

  test('NOTES point only at sections that exist', () => {
    for (const set of ['migration.enabled=false', 'migration.enabled=true', 'kubeconfigFromConfigMap.enabled=true', 'kubeProxyConfigMap.enabled=true']) {
      const r = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set', set);
      assert.equal(r.status, 0, r.stderr);
      const notes = r.stdout.slice(r.stdout.indexOf('NOTES:'));
      const refs = [...notes.matchAll(/(docs\/[\w-]+\.md)(?:, "([^"]+)")?/g)];
      assert.ok(refs.length >= 3, notes);
      for (const [, file, section] of refs) {
        const text = readFileSync(path.join(CHART, '..', '..', file), 'utf8');
        if (section)
          assert.ok(
            text.split('\n').some((l) => /^#+ /.test(l) && l.replace(/^#+ /, '') === section),
            `${file} has no section "${section}"`,
          );
      }
    }
  });

  test('NOTES warn loudly without k8sServiceHost', () => {
    const r = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /WARNING: k8sServiceHost is not set/);
    const set = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set', 'k8sServiceHost=198.18.0.2');
    assert.doesNotMatch(set.stdout, /WARNING: k8sServiceHost/);
    const kubeProxy = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set', 'kubeProxyConfigMap.enabled=true');
    assert.doesNotMatch(kubeProxy.stdout, /WARNING: k8sServiceHost/, "config.conf's kubeconfig is the way in");
  });
});
