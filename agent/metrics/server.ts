/**
 * kube-proxy's metrics server (default 127.0.0.1:10249): /metrics in the
 * Prometheus text format, /healthz answering "ok" while the process serves,
 * /proxyMode naming the proxy ("kpr"), and /configz, as kube-proxy's: the
 * effective configuration as JSON (read-only; the flags and config file as
 * resolved at start).
 */
import type { FastifyInstance } from 'fastify';
import { guardedFastify, NODE_LISTENER_LIMITS, type ShedHandler } from '../http/http-guard.js';
import { goNotFound } from '../health/server.js';

export const PROXY_MODE = 'kpr';

export interface MetricsSource {
  text(): Promise<string>;
  readonly contentType: string;
}

/** /configz's body: the agent's version and its effective configuration. */
export interface ConfigzBody {
  version: string;
  config: Record<string, unknown>;
  /** The service ranges in force, each with its source (agent/sync/service-ranges.ts). */
  serviceRanges?: unknown;
}

export function buildMetricsServer(metrics: MetricsSource, onShed?: ShedHandler, configz?: () => ConfigzBody): FastifyInstance {
  const app = guardedFastify(NODE_LISTENER_LIMITS, onShed);
  goNotFound(app);
  app.get('/metrics', async (_req, reply) => reply.header('Content-Type', metrics.contentType).send(await metrics.text()));
  const plain = (text: string) => (_req: unknown, reply: import('fastify').FastifyReply) =>
    reply.header('Content-Type', 'text/plain; charset=utf-8').header('X-Content-Type-Options', 'nosniff').send(Buffer.from(text));
  app.all('/healthz', plain('ok'));
  app.all('/proxyMode', plain(PROXY_MODE));
  if (configz) {
    app.get('/configz', (_req, reply) =>
      reply
        .header('Content-Type', 'application/json')
        .header('X-Content-Type-Options', 'nosniff')
        .send(Buffer.from(JSON.stringify(configz()))),
    );
  }
  return app;
}
