/**
 * What prometheus-operator makes of the chart's PodMonitor and ServiceMonitor,
 * for tests that run a real Prometheus without Kubernetes: the scrape config
 * the operator generates for one endpoint (its relabel_configs, in the
 * operator's order: pkg/prometheus/promcfg.go, generatePodMonitorConfig and
 * generateServiceMonitorConfig, without sharding, scrape classes or
 * namespace enforcement), and the targets Kubernetes service discovery would
 * hand it for the chart's pods, meta labels included (Prometheus'
 * discovery/kubernetes pod.go and endpoints.go), as static targets. Prometheus
 * then applies the relabelling itself, so what a test reads back (the targets
 * API, the scraped series) is Prometheus' own answer.
 *
 * A monitor field this module does not know is an error, so a chart change
 * the translation would silently drop fails the tests instead.
 */
import type { K8sObject } from '../chart/render.js';

type Labels = Record<string, string>;

/** One static target group: `__address__` values and their labels (meta labels included). */
export interface StaticGroup {
  targets: string[];
  labels: Labels;
}

/** A Prometheus scrape config (the parts the operator writes for these monitors). */
export interface ScrapeConfig {
  job_name: string;
  scrape_interval?: string;
  metrics_path?: string;
  honor_labels: boolean;
  static_configs: StaticGroup[];
  relabel_configs: Array<Record<string, unknown>>;
}

/** A pod as the discovery sees it: the rendered DaemonSet's template on one node. */
export interface DiscoveredPod {
  name: string;
  node: string;
  /** status.podIP: in the host network, the node's address. */
  ip: string;
  phase?: string;
}

interface OperatorRelabel {
  sourceLabels?: string[];
  separator?: string;
  targetLabel?: string;
  regex?: string;
  modulus?: number;
  replacement?: string;
  action?: string;
}

const RELABEL_KEYS = new Set(['sourceLabels', 'separator', 'targetLabel', 'regex', 'modulus', 'replacement', 'action']);
const POD_ENDPOINT_KEYS = new Set(['interval', 'path', 'port', 'relabelings']);
const SERVICE_ENDPOINT_KEYS = new Set(['interval', 'path', 'port', 'relabelings']);
const POD_MONITOR_SPEC_KEYS = new Set(['selector', 'podMetricsEndpoints', 'jobLabel', 'namespaceSelector']);
const SERVICE_MONITOR_SPEC_KEYS = new Set(['selector', 'endpoints', 'jobLabel', 'namespaceSelector']);

function onlyKnown(what: string, obj: Record<string, unknown>, known: Set<string>): void {
  for (const k of Object.keys(obj)) if (!known.has(k)) throw new Error(`${what}: ${k} is not modelled by test/support/prometheus-operator.ts`);
}

/** Prometheus' strutil.SanitizeLabelName, which both the discovery and the operator use. */
export function sanitizeLabelName(name: string): string {
  return name.replace(/[^a-zA-Z0-9_]/g, '_');
}

/** generateRelabelConfig: the operator's camelCase fields to Prometheus', only those set, the action lower-cased. */
function toPrometheus(r: OperatorRelabel): Record<string, unknown> {
  onlyKnown('relabeling', r as Record<string, unknown>, RELABEL_KEYS);
  const out: Record<string, unknown> = {};
  if (r.sourceLabels?.length) out.source_labels = r.sourceLabels;
  if (r.separator !== undefined) out.separator = r.separator;
  if (r.targetLabel) out.target_label = r.targetLabel;
  if (r.regex) out.regex = r.regex;
  if (r.modulus) out.modulus = r.modulus;
  if (r.replacement !== undefined) out.replacement = r.replacement;
  if (r.action) out.action = r.action.toLowerCase();
  return out;
}

