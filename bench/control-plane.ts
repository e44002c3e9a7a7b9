/**
 * The kpr side of the control-plane benchmark: fills the embedded API server,
 * starts bin/kpr-agent against it (attached to the run's cgroup, pinning under
 * the run's bpffs directory), reads the agent's JSON log lines from stderr and
 * measures the initial programming, single endpoint changes and the RSS.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Sandbox } from '../sandbox/netns.js';
import { agentBin, repoRoot } from '../sandbox/repo.js';
import type { KpService } from './kube-proxy-rules.js';
import { asUnderTest } from './priority.js';
import { endpointSliceObject, nodeObject, serviceObject, NODE_NAME, type KubeObj } from './scenario.js';

export type LogRecord = Record<string, any>;

/** The subset of sandbox/apiserver.ts the bench uses (imported dynamically: it may not be built yet). */
export interface BenchApiServer {
  url: string;
  create(obj: KubeObj): KubeObj;
  update(obj: KubeObj): KubeObj;
  writeKubeconfig(file: string): Promise<string>;
  close(): Promise<void>;
}

/** The agent command; KPR_BENCH_AGENT_BIN overrides bin/kpr-agent (e.g. to try a stub). */
export const benchAgentBin = process.env.KPR_BENCH_AGENT_BIN ?? agentBin;

export function agentAvailable(): boolean {
  if (process.env.KPR_BENCH_AGENT_BIN) return existsSync(benchAgentBin);
  return existsSync(path.join(repoRoot, 'dist', 'kpr-agent.mjs')); // what bin/kpr-agent runs
}

/** `nodeObj` and `toObjects` default to the ClusterIP scenario's Node and objects. */
export async function startApi(
  services: KpService[],
  nodeObj: KubeObj = nodeObject(),
  toObjects: (svc: KpService) => KubeObj[] = (svc) => [serviceObject(svc), endpointSliceObject(svc)],
): Promise<BenchApiServer> {
  const mod = (await import('../sandbox/apiserver.js')) as unknown as {
    startApiServer(opts: Record<string, unknown>): Promise<BenchApiServer>;
  };
  // Watch history must outlive a burst of changes; the changes are sequential anyway.
  const api = await mod.startApiServer({ serviceCIDR: '198.19.0.0/16', historyLimit: 5000, bookmarkIntervalMs: 0 });
  api.create(nodeObj);
  for (const svc of services) for (const obj of toObjects(svc)) api.create(obj);
  return api;
}

export interface AgentOptions {
  /** Default: the sandbox's cgroup. */
  cgroupPath?: string;
  /** Default: the sandbox's bpffs directory. */
  bpffsDir?: string;
  /** More agent flags (e.g. --netns, --external-interfaces). */
  extraArgs?: string[];
}

/** Parsed log records kept for waitLog() (beyond that, only the newest are kept). */
const KEEP_RECORDS = 10_000;

/** A running agent and a feed of its parsed log lines. */
export class Agent {
  readonly child: ChildProcess;
  readonly started = process.hrtime.bigint();
  private readonly waiters = new Set<{ pred: (r: LogRecord) => boolean; resolve: (r: LogRecord) => void }>();
  private tail: string[] = [];
  /** Every parsed log record so far (bounded), for waits on lines that may already have passed. */
  readonly records: LogRecord[] = [];
  private exited: string | undefined;
  private buf = '';

