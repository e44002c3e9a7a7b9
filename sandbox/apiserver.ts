/**
 * An embedded, in-process Kubernetes API server for the sandbox and tests.
 *
 * It speaks the real list/watch protocol (JSON over plain HTTP) for core/v1
 * Services, discovery.k8s.io/v1 EndpointSlices and core/v1 Nodes (and stores
 * Pods and apps/v1 DaemonSets, with no controller behind them), so the agent
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
 * Standalone: node dist/sandbox/apiserver.js [--host H] [--port N]
 *   [--manifests PATH]... [--kubeconfig PATH] [--history-limit N] [--bookmark-interval-ms N]
 *   [--tls-cert-file PEM --tls-private-key-file PEM] [--token-file FILE]
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import {
  parseFieldSelector,
  parseLabelSelector,
  selectorMatches,
  SelectorError,
  type KubeObject,
  type Selector,
} from './apiserver-selectors.js';
import { ApiError, RESOURCES, resourceFor, statusObject, Store, type ResourceDef, type StoreEvent } from './apiserver-store.js';

export type { KubeObject } from './apiserver-selectors.js';
export { ApiError } from './apiserver-store.js';

export interface ApiServerOptions {
  /** Default 0 (a random free port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Retained watch events; older resourceVersions get 410 Gone. Default 1000. */
  historyLimit?: number;
  /** Interval of BOOKMARK events on watches that allow them; 0 disables. Default 1000. */
  bookmarkIntervalMs?: number;
  /** ClusterIP allocation range. Default 198.19.0.0/16. */
  serviceCIDR?: string;
  /** Called for each HTTP request (method, url, status) — handy for debugging clients. */
  onRequest?: (info: { method: string; url: string; status: number }) => void;
  /** Serve HTTPS with this certificate and key (PEM) instead of plain HTTP. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** The one bearer token accepted; unset: no authentication. */
  bearerToken?: string;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

export interface LoadManifestsResult {
  /** Objects created or updated, as stored. */
  objects: KubeObject[];
  /** "Kind ns/name (file)" of documents of kinds this server does not serve. */
  skipped: string[];
}

export interface ApiServer {
  readonly url: string;
  readonly port: number;
  readonly host: string;
  /** Ends every watch stream and held request, then stops listening. */
  close(): Promise<void>;
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
  /** Number of watch requests held by pauseWatches() whose client is still connected. */
  heldWatchCount(): number;
  /** Number of open watch streams. */
  watchCount(): number;
  /** Writes a kubeconfig (insecure-skip-tls-verify, dummy token) pointing at this server; returns the path. */
  writeKubeconfig(file: string, opts?: { namespace?: string; contextName?: string }): Promise<string>;
  /** Creates-or-updates the objects in YAML/JSON files or directories (multi-document YAML, *List kinds). */
  loadManifests(paths: string | string[]): Promise<LoadManifestsResult>;
}

interface Route {
  def: ResourceDef;
  namespace?: string;
  name?: string;
  subresource?: 'status';
  legacyWatch: boolean;
}

/** Parses /api/v1/... and /apis/GROUP/VERSION/... paths for the served resources. */
function parseRoute(pathname: string): Route | ApiError | undefined {
  const parts = pathname.split('/').filter((p) => p.length > 0).map(decodeURIComponent);
  let group: string;
  let version: string;
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 2) {
    group = '';
    version = parts[1];
    rest = parts.slice(2);
  } else if (parts[0] === 'apis' && parts.length >= 3) {
    group = parts[1];
    version = parts[2];
    rest = parts.slice(3);
  } else return undefined;
  let legacyWatch = false;
  if (rest[0] === 'watch') {
    legacyWatch = true;
    rest = rest.slice(1);
  }
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const def = RESOURCES.find((r) => r.group === group && r.version === version && r.plural === rest[0]);
  if (!def || rest.length > 3) return undefined;
  if (namespace !== undefined && !def.namespaced) return undefined;
  const name = rest[1];
  let subresource: 'status' | undefined;
  if (rest.length === 3) {
    if (rest[2] !== 'status') return undefined;
    subresource = 'status';
  }
  return { def, namespace, name, subresource, legacyWatch };
}