/** The selector's keep/drop rules over `prefix` (pod or service labels), keys sorted as the operator does. */
function selectorRelabelings(
  selector: { matchLabels?: Labels; matchExpressions?: Array<{ key: string; operator: string; values?: string[] }> },
  prefix: string,
): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const k of Object.keys(selector.matchLabels ?? {}).sort()) {
    out.push({
      action: 'keep',
      source_labels: [`${prefix}_label_${sanitizeLabelName(k)}`, `${prefix}_labelpresent_${sanitizeLabelName(k)}`],
      regex: `(${selector.matchLabels![k]});true`,
    });
  }
  for (const e of selector.matchExpressions ?? []) {
    const label = [`${prefix}_label_${sanitizeLabelName(e.key)}`, `${prefix}_labelpresent_${sanitizeLabelName(e.key)}`];
    const present = [`${prefix}_labelpresent_${sanitizeLabelName(e.key)}`];
    if (e.operator === 'In') out.push({ action: 'keep', source_labels: label, regex: `(${(e.values ?? []).join('|')});true` });
    else if (e.operator === 'NotIn') out.push({ action: 'drop', source_labels: label, regex: `(${(e.values ?? []).join('|')});true` });
    else if (e.operator === 'Exists') out.push({ action: 'keep', source_labels: present, regex: 'true' });
    else if (e.operator === 'DoesNotExist') out.push({ action: 'drop', source_labels: present, regex: 'true' });
    else throw new Error(`selector operator ${e.operator}`);
  }
  return out;
}

/** The operator discovers only in the monitor's own namespace unless namespaceSelector says otherwise. */
function watchesNamespace(monitor: K8sObject, namespace: string): boolean {
  const sel = (monitor.spec.namespaceSelector ?? {}) as { any?: boolean; matchNames?: string[] };
  if (sel.any) return true;
  if (sel.matchNames?.length) return sel.matchNames.includes(namespace);
  return monitor.metadata.namespace === namespace;
}

const RUNNING_FILTER = { action: 'drop', source_labels: ['__meta_kubernetes_pod_phase'], regex: '(Failed|Succeeded)' };
const INIT = { source_labels: ['job'], target_label: '__tmp_prometheus_job_name' };

function podMetaLabels(ds: K8sObject, pod: DiscoveredPod): Labels {
  const labels: Labels = {
    __meta_kubernetes_namespace: ds.metadata.namespace!,
    __meta_kubernetes_pod_name: pod.name,
    __meta_kubernetes_pod_ip: pod.ip,
    __meta_kubernetes_pod_node_name: pod.node,
    __meta_kubernetes_pod_host_ip: pod.ip,
    __meta_kubernetes_pod_uid: `uid-${pod.name}`,
    __meta_kubernetes_pod_phase: pod.phase ?? 'Running',
    __meta_kubernetes_pod_ready: 'true',
    __meta_kubernetes_pod_controller_kind: 'DaemonSet',
    __meta_kubernetes_pod_controller_name: ds.metadata.name,
  };
  for (const [k, v] of Object.entries((ds.spec.template.metadata.labels ?? {}) as Labels)) {
    labels[`__meta_kubernetes_pod_label_${sanitizeLabelName(k)}`] = v;
    labels[`__meta_kubernetes_pod_labelpresent_${sanitizeLabelName(k)}`] = 'true';
  }
  return labels;
}

type Container = { name: string; ports?: Array<{ name?: string; containerPort: number; protocol?: string }> };

/**
 * The role "pod" targets of one pod: one per container port, and one without
 * a port for every container (init containers too) that declares none.
 */
export function podTargets(ds: K8sObject, pod: DiscoveredPod): StaticGroup[] {
  const base = podMetaLabels(ds, pod);
  const out: StaticGroup[] = [];
  const spec = ds.spec.template.spec as { containers: Container[]; initContainers?: Container[] };
  const all = [...spec.containers.map((c) => ({ c, init: false })), ...(spec.initContainers ?? []).map((c) => ({ c, init: true }))];
  for (const { c, init } of all) {
    const container = {
      __meta_kubernetes_pod_container_name: c.name,
      __meta_kubernetes_pod_container_init: String(init),
      __meta_kubernetes_pod_container_image: 'kpr',
    };
    if (!c.ports?.length) {
      out.push({ targets: [pod.ip], labels: { ...base, ...container } });
      continue;
    }
    for (const p of c.ports) {
      out.push({
        targets: [`${pod.ip}:${p.containerPort}`],
        labels: {
          ...base,
          ...container,
          __meta_kubernetes_pod_container_port_name: p.name ?? '',
          __meta_kubernetes_pod_container_port_number: String(p.containerPort),
          __meta_kubernetes_pod_container_port_protocol: p.protocol ?? 'TCP',
        },
      });
    }
  }
  return out;
}

