/**
 * The agent's view of the cluster: one reflector (agent/k8s/reflector.ts:
 * list, then watch, with client-go's relist rules) for Services,
 * EndpointSlices and this node's Node, with kube-proxy's selectors, typed
 * caches, an index of EndpointSlices by Service, and one change feed keyed by
 * the Service a change concerns.
 *
 * A watch is never trusted forever: besides 410 Expired, a reflector relists
 * when its watch fails or breaks, when the server sends resourceVersions
 * older than what it holds (a new history, e.g. an API server restored from
 * an etcd backup), and when nothing (no event, no bookmark) arrived for
 * noProgressTimeoutMs. A relist diffs the whole cache against the list:
 * objects gone emit delete changes (the DELETED events that never came),
 * changed ones updates, new ones adds. Failures are retried with exponential
 * backoff. cacheStatus() says when each cache was last confirmed against the
 * server (health, metrics).
 */
import { KubeConfig, V1EndpointSlice, V1Node, V1Service, type KubernetesObject } from '@kubernetes/client-node';
import { pruneEndpointSlice, pruneNode, pruneService } from './prune.js';
import { flatKey, namespacedKey } from '../runtime/flat-key.js';
import { Reflector, type RelistInfo, type RelistReason, type WatchEndReason } from './reflector.js';
import type { ApiRequestObserver } from './api-requests.js';
import { LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME } from './labels.js';

export type { RelistReason } from './reflector.js';

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
  /**
   * Relist when no watch event or bookmark arrived for this long (the watch asks for
   * bookmarks; a real API server sends one about every minute). Default 300000 (5 min).
   */
  noProgressTimeoutMs?: number;
  /** Server-side timeout of each watch request, in seconds. Default: random 300-600 per watch (client-go's). */
  watchTimeoutSeconds?: number;
  /**
   * Called on each raw object (list item or watch event) before it is typed and pruned.
   * A rejection makes the object absent: removed from the cache with a delete change if
   * it was there, logged once per object version, reported to onRejected.
   */
  validate?: (kind: ChangeKind, raw: unknown) => { field: string; reason: string } | undefined;
  /** An object version was rejected (by validate, or because it could not be typed/pruned). */
  onRejected?: (kind: ChangeKind, reason: string) => void;
  /** A list was applied to a cache (the initial one and every relist). */
  onRelist?: (kind: ChangeKind, reason: RelistReason, counts: { added: number; updated: number; deleted: number }) => void;
  /** Every list and watch request's outcome (rest_client_* metrics). */
  onApiRequest?: ApiRequestObserver;
  /** A cache made a watch request. */
  onWatchStart?: (kind: ChangeKind) => void;
  /** A cache's watch ended, and why. */
  onWatchEnd?: (kind: ChangeKind, reason: WatchEndReason) => void;
}

/** One informer's cache as the health and metrics see it. */
export interface CacheStatus {
  kind: ChangeKind;
  /** The initial list was applied. */
  synced: boolean;
  /** Last confirmation against the server (a successful list, any watch event or bookmark); undefined before any. */
  lastConfirmed: Date | undefined;
  resourceVersion: string;
  objects: number;
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

interface InformerState {
  kind: ChangeKind;
  reflector: Reflector<any>;
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
  private readonly informers: InformerState[] = [];
  private readonly synced_ = new Map<ChangeKind, () => void>();
  private stopped = false;
  private started = false;

