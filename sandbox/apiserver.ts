/**
 * An embedded, in-process Kubernetes API server for the sandbox and tests.
 *
 * It speaks the real list/watch protocol (JSON over plain HTTP) for core/v1
 * Services, discovery.k8s.io/v1 EndpointSlices and core/v1 Nodes (and stores
 * Pods, ConfigMaps and apps/v1 DaemonSets, with no controller behind them;
 * enough of OpenAPI, patches and protobuf bodies for the real kubectl), so the agent
 * talks to it through the very same client-node code path it uses against a
 * real cluster. Semantics follow kube-apiserver where they matter to a watcher:
 * a global resourceVersion, selector filtering (including MODIFIED events that
 * move an object in/out of a selector becoming ADDED/DELETED), watch resumption
 * from a bounded history, "410 Gone" (an ERROR event carrying an Expired Status)
 * for compacted resourceVersions, bookmarks and timeoutSeconds.
 *
 * Plain HTTP by default; with `tls` it serves HTTPS, and with `bearerToken`
 * every request but the health paths needs `Authorization: Bearer <token>`
 * (401 Unauthorized otherwise, as kube-apiserver), for clients whose
 * credentials and CA are what is under test.
 *
 * This module composes the server and runs it standalone; one job each in:
 * apiserver-http.ts (the requests: authentication, verbs, Status errors),
 * apiserver-routes.ts (paths and discovery), apiserver-openapi.ts,
 * apiserver-patch.ts, apiserver-protobuf.ts, apiserver-list.ts (lists, paged),
 * apiserver-watch.ts (watch streams), apiserver-store.ts (objects and their
 * history; apiserver-service-defaults.ts), apiserver-selectors.ts,
 * apiserver-request-faults.ts and apiserver-manifests.ts.
 *
 * Standalone: node dist/sandbox/apiserver.js [--host H] [--port N]
 *   [--manifests PATH]... [--kubeconfig PATH] [--history-limit N] [--bookmark-interval-ms N]
 *   [--tls-cert-file PEM --tls-private-key-file PEM] [--token-file FILE]
 */
import { createServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import { requestListener } from './apiserver-http.js';
import { ListPager } from './apiserver-list.js';
import { loadManifests, type LoadManifestsResult } from './apiserver-manifests.js';
import { RequestFaults } from './apiserver-request-faults.js';
import { resourceFor, type ResourceDef } from './apiserver-resources.js';
import type { KubeObject } from './apiserver-selectors.js';
import { ApiError } from './apiserver-status.js';
import { Store } from './apiserver-store.js';
import { WatchStreams } from './apiserver-watch.js';

// The types and the error callers of the server handle, from the module they start it from.
export type { KubeObject } from './apiserver-selectors.js';
export type { LoadManifestsResult } from './apiserver-manifests.js';
export { ApiError } from './apiserver-status.js';

export interface ApiServerOptions {
  /** Default 0 (a random free port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Retained watch events; older resourceVersions get 410 Gone. Default 1000. */
  historyLimit?: number;
  /** Interval of BOOKMARK events on watches that allow them; 0 disables. Default 1000. */
  bookmarkIntervalMs?: number;
  /** ClusterIP allocation ranges, as --service-cluster-ip-range takes them: "primary[,secondary]", one per IP family. Default 198.19.0.0/16. */
  serviceCIDR?: string;
  /** Called for each HTTP request (method, url, status) — handy for debugging clients. */
  onRequest?: (info: { method: string; url: string; status: number }) => void;
  /** Serve HTTPS with this certificate and key (PEM) instead of plain HTTP. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** The one bearer token accepted; unset: no authentication. */
  bearerToken?: string;
  /**
   * Kinds this server does not serve (404 on their paths, absent from discovery), e.g.
   * ['ServiceCIDR'] for a cluster older than Kubernetes 1.33. Default: every kind served.
   */
  unservedKinds?: string[];
}

export interface ApiServer {
  readonly url: string;
  readonly port: number;
  readonly host: string;
  /** Ends every watch stream and held request, then stops listening. */
  close(): Promise<void>;
  /**
   * Fault injection: the server process stops (restartApiserver's first half). Every connection
   * is destroyed mid-stream (watches broken, as when kube-apiserver dies) and the port stops
   * listening (connection refused); the objects, their resourceVersions and the watch history
   * are kept, as etcd keeps them across an API server restart.
   */
  stop(): Promise<void>;
  /** The stopped server listens again on the same address; resourceVersions continue from where they were. */
  start(): Promise<void>;
  /** Creates an object (kind/apiVersion pick the resource); throws ApiError (409 AlreadyExists, 422...). */
  create(obj: KubeObject): KubeObject;
  /** Replaces an object; a set metadata.resourceVersion must match (409 Conflict). Throws 404 when missing. */
  update(obj: KubeObject): KubeObject;
  /** Creates or replaces (ignoring resourceVersion). */
  apply(obj: KubeObject): KubeObject;
  /** Deletes an object and returns its last state; throws 404 when missing. */
  remove(kind: string, namespace: string | undefined, name: string): KubeObject;
  /** The stored object, or undefined. */
  get(kind: string, namespace: string | undefined, name: string): KubeObject | undefined;
  /** All objects of a kind (optionally one namespace), sorted by ns/name. */
  list(kind: string, namespace?: string): KubeObject[];
  /** The current global resourceVersion. */
  resourceVersion(): string;
  /** Drops all retained watch history: resuming a watch from any older resourceVersion gets 410. */
  compactHistory(): void;
  /**
   * Fault injection: the server comes back with another history (a restore from an etcd
   * backup, a new etcd). Every watch stream is cut (`closeWatches` "reset", the default: the
   * connection is destroyed mid-stream, as when the server process dies; "clean": the stream
   * ends normally, as a graceful shutdown does); then every object gets a new resourceVersion
   * from `resourceVersionBase` + 1 on (below or above the old ones), `edit` changes the objects
   * through this API without any watch event (a removal never sends DELETED), and the server
   * serves on with an empty history starting at the base (see Store.replaceHistory).
   */
  replaceHistory(opts: { resourceVersionBase: number; edit?: () => void; closeWatches?: 'reset' | 'clean' }): void;
  /** Ends all current watch streams cleanly (clients resume from their last resourceVersion). */
  dropWatches(): number;
  /** Ends current watch streams and holds new watch requests unanswered (a partition) until resumeWatches(). */
  pauseWatches(): void;
  resumeWatches(): void;
  /**
   * Fault injection: the next `count` requests whose "METHOD path?query" matches `match`
   * (default: every request) fail with a Status of `code` (default 500).
   */
  failRequests(count: number, opts?: { code?: number; match?: RegExp }): void;
  /** Kinds served from now on: those named are not (404, absent from discovery), every other kind is. */
  setUnservedKinds(kinds: string[]): void;
  /** Number of watch requests held by pauseWatches() whose client is still connected. */
  heldWatchCount(): number;
  /** Number of open watch streams. */
  watchCount(): number;
  /** Writes a kubeconfig (insecure-skip-tls-verify, dummy token) pointing at this server; returns the path. */
  writeKubeconfig(file: string, opts?: { namespace?: string; contextName?: string }): Promise<string>;
  /** Creates-or-updates the objects in YAML/JSON files or directories (multi-document YAML, *List kinds). */
  loadManifests(paths: string | string[]): Promise<LoadManifestsResult>;
}

export async function startApiServer(opts: ApiServerOptions = {}): Promise<ApiServer> {
  const host = opts.host ?? '127.0.0.1';
  const store = new Store({ historyLimit: opts.historyLimit ?? 1000, serviceCIDR: opts.serviceCIDR });
  const watches = new WatchStreams(store, opts.bookmarkIntervalMs ?? 1000);
  const lists = new ListPager(store);
  const faults = new RequestFaults();
  let closing = false;
  let port = 0;

  let unserved = new Set(opts.unservedKinds ?? []);
  const served = (d: ResourceDef) => !unserved.has(d.kind);
  const serve = requestListener({
    store,
    lists,
    watches,
    faults,
    bearerToken: opts.bearerToken,
    serverAddress: () => `${host}:${port}`,
    onRequest: opts.onRequest,
    served,
  });
  const server: Server = opts.tls ? createHttpsServer({ cert: opts.tls.cert, key: opts.tls.key }, serve) : createServer(serve);

  const listen = (p: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(p, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  const stopListening = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  await listen(opts.port ?? 0);
  port = (server.address() as AddressInfo).port;
  let stopped = false;
  const url = `${opts.tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;

  const defOf = (obj: KubeObject): ResourceDef => {
    const def = typeof obj?.kind === 'string' ? resourceFor(obj.kind) : undefined;
    if (!def || def.kind !== obj.kind) throw new ApiError(400, 'BadRequest', `unsupported kind: ${String(obj?.kind)}`);
    return def;
  };
  const defNamed = (kind: string): ResourceDef => {
    const def = resourceFor(kind);
    if (!def) throw new ApiError(400, 'BadRequest', `unsupported kind: ${kind}`);
    return def;
  };

  const api: ApiServer = {
    url,
    port,
    host,
    async close() {
      if (closing) return;
      closing = true;
      watches.close();
      if (!stopped) await stopListening();
    },
    async stop() {
      if (stopped || closing) return;
      stopped = true;
      watches.cut('reset');
      lists.clear();
      await stopListening();
    },
    async start() {
      if (!stopped || closing) return;
      await listen(port);
      stopped = false;
    },
    create: (obj) => store.create(defOf(obj), obj),
    update: (obj) => store.update(defOf(obj), obj),
    apply(obj) {
      const def = defOf(obj);
      const md = obj.metadata ?? {};
      const existing = md.name ? store.tryGet(def, md.namespace ?? 'default', md.name) : undefined;
      if (!existing) return store.create(def, obj);
      const next = structuredClone(obj);
      if (next.metadata) delete next.metadata.resourceVersion;
      return store.update(def, next);
    },
    remove: (kind, namespace, name) => store.remove(defNamed(kind), namespace ?? 'default', name),
    get: (kind, namespace, name) => store.tryGet(defNamed(kind), namespace ?? 'default', name),
    list: (kind, namespace) => store.list(defNamed(kind), namespace),
    resourceVersion: () => String(store.currentRv()),
    compactHistory: () => store.compact(),
    replaceHistory(o) {
      watches.cut(o.closeWatches ?? 'reset');
      lists.clear();
      store.replaceHistory(o.resourceVersionBase, o.edit);
    },
    dropWatches: () => watches.drop(),
    pauseWatches: () => watches.pause(),
    resumeWatches: () => watches.resume(),
    watchCount: () => watches.count,
    heldWatchCount: () => watches.heldCount,
    setUnservedKinds(kinds) {
      unserved = new Set(kinds);
    },
    failRequests(count, o = {}) {
      faults.arm(count, o.code ?? 500, o.match);
    },
    async writeKubeconfig(file, o = {}) {
      const name = o.contextName ?? 'kpr-sandbox';
      const doc = {
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name, cluster: { server: url, 'insecure-skip-tls-verify': true } }],
        users: [{ name, user: { token: opts.bearerToken ?? 'kpr-sandbox-token' } }],
        contexts: [{ name, context: { cluster: name, user: name, namespace: o.namespace ?? 'default' } }],
        'current-context': name,
        preferences: {},
      };
      await fsp.mkdir(path.dirname(path.resolve(file)), { recursive: true });
      await fsp.writeFile(file, YAML.stringify(doc), { mode: 0o600 });
      return file;
    },
    loadManifests: (paths) => loadManifests(paths, (obj) => api.apply(obj)),
  };
  return api;
}

async function main(argv: string[]): Promise<void> {
  const opts: ApiServerOptions = { port: 0 };
  const manifests: string[] = [];
  let kubeconfig: string | undefined;
  let tlsCert: string | undefined;
  let tlsKey: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case '--port':
        opts.port = Number(value());
        break;
      case '--host':
        opts.host = value();
        break;
      case '--manifests':
        manifests.push(value());
        break;
      case '--kubeconfig':
        kubeconfig = value();
        break;
      case '--history-limit':
        opts.historyLimit = Number(value());
        break;
      case '--bookmark-interval-ms':
        opts.bookmarkIntervalMs = Number(value());
        break;
      case '--tls-cert-file':
        tlsCert = value();
        break;
      case '--tls-private-key-file':
        tlsKey = value();
        break;
      case '--token-file':
        opts.bearerToken = (await fsp.readFile(value(), 'utf8')).trim();
        break;
      case '-h':
      case '--help':
        process.stdout.write(
          'usage: apiserver [--host 127.0.0.1] [--port 0] [--manifests PATH]... [--kubeconfig PATH] [--history-limit 1000] [--bookmark-interval-ms 1000] [--tls-cert-file PEM --tls-private-key-file PEM] [--token-file FILE]\n',
        );
        return;
      default:
        throw new Error(`unknown flag: ${a}`);
    }
  }
  if ((tlsCert === undefined) !== (tlsKey === undefined)) throw new Error('--tls-cert-file and --tls-private-key-file go together');
  if (tlsCert && tlsKey) opts.tls = { cert: await fsp.readFile(tlsCert), key: await fsp.readFile(tlsKey) };
  opts.onRequest = process.env.KPR_APISERVER_DEBUG ? (r) => process.stderr.write(`${r.method} ${r.url} -> ${r.status}\n`) : undefined;
  const api = await startApiServer(opts);
  if (manifests.length > 0) {
    const r = await api.loadManifests(manifests);
    process.stderr.write(`loaded ${r.objects.length} objects${r.skipped.length ? `, skipped ${r.skipped.length}: ${r.skipped.join(', ')}` : ''}\n`);
  }
  if (kubeconfig) await api.writeKubeconfig(kubeconfig);
  process.stdout.write(`${api.url}\n`);
  const stop = (): void => {
    void api.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`apiserver: ${(e as Error).message}\n`);
    process.exit(1);
  });
}
