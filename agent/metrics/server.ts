/**
 * kube-proxy's metrics server (default 127.0.0.1:10249): /metrics in the
 * Prometheus text format, /healthz answering "ok" while the process serves,
 * and /proxyMode naming the proxy ("kpr").
 */
import type { FastifyInstance } from 'fastify';
import { guardedFastify, NODE_LISTENER_LIMITS, type ShedHandler } from '../http-guard.js';
import { goNotFound, ignoreBodies } from '../health/server.js';

export const PROXY_MODE = 'kpr';

export interface MetricsSource {
  text(): Promise<string>;
  readonly contentType: string;
}

export function buildMetricsServer(metrics: MetricsSource, onShed?: ShedHandler): FastifyInstance {
  const app = guardedFastify(NODE_LISTENER_LIMITS, onShed);
  ignoreBodies(app);
  goNotFound(app);
  app.get('/metrics', async (_req, reply) => reply.header('Content-Type', metrics.contentType).send(await metrics.text()));
  const plain = (text: string) => (_req: unknown, reply: import('fastify').FastifyReply) =>
    reply.header('Content-Type', 'text/plain; charset=utf-8').header('X-Content-Type-Options', 'nosniff').send(Buffer.from(text));
  app.all('/healthz', plain('ok'));
  app.all('/proxyMode', plain(PROXY_MODE));
  return app;
}
