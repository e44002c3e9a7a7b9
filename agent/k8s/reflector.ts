/**
 * One informer's list/watch loop with client-go's reflector semantics, and
 * its cache (objectKey -> typed, pruned object).
 *
 * - It lists (in pages, agent/k8s/list-page.ts), replaces its cache with the
 *   list (emitting add/update for what is new or changed and delete for what
 *   is gone: the DELETED events it never saw are inferred), then watches from
 *   the list's resourceVersion (allowWatchBookmarks, a server-side timeout of
 *   5-10 min as client-go picks).
 * - A watch the server ends cleanly is resumed from the last resourceVersion
 *   (client-go's "watch closed" path), unless it lasted under a second with
 *   nothing received ("very short watch"), which relists.
 * - Everything else relists: the watch request failing or its stream breaking,
 *   an ERROR event (410 Expired: reason "expired"; others "watch_error"), an
 *   event or bookmark whose resourceVersion is below the last one seen
 *   ("rv_backwards": the server has a new history, e.g. an etcd restore), an
 *   event older than the object it concerns ("stale_event"), and no event or
 *   bookmark for noProgressMs ("no_progress": the server keeps the stream open
 *   but says nothing, or never answers the watch).
 * - Relists after a failure wait the restart backoff (doubling to its cap),
 *   reset once a watch delivers something.
 *
 * resourceVersions are opaque strings to Kubernetes clients. To see one "go
 * backwards" kpr must compare them; it does so only when both are
 * non-negative decimal integers (what every etcd-backed API server sends) and
 * never draws a conclusion from anything else.
 *
 * Every raw object (list item or watch event) goes through the validation
 * hook, then ObjectSerializer.deserialize and the pruner; an object either
 * rejects or fails to convert is treated as absent (removed from the cache,
 * with a delete change, if it was there) and logged once per version. It
 * never stops the list, the watch or any other object. The cache and that
 * conversion are agent/k8s/reflector-cache.ts; one watch request is
 * agent/k8s/watch-request.ts.
 */
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { listPage, type ListPageQuery } from './list-page.js';
import type { ApiRequestObserver } from './api-requests.js';
import { ReflectorCache, keyOf, type Rejection, type ReflectorHandlers, type ReflectorLogger, type Validator } from './reflector-cache.js';
import { watchRequest, type RelistReason, type WatchOutcome } from './watch-request.js';

export type { RelistReason } from './watch-request.js';

/**
 * How a watch ended: kpr_k8s_watch_ends_total{reason}. closed: the server ended it
 * cleanly (resumed from the last resourceVersion); closed_at_once: ended within a
 * second with nothing received (relists); the others are the relist reasons.
 */
export type WatchEndReason = 'closed' | 'closed_at_once' | Exclude<RelistReason, 'initial'>;

export interface RelistInfo {
  reason: RelistReason;
  added: number;
  updated: number;
  deleted: number;
  /** Objects in the cache afterwards. */
  objects: number;
  resourceVersion: string;
}

export interface ReflectorOptions<T extends KubernetesObject> {
  /** For logs ("Service", "EndpointSlice", "Node"). */
  kind: string;
  kubeConfig: KubeConfig;
  /** e.g. /api/v1/services */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** client-node model name, e.g. "V1Service". */
  typeName: string;
  prune: (o: T) => T;
  /** 0: unpaginated. */
  pageSize: number;
  restartBackoffMs: number;
  maxRestartBackoffMs: number;
  noProgressMs: number;
  /** Server-side watch timeout; default a random 300-600 s per watch (client-go). */
  watchTimeoutSeconds?: () => number;
  validate?: Validator;
  log: ReflectorLogger;
  handlers: ReflectorHandlers<T>;
  onSynced: () => void;
  onRelist?: (info: RelistInfo) => void;
  onRejected?: (rejection: Rejection) => void;
  /** Every list and watch request's outcome (rest_client_* metrics); requests cut by stop() are not reported. */
  onApiRequest?: ApiRequestObserver;
  /** A watch request is made. */
  onWatchStart?: () => void;
  /** A watch ended, and why (not when stop() ended it). */
  onWatchEnd?: (reason: WatchEndReason) => void;
  /** The clock (ms). */
  now?: () => number;
}

/**
 * Numeric comparison of two resourceVersions, only when both are non-negative
 * decimal integers (etcd revisions); undefined otherwise (they are opaque).
 */
