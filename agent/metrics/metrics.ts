/**
 * The agent's Prometheus metrics: kube-proxy's names and meanings for the
 * control loop (so existing dashboards and alerts work), and kpr_* for what
 * only kpr has (maps, datapath counters, drift). Kernel-side values (map
 * entries, datapath counters) are read from the pinned maps at scrape time.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, exponentialBuckets, linearBuckets } from 'prom-client';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { MAP_NAMES } from '../maps/layout.js';
import { findRepoRoot } from '../paths.js';
import type { AdoptResult } from '../reconcile/reconciler.js';
import { LIMIT_NAMES } from '../reconcile/limits.js';
import type { SyncReport } from '../sync-loop.js';
import type { Logger } from '../log.js';
import type { FeatureStatus } from '../datapath/kernel-features.js';
import { ChangeTracker, type TrackedChange } from './change-tracker.js';
import { STAT_METRIC_HELP, readStats, statMetric, type StatMetric } from './datapath-stats.js';
import { pinnedMapStats } from './map-stats.js';
import { serviceCounters } from './service-counters.js';
import type { ApiRequest } from '../k8s/api-requests.js';

// ---- kube-proxy's and client-go's bucket layouts -----------------------------------
// Copied from upstream so a kube-proxy dashboard's histogram_quantile() and
// any recording rule over `le` see the same buckets from kpr as from kube-proxy.

/**
 * kubeproxy_sync_{,full_,partial_}proxy_rules_duration_seconds:
 * ExponentialBuckets(0.001, 2, 15) in pkg/proxy/metrics/metrics.go, 1 ms to 16.384 s.
 */
export const SYNC_BUCKETS = exponentialBuckets(0.001, 2, 15);

/**
 * kubeproxy_network_programming_duration_seconds: component-base's
 * MergeBuckets(LinearBuckets(0.25, 0.25, 2), LinearBuckets(1, 1, 59),
 * LinearBuckets(60, 5, 12), LinearBuckets(120, 30, 7)). MergeBuckets starts
 * from a one-element slice, so upstream's first bucket is le="0": 81 buckets,
 * 0 to 300 s.
 */
export const NETWORK_PROGRAMMING_BUCKETS = [0, ...linearBuckets(0.25, 0.25, 2), ...linearBuckets(1, 1, 59), ...linearBuckets(60, 5, 12), ...linearBuckets(120, 30, 7)];

/** rest_client_request_duration_seconds: client-go's (k8s.io/component-base/metrics/prometheus/restclient). */
export const REST_CLIENT_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];