/**
 * The role "endpoints" targets of a Service over the pods it selects: one per
 * pod and Service port, at the pod's IP and the target port, with the
 * Service's and the pod's meta labels (the container's only where a container
 * port is the target port).
 */
export function endpointsTargets(service: K8sObject, ds: K8sObject, pods: DiscoveredPod[]): StaticGroup[] {
  const podLabels = (ds.spec.template.metadata.labels ?? {}) as Labels;
  const selector = (service.spec.selector ?? {}) as Labels;
  if (!Object.entries(selector).every(([k, v]) => podLabels[k] === v)) return [];
  const svc: Labels = { __meta_kubernetes_service_name: service.metadata.name, __meta_kubernetes_endpoints_name: service.metadata.name };
  for (const [k, v] of Object.entries(service.metadata.labels ?? {})) {
    svc[`__meta_kubernetes_service_label_${sanitizeLabelName(k)}`] = v;
    svc[`__meta_kubernetes_service_labelpresent_${sanitizeLabelName(k)}`] = 'true';
  }
  const containers = (ds.spec.template.spec as { containers: Container[] }).containers;
  const out: StaticGroup[] = [];
  for (const pod of pods) {
    for (const port of service.spec.ports as Array<{ name?: string; port: number; targetPort?: number | string; protocol?: string }>) {
      const target = typeof port.targetPort === 'number' ? port.targetPort : port.targetPort === undefined ? port.port : undefined;
      if (target === undefined) throw new Error('a named targetPort is not modelled');
      const labels: Labels = {
        ...podMetaLabels(ds, pod),
        ...svc,
        __meta_kubernetes_endpoint_port_name: port.name ?? '',
        __meta_kubernetes_endpoint_port_protocol: port.protocol ?? 'TCP',
        __meta_kubernetes_endpoint_ready: 'true',
        __meta_kubernetes_endpoint_node_name: pod.node,
        __meta_kubernetes_endpoint_address_target_kind: 'Pod',
        __meta_kubernetes_endpoint_address_target_name: pod.name,
      };
      for (const c of containers) {
        const cp = c.ports?.find((p) => p.containerPort === target);
        if (cp)
          Object.assign(labels, {
            __meta_kubernetes_pod_container_name: c.name,
            __meta_kubernetes_pod_container_port_name: cp.name ?? '',
            __meta_kubernetes_pod_container_port_number: String(cp.containerPort),
          });
      }
      out.push({ targets: [pod.ip.includes(':') ? `[${pod.ip}]:${target}` : `${pod.ip}:${target}`], labels });
    }
  }
  return out;
}

