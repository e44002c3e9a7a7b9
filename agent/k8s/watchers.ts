/**
 * The agent's view of the cluster: list/watch informers (client-node's
 * ListWatch, i.e. what makeInformer builds) for Services, EndpointSlices and
 * this node's Node, with kube-proxy's selectors, typed caches, an index of
 * EndpointSlices by Service, and one change feed keyed by the Service a change
 * concerns.
 *
 * client-node 1.4 informers stop for good after any error other than 410 (a
 * failed list, a refused/reset connection, a non-200 watch): ClusterWatch
 * restarts them with exponential backoff. A restart resumes the watch from the
 * last resourceVersion; when that is compacted the server answers 410 and the
 * informer relists, diffing the new list against its cache, which yields the
 * add/update/delete notifications for what changed meanwhile.
 */
import * as http from 'node:http';
import {
  KubeConfig,
  ListWatch,
  V1EndpointSlice,
  V1Node,
  V1Service,
  Watch,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { listPage, type ListPageQuery } from './list-page.js';
// Not re-exported by the package index; used to give watch-event objects the same
// typed shape (Date timestamps etc.) as list items. The package has no "exports" map.
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { pruneEndpointSlice, pruneNode, pruneService } from './prune.js';
import { flatKey, namespacedKey } from '../flat-key.js';

export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

export const nullLogger: Logger = { info() {}, warn() {}, error() {}, debug() {} };

export type ChangeKind = 'Service' | 'EndpointSlice' | 'Node';
export type ChangeType = 'add' | 'update' | 'delete';

export interface ClusterChange {
  kind: ChangeKind;
  type: ChangeType;
  /**
   * What the change concerns: "ns/name" of the Service for Service and EndpointSlice
   * changes (for a slice, ns/<kubernetes.io/service-name label>), the node name for Node.
   */
  key: string;
  /** The changed object itself: "ns/name" (the slice's own name for EndpointSlices), or the node name. */
  object: string;
  /** The changed object (its last state for a delete). */
  resource?: KubernetesObject;
}

export type ChangeListener = (change: ClusterChange) => void;

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const SERVICE_PROXY_NAME_LABEL = 'service.kubernetes.io/service-proxy-name';
export const HEADLESS_LABEL = 'service.kubernetes.io/headless';

export interface ClusterWatchOptions {
  kubeConfig: KubeConfig;
  /** This node's name; without it no Node is watched. */
  nodeName?: string;
  logger?: Logger;
  /** Service label selector. Default "!service.kubernetes.io/service-proxy-name" (kube-proxy's). */
  serviceLabelSelector?: string;
  /** Service field selector. Default "spec.clusterIP!=None" (no headless Services). */
  serviceFieldSelector?: string;
  /** EndpointSlice label selector. Default "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless". */
  endpointSliceLabelSelector?: string;
  /**
   * Page size of the initial (and any re-)lists (limit/continue): the agent never holds
   * one giant list response, whose transient peak RSS V8 would keep. 0 = unpaginated. Default 100.
   */
  listPageSize?: number;
  /** First restart delay after an informer error (doubles up to maxRestartBackoffMs). Default 200. */
  restartBackoffMs?: number;
  maxRestartBackoffMs?: number;
}

const NO_SLICES: readonly V1EndpointSlice[] = Object.freeze([]);

/** Code-point order of the entries' keys (as Go sorts strings; localeCompare is ~10× slower and locale-dependent). */
function byKey([a]: [string, unknown], [b]: [string, unknown]): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function objectKey(o: KubernetesObject): string {
  const ns = o.metadata?.namespace;
  const name = o.metadata?.name ?? '';
  return ns ? namespacedKey(ns, name) : name;
}

interface InformerState<T extends KubernetesObject> {
  kind: ChangeKind;
  path: string;
  lw: ListWatch<T>;
  synced: boolean;
  onSynced: Array<() => void>;
  backoffMs: number;
  restartTimer?: NodeJS.Timeout;
  /** The http.Agent of the informer's current watch request, destroyed on stop(). */
  agent?: http.Agent;
}

export class ClusterWatch {
  private readonly log: Logger;
  private readonly kc: KubeConfig;
  private readonly nodeName?: string;
  private readonly listeners = new Set<ChangeListener>();
  private readonly svcs = new Map<string, V1Service>();
  /** slice key -> (service key, slice) for slices carrying the service-name label. */
  private readonly slices = new Map<string, { svc: string; slice: V1EndpointSlice }>();
  /**
   * service key -> its slices, sorted by name. Replaced, never changed in place
   * (a caller may hold the array); most Services have one slice, so an array
   * per Service costs 56 bytes where a Map cost ~200.
   */
  private readonly slicesBySvc = new Map<string, V1EndpointSlice[]>();
  private theNode: V1Node | undefined;
  private readonly informers: InformerState<any>[] = [];
  private stopped = false;
  private started = false;
  private readonly baseBackoff: number;
  private readonly maxBackoff: number;
  private readonly pageSize: number;

  constructor(opts: ClusterWatchOptions) {
    this.kc = opts.kubeConfig;
    this.nodeName = opts.nodeName;
    this.log = opts.logger ?? nullLogger;
    this.baseBackoff = opts.restartBackoffMs ?? 200;
    this.maxBackoff = opts.maxRestartBackoffMs ?? 10_000;
    this.pageSize = opts.listPageSize ?? 100;

    const svcLabels = opts.serviceLabelSelector ?? `!${SERVICE_PROXY_NAME_LABEL}`;
    const svcFields = opts.serviceFieldSelector ?? 'spec.clusterIP!=None';
    const svc = this.makeInformer<V1Service>('Service', 'V1Service', '/api/v1/services', svcLabels, svcFields, pruneService);
    svc.lw.on('add', (o) => this.serviceEvent('add', o));
    svc.lw.on('update', (o) => this.serviceEvent('update', o));
    svc.lw.on('delete', (o) => this.serviceEvent('delete', o));

    const epsLabels = opts.endpointSliceLabelSelector ?? `!${SERVICE_PROXY_NAME_LABEL},!${HEADLESS_LABEL}`;
    const eps = this.makeInformer<V1EndpointSlice>(
      'EndpointSlice',
      'V1EndpointSlice',
      '/apis/discovery.k8s.io/v1/endpointslices',
      epsLabels,
      undefined,
      pruneEndpointSlice,
    );
    eps.lw.on('add', (o) => this.sliceEvent('add', o));
    eps.lw.on('update', (o) => this.sliceEvent('update', o));
    eps.lw.on('delete', (o) => this.sliceEvent('delete', o));

    if (this.nodeName) {
      const nodeFields = `metadata.name=${this.nodeName}`;
      const node = this.makeInformer<V1Node>('Node', 'V1Node', '/api/v1/nodes', undefined, nodeFields, pruneNode);
      node.lw.on('add', (o) => this.nodeEvent('add', o));
      node.lw.on('update', (o) => this.nodeEvent('update', o));
      node.lw.on('delete', (o) => this.nodeEvent('delete', o));
    }
  }

  /** Starts the informers; resolves once every initial list has been applied to the caches. */
  async start(): Promise<void> {
    if (this.started) throw new Error('ClusterWatch already started');
    this.started = true;
    const synced = this.informers.map((inf) => new Promise<void>((resolve) => inf.onSynced.push(resolve)));
    for (const inf of this.informers) this.runInformer(inf);
    await Promise.all(synced);
    if (!this.stopped) this.log.info('k8s caches synced', { services: this.svcs.size, endpointSlices: this.slices.size, node: this.theNode ? this.nodeName : null });
  }

  /** Whether every informer has completed its initial list. */
  synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  /** Stops all informers and closes their connections; pending start() promises stay unresolved. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const inf of this.informers) {
      if (inf.restartTimer) clearTimeout(inf.restartTimer);
      inf.restartTimer = undefined;
      await inf.lw.stop();
      inf.agent?.destroy();
      inf.agent = undefined;
    }
    this.log.debug('k8s watch stopped');
  }

  /** Subscribes to changes; returns the unsubscribe function. */
  onChange(cb: ChangeListener): () => void {
    this.listeners.add(cb);
    return () => this.listeners.delete(cb);
  }

  /** All watched Services, sorted by ns/name. */
  services(): V1Service[] {
    return [...this.svcs.entries()].sort(byKey).map(([, s]) => s);
  }

  service(namespace: string, name: string): V1Service | undefined {
    return this.serviceByKey(`${namespace}/${name}`);
  }

  /** The key ("namespace/name") of every watched Service, in no particular order. */
  serviceKeys(): IterableIterator<string> {
    return this.svcs.keys();
  }

  serviceByKey(key: string): V1Service | undefined {
    return this.svcs.get(key);
  }

  /** endpointSlicesFor by Service key ("namespace/name"). */
  endpointSlicesByKey(key: string): readonly V1EndpointSlice[] {
    return this.slicesBySvc.get(key) ?? NO_SLICES;
  }

  /** The EndpointSlices labelled kubernetes.io/service-name=serviceName in namespace, sorted by name. */
  endpointSlicesFor(namespace: string, serviceName: string): readonly V1EndpointSlice[] {
    return this.endpointSlicesByKey(`${namespace}/${serviceName}`);
  }

  /** All indexed EndpointSlices (those with a service-name label), sorted by ns/name. */
  endpointSlices(): V1EndpointSlice[] {
    return [...this.slices.entries()].sort(byKey).map(([, e]) => e.slice);
  }

  node(): V1Node | undefined {
    return this.theNode;
  }

  // ---- informers -------------------------------------------------------------------------

  private makeInformer<T extends KubernetesObject>(
    kind: ChangeKind,
    typeName: string,
    path: string,
    labelSelector: string | undefined,
    fieldSelector: string | undefined,
    prune: (o: T) => T,
  ): InformerState<T> {
    const state = { kind, path, synced: false, onSynced: [], backoffMs: this.baseBackoff } as unknown as InformerState<T>;
    // The watch's config: the real KubeConfig, except that we keep hold of each watch
    // request's agent so stop() can also cut a request still waiting for its response
    // (ListWatch.stop() can only abort a request whose response headers have arrived).
    const watchConfig = Object.create(this.kc) as KubeConfig;
    watchConfig.applyToFetchOptions = async (o: http.RequestOptions) => {
      const init = await this.kc.applyToFetchOptions(o);
      state.agent = init.agent as http.Agent | undefined;
      return init;
    };
    const isStopped = (): boolean => this.stopped;
    class GuardedWatch extends Watch {
      override async watch(
        p: string,
        q: Record<string, string | number | boolean | undefined>,
        cb: (phase: string, apiObj: any, watchObj?: any) => void,
        done: (err: any) => void,
      ): Promise<AbortController> {
        // ListWatch starts the watch after its list even if stop() came meanwhile.
        if (isStopped()) return new AbortController();
        // Watch-event objects are raw JSON: type and slim them before ListWatch caches them,
        // so its cache and ours share one slim typed object (as for list items).
        const typedCb = (phase: string, apiObj: any, watchObj?: any): void =>
          cb(phase, (phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED') && apiObj ? typed(apiObj) : apiObj, watchObj);
        const ctl = await super.watch(p, q, typedCb, done);
        if (isStopped()) ctl.abort();
        return ctl;
      }
    }
    // Raw JSON (list pages, watch events) becomes the client-node model type, as a typed cache holds it.
    const asModel = (o: any): T => (o && o.constructor === Object ? (ObjectSerializer.deserialize(o, typeName, '') as T) : (o as T));
    const typed = (o: any): T => prune(asModel(o));
    const typedList = async (): Promise<KubernetesListObject<T>> => {
      const page = (q: { limit?: number; continue?: string }) => listPage<T>(this.kc, path, { labelSelector, fieldSelector, ...q });
      const l = await this.listAll(kind, page, typed);
      this.log.debug('k8s list', { kind, items: l.items.length, resourceVersion: l.metadata?.resourceVersion });
      // ListWatch applies the items synchronously right after this promise resolves.
      setImmediate(() => this.markSynced(state));
      return l;
    };
    const lw = new ListWatch<T>(path, new GuardedWatch(watchConfig), typedList, false, labelSelector, fieldSelector);
    const origOn = lw.on.bind(lw) as (verb: string, cb: (x: any) => void) => void;
    (lw as any).on = (verb: string, cb: (x: any) => void) => {
      if (verb === 'add' || verb === 'update' || verb === 'delete') {
        origOn(verb, (o: any) => {
          if (this.stopped) return;
          try {
            cb(asModel(o)); // already typed when cached; kept for anything ListWatch hands over raw
          } catch (e) {
            this.log.error('k8s event handler failed', { kind, verb, error: String((e as Error)?.stack ?? e) });
          }
        });
      } else origOn(verb, cb);
    };
    lw.on('error', (err: any) => this.informerError(state, err));
    lw.on('connect', () => this.log.debug('k8s watch connecting', { kind, resourceVersion: lw.latestResourceVersion() || undefined }));
    state.lw = lw;
    this.informers.push(state);
    return state;
  }

  /**
   * The full list, fetched in pages of pageSize (limit/continue) and slimmed page by
   * page. Every page comes from one snapshot (the first page's resourceVersion); when
   * that expires mid-way (410), falls back to one unpaginated list, like client-go's pager.
   */
  private async listAll<T extends KubernetesObject>(
    kind: ChangeKind,
    page: (q: Pick<ListPageQuery, 'limit' | 'continue'>) => Promise<KubernetesListObject<T>>,
    toCached: (raw: T) => T,
  ): Promise<KubernetesListObject<T>> {
    const limit = this.pageSize > 0 ? this.pageSize : undefined;
    const items: T[] = [];
    let l = await page({ limit });
    let pages = 1;
    for (;;) {
      for (const o of l.items) items.push(toCached(o));
      const cont = (l.metadata as { _continue?: string } | undefined)?._continue;
      if (!limit || !cont) break;
      try {
        l = await page({ limit, continue: cont });
        pages++;
      } catch (e: any) {
        if (e?.code !== 410) throw e;
        this.log.info('k8s list snapshot expired while paging; listing without pages', { kind });
        const full = await page({});
        return { ...full, items: full.items.map(toCached) };
      }
    }
    if (pages > 1) this.log.debug('k8s paged list', { kind, pages });
    return { ...l, items };
  }

  private runInformer(inf: InformerState<any>): void {
    if (this.stopped) return;
    inf.lw.start().catch((err: unknown) => this.informerError(inf, err));
  }

  private markSynced(inf: InformerState<any>): void {
    inf.backoffMs = this.baseBackoff;
    if (inf.synced || this.stopped) return;
    inf.synced = true;
    this.log.debug('k8s informer synced', { kind: inf.kind });
    for (const f of inf.onSynced.splice(0)) f();
  }

  private informerError(inf: InformerState<any>, err: any): void {
    if (this.stopped) return;
    const delay = inf.backoffMs;
    inf.backoffMs = Math.min(inf.backoffMs * 2, this.maxBackoff);
    this.log.warn('k8s informer failed; restarting', {
      kind: inf.kind,
      error: String(err?.message ?? err),
      status: err?.statusCode ?? err?.code,
      retryInMs: delay,
    });
    if (inf.restartTimer) return;
    inf.restartTimer = setTimeout(() => {
      inf.restartTimer = undefined;
      this.runInformer(inf);
    }, delay);
  }

  // ---- caches and change feed ------------------------------------------------------------

  private emit(change: ClusterChange): void {
    const { resource: _resource, ...fields } = change;
    this.log.debug('k8s change', fields);
    for (const l of [...this.listeners]) {
      try {
        l(change);
      } catch (e) {
        this.log.error('k8s change listener failed', { error: String((e as Error)?.stack ?? e) });
      }
    }
  }

  private serviceEvent(type: ChangeType, svc: V1Service): void {
    const key = objectKey(svc);
    if (type === 'delete') this.svcs.delete(key);
    else this.svcs.set(key, svc);
    this.emit({ kind: 'Service', type, key, object: key, resource: svc });
  }

  private sliceEvent(type: ChangeType, slice: V1EndpointSlice): void {
    const key = objectKey(slice);
    const ns = slice.metadata?.namespace ?? '';
    const label = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
    const newSvc = type !== 'delete' && label ? flatKey('/', ns, label) : undefined;
    const old = this.slices.get(key);
    if (old && old.svc !== newSvc) {
      // Deleted, or moved to another Service / lost its label: gone from the old Service.
      this.slices.delete(key);
      this.unindexSlice(old.svc, slice.metadata?.name ?? '');
      this.emit({ kind: 'EndpointSlice', type: 'delete', key: old.svc, object: key, resource: slice });
    }
    if (!newSvc) return;
    this.slices.set(key, { svc: newSvc, slice });
    this.indexSlice(newSvc, slice);
    this.emit({ kind: 'EndpointSlice', type: old && old.svc === newSvc ? 'update' : 'add', key: newSvc, object: key, resource: slice });
  }

  /** Adds or replaces `slice` (by name) in its Service's sorted list. */
  private indexSlice(svc: string, slice: V1EndpointSlice): void {
    const name = slice.metadata?.name ?? '';
    const list = this.slicesBySvc.get(svc) ?? NO_SLICES;
    let i = 0;
    while (i < list.length && (list[i].metadata?.name ?? '') < name) i++;
    const same = i < list.length && (list[i].metadata?.name ?? '') === name;
    this.slicesBySvc.set(svc, [...list.slice(0, i), slice, ...list.slice(same ? i + 1 : i)]);
  }

  private unindexSlice(svc: string, name: string): void {
    const list = this.slicesBySvc.get(svc);
    if (!list) return;
    const rest = list.filter((s) => (s.metadata?.name ?? '') !== name);
    if (rest.length) this.slicesBySvc.set(svc, rest);
    else this.slicesBySvc.delete(svc);
  }

  private nodeEvent(type: ChangeType, node: V1Node): void {
    const name = node.metadata?.name ?? '';
    if (this.nodeName && name !== this.nodeName) return;
    this.theNode = type === 'delete' ? undefined : node;
    this.emit({ kind: 'Node', type, key: name, object: name, resource: node });
  }
}
