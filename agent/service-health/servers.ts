/**
 * One HTTP server per Service with a healthCheckNodePort (type LoadBalancer,
 * externalTrafficPolicy Local), as kube-proxy runs them: opened and closed as
 * services come and go (and reopened when the port changes), answering on
 * any path and method with the node's count of ready local endpoints.
 * Servers listen in the node's network namespace on every address.
 */
import type { FastifyInstance } from 'fastify';
import { guardedFastify, SERVICE_HEALTH_LIMITS, type ShedHandler } from '../http/http-guard.js';
import { withNetns } from '../../native/index.js';
import type { Logger } from '../log/log.js';
import { serviceHealthAnswer } from './body.js';

export interface ServiceHealthTarget {
  /** "namespace/name". */
  service: string;
  port: number;
  localEndpoints: number;
}

interface Running {
  port: number;
  localEndpoints: number;
  app: FastifyInstance;
}

export class ServiceHealthServers {
  private readonly running = new Map<string, Running>();
  /** The applies in order: opening and closing servers awaits, and the agent calls sync() after every sync without waiting. */
  private applied: Promise<void> = Promise.resolve();
  /** Targets of a sync() whose apply has not started yet: a later sync() replaces them. */
  private pending: ServiceHealthTarget[] | undefined;
  private closed = false;
  /**
   * Services whose server could not be opened → "port|error" last warned
   * about: every sync retries, but the warning is logged once per port and
   * error (a healthCheckNodePort that cannot be bound fails the same way each time).
   */
  private readonly failing = new Map<string, string>();

  constructor(private readonly opts: { netns?: string; proxyHealthy: () => boolean; log: Logger; onShed?: ShedHandler }) {}

  /**
   * Makes the set of servers match `targets`; counts of unchanged servers are
   * updated in place. Calls apply one at a time, in order (two overlapping
   * applies would both open a new Service's server, or one could reopen a
   * server the other just closed); a call made while another waits to start
   * replaces it. Resolves once `targets` (or a later call's) are applied.
   */
  sync(targets: ServiceHealthTarget[]): Promise<void> {
    if (this.closed) return Promise.resolve();
    const queued = this.pending !== undefined;
    this.pending = targets;
    if (!queued) {
      this.applied = this.applied
        .catch(() => {}) // reported to the caller that made it; the next apply starts from what is running
        .then(() => {
          const next = this.pending ?? [];
          this.pending = undefined;
          return this.closed ? undefined : this.apply(next);
        });
    }
    return this.applied;
  }

  private async apply(targets: ServiceHealthTarget[]): Promise<void> {
    const wanted = new Map(targets.map((t) => [t.service, t]));
    for (const svc of this.failing.keys()) if (!wanted.has(svc)) this.failing.delete(svc);
    for (const [svc, r] of this.running) {
      const t = wanted.get(svc);
      if (!t || t.port !== r.port) {
        this.running.delete(svc);
        await r.app.close();
        this.opts.log.info('service health check server closed', { service: svc, port: r.port });
      }
    }
    for (const t of wanted.values()) {
      const r = this.running.get(t.service);
      if (r) {
        r.localEndpoints = t.localEndpoints;
        continue;
      }
      try {
        this.running.set(t.service, await this.open(t));
        this.failing.delete(t.service);
        this.opts.log.info('service health check server listening', { service: t.service, port: t.port });
      } catch (err) {
        // kube-proxy emits FailedToStartServiceHealthcheck and skips the service.
        const error = (err as Error).message;
        const version = `${t.port}|${error}`;
        if (this.failing.get(t.service) === version) continue; // retried each sync, warned once
        this.failing.set(t.service, version);
        this.opts.log.warn('could not start service health check server', { service: t.service, port: t.port, error });
      }
    }
  }

  private async open(t: ServiceHealthTarget): Promise<Running> {
    const [namespace, name] = [t.service.slice(0, t.service.indexOf('/')), t.service.slice(t.service.indexOf('/') + 1)];
    const app = guardedFastify(SERVICE_HEALTH_LIMITS, this.opts.onShed);
    const entry: Running = { port: t.port, localEndpoints: t.localEndpoints, app };
    app.all('/*', async (_req, reply) => {
      const a = serviceHealthAnswer(namespace, name, entry.localEndpoints, this.opts.proxyHealthy());
      // A Buffer, so fastify sends the Content-Type exactly as kube-proxy does (no charset suffix).
      return reply.code(a.status).headers(a.headers).send(Buffer.from(a.body));
    });
    await app.ready();
    // listen() without a host binds synchronously, so the socket is created inside the node's namespace.
    await new Promise<void>((resolve, reject) => {
      app.server.once('error', reject);
      app.server.once('listening', () => {
        app.server.off('error', reject);
        resolve();
      });
      const listen = () => app.server.listen(t.port);
      if (this.opts.netns) withNetns(this.opts.netns, listen);
      else listen();
    });
    return entry;
  }

  ports(): Map<string, number> {
    return new Map([...this.running].map(([svc, r]) => [svc, r.port]));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.applied.catch(() => {}); // a server being opened now is in `running` once this resolves
    for (const r of this.running.values()) await r.app.close();
    this.running.clear();
  }
}
