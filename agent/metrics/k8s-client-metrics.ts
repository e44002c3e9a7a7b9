/**
 * The metrics of the agent's API client and k8s caches: client-go's
 * rest_client_* for every list and watch request, and kpr_k8s_* for the
 * reflectors (watches, how they ended, relists, rejected objects, cache age).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ApiRequest } from '../k8s/api-requests.js';
import { REST_CLIENT_BUCKETS } from './buckets.js';

export class K8sClientMetrics {
  private readonly restRequests: Counter<'code' | 'method' | 'host'>;
  private readonly restDuration: Histogram<'verb' | 'host'>;
  private readonly watchesStarted: Counter<'kind'>;
  private readonly watchEnds: Counter<'kind' | 'reason'>;
  private readonly relists: Counter<'kind' | 'reason'>;
  private readonly rejectedObjects: Counter<'kind'>;
  private k8sCacheList: () => Array<{ kind: string; lastConfirmed: Date | undefined }> = () => [];

  constructor(
    registry: Registry,
    private readonly now: () => Date,
  ) {
    const registers = [registry];
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
}