export function compareResourceVersions(a: string | undefined, b: string | undefined): number | undefined {
  if (!a || !b || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return undefined;
  const x = a.replace(/^0+(?=\d)/, '');
  const y = b.replace(/^0+(?=\d)/, '');
  if (x.length !== y.length) return x.length < y.length ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

export class Reflector<T extends KubernetesObject> {
  private readonly cache: ReflectorCache<T>;
  private lastRv = '';
  private lastConfirmedMs: number | undefined;
  private hasSynced = false;
  private stopped = false;
  private backoffMs: number;
  private readonly now: () => number;
  /** Cuts whatever request is in flight (list page or watch). */
  private cut: (() => void) | undefined;
  private sleepTimer: { timer: NodeJS.Timeout; resolve: () => void } | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly o: ReflectorOptions<T>) {
    this.backoffMs = o.restartBackoffMs;
    this.now = o.now ?? Date.now;
    this.cache = new ReflectorCache<T>({ ...o, stopped: () => this.stopped });
  }

  get synced(): boolean {
    return this.hasSynced;
  }

  /** When the cache was last confirmed against the server: a successful list, any watch event or bookmark. */
  get lastConfirmed(): number | undefined {
    return this.lastConfirmedMs;
  }

  get resourceVersion(): string {
    return this.lastRv;
  }

  get size(): number {
    return this.cache.size;
  }

  start(): void {
    if (this.running) throw new Error('reflector already started');
    this.running = this.loop().catch((e: unknown) =>
      this.o.log.error('k8s reflector loop failed', { kind: this.o.kind, error: String((e as Error)?.stack ?? e) }),
    );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cut?.();
    if (this.sleepTimer) {
      clearTimeout(this.sleepTimer.timer);
      this.sleepTimer.resolve();
    }
    await this.running;
  }

  // ---- the loop ----------------------------------------------------------------

  private async loop(): Promise<void> {
    let relist: RelistReason | undefined = 'initial';
    while (!this.stopped) {
      if (relist) {
        try {
          await this.listAndReplace(relist);
          relist = undefined;
        } catch (err: any) {
          if (this.stopped) return;
          this.failed('list', err);
          await this.sleep(this.nextBackoff());
          continue;
        }
      }
      const out = await this.watchOnce();
      if (out.kind === 'stopped' || this.stopped) return;
      const atOnce = out.kind === 'closed' && out.events === 0 && out.durationMs < 1000;
      this.tell('onWatchEnd', () => this.o.onWatchEnd?.(out.kind === 'closed' ? (atOnce ? 'closed_at_once' : 'closed') : (out.reason as WatchEndReason)));
      if (out.kind === 'closed') {
        if (atOnce) {
          // client-go: "very short watch ... watch lasted less than a second and no items received".
          this.o.log.warn('k8s watch closed at once with nothing received; relisting', { kind: this.o.kind, retryInMs: this.backoffMs });
          relist = 'watch_error';
          await this.sleep(this.nextBackoff());
        } else {
          this.o.log.debug('k8s watch closed; resuming', { kind: this.o.kind, resourceVersion: this.lastRv });
          if (out.durationMs >= 1000) this.backoffMs = this.o.restartBackoffMs;
        }
        continue;
      }
      relist = out.reason;
      const delay = this.nextBackoff();
      const fields = { kind: this.o.kind, reason: out.reason, error: out.error, status: out.status, resourceVersion: this.lastRv, retryInMs: delay };
      if (out.reason === 'watch_error') this.o.log.warn('k8s informer failed; restarting with a relist', fields);
      else if (out.reason === 'expired') this.o.log.info('k8s watch expired (410); relisting', fields);
      else this.o.log.warn('k8s watch no longer trusted; relisting', fields);
      await this.sleep(delay);
    }
  }

  /** Calls a metrics hook; a hook that throws is logged, never stops the reflector. */
  private tell(hook: string, fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.o.log.error('k8s reflector hook failed', { kind: this.o.kind, hook, error: String((e as Error)?.message ?? e) });
    }
  }

  /** The API request observer, silent once stopped. */
  private observer(observe: ApiRequestObserver): ApiRequestObserver {
    return (r) => {
      if (!this.stopped) this.tell('onApiRequest', () => observe(r));
    };
  }

  private failed(what: string, err: any): void {
    this.o.log.warn('k8s informer failed; restarting', {
      kind: this.o.kind,
      during: what,
      error: String(err?.message ?? err),
      status: err?.statusCode ?? err?.code,
      retryInMs: this.backoffMs,
    });
  }

  private nextBackoff(): number {
    const d = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, this.o.maxRestartBackoffMs);
    return d;
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopped || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.sleepTimer = undefined;
        resolve();
      }, ms);
      this.sleepTimer = { timer, resolve };
    });
  }

  // ---- list ------------------------------------------------------------------------

  private async listAndReplace(reason: RelistReason): Promise<void> {
    const seenRejected = new Set<string>();
    const items: T[] = [];
    const accept = (raw: any): void => {
      const t = this.cache.convert(raw);
      if (t.ok) items.push(t.obj);
      else seenRejected.add(t.key);
    };
    const list = await this.listAll(accept, () => {
      items.length = 0;
      seenRejected.clear();
    });
    if (this.stopped) return;
    const listRv = list.metadata?.resourceVersion ?? '';
    // A list behind what the cache last saw: a new history; resourceVersions say nothing across it.
    const newHistory = reason === 'rv_backwards' || reason === 'stale_event' || (compareResourceVersions(listRv, this.lastRv) ?? 0) < 0;
    const { added, updated, deleted } = this.cache.replace(items, seenRejected, newHistory);
    this.lastRv = listRv;
    this.lastConfirmedMs = this.now();
    const info: RelistInfo = { reason, added, updated, deleted, objects: this.cache.size, resourceVersion: listRv };
    const fields = { kind: this.o.kind, ...info, rejected: seenRejected.size, ...(newHistory && reason !== 'initial' ? { newHistory } : {}) };
    if (reason === 'initial') this.o.log.debug('k8s list', fields);
    else this.o.log.info('k8s relist', fields);
    this.o.onRelist?.(info);
    if (!this.hasSynced) {
      this.hasSynced = true;
      this.o.onSynced();
    }
  }

  /**
   * The full list, fetched in pages of pageSize (limit/continue) and converted page by
   * page. Every page comes from one snapshot (the first page's resourceVersion); when
   * that expires mid-way (410), falls back to one unpaginated list, like client-go's pager.
   */
  private async listAll(accept: (raw: any) => void, restart: () => void): Promise<KubernetesListObject<T>> {
    const limit = this.o.pageSize > 0 ? this.o.pageSize : undefined;
    const page = (q: Pick<ListPageQuery, 'limit' | 'continue'>): Promise<KubernetesListObject<T>> => {
      const ctl = new AbortController();
      this.cut = () => ctl.abort();
      const query = { labelSelector: this.o.labelSelector, fieldSelector: this.o.fieldSelector, ...q };
      return listPage<T>(this.o.kubeConfig, this.o.path, query, ctl.signal, this.o.onApiRequest && this.observer(this.o.onApiRequest)).finally(() => {
        this.cut = undefined;
      });
    };
    let l = await page({ limit });
    let pages = 1;
    for (;;) {
      for (const o of l.items) accept(o);
      const cont = (l.metadata as { _continue?: string } | undefined)?._continue;
      if (!limit || !cont || this.stopped) break;
      try {
        l = await page({ limit, continue: cont });
        pages++;
      } catch (e: any) {
        if (e?.code !== 410) throw e;
        this.o.log.info('k8s list snapshot expired while paging; listing without pages', { kind: this.o.kind });
        restart();
        const full = await page({});
        for (const o of full.items) accept(o);
        return { ...full, items: [] };
      }
    }
    if (pages > 1) this.o.log.debug('k8s paged list', { kind: this.o.kind, pages });
    return { ...l, items: [] };
  }

  // ---- watch -------------------------------------------------------------------------

  private watchOnce(): Promise<WatchOutcome> {
    if (this.stopped) return Promise.resolve({ kind: 'stopped' });
    const timeoutSeconds = this.o.watchTimeoutSeconds?.() ?? Math.floor(300 * (1 + Math.random()));
    const query: Record<string, string | number | boolean | undefined> = {
      resourceVersion: this.lastRv || undefined,
      allowWatchBookmarks: true,
      timeoutSeconds,
      labelSelector: this.o.labelSelector,
      fieldSelector: this.o.fieldSelector,
    };
    this.o.log.debug('k8s watch connecting', { kind: this.o.kind, resourceVersion: this.lastRv || undefined });
    this.tell('onWatchStart', () => this.o.onWatchStart?.());
    return watchRequest({
      kubeConfig: this.o.kubeConfig,
      path: this.o.path,
      query,
      noProgressMs: this.o.noProgressMs,
      now: this.now,
      lastConfirmed: () => this.lastConfirmedMs,
      onEvent: (type, obj) => this.handleEvent(type, obj),
      observe: this.o.onApiRequest && this.observer(this.o.onApiRequest),
      setCut: (cut) => void (this.cut = cut),
      stopped: () => this.stopped,
    });
  }

  /** Applies one watch event; returns why the watch is no longer trusted, if it is not. */
  private handleEvent(type: string, obj: any): WatchOutcome | undefined {
    if (type === 'ERROR') {
      const code = obj?.code;
      if (code === 410) return { kind: 'relist', reason: 'expired', error: String(obj?.message ?? 'Expired'), status: 410 };
      return { kind: 'relist', reason: 'watch_error', error: String(obj?.message ?? 'watch ERROR event'), status: code };
    }
    if (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'DELETED' && type !== 'BOOKMARK') return undefined;
    const rv: string | undefined = obj?.metadata?.resourceVersion;
    const vsLast = compareResourceVersions(rv, this.lastRv);
    // An event at or below the last resourceVersion seen, or a bookmark below it: not this history.
    if (vsLast !== undefined && (vsLast < 0 || (vsLast === 0 && type !== 'BOOKMARK'))) {
      return { kind: 'relist', reason: 'rv_backwards', error: `${type} at resourceVersion ${rv} after ${this.lastRv}` };
    }
    if (type !== 'BOOKMARK') {
      const key = keyOf(obj);
      const cachedRv = this.cache.get(key)?.metadata?.resourceVersion;
      if ((compareResourceVersions(rv, cachedRv) ?? 0) < 0) {
        return { kind: 'relist', reason: 'stale_event', error: `${type} ${key} at resourceVersion ${rv}, cached at ${cachedRv}` };
      }
      if (type === 'DELETED') this.cache.deleted(key, obj);
      else this.cache.upsert(obj);
    }
    if (rv) this.lastRv = rv;
    this.lastConfirmedMs = this.now();
    this.backoffMs = this.o.restartBackoffMs;
    return undefined;
  }
}
