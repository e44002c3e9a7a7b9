/**
 * The data-plane benchmark: a 1-byte TCP echo server in a pod namespace and
 * bench/connload.c (compiled with cc -O2 into build/) in the node namespace
 * and the run's cgroup, so kpr's socket hooks apply. Runs alternate between
 * the ClusterIP (translated by kpr at connect) and the pod IP directly.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { inNs, type Sandbox } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import { addPod, createNode, type NodeTopology } from '../sandbox/topology.js';
import { ECHO_PORT, POD_IP } from './scenario.js';
import { withCountersOff, type CounterSwitch } from './counter-switch.js';
import { withMonitorOn } from './monitor-reader.js';

const buildDir = path.join(repoRoot, 'build');
export const connloadBin = path.join(buildDir, 'connload');
export const echoServerBin = path.join(buildDir, 'echo-server');

/** $CC, else cc, else clang (which the Makefile installs for the BPF object anyway). */
function cCompiler(): string {
  if (process.env.CC) return process.env.CC;
  for (const c of ['cc', 'clang']) {
    try {
      execFileSync('sh', ['-c', `command -v ${c}`], { stdio: 'ignore' });
      return c;
    } catch {
      /* next */
    }
  }
  throw new Error('no C compiler found (set CC, or install gcc or clang)');
}

/** Compiles the C helpers when missing or older than their source. */
export function buildHelpers(): void {
  mkdirSync(buildDir, { recursive: true });
  for (const [src, out] of [
    ['connload.c', connloadBin],
    ['echo-server.c', echoServerBin],
  ] as const) {
    const srcPath = path.join(repoRoot, 'bench', src);
    if (existsSync(out) && statSync(out).mtimeMs >= statSync(srcPath).mtimeMs) continue;
    execFileSync(cCompiler(), ['-O2', '-Wall', '-o', out, srcPath], { stdio: 'inherit' });
  }
}

export interface ConnResult {
  count: number;
  errors: number;
  p50_us: number;
  p99_us: number;
  mean_us: number;
  conns_per_sec: number;
  elapsed_ms: number;
  first_error: string;
  /** A round with kpr monitor on (bench/monitor-reader.ts): records its reader took, events the ring lost. */
  monitor_events?: number;
  monitor_lost?: number;
}

/** connload's round with kpr monitor on and a reader draining, the reader's counts added to its result. */
export async function withMonitorRound(bpffsDir: string, round: () => Promise<ConnResult>): Promise<ConnResult> {
  const m = await withMonitorOn(bpffsDir, round);
  return { ...m.result, monitor_events: m.events, monitor_lost: m.lost };
}

export interface DataplaneEnv {
  topo: NodeTopology;
  podIp: string;
}

/** Starts bench/echo-server.c in a namespace on 0.0.0.0:port and waits for its "ready". */
export async function startEchoServer(sandbox: Sandbox, ns: string, port: number): Promise<ChildProcess> {
  const echo = sandbox.spawnIn(ns, echoServerBin, ['0.0.0.0', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const t = setTimeout(() => reject(new Error(`echo-server in ${ns}: not ready after 5 s`)), 5000);
    echo.stdout!.on('data', (d) => {
      out += d;
      if (out.includes('ready')) {
        clearTimeout(t);
        resolve();
      }
    });
    echo.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`echo-server in ${ns} exited ${code}`));
    });
  });
  return echo;
}

/** Node namespace + one pod running the C echo server on ECHO_PORT. */
export async function setupDataplane(sandbox: Sandbox): Promise<DataplaneEnv> {
  const topo = createNode(sandbox);
  // Per-namespace TCP settings of the throwaway node namespace: a wide
  // ephemeral range and TIME_WAIT reuse, so tens of thousands of sequential
  // connections never run out of ports.
  inNs(topo.nodeNs, 'sysctl', '-q', '-w', 'net.ipv4.ip_local_port_range=1024 65000');
  inNs(topo.nodeNs, 'sysctl', '-q', '-w', 'net.ipv4.tcp_tw_reuse=1');
  const pod = await addPod(sandbox, topo, 'pod-a', POD_IP);
  await startEchoServer(sandbox, pod.ns, ECHO_PORT);
  return { topo, podIp: POD_IP };
}

/** What a monitor round's reader saw, for the progress lines; "" for other rounds. */
export function monitorNote(r: ConnResult): string {
  return r.monitor_events === undefined ? '' : `  monitor: ${r.monitor_events} events read, ${r.monitor_lost} lost`;
}

