/**
 * The agent's observability wiring: kube-proxy's health state (fed by queued
 * changes and successful syncs), the metrics, and their two HTTP servers.
 * agent.ts calls it at a handful of points; nothing here changes behaviour.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { buildHealthServer } from '../health/server.js';
import { ProxyHealthState, type NodeLike } from '../health/proxy-health.js';
import type { IPFamily } from '../net/ip.js';
import { cacheHealth, type CacheHealth, type CacheState } from '../health/cache-health.js';
import { attachmentHealth, type AttachmentStateLike } from '../health/attachment-health.js';
import type { Logger } from '../log/log.js';
import type { AdoptResult } from '../reconcile/reconciler.js';
import type { SyncReport } from '../sync/sync-report.js';
import { parseBindAddress } from '../net/listen-address.js';
import { listenWithRetry, type Listener } from './http-listen.js';
import { instrumentMapErrors } from './instrument-maps.js';
import { AgentMetrics } from './metrics.js';
import { kprVersion } from './kpr-version.js';
import { summarizeLimits, type LimitReport, type LimitSummary } from '../reconcile/limits.js';
import { buildMetricsServer, type ConfigzBody } from './server.js';

/**
 * The families kpr's health reports. One sync programs one set of maps that
 * serves IPv4 and IPv6 sockets alike (16-byte addresses, connect4 and connect6
 * hooks), so both families are updated together and always agree; both are
 * reported so per-family dashboards built for dual-stack kube-proxy work.
 */
export const HEALTH_FAMILIES: readonly IPFamily[] = ['IPv4', 'IPv6'];

export interface ObservabilityOptions {
  bpffsDir: string;
  syncPeriodMs: number;
  /** "" disables the server. */
  healthzBindAddress: string;
  metricsBindAddress: string;
  log: Logger;
  /** This node's Node object as the watch last saw it. */
  node: () => NodeLike | undefined;
  /** The k8s caches (ClusterWatch.cacheStatus()); undefined until the watch exists. */
  caches?: () => CacheState[] | undefined;
  /**
   * /healthz is 503 when a synced k8s cache was not confirmed by the API server for longer
   * than this. Default 600000 (10 min: twice the watch layer's 5-min no-progress relist).
   */
  cacheStaleAfterMs?: number;
  /** The effective configuration /configz shows on the metrics server (the agent's AgentConfig). */
  config?: object;
  /** The service ranges in force, for /configz (agent/sync/service-ranges.ts); undefined until known. */
  serviceRanges?: () => unknown;
}

/** Default bound of an unconfirmed k8s cache before /healthz says 503. */
export const CACHE_STALE_AFTER_MS = 600_000;

/** /healthz "mapSizes": max_entries by map name as configured and as in use; the live map migration of this start, if any. */
export interface MapSizeReport {
  configured: Record<string, number>;
  inUse: Record<string, number>;
  /** The maps moved to a new set at this start (agent/datapath/migration.ts): why, and whether it is done. */
  migration?: { state: 'in progress' | 'done'; maps: Array<{ map: string; reason: string; detail: string }> };
}

export interface ObservedChange {
  kind: 'Service' | 'EndpointSlice' | 'Node';
  key: string;
  resource?: KubernetesObject;
}

export class Observability {
  readonly metrics: AgentMetrics;
  /** kube-proxy's rule: unhealthy when a queued update waits 2 × syncPeriod. */
  readonly health: ProxyHealthState;
  private readonly listeners: Listener[] = [];
  private readonly startedAt = new Date();
  /** The Services over a datapath limit after the last sync that reported them (undefined before the first). */
  private overLimit: LimitSummary | undefined;
  /** The list it was made from (the reconciler's, the same until a Service starts or stops being over a limit). */
  private overLimitFrom: readonly LimitReport[] | undefined;

  constructor(private readonly opts: ObservabilityOptions) {
    this.metrics = new AgentMetrics({ bpffsDir: opts.bpffsDir, log: opts.log });
    this.health = new ProxyHealthState(2 * opts.syncPeriodMs);
    const caches = opts.caches;
    if (caches) this.metrics.k8sCaches(() => caches() ?? []);
  }

