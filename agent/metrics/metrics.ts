/**
 * The agent's Prometheus metrics: kube-proxy's names and meanings for the
 * control loop (so existing dashboards and alerts work), and kpr_* for what
 * only kpr has (maps, datapath counters, drift). Kernel-side values (map
 * entries, datapath counters) are read from the pinned maps at scrape time.
 *
 * AgentMetrics is the one object the agent feeds. It holds kpr's sync
 * metrics (syncs, programmed frontends and backends, limits, conflicts,
 * drift, failures) and hands the rest to one module per area:
 * kube-proxy-metrics.ts, k8s-client-metrics.ts, node-datapath-metrics.ts,
 * kernel-collectors.ts and service-counters.ts (read at scrape time).
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { AdoptResult } from '../reconcile/reconciler.js';
import { LIMIT_NAMES } from '../reconcile/limits.js';
import type { SyncReport } from '../sync/sync-report.js';
import type { Logger } from '../log/log.js';
import type { FeatureStatus } from '../datapath/kernel-features.js';
import type { ApiRequest } from '../k8s/api-requests.js';
import type { ShedKind } from '../http/http-guard.js';
import type { TrackedChange } from './change-tracker.js';
import { K8sClientMetrics } from './k8s-client-metrics.js';
import { kernelCollectors } from './kernel-collectors.js';
import { kprVersion } from './kpr-version.js';
import { KubeProxyMetrics } from './kube-proxy-metrics.js';
import { NodeDatapathMetrics, type TcAttachStatus } from './node-datapath-metrics.js';
import { serviceCounters } from './service-counters.js';

export interface AgentMetricsOptions {
  /** Where the maps are pinned; read at scrape time. */
  bpffsDir: string;
  log: Logger;
  /** Wall clock (tests inject one). */
  now?: () => Date;
}

export class AgentMetrics {
  readonly registry = new Registry();
  private readonly kubeProxy: KubeProxyMetrics;
  private readonly k8s: K8sClientMetrics;
  private readonly node: NodeDatapathMetrics;
  /** Map entries/capacity and the datapath counters, read from the pinned maps once per scrape (see text()). */
  private readonly refreshKernel: () => void;
  /** kpr_service_*_total from kpr_svc_stats, read once per scrape. */
  private refreshServices?: () => void;

  private readonly shed: Counter<'listener' | 'kind'>;
  private readonly syncs: Counter<'trigger' | 'result'>;
  private readonly mapErrors: Counter<'map' | 'op'>;
  private readonly frontends: Gauge;
  private readonly backends: Gauge;
  private readonly overLimit: Gauge<'limit'>;
  private readonly driftFound: Counter<'kind'>;
  private readonly driftRepairSyncs: Counter;
  private readonly driftRepaired: Counter<'map' | 'kind'>;
  private readonly taskFailures: Counter<'task'>;
  private readonly conflicts: Gauge<'type' | 'rule'>;
  private readonly rangeErrors: Counter<'source'>;
  private readonly ranges: Gauge<'source'>;

