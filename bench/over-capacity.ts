/**
 * Over capacity on the default map sizes (issue 22): more Services than the
 * compile-time maps hold (30,000 × 10 endpoints: 330,000 kpr_svc entries and
 * 300,000 backends against 262,144 each), served by the embedded API server
 * to the real agent. Measures what the node lives with afterwards:
 *
 *   - what the initial sync programmed and refused (its log line, the
 *     kpr_services_over_limit gauge, /healthz's servicesOverLimit field);
 *   - the agent's CPU (utime+stime from /proc/PID/stat) and RSS over a
 *     minute of being over capacity (KPR_BENCH_OBSERVE_MS; the issue's
 *     10 minutes: 600000), sampled every 5 s, with the RSS at rest (between
 *     resyncs) early and late, and how many syncs (and failed syncs) it ran
 *     meanwhile;
 *   - connect latency (bench/connload.c) to a Service that fits, to its pod
 *     directly under kpr's hooks, and to the pod outside kpr's cgroup.
 *
 *   make build && node dist/bench/over-capacity.js
 *   KPR_BENCH_SERVICES=30000 KPR_BENCH_ENDPOINTS=10 KPR_BENCH_OBSERVE_MS=60000 node dist/bench/over-capacity.js
 *   KPR_BENCH_AGENT_ARGS="--map-size-services 400000 --map-size-backends 350000" node dist/bench/over-capacity.js
 *
 * Prints one JSON object on stdout (progress on stderr). The maps have their
 * default sizes unless KPR_BENCH_AGENT_ARGS gives the agent run-time sizes
 * (--map-size-*: the same 30,000 Services then fit).
 */
import { readFileSync } from 'node:fs';
import { Sandbox } from '../sandbox/netns.js';
import { startAgent, startApi, type Agent, type BenchApiServer } from './control-plane.js';
import { buildHelpers, connload, setupDataplane, waitReachable, type ConnResult } from './data-plane.js';
import { ECHO_CLUSTER_IP, ECHO_PORT, SERVICE_PORT, makeScenario } from './scenario.js';