function stripForList(o: KubeObject): KubeObject {
  const { kind: _k, apiVersion: _a, ...rest } = o;
  return rest;
}

/** A list continue token, like the real server's: base64 of {"v":"meta.k8s.io/v1","rv":N,"start":"<key>"}. */
function encodeContinue(rv: number, lastKey: string): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv, start: lastKey })).toString('base64url');
}

function decodeContinue(token: string): { rv: number; start: string } | undefined {
  try {
    const t = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
    if (t?.v !== 'meta.k8s.io/v1' || !Number.isInteger(t.rv) || t.rv < 0 || typeof t.start !== 'string' || t.start === '') return undefined;
    return { rv: t.rv, start: t.start };
  } catch {
    return undefined;
  }
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: any, patch: any): any {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

interface Watcher {
  def: ResourceDef;
  sel: Selector;
  res: ServerResponse;
  bookmarks: boolean;
  timer?: NodeJS.Timeout;
  closed: boolean;
}

/** How one store event looks through a watcher's selector (real apiserver semantics), or null. */
function translate(sel: Selector, ev: StoreEvent): [WatchEventType, KubeObject] | null {
  const now = selectorMatches(sel, ev.object);
  if (ev.type === 'ADDED') return now ? ['ADDED', ev.object] : null;
  if (ev.type === 'DELETED') return now ? ['DELETED', ev.object] : null;
  const before = selectorMatches(sel, ev.prev);
  if (now && before) return ['MODIFIED', ev.object];
  if (now) return ['ADDED', ev.object];
  if (before) return ['DELETED', ev.object];
  return null;
}

async function readBody(req: IncomingMessage): Promise<any> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 8 << 20) throw new ApiError(413, 'RequestEntityTooLarge', 'request entity too large');
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text.trim()) throw new ApiError(400, 'BadRequest', 'empty request body');
  const ct = String(req.headers['content-type'] ?? '');
  try {
    return ct.includes('yaml') ? YAML.parse(text) : JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, 'BadRequest', `unable to decode the request body: ${(e as Error).message}`);
  }
}