  constructor(sandbox: Sandbox, kubeconfig: string, logLevel: string, opts: AgentOptions = {}) {
    const args = [
      '--kubeconfig',
      kubeconfig,
      '--node-name',
      NODE_NAME,
      '--cgroup-path',
      opts.cgroupPath ?? sandbox.cgroupPath,
      '--bpffs',
      opts.bpffsDir ?? sandbox.bpffsDir,
      // The control-plane run measures map programming only: attach tc nowhere (the agent runs in
      // the root namespace, whose eth0 would match the default interface patterns).
      '--external-interfaces',
      '',
      '--pod-interfaces',
      '',
      '--log-level',
      logLevel,
      // The health and metrics servers run, as in a real deployment (their share of the RSS
      // counts), on loopback ports the kernel picks: other agents may hold the default ports.
      '--healthz-bind-address',
      '127.0.0.1:0',
      '--metrics-bind-address',
      '127.0.0.1:0',
      ...(opts.extraArgs ?? []),
    ];
    // The agent runs in the host namespace (it talks to the API server on 127.0.0.1);
    // its hooks attach only to the sandbox's cgroup.
    this.child = asUnderTest(sandbox.track(spawn(benchAgentBin, args, { stdio: ['ignore', 'ignore', 'pipe'] })));
    this.child.stderr!.setEncoding('utf8');
    this.child.stderr!.on('data', (d: string) => this.onData(d));
    this.child.once('exit', (code, sig) => {
      this.exited = `agent exited (${sig ?? code})`;
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      this.tail.push(line);
      if (this.tail.length > 40) this.tail.shift();
      let rec: LogRecord;
      try {
        rec = JSON.parse(line);
      } catch {
        continue;
      }
      this.records.push(rec);
      if (this.records.length > KEEP_RECORDS) this.records.splice(0, this.records.length - KEEP_RECORDS);
      for (const w of [...this.waiters]) {
        if (w.pred(rec)) {
          this.waiters.delete(w);
          w.resolve(rec);
        }
      }
    }
  }

  /** Resolves with the next log record matching `pred`; register it before causing the event. */
  next(pred: (r: LogRecord) => boolean, timeoutMs: number, what: string): Promise<LogRecord> {
    return new Promise((resolve, reject) => {
      const w = {
        pred,
        resolve: (r: LogRecord) => {
          clearTimeout(timer);
          clearInterval(poll);
          resolve(r);
        },
      };
      const fail = (why: string) => {
        this.waiters.delete(w);
        clearTimeout(timer);
        clearInterval(poll);
        reject(new Error(`${what}: ${why}. Last agent output:\n${this.tail.slice(-15).join('\n')}`));
      };
      const timer = setTimeout(() => fail(`no log line after ${timeoutMs} ms`), timeoutMs);
      const poll = setInterval(() => this.exited && fail(this.exited), 100);
      this.waiters.add(w);
    });
  }

  /** Like next(), but an already logged matching record counts too. */
  waitLog(pred: (r: LogRecord) => boolean, timeoutMs: number, what: string): Promise<LogRecord> {
    const seen = this.records.find(pred);
    return seen ? Promise.resolve(seen) : this.next(pred, timeoutMs, what);
  }

  rssKiB(): number {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
    return m ? Number(m[1]) : NaN;
  }

  lastLines(n = 15): string {
    return this.tail.slice(-n).join('\n');
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const done = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.kill('SIGTERM');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await done;
    clearTimeout(t);
  }
}

export interface InitialSync {
  /** The agent's own figure: informer cache synced → all maps written. */
  cacheSyncedToMapsWrittenMs: number;
  /** Spawn → "initial sync complete" as the bench saw it (process start, list, decode, program). */
  spawnToSyncedMs: number;
  record: LogRecord;
  rssKiB: number;
}

export async function startAgent(
  sandbox: Sandbox,
  api: BenchApiServer,
  logLevel: string,
  timeoutMs: number,
  opts: AgentOptions = {},
): Promise<{ agent: Agent; initial: InitialSync }> {
  const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-kc-`)));
  const kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
  const agent = new Agent(sandbox, kubeconfig, logLevel, opts);
  const rec = await agent.waitLog((r) => r.msg === 'initial sync complete', timeoutMs, "waiting for the agent's initial sync");
  const spawnToSyncedMs = Number(process.hrtime.bigint() - agent.started) / 1e6;
  return {
    agent,
    initial: { cacheSyncedToMapsWrittenMs: Number(rec.cacheSyncedToMapsWrittenMs), spawnToSyncedMs, record: rec, rssKiB: agent.rssKiB() },
  };
}

export interface ChangeSamples {
  eventToMapsMs: number[];
  durationMs: number[];
  /** api.update() → the agent's "sync" log line read by the bench (includes watch delivery and log pipe). */
  apiToLogMs: number[];
  /** When each change was made, ms after the agent was spawned. */
  atMs: number[];
  /** How long the agent had been idle (no change since the previous sync was seen), ms, per change. */
  idleBeforeMs: number[];
  timeouts: number;
}

/**
 * A change made after the agent sat idle at least this long (the runner's
 * iptables steps make such pauses) runs on cold CPU caches: on the 2-CPU VM
 * the benchmark was written on, its sync took 2–4× as long as back to back.
 */
export const PAUSE_MS = 50;

/** eventToMapsMs of the changes made back to back, and of those made after the agent sat idle ≥ pauseMs. */
export function splitByPause(c: Pick<ChangeSamples, 'eventToMapsMs' | 'idleBeforeMs'>, pauseMs = PAUSE_MS): { backToBack: number[]; afterPause: number[] } {
  const backToBack: number[] = [];
  const afterPause: number[] = [];
  c.eventToMapsMs.forEach((ms, i) => ((c.idleBeforeMs[i] ?? 0) >= pauseMs ? afterPause : backToBack).push(ms));
  return { backToBack, afterPause };
}

/**
 * Flips endpoint 0's ready condition of `target`'s EndpointSlice `count` times,
 * waiting each time for the agent's event-triggered sync. `between(i)` runs
 * after change i (the runner interleaves the iptables changes there).
 */
export async function endpointChanges(
  api: BenchApiServer,
  agent: Agent,
  target: KpService,
  count: number,
  budgetMs: number,
  between: (i: number) => Promise<void>,
): Promise<ChangeSamples> {
  const out: ChangeSamples = { eventToMapsMs: [], durationMs: [], apiToLogMs: [], atMs: [], idleBeforeMs: [], timeouts: 0 };
  let lastSeen = process.hrtime.bigint();
  const deadline = Date.now() + budgetMs;
  let notReady = false;
  for (let i = 0; i < count && Date.now() < deadline; i++) {
    notReady = !notReady;
    const slice = endpointSliceObject(target, notReady ? new Set([0]) : new Set());
    const seen = agent.next(
      (r) => (r.msg === 'sync' && r.trigger === 'event') || (typeof r.msg === 'string' && r.msg.startsWith('sync failed')),
      10_000,
      `change ${i + 1}`,
    );
    const t0 = process.hrtime.bigint();
    api.update(slice);
    try {
      const rec = await seen;
      if (rec.msg !== 'sync') throw new Error(`change ${i + 1}: the agent's sync failed: ${JSON.stringify(rec)}`);
      const now = process.hrtime.bigint();
      out.apiToLogMs.push(Number(now - t0) / 1e6);
      out.idleBeforeMs.push(Number(t0 - lastSeen) / 1e6);
      lastSeen = now;
      out.atMs.push(Number(t0 - agent.started) / 1e6);
      out.eventToMapsMs.push(Number(rec.eventToMapsMs));
      out.durationMs.push(Number(rec.durationMs));
    } catch (err) {
      lastSeen = process.hrtime.bigint();
      out.timeouts++;
      if (out.timeouts >= 3) throw err;
    }
    await between(i);
  }
  return out;
}