const num = (env: string, dflt: number): number => {
  const v = process.env[env];
  const n = v === undefined || v === '' ? dflt : Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${env}: not a number: ${v}`);
  return n;
};

const SERVICES = num('KPR_BENCH_SERVICES', 30_000);
const ENDPOINTS = num('KPR_BENCH_ENDPOINTS', 10);
const OBSERVE_MS = num('KPR_BENCH_OBSERVE_MS', 60_000);
const SAMPLE_MS = 5000;
const CONNS = num('KPR_BENCH_DP_CONNS', 3000);
/** More agent flags, space-separated (e.g. run-time map sizes). */
const AGENT_ARGS = (process.env.KPR_BENCH_AGENT_ARGS ?? '').split(/\s+/).filter(Boolean);
const log = (m: string) => process.stderr.write(`[over-capacity] ${m}\n`);

/** utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux). */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // fields 14 and 15 of stat(5), counted from field 3
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 102.4) / 10 : NaN;
}

const TICK_MS = 10;
/** A sample under this share of a CPU fell between resyncs: its RSS is the agent's resting size. */
const IDLE_CPU_PCT = 5;

/**
 * RSS at rest, early and late: the median of the samples taken between
 * resyncs in the first and the last fifth of the observation. A sample
 * taken while a resync runs holds its transient garbage (the resync's
 * swing, up to ~50 MiB at 30,000 Services), which says nothing about growth.
 */
function idleRss(samples: ReadonlyArray<{ atS: number; cpuPct: number; rssMiB: number }>): {
  idleEarly?: number;
  idleLate?: number;
  idleLateOverEarly?: number;
} {
  const span = samples.length === 0 ? 0 : samples[samples.length - 1]!.atS;
  const median = (xs: number[]) => (xs.length === 0 ? undefined : xs.sort((a, b) => a - b)[xs.length >> 1]);
  const idle = samples.filter((s) => s.cpuPct < IDLE_CPU_PCT);
  const early = median(idle.filter((s) => s.atS <= span / 5).map((s) => s.rssMiB));
  const late = median(idle.filter((s) => s.atS >= (span * 4) / 5).map((s) => s.rssMiB));
  return {
    ...(early !== undefined ? { idleEarly: early } : {}),
    ...(late !== undefined ? { idleLate: late } : {}),
    ...(early !== undefined && late !== undefined ? { idleLateOverEarly: Math.round((late / early) * 1000) / 1000 } : {}),
  };
}

async function main(): Promise<void> {
  buildHelpers();
  const sandbox = new Sandbox();
  let api: BenchApiServer | undefined;
  let agent: Agent | undefined;
  try {
    const env = await setupDataplane(sandbox);
    const scenario = makeScenario(SERVICES, ENDPOINTS);
    log(`loading ${scenario.services.length} Services × ${ENDPOINTS} endpoints into the API server`);
    api = await startApi(scenario.services);
    log('starting the agent');
    const started = await startAgent(sandbox, api, 'info', 300_000, { extraArgs: AGENT_ARGS });
    agent = started.agent;
    const pid = agent.pid;
    const initial = started.initial.record;
    log(`initial sync: ${JSON.stringify(initial)}`);
    const metricsAddr = String((await agent.waitLog((r) => r.msg === 'metrics server listening', 10_000, 'metrics')).address);
    const healthAddr = String((await agent.waitLog((r) => r.msg === 'health server listening', 10_000, 'health')).address);
    await waitReachable(sandbox, env, ECHO_CLUSTER_IP, SERVICE_PORT);

    const logsAtStart = agent.records.length;
    const rss0 = rssMiB(pid);
    const t0 = cpuTicks(pid);
    const w0 = performance.now();
    const samples: Array<{ atS: number; cpuPct: number; rssMiB: number }> = [];
    let lastTicks = t0;
    let lastAt = w0;
    log(`observing the agent for ${OBSERVE_MS / 1000} s (sample every ${SAMPLE_MS / 1000} s); RSS right after the initial sync ${rss0} MiB`);
    while (performance.now() - w0 < OBSERVE_MS) {
      await new Promise((r) => setTimeout(r, SAMPLE_MS));
      const now = performance.now();
      const ticks = cpuTicks(pid);
      samples.push({
        atS: Math.round((now - w0) / 100) / 10,
        cpuPct: Math.round(((ticks - lastTicks) * TICK_MS * 1000) / (now - lastAt)) / 10,
        rssMiB: rssMiB(pid),
      });
      log(`  ${JSON.stringify(samples[samples.length - 1])}`);
      lastTicks = ticks;
      lastAt = now;
    }
    const wallMs = performance.now() - w0;
    const cpuMs = (cpuTicks(pid) - t0) * TICK_MS;
    const during = agent.records.slice(logsAtStart);
    const syncs = during.filter((r) => r.msg === 'sync').length;
    const failed = during.filter((r) => typeof r.msg === 'string' && r.msg.startsWith('sync failed')).length;

    log(`connect latency: ${CONNS} connections per arm`);
    const arms: Record<string, ConnResult> = {
      clusterip: await connload(sandbox, env, ECHO_CLUSTER_IP, SERVICE_PORT, CONNS, 30_000, true),
      direct: await connload(sandbox, env, env.podIp, ECHO_PORT, CONNS, 30_000, true),
      'direct-nohook': await connload(sandbox, env, env.podIp, ECHO_PORT, CONNS, 30_000, false),
    };
    const metrics = await (await fetch(`http://${metricsAddr}/metrics`)).text();
    const overLimit = metrics.split('\n').filter((l) => l.startsWith('kpr_services_over_limit'));
    const health = await fetch(`http://${healthAddr}/healthz`);
    const healthBody = (await health.json()) as Record<string, unknown>;
    const out = {
      agentArgs: AGENT_ARGS,
      services: scenario.services.length,
      endpointsPerService: ENDPOINTS,
      initialSync: {
        ok: initial.ok,
        frontends: initial.frontends,
        backends: initial.backends,
        overLimit: initial.overLimit,
        cacheSyncedToMapsWrittenMs: initial.cacheSyncedToMapsWrittenMs,
        rssMiB: rss0,
      },
      observed: {
        seconds: Math.round(wallMs / 100) / 10,
        cpuPctOfOneCpu: Math.round((cpuMs * 1000) / wallMs) / 10,
        rssMiB: {
          atStart: rss0,
          min: Math.min(...samples.map((s) => s.rssMiB)),
          max: Math.max(...samples.map((s) => s.rssMiB)),
          atEnd: samples[samples.length - 1]?.rssMiB,
          ...idleRss(samples),
        },
        syncs,
        failedSyncs: failed,
        samples,
      },
      connect: Object.fromEntries(Object.entries(arms).map(([k, r]) => [k, { count: r.count, errors: r.errors, p50_us: r.p50_us, p99_us: r.p99_us }])),
      metrics: overLimit,
      healthz: { status: health.status, servicesOverLimit: healthBody.servicesOverLimit },
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } finally {
    await agent?.stop().catch(() => {});
    await api?.close().catch(() => {});
    await sandbox.teardown();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