/** One connload run in any namespace of the sandbox; `inCgroup` puts it under kpr's socket hooks. */
export async function connloadIn(
  sandbox: Sandbox,
  ns: string,
  target: string,
  port: number,
  count: number,
  limitMs: number,
  inCgroup: boolean,
  warmup = 200,
): Promise<ConnResult> {
  const child = sandbox.spawnIn(ns, connloadBin, [target, String(port), String(count), String(limitMs), String(warmup)], {
    inCgroup,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const kill = setTimeout(() => child.kill('SIGKILL'), limitMs + 15_000);
  // 'close', not 'exit': only then has all of stdout been read.
  const [code] = await once(child, 'close');
  clearTimeout(kill);
  if (code !== 0) throw new Error(`connload ${target}:${port} in ${ns} exited ${code}: ${err}`);
  return JSON.parse(out) as ConnResult;
}

/** One connload run in the node namespace; `inCgroup` puts it under kpr's hooks. */
export function connload(
  sandbox: Sandbox,
  env: DataplaneEnv,
  target: string,
  port: number,
  count: number,
  limitMs: number,
  inCgroup = true,
  warmup = 200,
): Promise<ConnResult> {
  return connloadIn(sandbox, env.topo.nodeNs, target, port, count, limitMs, inCgroup, warmup);
}

/** Waits until a ClusterIP answers through kpr (the agent's hooks and maps are live). */
export async function waitReachable(sandbox: Sandbox, env: DataplaneEnv, ip: string, port: number, timeoutMs = 10_000): Promise<ConnResult> {
  const end = Date.now() + timeoutMs;
  let last: ConnResult | undefined;
  while (Date.now() < end) {
    last = await connload(sandbox, env, ip, port, 20, 3000, true, 0);
    if (last.errors === 0 && last.count === 20) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${ip}:${port} not reachable through kpr after ${timeoutMs} ms: ${JSON.stringify(last)}`);
}

/**
 * clusterip-nocounters: the ClusterIP with the per-Service counters off (counter-switch.ts), beside the same with them on;
 * clusterip-monitor: with kpr monitor on and a reader draining its ring (monitor-reader.ts), beside the same off.
 */
export type Arm = 'clusterip' | 'clusterip-nocounters' | 'clusterip-monitor' | 'direct' | 'direct-nohook';

export interface DataplaneRounds {
  rounds: Record<Arm, ConnResult[]>;
}

/**
 * `rounds` rounds of each arm, alternating the order (ABC, CBA, ...) so drift
 * on a shared machine hits all arms alike. 'direct-nohook' runs outside the
 * sandbox cgroup (no kpr hook at all) as a reference for the hook's own cost.
 */
export async function dataplaneRounds(
  sandbox: Sandbox,
  env: DataplaneEnv,
  clusterIP: { ip: string; port: number } | undefined,
  rounds: number,
  count: number,
  limitMs: number,
  log: (m: string) => void,
  counters?: CounterSwitch,
  monitorBpffs?: string,
): Promise<DataplaneRounds> {
  const res: Record<Arm, ConnResult[]> = { clusterip: [], 'clusterip-nocounters': [], 'clusterip-monitor': [], direct: [], 'direct-nohook': [] };
  const arms: Arm[] = clusterIP
    ? [
        'clusterip',
        ...(counters ? (['clusterip-nocounters'] as Arm[]) : []),
        ...(monitorBpffs ? (['clusterip-monitor'] as Arm[]) : []),
        'direct',
        'direct-nohook',
      ]
    : ['direct', 'direct-nohook'];
  const run = async (arm: Arm): Promise<ConnResult> => {
    if (arm === 'direct' || arm === 'direct-nohook') return connload(sandbox, env, env.podIp, ECHO_PORT, count, limitMs, arm === 'direct');
    const viaClusterIp = () => connload(sandbox, env, clusterIP!.ip, clusterIP!.port, count, limitMs, true);
    if (arm === 'clusterip') return viaClusterIp();
    if (arm === 'clusterip-monitor') return withMonitorRound(monitorBpffs!, viaClusterIp);
    return withCountersOff(counters!, viaClusterIp, log);
  };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? arms : [...arms].reverse();
    for (const arm of order) {
      const r1 = await run(arm);
      res[arm].push(r1);
      log(
        `  round ${r + 1}/${rounds} ${arm.padEnd(17)} ${r1.count} ok ${r1.errors} err  p50 ${r1.p50_us} us  p99 ${r1.p99_us} us  ${r1.conns_per_sec}/s${monitorNote(r1)}`,
      );
    }
  }
  return { rounds: res };
}
