/**
 * kube-proxy's node health server (default 0.0.0.0:10256): /healthz and
 * /livez answer any method with the JSON of agent/health/proxy-health.ts;
 * every other path is a plain 404, as Go's ServeMux gives.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { guardedFastify, NODE_LISTENER_LIMITS, type ShedHandler } from '../http/http-guard.js';
import type { CacheHealth } from './cache-health.js';
import { withAttachments, type AttachmentHealth } from './attachment-health.js';
import { healthzResponse, livezResponse, type HealthResponse, type NodeLike, type ProxyHealthState } from './proxy-health.js';

export interface HealthServerOptions {
  state: ProxyHealthState;
  /** This node's Node object as last seen (undefined until known or after deletion). */
  node: () => NodeLike | undefined;
  /** kpr's k8s cache verdict for /healthz at a given time (agent/health/cache-health.ts); /livez ignores it. */
  caches?: (now: Date) => CacheHealth;
  /** kpr's Services over a datapath limit for /healthz's body (agent/reconcile/limits.ts LimitSummary); never changes the status. */
  overLimit?: () => Record<string, unknown> | undefined;
  /** kpr's run-time BPF map sizes for /healthz's body (agent/metrics/observability.ts MapSizeReport); never changes the status. */
  mapSizes?: () => Record<string, unknown> | undefined;
  /** kpr's attachment verdict (agent/health/attachment-health.ts): 503 when one is missing; /livez ignores it. */
  attachments?: (now: Date) => AttachmentHealth | undefined;
  /** Called for every answer, for kubeproxy_proxy_{healthz,livez}_total. */
  onServed?: (path: 'healthz' | 'livez', code: number) => void;
  /** Called when the connection cap closes an idle connection or refuses one. */
  onShed?: ShedHandler;
}

/** kube-proxy's headers on every answer, whatever the status. */
function send(reply: FastifyReply, r: HealthResponse): FastifyReply {
  return reply
    .code(r.statusCode)
    .header('Content-Type', 'application/json')
    .header('X-Content-Type-Options', 'nosniff')
    .send(Buffer.from(JSON.stringify(r.body))); // a Buffer: fastify adds no charset to the Content-Type
}

/** Go's http.NotFound. */
export function goNotFound(app: FastifyInstance): void {
  app.setNotFoundHandler((_req, reply) =>
    reply.code(404).header('Content-Type', 'text/plain; charset=utf-8').header('X-Content-Type-Options', 'nosniff').send('404 page not found\n'),
  );
}

export function buildHealthServer(opts: HealthServerOptions): FastifyInstance {
  const app = guardedFastify(NODE_LISTENER_LIMITS, opts.onShed);
  goNotFound(app);
  // app.all: every method fastify routes (GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, ...) gets the same answer.
  app.all('/healthz', (_req, reply) => {
    const r = withAttachments(healthzResponse(opts.state, opts.node(), opts.caches, opts.overLimit, opts.mapSizes), opts.attachments?.(new Date()));
    opts.onServed?.('healthz', r.statusCode);
    return send(reply, r);
  });
  app.all('/livez', (_req, reply) => {
    const r = livezResponse(opts.state);
    opts.onServed?.('livez', r.statusCode);
    return send(reply, r);
  });
  return app;
}