  /**
   * The k8s caches' verdict for /healthz: unsynced 2 × syncPeriod (the proxy health
   * timeout) after the start, or a cache unconfirmed for cacheStaleAfterMs, is unhealthy.
   */
  cacheHealth(now: Date = new Date()): CacheHealth | undefined {
    if (!this.opts.caches) return undefined;
    return cacheHealth(this.opts.caches(), now, {
      startedAt: this.startedAt,
      syncBoundMs: this.health.healthTimeoutMs,
      staleBoundMs: this.opts.cacheStaleAfterMs ?? CACHE_STALE_AFTER_MS,
    });
  }

  /** Starts the servers that are enabled (each retries every 5 s if its port is busy). */
  start(): void {
    const { log } = this.opts;
    const healthz = parseBindAddress(this.opts.healthzBindAddress, '--healthz-bind-address');
    if (healthz) {
      const build = () =>
        buildHealthServer({
          state: this.health,
          node: this.opts.node,
          caches: this.opts.caches ? (now) => this.cacheHealth(now)! : undefined,
          overLimit: () => this.limitSummary() as Record<string, unknown> | undefined,
          mapSizes: () => this.mapSizeReport as Record<string, unknown> | undefined,
          attachments: (now) => attachmentHealth(this.attachmentSource?.(), now),
          onServed: (p, code) => this.metrics.healthServed(p, code),
          onShed: (kind) => this.metrics.connectionShed('healthz', kind),
        });
      this.listeners.push(listenWithRetry(build, healthz, 'health server', log));
    }
    const metrics = parseBindAddress(this.opts.metricsBindAddress, '--metrics-bind-address');
    const config = this.opts.config;
    const ranges = this.opts.serviceRanges;
    const configz = config
      ? (): ConfigzBody => {
          const serviceRanges = ranges?.();
          return { version: kprVersion(), config: config as Record<string, unknown>, ...(serviceRanges !== undefined ? { serviceRanges } : {}) };
        }
      : undefined;
    if (metrics)
      this.listeners.push(
        listenWithRetry(
          () => buildMetricsServer(this.metrics, (kind) => this.metrics.connectionShed('metrics', kind), configz),
          metrics,
          'metrics server',
          log,
        ),
      );
  }

  async stop(): Promise<void> {
    await Promise.all(this.listeners.splice(0).map((l) => l.close()));
  }

  /** The reconciler's map writer, with failed operations counted by map and operation. */
  instrument<T extends object>(maps: T): T {
    return instrumentMapErrors(maps, (map, op) => this.metrics.mapOperationFailed(map, op));
  }

  adopted(result: AdoptResult): void {
    this.metrics.adopted(result);
  }

  /** The sync loop is about to run its first sync (kube-proxy marks every family updated here). */
  loopStarting(): void {
    for (const f of HEALTH_FAMILIES) this.health.updated(f);
  }

  /**
   * A watched object changed. `queued`: the change queues a sync (the initial
   * sync is not running yet covers earlier ones).
   */
  changed(change: ObservedChange, queued: boolean): void {
    this.metrics.changeQueued({ kind: change.kind, key: change.key, annotations: change.resource?.metadata?.annotations }, queued);
    if (queued) for (const f of HEALTH_FAMILIES) this.health.queuedUpdate(f);
  }

  /** The node datapath's last attachment check (/healthz "attachments", kpr status). */
  private attachmentSource: (() => AttachmentStateLike | undefined) | undefined;

  /** Where /healthz reads the attachment check from (the node datapath, once it runs). */
  attachments(source: () => AttachmentStateLike | undefined): void {
    this.attachmentSource = source;
  }

  /** The run-time map sizes, as loaded (/healthz "mapSizes", kpr status). */
  private mapSizeReport: MapSizeReport | undefined;

  /** The datapath is loaded with these sizes: configured, in use, and this start's map migration. */
  mapSizes(report: MapSizeReport): void {
    this.mapSizeReport = report;
    this.metrics.mapSizes(report.configured);
  }

  /** The Services over a datapath limit, as the last sync left them (/healthz, kpr status). */
  limitSummary(): LimitSummary | undefined {
    return this.overLimit;
  }

  synced(report: SyncReport): void {
    this.metrics.syncDone(report);
    const limits = report.result.limits;
    if (limits && limits !== this.overLimitFrom) {
      this.overLimit = summarizeLimits(limits);
      this.overLimitFrom = limits;
    }
    if (report.result.ok) for (const f of HEALTH_FAMILIES) this.health.updated(f);
  }
}