  constructor(private readonly opts: ClusterWatchOptions) {
    this.kc = opts.kubeConfig;
    this.nodeName = opts.nodeName;
    this.log = opts.logger ?? nullLogger;

    const svcLabels = opts.serviceLabelSelector ?? `!${LABEL_SERVICE_PROXY_NAME}`;
    const svcFields = opts.serviceFieldSelector ?? 'spec.clusterIP!=None';
    this.makeInformer<V1Service>('Service', 'V1Service', '/api/v1/services', svcLabels, svcFields, pruneService, (t, o) => this.serviceEvent(t, o));

    const epsLabels = opts.endpointSliceLabelSelector ?? `!${LABEL_SERVICE_PROXY_NAME},!${LABEL_HEADLESS}`;
    this.makeInformer<V1EndpointSlice>(
      'EndpointSlice',
      'V1EndpointSlice',
      '/apis/discovery.k8s.io/v1/endpointslices',
      epsLabels,
      undefined,
      pruneEndpointSlice,
      (t, o) => this.sliceEvent(t, o),
    );

    if (this.nodeName) {
      const nodeFields = `metadata.name=${this.nodeName}`;
      this.makeInformer<V1Node>('Node', 'V1Node', '/api/v1/nodes', undefined, nodeFields, pruneNode, (t, o) => this.nodeEvent(t, o));
    }
  }

  /** Starts the informers; resolves once every initial list has been applied to the caches. */
  async start(): Promise<void> {
    if (this.started) throw new Error('ClusterWatch already started');
    this.started = true;
    const synced = this.informers.map((inf) => new Promise<void>((resolve) => this.synced_.set(inf.kind, resolve)));
    for (const inf of this.informers) inf.reflector.start();
    await Promise.all(synced);
    if (!this.stopped)
      this.log.info('k8s caches synced', { services: this.svcs.size, endpointSlices: this.slices.size, node: this.theNode ? this.nodeName : null });
  }

  /** Whether every informer has completed its initial list. */
  synced(): boolean {
    return this.informers.every((i) => i.reflector.synced);
  }

  /** Per informer: synced, and when its cache was last confirmed against the server. */
  cacheStatus(): CacheStatus[] {
    return this.informers.map(({ kind, reflector: r }) => ({
      kind,
      synced: r.synced,
      lastConfirmed: r.lastConfirmed === undefined ? undefined : new Date(r.lastConfirmed),
      resourceVersion: r.resourceVersion,
      objects: r.size,
    }));
  }

  /** Stops all informers and closes their connections; pending start() promises stay unresolved. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await Promise.all(this.informers.map((inf) => inf.reflector.stop()));
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
    event: (type: ChangeType, o: T) => void,
  ): void {
    const o = this.opts;
    const handle = (type: ChangeType) => (obj: T) => {
      if (!this.stopped) event(type, obj);
    };
    const validate = o.validate;
    const reflector = new Reflector<T>({
      kind,
      kubeConfig: this.kc,
      path,
      labelSelector,
      fieldSelector,
      typeName,
      prune,
      pageSize: o.listPageSize ?? 100,
      restartBackoffMs: o.restartBackoffMs ?? 200,
      maxRestartBackoffMs: o.maxRestartBackoffMs ?? 10_000,
      noProgressMs: o.noProgressTimeoutMs ?? 300_000,
      watchTimeoutSeconds: o.watchTimeoutSeconds === undefined ? undefined : () => o.watchTimeoutSeconds!,
      validate: validate ? (raw) => validate(kind, raw) : undefined,
      log: this.log,
      handlers: { add: handle('add'), update: handle('update'), delete: handle('delete') },
      onSynced: () => {
        this.log.debug('k8s informer synced', { kind });
        this.synced_.get(kind)?.();
      },
      onRelist: (info: RelistInfo) => {
        if (this.stopped) return;
        try {
          o.onRelist?.(kind, info.reason, { added: info.added, updated: info.updated, deleted: info.deleted });
        } catch (e) {
          this.log.error('k8s onRelist callback failed', { error: String((e as Error)?.stack ?? e) });
        }
      },
      onRejected: (r) => {
        try {
          o.onRejected?.(kind, r.reason);
        } catch (e) {
          this.log.error('k8s onRejected callback failed', { error: String((e as Error)?.stack ?? e) });
        }
      },
      onApiRequest: o.onApiRequest,
      onWatchStart: o.onWatchStart && (() => o.onWatchStart!(kind)),
      onWatchEnd: o.onWatchEnd && ((reason) => o.onWatchEnd!(kind, reason)),
    });
    this.informers.push({ kind, reflector });
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
    const label = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
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
