/**
 * Every HTTP listener of the agent (health, metrics, healthCheckNodePort
 * servers) is reachable from the network without authentication, as
 * kube-proxy's are. A flood of idle or slow connections must not exhaust the
 * agent's file descriptors or keep a kubelet probe from being answered, so
 * each listener gets:
 *  - timeouts for headers, whole requests and idle keep-alive sockets;
 *  - answers that never wait for a request body: none of these listeners
 *    reads one, so a request is answered as soon as its headers are in, and
 *    a connection whose request announced a body is closed after the answer
 *    (the rest of the body is never read, and the client cannot hold the
 *    connection by sending it one byte at a time);
 *  - a cap on open connections: when a new one arrives at the cap, the oldest
 *    connection with no request in flight, or whose request's body is still
 *    arriving, is closed to make room (an idle, slowloris or slow-body socket
 *    loses its place to the probe), and only when every socket is busy
 *    answering is the newcomer refused.
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

/**
 * Why a connection was shed: `evicted` (idle, closed at the cap to make
 * room), `refused` (a newcomer at the cap with every socket busy answering),
 * `unread_body` (closed while its request's body was still arriving: after
 * its answer, or at the cap to make room).
 */
export type ShedKind = 'evicted' | 'refused' | 'unread_body';
export type ShedHandler = (kind: ShedKind) => void;

export interface ConnectionGuardStats {
  /** Connections open now. */
  open(): number;
  /** Idle connections closed to make room for a new one. */
  readonly evicted: number;
  /** New connections refused because every open one was busy. */
  readonly refused: number;
  /** Connections closed while a request body was still arriving (after the answer, or to make room). */
  readonly unreadBody: number;
}

/** The request announces a body (HTTP/1.1: a non-zero Content-Length or any Transfer-Encoding). */
export function announcesBody(req: IncomingMessage): boolean {
  const len = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (len !== undefined && len !== '0');
}

/** The request's body has not fully arrived (nothing is waiting for a request without one). */
function bodyPending(req: IncomingMessage): boolean {
  return announcesBody(req) && !req.complete;
}

/**
 * Applies the cap with eviction to `server` (an http.Server), and closes a
 * connection after answering a request that announced a body. Sockets are
 * kept in arrival order, so the first evictable one found is the oldest.
 */
export function guardConnections(server: Server, limits: ListenerLimits, onShed?: ShedHandler): ConnectionGuardStats {
  const sockets = new Set<Socket>();
  /** Requests in flight (answer not yet finished) per socket. */
  const inFlight = new Map<Socket, Set<IncomingMessage>>();
  /** Sockets closed at the cap, already counted. */
  const shedSockets = new WeakSet<Socket>();
  const stats = { evicted: 0, refused: 0, unreadBody: 0, open: () => sockets.size };
  const shed = (kind: ShedKind) => {
    if (kind === 'evicted') stats.evicted++;
    else if (kind === 'refused') stats.refused++;
    else stats.unreadBody++;
    onShed?.(kind);
  };
  /** Why `s` may be closed to make room: idle, or every request in flight still waiting for its body; undefined if busy answering. */
  const evictable = (s: Socket): ShedKind | undefined => {
    const reqs = inFlight.get(s);
    if (!reqs || reqs.size === 0) return 'evicted';
    for (const r of reqs) if (!bodyPending(r)) return undefined;
    return 'unread_body';
  };
  server.on('connection', (sock: Socket) => {
    sockets.add(sock);
    sock.once('close', () => {
      sockets.delete(sock);
      inFlight.delete(sock);
    });
    if (sockets.size <= limits.maxConnections) return;
    for (const s of sockets) {
      if (s === sock) continue;
      const kind = evictable(s);
      if (!kind) continue;
      shedSockets.add(s);
      s.destroy();
      sockets.delete(s);
      inFlight.delete(s);
      shed(kind);
      return;
    }
    sock.destroy();
    sockets.delete(sock);
    shed('refused');
  });
  // First of the 'request' listeners (before fastify's handler, which may answer synchronously), so the header is set in time.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const sock = req.socket;
    let reqs = inFlight.get(sock);
    if (!reqs) inFlight.set(sock, (reqs = new Set()));
    reqs.add(req);
    // Node answers "Connection: close" and closes the socket once the answer is out; the unread rest of the body goes with it.
    if (announcesBody(req)) res.setHeader('Connection', 'close');
    // Counted when the socket closes (the answer can go out before Node has parsed a body that came with the headers).
    res.once('finish', () => {
      if (bodyPending(req)) sock.once('close', () => bodyPending(req) && !shedSockets.has(sock) && shed('unread_body'));
    });
    res.once('close', () => {
      inFlight.get(sock)?.delete(req);
    });
  });
  return stats;
}

/**
 * None of the agent's listeners reads a request body: every content type is
 * accepted and the route's handler runs at once, without waiting for the
 * body (fastify otherwise holds the request until its body has arrived, or
 * answers 415 to a type it has no parser for).
 */
export function answerWithoutBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));
}

/** A fastify instance with the listener limits applied (timeouts, the connection guard, answers without bodies). */
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
  answerWithoutBodies(app);
  return Object.assign(app, { connectionGuard: guard });
}
