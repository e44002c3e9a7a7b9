/**
 * A container's probes run as the kubelet runs them (pkg/kubelet/prober):
 * the startup probe every period until it succeeds (failureThreshold
 * failures in a row: the kubelet would kill the container), then liveness
 * and readiness on their own periods. httpGet succeeds on a status in
 * [200, 400) within timeoutSeconds; tcpSocket on a connect; exec on exit 0
 * (through the runner's exec). Every attempt is recorded with its answer,
 * so a test can say which probe answered what.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { ProbePlan } from './pod-to-podman.js';

export type ProbeKind = 'startup' | 'liveness' | 'readiness';

export interface ProbeAttempt {
  kind: ProbeKind;
  at: number;
  ok: boolean;
  /** The HTTP status, when one came back. */
  status?: number;
  error?: string;
}

export type ExecProbe = (command: string[], timeoutMs: number) => Promise<number>;

/** One probe attempt. */
export async function probeOnce(p: ProbePlan, exec: ExecProbe | undefined): Promise<{ ok: boolean; status?: number; error?: string }> {
  const timeoutMs = p.timeoutSeconds * 1000;
  const a = p.action;
  if (a.kind === 'httpGet') {
    return new Promise((resolve) => {
      const mod = a.scheme === 'HTTPS' ? https : http;
      const req = mod.get(
        {
          host: a.host,
          port: a.port,
          path: a.path,
          headers: { 'User-Agent': 'kube-probe/1.34', Accept: '*/*', ...a.headers },
          timeout: timeoutMs,
          rejectUnauthorized: false,
          agent: false,
        },
        (res) => {
          res.resume();
          const status = res.statusCode ?? 0;
          resolve({ ok: status >= 200 && status < 400, status });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', (err) => resolve({ ok: false, error: err.message }));
    });
  }
  if (a.kind === 'tcpSocket') {
    return new Promise((resolve) => {
      const s = net.connect({ host: a.host, port: a.port, timeout: timeoutMs });
      s.once('connect', () => {
        s.destroy();
        resolve({ ok: true });
      });
      s.once('timeout', () => s.destroy(new Error(`no connect within ${timeoutMs} ms`)));
      s.once('error', (err) => resolve({ ok: false, error: err.message }));
    });
  }
  if (!exec) return { ok: false, error: 'exec probe without an exec' };
  try {
    const code = await exec(a.command, timeoutMs);
    return { ok: code === 0, ...(code === 0 ? {} : { error: `exit ${code}` }) };
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
}

/** The state a kubelet keeps per container from its probes. */
export class ContainerProbes {
  readonly attempts: ProbeAttempt[] = [];
  started = false;
  ready = false;
  /** Set when a probe reached its failureThreshold: what the kubelet would do. */
  verdict: string | undefined;
  private stopped = false;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly waiters = new Set<() => void>();

  constructor(
    private readonly probes: { startup?: ProbePlan; liveness?: ProbePlan; readiness?: ProbePlan },
    private readonly exec?: ExecProbe,
  ) {}

  start(): void {
    if (this.probes.startup) this.loop('startup', this.probes.startup);
    else this.afterStartup();
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.notify();
  }

  /** Resolves once the container is ready (readiness succeeded, or started with no readiness probe); rejects on a verdict or `deadlineMs`. */
  waitReady(deadlineMs: number, exited?: () => string | undefined): Promise<void> {
    return this.waitFor(() => this.ready, deadlineMs, 'ready', exited);
  }

  waitStarted(deadlineMs: number, exited?: () => string | undefined): Promise<void> {
    return this.waitFor(() => this.started, deadlineMs, 'started', exited);
  }

  /** Each probe kind's answers so far, e.g. {startup: ['refused', 200], ...}, for messages. */
  summary(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const k of ['startup', 'liveness', 'readiness'] as const) {
      const a = this.attempts.filter((x) => x.kind === k);
      if (a.length) out[k] = a.map((x) => x.status ?? x.error ?? (x.ok ? 'ok' : 'failed')).join(', ');
    }
    return out;
  }

  private waitFor(cond: () => boolean, deadlineMs: number, what: string, exited?: () => string | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => done(new Error(`not ${what} within ${deadlineMs} ms; probes: ${JSON.stringify(this.summary())}`)), deadlineMs);
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (err) reject(err);
        else resolve();
      };
      const check = () => {
        if (cond()) return done();
        if (this.verdict) return done(new Error(`not ${what}: ${this.verdict}; probes: ${JSON.stringify(this.summary())}`));
        const gone = exited?.();
        if (gone) return done(new Error(`not ${what}: ${gone}; probes: ${JSON.stringify(this.summary())}`));
        if (this.stopped) return done(new Error(`not ${what}: the probes were stopped`));
      };
      this.waiters.add(check);
      check();
    });
  }

  /** Re-checks the waiters (also called by the runner when the container exits). */
  notify(): void {
    for (const w of [...this.waiters]) w();
  }

  private afterStartup(): void {
    this.started = true;
    if (this.probes.liveness) this.loop('liveness', this.probes.liveness);
    if (this.probes.readiness) this.loop('readiness', this.probes.readiness);
    else this.ready = true;
    this.notify();
  }

  private loop(kind: ProbeKind, p: ProbePlan): void {
    let failures = 0;
    let successes = 0;
    const tick = async () => {
      if (this.stopped) return;
      const r = await probeOnce(p, this.exec);
      if (this.stopped) return;
      this.attempts.push({ kind, at: Date.now(), ...r });
      if (r.ok) {
        failures = 0;
        successes++;
        if (successes >= p.successThreshold) {
          if (kind === 'startup') {
            this.afterStartup();
            return;
          }
          if (kind === 'readiness') this.ready = true;
        }
      } else {
        successes = 0;
        failures++;
        if (failures >= p.failureThreshold) {
          if (kind === 'readiness') this.ready = false;
          else {
            this.verdict = `${kind} probe failed ${failures} times in a row (${r.status ?? r.error}): the kubelet kills the container`;
            this.notify();
            return;
          }
        }
      }
      this.notify();
      this.schedule(() => void tick(), p.periodSeconds * 1000);
    };
    this.schedule(() => void tick(), p.initialDelaySeconds * 1000);
  }

  private schedule(fn: () => void, ms: number): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }
}