export function kprVersion(): string {
  try {
    return (JSON.parse(readFileSync(path.join(findRepoRoot(), 'package.json'), 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

export interface TcAttachStatus {
  mode: 'tcx' | 'tc';
  interfaces: number;
  failures: number;
}

export interface AgentMetricsOptions {
  /** Where the maps are pinned; read at scrape time. */
  bpffsDir: string;
  log: Logger;
  /** Wall clock (tests inject one). */
  now?: () => Date;
}

export class AgentMetrics {
  readonly registry = new Registry();
  private readonly now: () => Date;
  private readonly tracker: ChangeTracker;

  // ---- kube-proxy's
  private readonly syncDuration: Histogram;
  private readonly syncFullDuration: Histogram;
  private readonly syncPartialDuration: Histogram;
  private readonly networkProgramming: Histogram;
  private readonly noLocalEndpoints: Gauge<'traffic_policy'>;
  private readonly lastSync: Gauge;
  private readonly lastQueued: Gauge;
  private readonly endpointChanges: Counter;
  private readonly endpointPending: Gauge;
  private readonly serviceChanges: Counter;
  private readonly servicePending: Gauge;
  private readonly healthz: Counter<'code'>;
  private readonly livez: Counter<'code'>;
  private readonly shed: Counter<'listener' | 'kind'>;
  // ---- client-go's (API client)
  private readonly restRequests: Counter<'code' | 'method' | 'host'>;
  private readonly restDuration: Histogram<'verb' | 'host'>;
  private readonly watchesStarted: Counter<'kind'>;
  private readonly watchEnds: Counter<'kind' | 'reason'>;
  // ---- kpr's
  private readonly syncs: Counter<'trigger' | 'result'>;
  private readonly mapErrors: Counter<'map' | 'op'>;
  private readonly frontends: Gauge;
  private readonly backends: Gauge;
  private readonly overLimit: Gauge<'limit'>;
  private readonly driftFound: Counter<'kind'>;
  private readonly driftRepairSyncs: Counter;
  private readonly driftRepaired: Counter<'map' | 'kind'>;
  private readonly nodeErrors: Counter<'op'>;
  private readonly pinsRestored: Counter<'object' | 'reason'>;
  private readonly cgroupReattached: Counter;
  private readonly udpDestroyed: Counter<'mechanism'>;
  private readonly udpMode: Gauge<'mode'>;
  private readonly taskFailures: Counter<'task'>;
  private readonly relists: Counter<'kind' | 'reason'>;
  private readonly rejectedObjects: Counter<'kind'>;
  private k8sCacheList: () => Array<{ kind: string; lastConfirmed: Date | undefined }> = () => [];
  private readonly conflicts: Gauge<'type' | 'rule'>;
  private kernelFeatureList: () => FeatureStatus[] = () => [];

  constructor(private readonly opts: AgentMetricsOptions) {
    this.now = opts.now ?? (() => new Date());
    this.tracker = new ChangeTracker(this.now());
    const registers = [this.registry];
    const hist = (name: string, help: string) => new Histogram({ name, help, buckets: SYNC_BUCKETS, registers });

    // ---- Node's process_* and nodejs_* (prom-client's defaults), as kube-proxy exports Go's process_* and go_*.
    collectDefaultMetrics({ register: this.registry });

    this.syncDuration = hist('kubeproxy_sync_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds (every sync, full or partial).');
    this.syncFullDuration = hist('kubeproxy_sync_full_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds for full resyncs.');
    this.syncPartialDuration = hist('kubeproxy_sync_partial_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds for partial (per-service) syncs.');
    this.networkProgramming = new Histogram({
      name: 'kubeproxy_network_programming_duration_seconds',
      help: 'In-cluster network programming latency in seconds: from an EndpointSlice last-change-trigger-time to the maps holding the change.',
      buckets: NETWORK_PROGRAMMING_BUCKETS,
      registers,
    });
    this.noLocalEndpoints = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_no_local_endpoints_total',
      help: 'Number of services with a Local traffic policy and no endpoints (service ports with endpoints elsewhere but none on this node, by traffic_policy internal or external), after the last successful sync.',
      labelNames: ['traffic_policy'],
      registers,
    });
    for (const traffic_policy of ['internal', 'external']) this.noLocalEndpoints.set({ traffic_policy }, 0);
    this.lastSync = new Gauge({ name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', help: 'The last time the maps were successfully synced.', registers });
    this.lastQueued = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
      help: 'The last time a sync was queued by a Service, EndpointSlice or Node change.',
      registers,
    });
    this.endpointChanges = new Counter({ name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total', help: 'Cumulative EndpointSlice changes (adds, updates, deletes).', registers });
    this.endpointPending = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      help: 'EndpointSlice changes received and not yet applied to the maps.',
      registers,
      collect: () => this.endpointPending.set(this.tracker.endpointChangesPending),
    });
    this.serviceChanges = new Counter({ name: 'kubeproxy_sync_proxy_rules_service_changes_total', help: 'Cumulative Service changes (adds, updates, deletes).', registers });
    this.servicePending = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_service_changes_pending',
      help: 'Services changed and not yet applied to the maps.',
      registers,
      collect: () => this.servicePending.set(this.tracker.serviceChangesPending),
    });
    this.healthz = new Counter({ name: 'kubeproxy_proxy_healthz_total', help: 'Cumulative proxy /healthz answers by HTTP status code.', labelNames: ['code'], registers });
    this.livez = new Counter({ name: 'kubeproxy_proxy_livez_total', help: 'Cumulative proxy /livez answers by HTTP status code.', labelNames: ['code'], registers });
    // ---- client-go's API client metrics (rest_client_*), for the agent's list and watch requests
    this.restRequests = new Counter({
      name: 'rest_client_requests_total',
      help: 'Number of HTTP requests to the API server, partitioned by status code (<error> when none came back), method, and host.',
      labelNames: ['code', 'method', 'host'],
      registers,
    });
    this.restDuration = new Histogram({
      name: 'rest_client_request_duration_seconds',
      help: 'Request latency in seconds, broken down by verb and host: list requests, to the whole answer read (watch requests count only in rest_client_requests_total, as client-go).',
      labelNames: ['verb', 'host'],
      buckets: REST_CLIENT_BUCKETS,
      registers,
    });
    this.watchesStarted = new Counter({
      name: 'kpr_k8s_watches_total',
      help: 'Watch requests each k8s cache made (after a list, or resuming a watch the server closed), by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.watchEnds = new Counter({
      name: 'kpr_k8s_watch_ends_total',
      help: 'Watches of a k8s cache that ended, by kind and reason: closed (by the server; resumed), closed_at_once (within 1 s, nothing received; relists), expired, watch_error, stale_event, rv_backwards, no_progress (each relists).',
      labelNames: ['kind', 'reason'],
      registers,
    });
    this.shed = new Counter({
      name: 'kpr_http_connections_shed_total',
      help: 'Connections a health or metrics listener closed at its connection cap: evicted (the oldest idle one, to make room) or refused (every open one was busy).',
      labelNames: ['listener', 'kind'],
      registers,
    });

    this.syncs = new Counter({ name: 'kpr_syncs_total', help: 'Sync attempts by trigger (initial, event, periodic, retry) and result (ok, error).', labelNames: ['trigger', 'result'], registers });
    this.mapErrors = new Counter({ name: 'kpr_map_operation_errors_total', help: 'Failed BPF map operations of the reconciler, by map and operation.', labelNames: ['map', 'op'], registers });
    this.frontends = new Gauge({ name: 'kpr_frontends_programmed', help: 'Frontends (service address, port, protocol and scope) in the service map after the last sync.', registers });
    this.backends = new Gauge({ name: 'kpr_backends_programmed', help: 'Backends in the backend map after the last sync.', registers });
    this.overLimit = new Gauge({
      name: 'kpr_services_over_limit',
      help:
        'Services over a datapath limit after the last sync, by limit: refused whole (rev_nat_ids, svc_map, backend_map, aff_match_map, src_range_map: nothing of them is programmed) or cut (backends_per_frontend: a frontend holds its first 65,535 backends). Each is logged and listed as skipped.',
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
    this.nodeErrors = new Counter({
      name: 'kpr_node_datapath_errors_total',
      help: 'Failed runs of the node datapath timers (interface_rescan, conntrack_sweep, cgroup_check, pin_check), e.g. while the node network namespace, the socket programs\' cgroup or the bpffs is gone; retried at the next tick.',
      labelNames: ['op'],
      registers,
    });
    this.pinsRestored = new Counter({
      name: 'kpr_pins_restored_total',
      help: 'kpr pins put back: object (map, link), reason (missing: the pin was removed or its bpffs re-mounted; replaced: another object was pinned there while the agent ran; incompatible: found at start with another type or size, replaced by a new map).',
      labelNames: ['object', 'reason'],
      registers,
    });
    this.cgroupReattached = new Counter({
      name: 'kpr_cgroup_reattached_total',
      help: 'Times the socket programs were attached to --cgroup-path again because the cgroup was removed and created anew.',
      registers,
    });
    const tc = () => this.tcSource?.();
    new Gauge({
      name: 'kpr_tc_attached_interfaces',
      help: 'Interfaces carrying a kpr tc program, by attach mode (tcx: tcx link, tc: clsact filter).',
      labelNames: ['mode'],
      registers,
      collect() {
        this.reset();
        const s = tc();
        if (s) this.set({ mode: s.mode }, s.interfaces);
      },
    });
    let failuresSeen = 0;
    new Counter({
      name: 'kpr_tc_attach_failures_total',
      help: 'Attempts to attach a tc program to an interface that failed (retried at every interface rescan).',
      registers,
      collect() {
        const n = tc()?.failures ?? failuresSeen;
        if (n > failuresSeen) this.inc(n - failuresSeen);
        failuresSeen = n;
      },
    });
    this.udpDestroyed = new Counter({
      name: 'kpr_udp_sockets_destroyed_total',
      help: 'Connected UDP sockets of a removed backend the agent destroyed, by mechanism (bpf_sock_destroy: the iter/udp program; netlink: sock_diag SOCK_DESTROY). kpr_datapath_sockets_destroyed_total counts both too.',
      labelNames: ['mechanism'],
      registers,
    });
    this.udpMode = new Gauge({
      name: 'kpr_udp_termination_mode',
      help: 'How connected UDP sockets of a removed backend are destroyed: 1 for the mode in use (bpf_sock_destroy, netlink or off).',
      labelNames: ['mode'],
      registers,
    });
    this.taskFailures = new Counter({
      name: 'kpr_agent_task_failures_total',
      help: 'Failures of agent work beside the sync loop (node-datapath, node-settings, uncaught), each logged and retried; the periodic timers count in kpr_node_datapath_errors_total.',
      labelNames: ['task'],
      registers,
    });
    this.relists = new Counter({
      name: 'kpr_k8s_relists_total',
      help: 'Lists of a k8s cache by kind and reason: initial, expired (410), watch_error, stale_event, rv_backwards, no_progress.',
      labelNames: ['kind', 'reason'],
      registers,
    });
    this.rejectedObjects = new Counter({
      name: 'kpr_k8s_objects_rejected_total',
      help: 'Object versions the watch layer rejected (invalid, or not convertible) and treated as absent, by kind.',
      labelNames: ['kind'],
      registers,
    });
    const cacheAge = new Gauge({
      name: 'kpr_k8s_cache_age_seconds',
      help: 'Seconds since each k8s cache was last confirmed by the API server (a list, a watch event or bookmark), by kind.',
      labelNames: ['kind'],
      registers,
      collect: () => {
        cacheAge.reset();
        const now = this.now().getTime();
        for (const c of this.k8sCacheList()) if (c.lastConfirmed) cacheAge.set({ kind: c.kind }, Math.max(0, now - c.lastConfirmed.getTime()) / 1000);
      },
    });
    this.conflicts = new Gauge({
      name: 'kpr_frontend_conflicts',
      help: 'Frontends a Service claims but another Service owns, not programmed for it, after the last successful sync: by the losing claim (type: ClusterIP, NodePort, LoadBalancer, ExternalIP) and rule (outranked: the same address, port and protocol claimed with precedence; cluster-ip-address: a LoadBalancer or external IP equal to a ClusterIP).',
      labelNames: ['type', 'rule'],
      registers,
    });
    const features = new Gauge({
      name: 'kpr_kernel_feature',
      help: 'Optional kernel features as probed at start: one series per feature with its state (active, fallback with the fallback in use, off); always 1.',
      labelNames: ['feature', 'state', 'fallback'],
      registers,
      collect: () => {
        features.reset();
        for (const f of this.kernelFeatureList()) features.set({ feature: f.feature, state: f.state, fallback: f.fallback ?? '' }, 1);
      },
    });
    new Gauge({ name: 'kpr_build_info', help: 'kpr version and the Node.js running it; always 1.', labelNames: ['version', 'node_version'], registers }).set(
      { version: kprVersion(), node_version: process.version },
      1,
    );
  }

  // ---- events from the agent ---------------------------------------------------

  private tcSource: (() => TcAttachStatus) | undefined;

  /** Where kpr_tc_* come from (the node datapath's TcAttacher), read at scrape time. */
  tcAttacher(source: () => TcAttachStatus): void {
    this.tcSource = source;
  }

  /**
   * A Service, EndpointSlice or Node change. `queued`: it queues a sync
   * (changes the initial sync covers count, but queue nothing).
   */
  changeQueued(change: TrackedChange, queued = true): void {
    if (queued) this.lastQueued.set(this.now().getTime() / 1000);
    if (change.kind === 'EndpointSlice') this.endpointChanges.inc();
    else if (change.kind === 'Service') this.serviceChanges.inc();
    this.tracker.record(change);
  }

  syncDone(report: SyncReport): void {
    const seconds = report.durationMs / 1000;
    this.syncDuration.observe(seconds);
    (report.full ? this.syncFullDuration : this.syncPartialDuration).observe(seconds);
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
    const now = this.now();
    this.lastSync.set(now.getTime() / 1000);
    if (report.noLocalEndpoints) {
      this.noLocalEndpoints.set({ traffic_policy: 'internal' }, report.noLocalEndpoints.internal);
      this.noLocalEndpoints.set({ traffic_policy: 'external' }, report.noLocalEndpoints.external);
    }
    for (const latency of this.tracker.applied(now)) this.networkProgramming.observe(latency);
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

  /** A node datapath timer failed (op: interface_rescan, conntrack_sweep, cgroup_check, pin_check). */
  nodeDatapathFailed(op: string): void {
    this.nodeErrors.inc({ op });
  }

  pinRestored(object: 'map' | 'link', reason: 'missing' | 'replaced' | 'incompatible'): void {
    this.pinsRestored.inc({ object, reason });
  }

  cgroupReattachedOnce(): void {
    this.cgroupReattached.inc();
  }

  adopted(result: AdoptResult): void {
    for (const [kind, n] of Object.entries(result.details)) this.driftFound.inc({ kind: snake(kind) }, n);
  }

  /** Where kpr_kernel_feature reads the features at scrape time. */
  kernelFeatures(list: () => FeatureStatus[]): void {
    this.kernelFeatureList = list;
  }

  /** A k8s cache was (re)listed. */
  relisted(kind: string, reason: string): void {
    this.relists.inc({ kind, reason });
  }

  /** One request to the API server answered (code: HTTP status) or failed ('<error>'); seconds only for list requests. */
  apiRequest(r: ApiRequest): void {
    this.restRequests.inc({ code: r.code, method: r.method, host: r.host });
    if (r.seconds !== undefined) this.restDuration.observe({ verb: r.method, host: r.host }, r.seconds);
  }

  /** A k8s cache opened a watch. */
  watchStarted(kind: string): void {
    this.watchesStarted.inc({ kind });
  }

  /** A k8s cache's watch ended. */
  watchEnded(kind: string, reason: string): void {
    this.watchEnds.inc({ kind, reason });
  }

  /** A k8s object version was rejected and treated as absent. */
  objectRejected(kind: string): void {
    this.rejectedObjects.inc({ kind });
  }

  /** Where kpr_k8s_cache_age_seconds reads the caches at scrape time. */
  k8sCaches(list: () => Array<{ kind: string; lastConfirmed: Date | undefined }>): void {
    this.k8sCacheList = list;
  }

  taskFailed(task: string): void {
    this.taskFailures.inc({ task });
  }

  mapOperationFailed(map: string, op: string): void {
    this.mapErrors.inc({ map, op });
  }

  /**
   * The map sizes the agent was configured with (kpr_bpf_map_configured_capacity);
   * kpr_bpf_map_capacity says the size in use (the same: a map pinned at
   * another size is migrated to it at start).
   */
  mapSizes(configured: Readonly<Record<string, number>>): void {
    this.mapSizeGauge ??= new Gauge({ name: 'kpr_bpf_map_configured_capacity', help: 'max_entries each run-time sized BPF map is configured with (--map-size-*, --bpf-map-dynamic-size-ratio, --conntrack-*).', labelNames: ['map'], registers: [this.registry] });
    const g = this.mapSizeGauge;
    g.reset();
    for (const [map, n] of Object.entries(configured)) g.set({ map }, n);
  }

  private mapSizeGauge: Gauge<string> | undefined;

  udpTerminationMode(mode: 'bpf_sock_destroy' | 'netlink' | 'off'): void {
    this.udpMode.reset();
    this.udpMode.set({ mode }, 1);
  }

  udpSocketsDestroyed(mechanism: string, sockets: number): void {
    this.udpDestroyed.inc({ mechanism }, sockets);
  }

  healthServed(path: 'healthz' | 'livez', code: number): void {
    (path === 'healthz' ? this.healthz : this.livez).inc({ code: String(code) });
  }

  /** A listener at its connection cap closed its oldest idle connection, or refused a new one. */
  connectionShed(listener: 'healthz' | 'metrics' | 'service-health', kind: 'evicted' | 'refused'): void {
    this.shed.inc({ listener, kind });
  }

  /** The Prometheus text exposition. */
  async text(): Promise<string> {
    this.refreshKernel();
    (this.refreshServices ??= serviceCounters(this.registry, this.opts.bpffsDir, this.opts.log))();
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  // ---- scrape-time kernel reads -------------------------------------------------

  /** Map entries/capacity and the datapath counters, read from the pinned maps once per scrape (see text()). */
  private readonly refreshKernel: () => void = this.kernelCollectors();
  /** kpr_service_*_total from kpr_svc_stats, read once per scrape. */
  private refreshServices?: () => void;

  private kernelCollectors(): () => void {
    const registers = [this.registry];
    const entries = new Gauge({ name: 'kpr_bpf_map_entries', help: 'Entries in each pinned BPF map (arrays: always their capacity).', labelNames: ['map'], registers });
    const capacity = new Gauge({ name: 'kpr_bpf_map_capacity', help: 'max_entries of each pinned BPF map.', labelNames: ['map'], registers });
    const counters = new Map<StatMetric['metric'], Counter<string>>();
    for (const [metric, help] of Object.entries(STAT_METRIC_HELP) as Array<[StatMetric['metric'], string]>) {
      const labelNames = STAT_LABELS[metric] ? [STAT_LABELS[metric]!] : [];
      counters.set(metric, new Counter({ name: `kpr_datapath_${metric}_total`, help, labelNames, registers }));
    }
    return () => {
      const { bpffsDir, log } = this.opts;
      try {
        const stats = pinnedMapStats(bpffsDir);
        entries.reset();
        capacity.reset();
        for (const s of stats) {
          // A ring buffer has no entries, and its capacity is bytes: not a map that fills.
          if (s.entries === null) continue;
          entries.set({ map: s.name }, s.entries);
          capacity.set({ map: s.name }, s.capacity);
        }
      } catch (err) {
        log.debug('cannot read the pinned maps for metrics', { error: (err as Error).message });
      }
      let stats;
      try {
        const map = BpfMap.openPinned(mapPinPath(bpffsDir, MAP_NAMES.stats));
        try {
          stats = readStats(map);
        } finally {
          map.close();
        }
      } catch (err) {
        log.debug('cannot read kpr_stats for metrics', { error: (err as Error).message });
        return;
      }
      // Counters that mirror kernel totals: reset, then add the current total.
      for (const c of counters.values()) c.reset();
      for (const s of stats) {
        const m = statMetric(s.stat);
        const c = counters.get(m.metric)!;
        if (m.label) c.inc({ [m.label.name]: m.label.value }, Number(s.value));
        else c.inc(Number(s.value));
      }
    };
  }
}

/** The label each datapath counter carries, if any. */
const STAT_LABELS: Partial<Record<StatMetric['metric'], string>> = {
  translations: 'path',
  refusals: 'reason',
  drops: 'reason',
  tc_packets: 'action',
  other: 'stat',
};

function snake(camel: string): string {
  return camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
