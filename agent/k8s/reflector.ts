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
 * never stops the list, the watch or any other object.
 */
import type * as http from 'node:http';
import { Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
// Not re-exported by the package index; used to give raw JSON the typed shape (Date timestamps etc.)
// client-node's models have. The package has no "exports" map.
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { listPage, type ListPageQuery } from './list-page.js';
import { errorCode, serverHost, type ApiRequestObserver } from './api-requests.js';
import { flatKey } from '../flat-key.js';

export interface ReflectorLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * How a watch ended: kpr_k8s_watch_ends_total{reason}. closed: the server ended it
 * cleanly (resumed from the last resourceVersion); closed_at_once: ended within a
 * second with nothing received (relists); the others are the relist reasons.
 */
export type WatchEndReason = 'closed' | 'closed_at_once' | Exclude<RelistReason, 'initial'>;

/** Why a reflector listed: kpr_k8s_relists_total{reason}. */
export type RelistReason = 'initial' | 'expired' | 'watch_error' | 'stale_event' | 'rv_backwards' | 'no_progress';

export interface RelistInfo {
  reason: RelistReason;
  added: number;
  updated: number;
  deleted: number;
  /** Objects in the cache afterwards. */
  objects: number;
  resourceVersion: string;
}

export interface Rejection {
  field: string;
  reason: string;
}

export type Validator = (raw: unknown) => Rejection | undefined;

export interface ReflectorHandlers<T> {
  add(o: T): void;
  update(o: T, old: T): void;
  delete(o: T): void;
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

export function keyOf(o: { metadata?: { namespace?: string; name?: string } } | undefined): string {
  const ns = o?.metadata?.namespace;
  const name = o?.metadata?.name ?? '';
  return ns ? flatKey('/', ns, name) : name;
}

const MAX_LOGGED_CHARS = 200;

function truncate(s: string): string {
  return s.length > MAX_LOGGED_CHARS ? `${s.slice(0, MAX_LOGGED_CHARS)}…` : s;
}

/** Everything but the resourceVersion, to tell a relisted object that did not change. */
function sameContent(a: KubernetesObject, b: KubernetesObject): boolean {
  const strip = (o: KubernetesObject) => ({ ...o, metadata: { ...o.metadata, resourceVersion: undefined } });
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

type WatchOutcome =
  | { kind: 'closed'; events: number; durationMs: number }
  | { kind: 'relist'; reason: RelistReason; error?: string; status?: number }
  | { kind: 'stopped' };

export class Reflector<T extends KubernetesObject> {
  private readonly cache = new Map<string, T>();
  /** key -> resourceVersion of the rejected version last logged, so each version is logged once. */
  private readonly rejected = new Map<string, string>();
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
    this.running = this.loop().catch((e: unknown) => this.o.log.error('k8s reflector loop failed', { kind: this.o.kind, error: String((e as Error)?.stack ?? e) }));
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
      const t = this.convert(raw);
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
    const { added, updated, deleted } = this.replace(items, seenRejected, newHistory);
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

  /** Makes the cache the list: adds, updates (changed objects only) and the deletes the list implies. */
  private replace(items: T[], rejectedKeys: Set<string>, newHistory: boolean): { added: number; updated: number; deleted: number } {
    let added = 0;
    let updated = 0;
    let deleted = 0;
    const listed = new Set<string>();
    const adds: T[] = [];
    const updates: Array<[T, T]> = [];
    for (const obj of items) {
      const key = keyOf(obj);
      listed.add(key);
      const old = this.cache.get(key);
      if (!old) adds.push(obj);
      else {
        const sameRv = old.metadata?.resourceVersion !== undefined && old.metadata.resourceVersion === obj.metadata?.resourceVersion;
        if (sameRv && !newHistory) continue;
        if (sameContent(old, obj)) {
          this.cache.set(key, obj); // only its resourceVersion moved: nothing to tell
          continue;
        }
        updates.push([obj, old]);
      }
    }
    // Deletes first: what left the cluster leaves the cache before anything new arrives.
    for (const [key, old] of [...this.cache]) {
      if (listed.has(key)) continue;
      this.cache.delete(key);
      deleted++;
      this.safely('delete', () => this.o.handlers.delete(old));
    }
    for (const key of [...this.rejected.keys()]) if (!rejectedKeys.has(key)) this.rejected.delete(key);
    for (const obj of adds) {
      this.cache.set(keyOf(obj), obj);
      added++;
      this.safely('add', () => this.o.handlers.add(obj));
    }
    for (const [obj, old] of updates) {
      this.cache.set(keyOf(obj), obj);
      updated++;
      this.safely('update', () => this.o.handlers.update(obj, old));
    }
    return { added, updated, deleted };
  }

  // ---- watch -------------------------------------------------------------------------

  private watchOnce(): Promise<WatchOutcome> {
    if (this.stopped) return Promise.resolve({ kind: 'stopped' });
    const started = this.now();
    let events = 0;
    let settled = false;
    let ctl: AbortController | undefined;
    let agent: http.Agent | undefined;
    let progressTimer: NodeJS.Timeout | undefined;
    return new Promise<WatchOutcome>((resolve) => {
      const finish = (out: WatchOutcome): void => {
        if (settled) return;
        settled = true;
        if (progressTimer) clearTimeout(progressTimer);
        this.cut = undefined;
        ctl?.abort();
        agent?.destroy();
        resolve(this.stopped ? { kind: 'stopped' } : out);
      };
      this.cut = () => finish({ kind: 'stopped' });
      const lastProgress = (): number => this.lastConfirmedMs ?? started;
      const armProgress = (): void => {
        const wait = Math.max(0, lastProgress() + this.o.noProgressMs - this.now());
        progressTimer = setTimeout(() => {
          if (settled) return;
          if (this.now() - lastProgress() >= this.o.noProgressMs) {
            finish({ kind: 'relist', reason: 'no_progress', error: `no watch event or bookmark for ${this.o.noProgressMs} ms` });
          } else armProgress();
        }, wait);
        progressTimer.unref?.();
      };
      armProgress();

      // The watch's config: the real KubeConfig, except that we keep hold of the request's
      // agent so a cut can also end a request still waiting for its response headers.
      const kc = this.o.kubeConfig;
      const watchConfig = Object.create(kc) as KubeConfig;
      watchConfig.applyToFetchOptions = async (opts: http.RequestOptions) => {
        const init = await kc.applyToFetchOptions(opts);
        agent = init.agent as http.Agent | undefined;
        if (settled) agent?.destroy();
        return init;
      };
      // rest_client_requests_total: once per watch request, when its response headers (or its failure) arrive.
      let answered = false;
      const answer = (code: string): void => {
        if (answered) return;
        answered = true;
        if (this.o.onApiRequest) this.observer(this.o.onApiRequest)({ method: 'GET', host: serverHost(kc.getCurrentCluster()?.server ?? ''), code });
      };
      const timeoutSeconds = this.o.watchTimeoutSeconds?.() ?? Math.floor(300 * (1 + Math.random()));
      const query: Record<string, string | number | boolean | undefined> = {
        resourceVersion: this.lastRv || undefined,
        allowWatchBookmarks: true,
        timeoutSeconds,
        labelSelector: this.o.labelSelector,
        fieldSelector: this.o.fieldSelector,
      };
      this.o.log.debug('k8s watch connecting', { kind: this.o.kind, resourceVersion: this.lastRv || undefined });
      const onEvent = (type: string, obj: any): void => {
        if (settled) return;
        events++;
        const out = this.handleEvent(type, obj);
        if (out) finish(out);
      };
      const done = (err: any): void => {
        // client-node's Watch calls done(error with statusCode) for a non-200 answer before watch() resolves,
        // and done(error) without one when the request itself failed.
        if (err) answer(errorCode(err));
        if (err) finish({ kind: 'relist', reason: 'watch_error', error: String(err?.message ?? err), status: err?.statusCode ?? err?.code });
        else finish({ kind: 'closed', events, durationMs: this.now() - started });
      };
      this.tell('onWatchStart', () => this.o.onWatchStart?.());
      new Watch(watchConfig)
        .watch(this.o.path, query, onEvent, done)
        .then((c) => {
          answer('200');
          ctl = c;
          if (settled) c.abort();
        })
        .catch((err: any) => done(err ?? new Error('watch failed')));
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
      if (type === 'DELETED') this.deleted(key, obj);
      else this.upsert(obj);
    }
    if (rv) this.lastRv = rv;
    this.lastConfirmedMs = this.now();
    this.backoffMs = this.o.restartBackoffMs;
    return undefined;
  }

  private upsert(raw: any): void {
    const t = this.convert(raw);
    if (!t.ok) {
      // Treated as absent: a rejected new version of a cached object is its deletion.
      const old = this.cache.get(t.key);
      if (old) {
        this.cache.delete(t.key);
        this.safely('delete', () => this.o.handlers.delete(old));
      }
      return;
    }
    const key = keyOf(t.obj);
    const old = this.cache.get(key);
    if (old && old.metadata?.resourceVersion !== undefined && old.metadata.resourceVersion === t.obj.metadata?.resourceVersion) return;
    this.cache.set(key, t.obj);
    if (old) this.safely('update', () => this.o.handlers.update(t.obj, old));
    else this.safely('add', () => this.o.handlers.add(t.obj));
  }

  private deleted(key: string, raw: any): void {
    this.rejected.delete(key);
    const old = this.cache.get(key);
    if (!old) return;
    this.cache.delete(key);
    let last: T = old;
    try {
      last = this.toTyped(raw);
    } catch {
      // the cached state is the last one we can name
    }
    this.safely('delete', () => this.o.handlers.delete(last));
  }

  // ---- objects ------------------------------------------------------------------------

  private toTyped(raw: any): T {
    const model = raw && raw.constructor === Object ? (ObjectSerializer.deserialize(raw, this.o.typeName, '') as T) : (raw as T);
    return this.o.prune(model);
  }

  /** Validates and types one raw object; a rejection is logged once per object version. */
  private convert(raw: any): { ok: true; obj: T } | { ok: false; key: string } {
    const key = keyOf(raw);
    let rejection: Rejection | undefined;
    if (raw === null || typeof raw !== 'object' || typeof raw.metadata?.name !== 'string' || raw.metadata.name === '') {
      rejection = { field: 'metadata.name', reason: 'missing' };
    } else {
      try {
        rejection = this.o.validate?.(raw);
      } catch (e) {
        rejection = { field: '?', reason: `validator failed: ${(e as Error)?.message ?? String(e)}` };
      }
    }
    if (!rejection) {
      try {
        const obj = this.toTyped(raw);
        this.rejected.delete(key);
        return { ok: true, obj };
      } catch (e) {
        rejection = { field: '?', reason: (e as Error)?.message ?? String(e) };
      }
    }
    const rv = String(raw?.metadata?.resourceVersion ?? '');
    if (!this.rejected.has(key) || this.rejected.get(key) !== rv) {
      this.rejected.set(key, rv);
      this.o.log.warn('k8s object rejected; treated as absent', {
        kind: this.o.kind,
        object: truncate(key),
        resourceVersion: truncate(rv),
        field: truncate(String(rejection.field)),
        reason: truncate(String(rejection.reason)),
      });
      this.o.onRejected?.(rejection);
    }
    return { ok: false, key };
  }

  private safely(verb: string, fn: () => void): void {
    if (this.stopped) return;
    try {
      fn();
    } catch (e) {
      this.o.log.error('k8s event handler failed', { kind: this.o.kind, verb, error: String((e as Error)?.stack ?? e) });
    }
  }
}
