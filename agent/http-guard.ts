/**
 * Every HTTP listener of the agent (health, metrics, healthCheckNodePort
 * servers) is reachable from the network without authentication, as
 * kube-proxy's are. A flood of idle or slow connections must not exhaust the
 * agent's file descriptors or keep a kubelet probe from being answered, so
 * each listener gets:
 *  - timeouts for headers, whole requests and idle keep-alive sockets;
 *  - a cap on open connections: when a new one arrives at the cap, the oldest
 *    connection with no request in flight is closed to make room (an idle or
 *    slowloris socket loses its place to the probe), and only when every
 *    socket is busy is the newcomer refused.
 * The caps keep the agent's descriptors for its own work (maps, links,
 * namespaces, the API watch) whatever the network does.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';

export interface ListenerLimits {
  /** Open connections per listener, at most. */
  maxConnections: number;
  /** A connection with no byte in either direction for this long is closed. */
  idleTimeoutMs: number;
  /** Time to receive a request's headers. */
  headersTimeoutMs: number;
  /** Time to receive a whole request. */
  requestTimeoutMs: number;
  /** Keep-alive: how long a served connection may wait for its next request. */
  keepAliveTimeoutMs: number;
}

/** The agent's own health and metrics ports. */
export const NODE_LISTENER_LIMITS: ListenerLimits = {
  maxConnections: 256,
  idleTimeoutMs: 10_000,
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
};

/** One healthCheckNodePort server per eTP=Local LoadBalancer Service: a smaller share each. */
export const SERVICE_HEALTH_LIMITS: ListenerLimits = { ...NODE_LISTENER_LIMITS, maxConnections: 32 };

export type ShedHandler = (kind: 'evicted' | 'refused') => void;

export interface ConnectionGuardStats {
  /** Connections open now. */
  open(): number;
  /** Idle connections closed to make room for a new one. */
  readonly evicted: number;
  /** New connections refused because every open one was busy. */
  readonly refused: number;
}

/**
 * Applies the cap with eviction to `server` (an http.Server). Sockets are
 * kept in arrival order, so the first idle one found is the oldest.
 */
export function guardConnections(server: Server, limits: ListenerLimits, onShed?: ShedHandler): ConnectionGuardStats {
  const sockets = new Set<Socket>();
  const busy = new Map<Socket, number>();
  const stats = { evicted: 0, refused: 0, open: () => sockets.size };
  server.on('connection', (sock: Socket) => {
    sockets.add(sock);
    sock.once('close', () => {
      sockets.delete(sock);
      busy.delete(sock);
    });
    if (sockets.size <= limits.maxConnections) return;
    for (const s of sockets) {
      if (s === sock || busy.has(s)) continue;
      s.destroy();
      sockets.delete(s);
      stats.evicted++;
      onShed?.('evicted');
      return;
    }
    sock.destroy();
    sockets.delete(sock);
    stats.refused++;
    onShed?.('refused');
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const sock = req.socket;
    busy.set(sock, (busy.get(sock) ?? 0) + 1);
    res.once('close', () => {
      const n = (busy.get(sock) ?? 1) - 1;
      if (n > 0) busy.set(sock, n);
      else busy.delete(sock);
    });
  });
  return stats;
}

/** A fastify instance with the listener limits applied (timeouts and the connection guard). */
export function guardedFastify(limits: ListenerLimits, onShed?: ShedHandler): FastifyInstance & { connectionGuard: ConnectionGuardStats } {
  const app = Fastify({
    logger: false,
    bodyLimit: 64 * 1024,
    connectionTimeout: limits.idleTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
  });
  app.server.headersTimeout = limits.headersTimeoutMs;
  // Node checks the header and request deadlines on a timer started at listen (every 30 s by default).
  (app.server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = 1000;
  const guard = guardConnections(app.server, limits, onShed);
  return Object.assign(app, { connectionGuard: guard });
}