  constructor(private readonly opts: AgentMetricsOptions) {
    const now = opts.now ?? (() => new Date());
    const registers = [this.registry];
    this.refreshKernel = kernelCollectors(this.registry, opts.bpffsDir, opts.log);

    // ---- Node's process_* and nodejs_* (prom-client's defaults), as kube-proxy exports Go's process_* and go_*.
    collectDefaultMetrics({ register: this.registry });

    this.kubeProxy = new KubeProxyMetrics(this.registry, now);
    this.k8s = new K8sClientMetrics(this.registry, now);
    this.shed = new Counter({
      name: 'kpr_http_connections_shed_total',
      help: 'Connections a health or metrics listener shed: evicted (the oldest idle one, closed at the connection cap to make room), refused (at the cap with every open one busy), unread_body (closed while its request body was still arriving: after the answer, or at the cap).',
      labelNames: ['listener', 'kind'],
      registers,
    });

    this.syncs = new Counter({
      name: 'kpr_syncs_total',
      help: 'Sync attempts by trigger (initial, event, periodic, retry) and result (ok, error).',
      labelNames: ['trigger', 'result'],
      registers,
    });
    this.mapErrors = new Counter({
      name: 'kpr_map_operation_errors_total',
      help: 'Failed BPF map operations of the reconciler, by map and operation.',
      labelNames: ['map', 'op'],
      registers,
    });
    this.frontends = new Gauge({
      name: 'kpr_frontends_programmed',
      help: 'Frontends (service address, port, protocol and scope) in the service map after the last sync.',
      registers,
    });
    this.backends = new Gauge({ name: 'kpr_backends_programmed', help: 'Backends in the backend map after the last sync.', registers });
    this.overLimit = new Gauge({
      name: 'kpr_services_over_limit',
      help: 'Services over a datapath limit after the last sync, by limit: refused whole (rev_nat_ids, svc_map, backend_map, aff_match_map, src_range_map: nothing of them is programmed) or cut (backends_per_frontend: a frontend holds its first 65,535 backends). Each is logged and listed as skipped.',
      labelNames: ['limit'],
      registers,
    });
    for (const limit of LIMIT_NAMES) this.overLimit.set({ limit }, 0);
    this.driftFound = new Counter({
      name: 'kpr_drift_found_total',
      help: 'Inconsistencies found in the pinned maps when the agent adopted them at start, by kind; the first full sync repairs them.',
      labelNames: ['kind'],
      registers,
    });
    this.driftRepairSyncs = new Counter({
      name: 'kpr_drift_repair_syncs_total',
      help: 'Periodic full resyncs whose read-back found the pinned maps changed behind the agent (drift), and repaired them.',
      registers,
    });
    this.driftRepaired = new Counter({
      name: 'kpr_drift_repaired_entries_total',
      help: 'Map entries repaired by periodic full resyncs, by map and kind (missing, changed, extra).',
      labelNames: ['map', 'kind'],
      registers,
    });
    this.node = new NodeDatapathMetrics(this.registry);
    this.taskFailures = new Counter({
      name: 'kpr_agent_task_failures_total',
      help: 'Failures of agent work beside the sync loop (node-datapath, node-settings, uncaught), each logged and retried; the periodic timers count in kpr_node_datapath_errors_total.',
      labelNames: ['task'],
      registers,
    });
    this.conflicts = new Gauge({
      name: 'kpr_frontend_conflicts',
      help: 'Frontends a Service claims but another Service owns, not programmed for it, after the last successful sync: by the losing claim (type: ClusterIP, NodePort, LoadBalancer, ExternalIP) and rule (outranked: the same address, port and protocol claimed with precedence; cluster-ip-address: a LoadBalancer or external IP equal to a ClusterIP).',
      labelNames: ['type', 'rule'],
      registers,
    });
    this.rangeErrors = new Counter({
      name: 'kpr_service_range_errors_total',
      help: "Service ranges left out because they are invalid (not a CIDR, host bits set, more than one per IP family), by source (flag: --service-cluster-ip-range; ServiceCIDR: an object's spec.cidrs); each distinct entry once, with a log line.",
      labelNames: ['source'],
      registers,
    });
    this.ranges = new Gauge({
      name: 'kpr_service_ranges',
      help: 'Service ranges in kpr_svc_cidr (their unallocated addresses are refused and dropped), by source: flag (--service-cluster-ip-range) or ServiceCIDR.',
      labelNames: ['source'],
      registers,
    });
    for (const source of ['flag', 'ServiceCIDR']) {
      this.rangeErrors.inc({ source }, 0);
      this.ranges.set({ source }, 0);
    }
    new Gauge({ name: 'kpr_build_info', help: 'kpr version and the Node.js running it; always 1.', labelNames: ['version', 'node_version'], registers }).set(
      { version: kprVersion(), node_version: process.version },
      1,
    );
  }

  // ---- events from the agent ---------------------------------------------------

  /**
   * A Service, EndpointSlice or Node change. `queued`: it queues a sync
   * (changes the initial sync covers count, but queue nothing).
   */
  changeQueued(change: TrackedChange, queued = true): void {
    this.kubeProxy.changeQueued(change, queued);
  }