/** generatePodMonitorConfig for endpoint `i` of `pm`, over the role "pod" targets of `pods`. */
export function podMonitorScrapeConfig(pm: K8sObject, ds: K8sObject, pods: DiscoveredPod[], i = 0): ScrapeConfig {
  onlyKnown('PodMonitor spec', pm.spec, POD_MONITOR_SPEC_KEYS);
  const ep = pm.spec.podMetricsEndpoints[i] as { interval?: string; path?: string; port?: string; relabelings?: OperatorRelabel[] };
  onlyKnown('podMetricsEndpoint', ep, POD_ENDPOINT_KEYS);
  const relabel: Array<Record<string, unknown>> = [INIT, RUNNING_FILTER, ...selectorRelabelings(pm.spec.selector, '__meta_kubernetes_pod')];
  if (ep.port) relabel.push({ action: 'keep', source_labels: ['__meta_kubernetes_pod_container_port_name'], regex: ep.port });
  relabel.push(
    { source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' },
    { source_labels: ['__meta_kubernetes_pod_container_name'], target_label: 'container' },
    { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
    { target_label: 'job', replacement: `${pm.metadata.namespace}/${pm.metadata.name}` },
  );
  if (pm.spec.jobLabel)
    relabel.push({
      source_labels: [`__meta_kubernetes_pod_label_${sanitizeLabelName(pm.spec.jobLabel)}`],
      target_label: 'job',
      regex: '(.+)',
      replacement: '${1}',
    });
  if (ep.port) relabel.push({ target_label: 'endpoint', replacement: ep.port });
  relabel.push(...(ep.relabelings ?? []).map(toPrometheus));
  return {
    job_name: `podMonitor/${pm.metadata.namespace}/${pm.metadata.name}/${i}`,
    honor_labels: false,
    ...(ep.interval ? { scrape_interval: ep.interval } : {}),
    ...(ep.path ? { metrics_path: ep.path } : {}),
    static_configs: pods.filter(() => watchesNamespace(pm, ds.metadata.namespace!)).flatMap((p) => podTargets(ds, p)),
    relabel_configs: relabel,
  };
}

/** generateServiceMonitorConfig (role endpoints) for endpoint `i` of `sm`, over the Services' endpoints of `pods`. */
export function serviceMonitorScrapeConfig(sm: K8sObject, services: K8sObject[], ds: K8sObject, pods: DiscoveredPod[], i = 0): ScrapeConfig {
  onlyKnown('ServiceMonitor spec', sm.spec, SERVICE_MONITOR_SPEC_KEYS);
  const ep = sm.spec.endpoints[i] as { interval?: string; path?: string; port?: string; relabelings?: OperatorRelabel[] };
  onlyKnown('endpoint', ep, SERVICE_ENDPOINT_KEYS);
  const relabel: Array<Record<string, unknown>> = [INIT, ...selectorRelabelings(sm.spec.selector, '__meta_kubernetes_service')];
  if (ep.port) relabel.push({ action: 'keep', source_labels: ['__meta_kubernetes_endpoint_port_name'], regex: ep.port });
  const kindName = ['__meta_kubernetes_endpoint_address_target_kind', '__meta_kubernetes_endpoint_address_target_name'];
  relabel.push(
    { source_labels: kindName, separator: ';', regex: 'Node;(.*)', replacement: '${1}', target_label: 'node' },
    { source_labels: kindName, separator: ';', regex: 'Pod;(.*)', replacement: '${1}', target_label: 'pod' },
    { source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' },
    { source_labels: ['__meta_kubernetes_service_name'], target_label: 'service' },
    { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
    { source_labels: ['__meta_kubernetes_pod_container_name'], target_label: 'container' },
    RUNNING_FILTER,
    { source_labels: ['__meta_kubernetes_service_name'], target_label: 'job', replacement: '${1}' },
  );
  if (sm.spec.jobLabel)
    relabel.push({
      source_labels: [`__meta_kubernetes_service_label_${sanitizeLabelName(sm.spec.jobLabel)}`],
      target_label: 'job',
      regex: '(.+)',
      replacement: '${1}',
    });
  if (ep.port) relabel.push({ target_label: 'endpoint', replacement: ep.port });
  relabel.push(...(ep.relabelings ?? []).map(toPrometheus));
  return {
    job_name: `serviceMonitor/${sm.metadata.namespace}/${sm.metadata.name}/${i}`,
    honor_labels: false,
    ...(ep.interval ? { scrape_interval: ep.interval } : {}),
    ...(ep.path ? { metrics_path: ep.path } : {}),
    static_configs: services.filter((s) => watchesNamespace(sm, s.metadata.namespace!)).flatMap((s) => endpointsTargets(s, ds, pods)),
    relabel_configs: relabel,
  };
}

/** The scrape config of the one monitor (PodMonitor or ServiceMonitor) among the rendered objects. */
export function monitorScrapeConfig(objs: K8sObject[], pods: DiscoveredPod[]): ScrapeConfig {
  const ds = objs.find((o) => o.kind === 'DaemonSet');
  if (!ds) throw new Error('no DaemonSet rendered');
  const monitors = objs.filter((o) => o.kind === 'PodMonitor' || o.kind === 'ServiceMonitor');
  if (monitors.length !== 1) throw new Error(`${monitors.length} monitors rendered, not one`);
  const m = monitors[0];
  if (m.apiVersion !== 'monitoring.coreos.com/v1') throw new Error(`${m.kind} is ${m.apiVersion}`);
  return m.kind === 'PodMonitor'
    ? podMonitorScrapeConfig(m, ds, pods)
    : serviceMonitorScrapeConfig(
        m,
        objs.filter((o) => o.kind === 'Service'),
        ds,
        pods,
      );
}
