/**
 * The sandbox API server's HTTP side: health paths, bearer-token
 * authentication, discovery, injected request failures, then each verb on a
 * resource path mapped onto the store, its lists and its watch streams; any
 * error answered as a Kubernetes Status.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import YAML from 'yaml';
import type { ListPager } from './apiserver-list.js';
import { OPENAPI_V2_PROTOBUF, openApiDocument } from './apiserver-openapi.js';
import { jsonPatch, mergePatch } from './apiserver-patch.js';
import { decodeProtobufObject } from './apiserver-protobuf.js';
import type { RequestFaults } from './apiserver-request-faults.js';
import { discoveryDocument, parseRoute } from './apiserver-routes.js';
import { SERVE_ALL, type Served } from './apiserver-resources.js';
import { parseFieldSelector, parseLabelSelector, SelectorError, type Selector } from './apiserver-selectors.js';
import { ApiError } from './apiserver-status.js';
import type { Store } from './apiserver-store.js';
import type { WatchStreams } from './apiserver-watch.js';

export interface RequestContext {
  store: Store;
  lists: ListPager;
  watches: WatchStreams;
  faults: RequestFaults;
  /** The one bearer token accepted; unset: no authentication. */
  bearerToken?: string;
  /** "host:port", as /api advertises it (known once the server listens). */
  serverAddress(): string;
  /** Called for each HTTP request (method, url, status). */
  onRequest?: (info: { method: string; url: string; status: number }) => void;
  /** The resources served (default all): the others are unknown paths, absent from discovery. */
  served?: Served;
}

async function readBody(req: IncomingMessage): Promise<any> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 8 << 20) throw new ApiError(413, 'RequestEntityTooLarge', 'request entity too large');
    chunks.push(c as Buffer);
  }
  const ct = String(req.headers['content-type'] ?? '');
  if (ct.startsWith('application/vnd.kubernetes.protobuf')) return decodeProtobufObject(Buffer.concat(chunks));
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text.trim()) throw new ApiError(400, 'BadRequest', 'empty request body');
  if (ct.includes('cbor')) {
    throw new ApiError(
      415,
      'UnsupportedMediaType',
      'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf',
    );
  }
  try {
    return ct.includes('yaml') ? YAML.parse(text) : JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, 'BadRequest', `unable to decode the request body: ${(e as Error).message}`);
  }
}

function json(res: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-cache, private' });
  res.end(text);
}

async function handle(ctx: RequestContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const method = (req.method ?? 'GET').toUpperCase();
  const p = url.pathname.replace(/\/+$/, '') || '/';
  if (p === '/healthz' || p === '/readyz' || p === '/livez') {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('ok');
    return;
  }
  if (ctx.bearerToken !== undefined && req.headers.authorization !== `Bearer ${ctx.bearerToken}`) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
  if (p === '/openapi/v2') {
    res.writeHead(200, { 'Content-Type': 'application/com.github.proto-openapi.spec.v2.v1.0+protobuf', 'Content-Length': OPENAPI_V2_PROTOBUF.length });
    res.end(OPENAPI_V2_PROTOBUF);
    return;
  }
  const served = ctx.served ?? SERVE_ALL;
  const discovery = discoveryDocument(p, ctx.serverAddress(), served) ?? openApiDocument(p, served);
  if (discovery !== undefined) return json(res, 200, discovery);
  const injected = ctx.faults.take(`${method} ${req.url ?? ''}`);
  if (injected) throw injected;
  const route = parseRoute(p);
  if (!route || (!(route instanceof ApiError) && !served(route.def))) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
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
    if (isWatch) return ctx.watches.start(def, q, sel, res);
    return json(res, 200, ctx.lists.list(def, route.namespace, sel, q));
  }
  if (def.namespaced && route.namespace === undefined && method !== 'GET') {
    throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
  }
  switch (method) {
    case 'GET':
      return json(res, 200, ctx.store.get(def, route.namespace, route.name!));
    case 'POST': {
      if (route.name !== undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      const body = await readBody(req);
      return json(res, 201, ctx.store.create(def, body, route.namespace));
    }
    case 'PUT': {
      if (route.name === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      const body = await readBody(req);
      return json(res, 200, ctx.store.update(def, body, route.namespace, route.name, route.subresource));
    }
    case 'PATCH': {
      if (route.name === undefined) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      const ct = String(req.headers['content-type'] ?? '')
        .split(';')[0]
        .trim();
      if (ct !== 'application/merge-patch+json' && ct !== 'application/strategic-merge-patch+json' && ct !== 'application/json-patch+json') {
        throw new ApiError(
          415,
          'UnsupportedMediaType',
          `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`,
        );
      }
      const patch = await readBody(req);
      const current = ctx.store.get(def, route.namespace, route.name);
      const next = ct === 'application/json-patch+json' ? jsonPatch(current, patch) : mergePatch(current, patch);
      if (next === null || typeof next !== 'object' || Array.isArray(next) || next.metadata === null || typeof next.metadata !== 'object') {
        throw new ApiError(422, 'Invalid', 'the patched object is not a Kubernetes object');
      }
      // A resourceVersion set by the patch is a precondition; otherwise the patch applies to the latest.
      if (next.metadata.resourceVersion === current.metadata!.resourceVersion || !next.metadata.resourceVersion)
        next.metadata.resourceVersion = current.metadata!.resourceVersion;
      return json(res, 200, ctx.store.update(def, next, route.namespace, route.name, route.subresource));
    }
    case 'DELETE':
      if (route.name === undefined || route.subresource)
        throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      return json(res, 200, ctx.store.remove(def, route.namespace, route.name));
    default:
      throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
  }
}

/** The server's request listener. */
export function requestListener(ctx: RequestContext): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    if (ctx.onRequest) res.on('finish', () => ctx.onRequest!({ method: req.method ?? '', url: req.url ?? '', status: res.statusCode }));
    handle(ctx, req, res).catch((e: unknown) => {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', `Internal error occurred: ${(e as Error)?.message ?? String(e)}`);
      if (res.headersSent) res.end();
      else json(res, err.code, err.toStatus());
    });
  };
}
