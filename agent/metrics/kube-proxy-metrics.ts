/**
 * kube-proxy's metrics of the control loop, with kube-proxy's names, help and
 * buckets (so existing dashboards and alerts work): sync durations, network
 * programming latency, queued changes, the last sync, /healthz and /livez.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { SyncReport } from '../sync/sync-report.js';
import { NETWORK_PROGRAMMING_BUCKETS, SYNC_BUCKETS } from './buckets.js';
import { ChangeTracker, type TrackedChange } from './change-tracker.js';

export class KubeProxyMetrics {
  private readonly tracker: ChangeTracker;
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

  constructor(
    registry: Registry,
    private readonly now: () => Date,
  ) {
    this.tracker = new ChangeTracker(this.now());
    const registers = [registry];
    const hist = (name: string, help: string) => new Histogram({ name, help, buckets: SYNC_BUCKETS, registers });

    this.syncDuration = hist('kubeproxy_sync_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds (every sync, full or partial).');
    this.syncFullDuration = hist('kubeproxy_sync_full_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds for full resyncs.');
    this.syncPartialDuration = hist(
      'kubeproxy_sync_partial_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds for partial (per-service) syncs.',
    );
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
    this.lastSync = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
      help: 'The last time the maps were successfully synced.',
      registers,
    });
    this.lastQueued = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
      help: 'The last time a sync was queued by a Service, EndpointSlice or Node change.',
      registers,
    });
    this.endpointChanges = new Counter({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total',
      help: 'Cumulative EndpointSlice changes (adds, updates, deletes).',
      registers,
    });
    this.endpointPending = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      help: 'EndpointSlice changes received and not yet applied to the maps.',
      registers,
      collect: () => this.endpointPending.set(this.tracker.endpointChangesPending),
    });
    this.serviceChanges = new Counter({
      name: 'kubeproxy_sync_proxy_rules_service_changes_total',
      help: 'Cumulative Service changes (adds, updates, deletes).',
      registers,
    });
    this.servicePending = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_service_changes_pending',
      help: 'Services changed and not yet applied to the maps.',
      registers,
      collect: () => this.servicePending.set(this.tracker.serviceChangesPending),
    });
    this.healthz = new Counter({
      name: 'kubeproxy_proxy_healthz_total',
      help: 'Cumulative proxy /healthz answers by HTTP status code.',
      labelNames: ['code'],
      registers,
    });
    this.livez = new Counter({
      name: 'kubeproxy_proxy_livez_total',
      help: 'Cumulative proxy /livez answers by HTTP status code.',
      labelNames: ['code'],
      registers,
    });
  }

  /** See AgentMetrics.changeQueued. */
  changeQueued(change: TrackedChange, queued: boolean): void {
    if (queued) this.lastQueued.set(this.now().getTime() / 1000);
    if (change.kind === 'EndpointSlice') this.endpointChanges.inc();
    else if (change.kind === 'Service') this.serviceChanges.inc();
    this.tracker.record(change);
  }

  /** Every sync is timed; a successful one also sets the last sync, the services without local endpoints and the programming latencies. */
  syncDone(report: SyncReport): void {
    const seconds = report.durationMs / 1000;
    this.syncDuration.observe(seconds);
    (report.full ? this.syncFullDuration : this.syncPartialDuration).observe(seconds);
    if (!report.result.ok) return;
    const now = this.now();
    this.lastSync.set(now.getTime() / 1000);
    if (report.noLocalEndpoints) {
      this.noLocalEndpoints.set({ traffic_policy: 'internal' }, report.noLocalEndpoints.internal);
      this.noLocalEndpoints.set({ traffic_policy: 'external' }, report.noLocalEndpoints.external);
    }
    for (const latency of this.tracker.applied(now)) this.networkProgramming.observe(latency);
  }

  healthServed(path: 'healthz' | 'livez', code: number): void {
    (path === 'healthz' ? this.healthz : this.livez).inc({ code: String(code) });
  }
}