/** One periodic full resync (with its kernel read-back) and the endpoint changes made while it ran. */
export interface ResyncSample {
  /** The agent's sync durationMs: re-plan, read-back and diff of every Service. */
  durationMs: number;
  /** Its read-back share: dumps of the maps, compared with the mirror. */
  readBackMs: number;
  /** The longest slice of it, and (agents that log it) the longest the agent's event loop was held while it ran (its 1 ms probe). */
  longestSliceMs?: number;
  loopBlockMs?: number;
  /** API update → sync log seen, for each change made while the resync ran (the event loop is busy: it waits). */
  blockedApiToLogMs: number[];
}

/**
 * How long after a resync's end a change still counts as made during it:
 * agents before 2026-12 ran a full GC right after a resync (up to ~0.2 s),
 * which a change made then waited for.
 */
const AFTER_RESYNC_MS = 300;

/**
 * Waits for `count` periodic full resyncs (the agent's --sync-period timer),
 * flipping `target`'s endpoint every `paceMs` meanwhile (each change waits for
 * its sync), so some change lands while a resync runs (or within
 * AFTER_RESYNC_MS of its end); returns each resync and what those changes
 * waited, and the API → log times of the other changes (no resync running).
 */
export async function periodicResyncs(
  api: BenchApiServer,
  agent: Agent,
  target: KpService,
  count: number,
  timeoutMs: number,
  paceMs = 20,
): Promise<{ resyncs: ResyncSample[]; otherApiToLogMs: number[] }> {
  const changes: Array<{ at: number; apiToLogMs: number }> = [];
  const resyncs: Array<{ end: number; rec: LogRecord }> = [];
  const deadline = Date.now() + timeoutMs * count;
  const waitResyncs = (async () => {
    while (resyncs.length < count && Date.now() < deadline) {
      const rec = await agent.next((r) => r.msg === 'sync' && r.trigger === 'periodic', Math.max(1, deadline - Date.now()), 'a periodic resync');
      resyncs.push({ end: Number(rec.time), rec });
    }
  })();
  let done = false;
  waitResyncs.finally(() => (done = true)).catch(() => {});
  let notReady = false;
  while (!done) {
    notReady = !notReady;
    const seen = agent.next((r) => r.msg === 'sync' && r.trigger === 'event', 30_000, 'a change during resyncs');
    const at = Date.now();
    const t0 = process.hrtime.bigint();
    api.update(endpointSliceObject(target, notReady ? new Set([0]) : new Set()));
    await seen;
    changes.push({ at, apiToLogMs: Number(process.hrtime.bigint() - t0) / 1e6 });
    await new Promise((r) => setTimeout(r, paceMs));
  }
  await waitResyncs;
  const blocked = new Set<number>();
  const out: ResyncSample[] = resyncs.map(({ end, rec }) => {
    const start = end - Number(rec.durationMs);
    const mine: number[] = [];
    changes.forEach((c, i) => {
      if (c.at >= start - 1 && c.at <= end + AFTER_RESYNC_MS) {
        mine.push(c.apiToLogMs);
        blocked.add(i);
      }
    });
    const opt = (v: unknown) => (v === undefined ? undefined : Number(v));
    return {
      durationMs: Number(rec.durationMs),
      readBackMs: Number(rec.readBackMs),
      longestSliceMs: opt(rec.longestSliceMs),
      loopBlockMs: opt(rec.loopBlockMs),
      blockedApiToLogMs: mine,
    };
  });
  return { resyncs: out, otherApiToLogMs: changes.filter((_, i) => !blocked.has(i)).map((c) => c.apiToLogMs) };
}