  syncDone(report: SyncReport): void {
    this.kubeProxy.syncDone(report);
    this.syncs.inc({ trigger: report.trigger, result: report.result.ok ? 'ok' : 'error' });
    this.frontends.set(report.result.frontends);
    this.backends.set(report.result.backends);
    const limits = report.result.limits;
    if (limits) {
      const by = new Map<string, number>(LIMIT_NAMES.map((l) => [l, 0]));
      for (const l of limits) by.set(l.limit, (by.get(l.limit) ?? 0) + 1);
      for (const [limit, n] of by) this.overLimit.set({ limit }, n);
    }
    if (!report.result.ok) return;
    if (report.result.conflicts) {
      this.conflicts.reset();
      for (const c of report.result.conflicts) this.conflicts.set({ type: c.type, rule: c.rule }, c.frontends);
    }
    const drift = report.result.drift;
    if (drift.length > 0) {
      this.driftRepairSyncs.inc();
      for (const d of drift) this.driftRepaired.inc({ map: d.map, kind: d.kind }, d.entries);
    }
  }

  adopted(result: AdoptResult): void {
    for (const [kind, n] of Object.entries(result.details)) this.driftFound.inc({ kind: snake(kind) }, n);
  }

  taskFailed(task: string): void {
    this.taskFailures.inc({ task });
  }

  mapOperationFailed(map: string, op: string): void {
    this.mapErrors.inc({ map, op });
  }

  healthServed(path: 'healthz' | 'livez', code: number): void {
    this.kubeProxy.healthServed(path, code);
  }

  /** A listener shed a connection (agent/http/http-guard.ts ShedKind). */
  connectionShed(listener: 'healthz' | 'metrics' | 'service-health', kind: ShedKind): void {
    this.shed.inc({ listener, kind });
  }

  // ---- the API client and k8s caches (k8s-client-metrics.ts)

  relisted(kind: string, reason: string): void {
    this.k8s.relisted(kind, reason);
  }

  apiRequest(r: ApiRequest): void {
    this.k8s.apiRequest(r);
  }

  watchStarted(kind: string): void {
    this.k8s.watchStarted(kind);
  }

  watchEnded(kind: string, reason: string): void {
    this.k8s.watchEnded(kind, reason);
  }

  /** A service range left out (agent/sync/service-ranges.ts), once per distinct entry. */
  serviceRangeError(source: 'flag' | 'ServiceCIDR'): void {
    this.rangeErrors.inc({ source });
  }

  /** The service ranges now in kpr_svc_cidr. */
  serviceRanges(ranges: ReadonlyArray<{ source: string }>): void {
    const flag = ranges.filter((r) => r.source === 'flag').length;
    this.ranges.set({ source: 'flag' }, flag);
    this.ranges.set({ source: 'ServiceCIDR' }, ranges.length - flag);
  }

  objectRejected(kind: string): void {
    this.k8s.objectRejected(kind);
  }

  k8sCaches(list: () => Array<{ kind: string; lastConfirmed: Date | undefined }>): void {
    this.k8s.k8sCaches(list);
  }

  // ---- the node's datapath (node-datapath-metrics.ts)

  tcAttacher(source: () => TcAttachStatus): void {
    this.node.tcAttacher(source);
  }

  nodeDatapathFailed(op: string): void {
    this.node.nodeDatapathFailed(op);
  }

  pinRestored(object: 'map' | 'link', reason: 'missing' | 'replaced' | 'incompatible'): void {
    this.node.pinRestored(object, reason);
  }

  cgroupReattachedOnce(): void {
    this.node.cgroupReattachedOnce();
  }

  attachmentRepaired(hook: 'cgroup' | 'tcx' | 'tc'): void {
    this.node.attachmentRepaired(hook);
  }

  kernelFeatures(list: () => FeatureStatus[]): void {
    this.node.kernelFeatures(list);
  }

  mapSizes(configured: Readonly<Record<string, number>>): void {
    this.node.mapSizes(configured);
  }

  udpTerminationMode(mode: 'bpf_sock_destroy' | 'netlink' | 'off'): void {
    this.node.udpTerminationMode(mode);
  }

  udpSocketsDestroyed(mechanism: string, sockets: number): void {
    this.node.udpSocketsDestroyed(mechanism, sockets);
  }

  // ---- the exposition ----------------------------------------------------------

  /** The Prometheus text exposition. */
  async text(): Promise<string> {
    this.refreshKernel();
    (this.refreshServices ??= serviceCounters(this.registry, this.opts.bpffsDir, this.opts.log))();
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

function snake(camel: string): string {
  return camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