async function collectManifestFiles(p: string): Promise<string[]> {
  const st = await fsp.stat(p);
  if (!st.isDirectory()) return [p];
  const out: string[] = [];
  for (const e of (await fsp.readdir(p, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const full = path.join(p, e.name);
    if (e.isDirectory()) out.push(...(await collectManifestFiles(full)));
    else if (/\.(ya?ml|json)$/i.test(e.name)) out.push(full);
  }
  return out;
}

export async function startApiServer(opts: ApiServerOptions = {}): Promise<ApiServer> {
  const host = opts.host ?? '127.0.0.1';
  const bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 1000;
  const store = new Store({ historyLimit: opts.historyLimit ?? 1000, serviceCIDR: opts.serviceCIDR });
  const watchers = new Set<Watcher>();
  let paused = false;
  let held: Array<{ start: () => void; gone: boolean }> = [];
  let closing = false;
  let faults: { count: number; code: number; match?: RegExp } | undefined;

  const send = (w: Watcher, type: WatchEventType, object: unknown): void => {
    if (w.closed) return;
    w.res.write(JSON.stringify({ type, object }) + '\n');
  };
  const endWatch = (w: Watcher): void => {
    if (w.closed) return;
    w.closed = true;
    if (w.timer) clearTimeout(w.timer);
    watchers.delete(w);
    w.res.end();
  };

  store.subscribe((ev) => {
    for (const w of watchers) {
      if (w.def !== ev.def) continue;
      const t = translate(w.sel, ev);
      if (t) send(w, t[0], t[1]);
    }
  });

  const bookmarkTimer =
    bookmarkIntervalMs > 0
      ? setInterval(() => {
          const rv = String(store.currentRv());
          for (const w of watchers) {
            if (w.bookmarks) send(w, 'BOOKMARK', { kind: w.def.kind, apiVersion: w.def.apiVersion, metadata: { resourceVersion: rv } });
          }
        }, bookmarkIntervalMs)
      : undefined;
  bookmarkTimer?.unref();

  const json = (res: ServerResponse, code: number, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-cache, private' });
    res.end(text);
  };

  /**
   * Recent list snapshots (plural@rv -> sorted keys and states) for paginated lists, so
   * that the pages of one list do not each rebuild and sort the whole collection.
   */
  const snapshots = new Map<string, { keys: string[]; objects: KubeObject[] }>();
  const snapshotAt = (def: ResourceDef, rv: number): { keys: string[]; objects: KubeObject[] } => {
    if (!store.canResumeFrom(rv)) return store.snapshotAt(def, rv); // throws 410 Expired
    const id = `${def.plural}@${rv}`;
    let snap = snapshots.get(id);
    if (!snap) {
      snap = store.snapshotAt(def, rv);
      snapshots.set(id, snap);
      while (snapshots.size > 8) snapshots.delete(snapshots.keys().next().value!);
    }
    return snap;
  };

  /**
   * One page of a chunked list (limit/continue), like the real API server: every page
   * comes from the snapshot at the first page's resourceVersion; the continue token
   * carries that resourceVersion and the last key served; a token whose
   * resourceVersion is compacted away gets 410 Expired.
   */
  const listPage = (def: ResourceDef, sel: Selector, limit: number, cont: string, q: URLSearchParams): unknown => {
    let rv: number;
    let after = '';
    if (cont !== '') {
      const rvParam = q.get('resourceVersion') ?? '';
      if (rvParam !== '' && rvParam !== '0') throw new ApiError(400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      const tok = decodeContinue(cont);
      if (!tok) throw new ApiError(400, 'BadRequest', `invalid continue token: ${cont}`);
      rv = tok.rv;
      after = tok.start;
    } else rv = store.currentRv();
    const snap = snapshotAt(def, rv);
    // First key strictly after `after` (same order as the snapshot's sort).
    let lo = 0;
    if (after !== '') {
      let hi = snap.keys.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (snap.keys[mid].localeCompare(after) <= 0) lo = mid + 1;
        else hi = mid;
      }
    }
    const items: KubeObject[] = [];
    let i = lo;
    for (; i < snap.objects.length && (limit === 0 || items.length < limit); i++) {
      const o = snap.objects[i];
      if (selectorMatches(sel, o)) items.push(stripForList(o));
    }
    // Like the real server, a full page may end exactly at the last match: the next page is then empty.
    const metadata: Record<string, unknown> = { resourceVersion: String(rv) };
    if (i < snap.objects.length) metadata.continue = encodeContinue(rv, snap.keys[i - 1]);
    return { kind: def.listKind, apiVersion: def.apiVersion, metadata, items };
  };

  const startWatch = (route: Route, q: URLSearchParams, sel: Selector, res: ServerResponse): void => {
    const rvParam = q.get('resourceVersion') ?? '';
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const w: Watcher = { def: route.def, sel, res, bookmarks: ['true', '1'].includes(q.get('allowWatchBookmarks') ?? ''), closed: false };
    res.on('close', () => endWatch(w));
    if (rvParam === '' || rvParam === '0') {
      // "Get state and start at most recent": synthetic ADDED events for the current state.
      for (const o of store.list(route.def)) if (selectorMatches(sel, o)) send(w, 'ADDED', o);
    } else {
      const rv = Number(rvParam);
      if (!Number.isInteger(rv) || rv < 0) {
        send(w, 'ERROR', statusObject(400, 'BadRequest', `invalid resource version: ${rvParam}`));
        endWatch(w);
        return;
      }
      if (!store.canResumeFrom(rv)) {
        send(w, 'ERROR', statusObject(410, 'Expired', `too old resource version: ${rv} (${store.oldestAvailableRv()})`));
        endWatch(w);
        return;
      }
      for (const ev of store.eventsAfter(rv)) {
        if (ev.def !== route.def) continue;
        const t = translate(sel, ev);
        if (t) send(w, t[0], t[1]);
      }
    }
    const timeout = Number(q.get('timeoutSeconds') ?? '');
    if (Number.isFinite(timeout) && timeout > 0) w.timer = setTimeout(() => endWatch(w), timeout * 1000);
    watchers.add(w);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const method = (req.method ?? 'GET').toUpperCase();
    const p = url.pathname.replace(/\/+$/, '') || '/';
    if (p === '/healthz' || p === '/readyz' || p === '/livez') {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
      return;
    }
    if (opts.bearerToken !== undefined && req.headers.authorization !== `Bearer ${opts.bearerToken}`) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    if (p === '/version') return json(res, 200, { major: '1', minor: '31', gitVersion: 'v1.31.0-kpr-sandbox', platform: `${process.platform}/${process.arch}` });
    if (p === '/api') return json(res, 200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: `${host}:${port}` }] });
    if (p === '/apis') {
      return json(res, 200, {
        kind: 'APIGroupList',
        apiVersion: 'v1',
        groups: [...new Set(RESOURCES.map((r) => r.group).filter(Boolean))].map((name) => ({
          name,
          versions: [{ groupVersion: `${name}/v1`, version: 'v1' }],
          preferredVersion: { groupVersion: `${name}/v1`, version: 'v1' },
        })),
      });
    }
    const gvMatch = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))$/.exec(p);
    if (gvMatch) {
      const group = gvMatch[2] ?? '';
      const version = gvMatch[1] ?? gvMatch[3];
      const defs = RESOURCES.filter((r) => r.group === group && r.version === version);
      if (defs.length > 0) {
        return json(res, 200, {
          kind: 'APIResourceList',
          apiVersion: 'v1',
          groupVersion: group ? `${group}/${version}` : version,
          resources: defs.map((d) => ({
            name: d.plural,
            singularName: d.kind.toLowerCase(),
            namespaced: d.namespaced,
            kind: d.kind,
            verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
            shortNames: d.shortNames,
          })),
        });
      }
    }
    if (faults && faults.count > 0 && (!faults.match || faults.match.test(`${method} ${req.url ?? ''}`))) {
      faults.count--;
      throw new ApiError(faults.code, faults.code === 503 ? 'ServiceUnavailable' : 'InternalError', 'injected failure');
    }
    const route = parseRoute(p);
    if (!route) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (route instanceof ApiError) throw route;
    const { def } = route;
    const q = url.searchParams;
    const isWatch = route.legacyWatch || ['true', '1'].includes(q.get('watch') ?? '');

    if (method === 'GET' && (isWatch || route.name === undefined)) {
      if (route.subresource) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      let sel: Selector;
      try {
        sel = { labels: parseLabelSelector(q.get('labelSelector')), fields: parseFieldSelector(q.get('fieldSelector')), namespace: route.namespace };
      } catch (e) {
        if (e instanceof SelectorError) throw new ApiError(400, 'BadRequest', e.message);
        throw e;
      }
      if (route.name !== undefined) sel.fields.push({ op: 'eq', path: 'metadata.name', value: route.name });
      if (isWatch) {
        if (paused) {
          const h = { start: () => void (!h.gone && startWatch(route, q, sel, res)), gone: false };
          res.on('close', () => (h.gone = true));
          held.push(h);
          return;
        }
        return startWatch(route, q, sel, res);
      }
      const limit = Number(q.get('limit') ?? '');
      const cont = q.get('continue') ?? '';
      if (cont !== '' || (Number.isInteger(limit) && limit > 0)) return json(res, 200, listPage(def, sel, Number.isInteger(limit) && limit > 0 ? limit : 0, cont, q));
      const items = store.list(def, route.namespace).filter((o) => selectorMatches(sel, o)).map(stripForList);
      return json(res, 200, { kind: def.listKind, apiVersion: def.apiVersion, metadata: { resourceVersion: String(store.currentRv()) }, items });
    }
    if (def.namespaced && route.namespace === undefined && method !== 'GET') {
      throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    }
    switch (method) {
      case 'GET':
        return json(res, 200, store.get(def, route.namespace, route.name!));
      case 'POST': {
        if (route.name !== undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        const body = await readBody(req);
        return json(res, 201, store.create(def, body, route.namespace));
      }
      case 'PUT': {
        if (route.name === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        const body = await readBody(req);
        return json(res, 200, store.update(def, body, route.namespace, route.name, route.subresource));
      }
      case 'PATCH': {
        if (route.name === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        const ct = String(req.headers['content-type'] ?? '').split(';')[0].trim();
        if (ct !== 'application/merge-patch+json' && ct !== 'application/strategic-merge-patch+json') {
          throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json`);
        }
        const patch = await readBody(req);
        const current = store.get(def, route.namespace, route.name);
        const next = mergePatch(current, patch);
        // A resourceVersion in the patch is a precondition; otherwise the patch applies to the latest.
        if (!patch?.metadata?.resourceVersion) next.metadata.resourceVersion = current.metadata!.resourceVersion;
        return json(res, 200, store.update(def, next, route.namespace, route.name, route.subresource));
      }
      case 'DELETE':
        if (route.name === undefined || route.subresource) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        return json(res, 200, store.remove(def, route.namespace, route.name));
      default:
        throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    }
  };

  const serve = (req: IncomingMessage, res: ServerResponse): void => {
    if (opts.onRequest) res.on('finish', () => opts.onRequest!({ method: req.method ?? '', url: req.url ?? '', status: res.statusCode }));
    handle(req, res).catch((e: unknown) => {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', `Internal error occurred: ${(e as Error)?.message ?? String(e)}`);
      if (res.headersSent) res.end();
      else json(res, err.code, err.toStatus());
    });
  };
  const server: Server = opts.tls ? createHttpsServer({ cert: opts.tls.cert, key: opts.tls.key }, serve) : createServer(serve);

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
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
      if (bookmarkTimer) clearInterval(bookmarkTimer);
      for (const w of [...watchers]) endWatch(w);
      held = [];
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
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
      for (const w of [...watchers]) {
        if (o.closeWatches === 'clean') endWatch(w);
        else {
          w.closed = true;
          if (w.timer) clearTimeout(w.timer);
          watchers.delete(w);
          w.res.destroy();
        }
      }
      snapshots.clear();
      store.replaceHistory(o.resourceVersionBase, o.edit);
    },
    dropWatches() {
      const n = watchers.size;
      for (const w of [...watchers]) endWatch(w);
      return n;
    },
    pauseWatches() {
      paused = true;
      for (const w of [...watchers]) endWatch(w);
    },
    resumeWatches() {
      paused = false;
      const pending = held;
      held = [];
      for (const h of pending) h.start();
    },
    watchCount: () => watchers.size,
    heldWatchCount: () => held.filter((h) => !h.gone).length,
    failRequests(count, o = {}) {
      faults = { count, code: o.code ?? 500, match: o.match };
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
    async loadManifests(paths) {
      const result: LoadManifestsResult = { objects: [], skipped: [] };
      const files: string[] = [];
      for (const p of Array.isArray(paths) ? paths : [paths]) files.push(...(await collectManifestFiles(p)));
      const applyDoc = (doc: any, file: string): void => {
        if (doc === null || doc === undefined || typeof doc !== 'object') return;
        if (typeof doc.kind === 'string' && doc.kind.endsWith('List') && Array.isArray(doc.items)) {
          for (const item of doc.items) applyDoc(item, file);
          return;
        }
        const def = typeof doc.kind === 'string' ? resourceFor(doc.kind) : undefined;
        if (!def || def.kind !== doc.kind || (doc.apiVersion !== undefined && doc.apiVersion !== def.apiVersion)) {
          const ns = doc.metadata?.namespace ? `${doc.metadata.namespace}/` : '';
          result.skipped.push(`${doc.kind ?? '?'} ${ns}${doc.metadata?.name ?? '?'} (${file})`);
          return;
        }
        result.objects.push(api.apply(doc));
      };
      for (const f of files) {
        const text = await fsp.readFile(f, 'utf8');
        for (const parsed of YAML.parseAllDocuments(text)) {
          if (parsed.errors.length) throw parsed.errors[0];
          applyDoc(parsed.toJS(), f);
        }
      }
      return result;
    },
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
