/**
 * Throwaway network namespaces and cgroups for tests, the demo and benchmarks.
 * Everything is named after one run id, lives under the run's own namespaces
 * and cgroup, and is removed by teardown() — which also runs on SIGINT/SIGTERM
 * and process exit, so a failing or interrupted run leaves nothing behind.
 * This is tooling, not the agent: it may call ip(8).
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { findCgroup2Mount } from '../agent/runtime/cgroup.js';

export function newRunId(prefix = 'kpr'): string {
  return `${prefix}${process.pid.toString(36)}${randomBytes(2).toString('hex')}`;
}

export function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/**
 * Runs ip(8) commands (each entry the arguments of one `ip` call) in one ip process, `ip -batch`,
 * in namespace `ns` (`ip -n`) or this process's one; `force` goes on past a failing command. A
 * process start costs ~0.4 s inside the kernel legs' emulated guests, and a topology is dozens of
 * commands.
 */
export function ipBatch(commands: string[][], ns?: string, force = false): void {
  if (commands.length === 0) return;
  const args = [...(force ? ['-force'] : []), ...(ns ? ['-n', ns] : []), '-batch', '-'];
  execFileSync('ip', args, { input: commands.map((c) => c.join(' ')).join('\n') + '\n', encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

export function nsPath(ns: string): string {
  return `/var/run/netns/${ns}`;
}

/** Runs a command inside a namespace, synchronously (setup steps). */
export function inNs(ns: string, cmd: string, ...args: string[]): string {
  return execFileSync('nsenter', [`--net=${nsPath(ns)}`, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

const live = new Set<Sandbox>();
let hooksInstalled = false;

function installExitHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  const cleanAll = () => {
    for (const s of live) s.teardownSync();
  };
  process.on('exit', cleanAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      cleanAll();
      process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1));
    });
  }
}

export interface SpawnInOptions extends SpawnOptions {
  /** Join the sandbox cgroup before entering the namespace (so the socket hooks apply). */
  inCgroup?: boolean;
}

/**
 * One run's namespaces, cgroup, bpffs directory and child processes.
 * Namespaces are created through add*; the sandbox remembers every one.
 */
export class Sandbox {
  readonly runId: string;
  readonly cgroupPath: string;
  readonly bpffsDir: string;
  private readonly namespaces: string[] = [];
  private readonly children = new Set<ChildProcess>();
  private readonly extraDirs: string[] = [];
  private tornDown = false;

  constructor(runId = newRunId()) {
    this.runId = runId;
    this.cgroupPath = path.join(findCgroup2Mount(), runId);
    this.bpffsDir = path.join('/sys/fs/bpf', runId);
    live.add(this);
    installExitHooks();
    mkdirSync(this.cgroupPath);
  }

  /** A namespace name scoped to this run. */
  nsName(role: string): string {
    return `${this.runId}-${role}`;
  }

  addNamespace(role: string): string {
    const ns = this.nsName(role);
    ip('netns', 'add', ns);
    this.namespaces.push(ns);
    inNs(ns, 'ip', 'link', 'set', 'lo', 'up');
    return ns;
  }

  /**
   * Creates the namespaces of `setup`'s roles (one ip process for all), then runs each one's ip(8)
   * commands, in `setup`'s order, lo brought up first, one ip process per namespace (ipBatch). A
   * namespace's commands may make veths whose peer goes into another namespace of the list
   * (`peer name eth0 netns <nsName(role)>`), configured by that one's later commands.
   */
  addNamespaces(setup: Array<[role: string, commands: string[][]]>): string[] {
    const names = setup.map(([role]) => this.nsName(role));
    ipBatch(names.map((ns) => ['netns', 'add', ns]));
    this.namespaces.push(...names);
    setup.forEach(([, commands], i) => ipBatch([['link', 'set', 'lo', 'up'], ...commands], names[i]));
    return names;
  }

  /** Remember a path to remove on teardown (kubeconfig dirs, etc.). */
  own(dir: string): string {
    this.extraDirs.push(dir);
    return dir;
  }

  /**
   * Spawns a process inside a namespace. With inCgroup, the process first
   * writes itself into the run's cgroup and only then enters the namespace
   * with nsenter: `ip netns exec` remounts /sys, which would hide cgroupfs.
   */
  spawnIn(ns: string, cmd: string, args: string[], opts: SpawnInOptions = {}): ChildProcess {
    const { inCgroup, ...spawnOpts } = opts;
    const nsenter = ['nsenter', `--net=${nsPath(ns)}`, cmd, ...args];
    const child = inCgroup
      ? spawn('sh', ['-c', `echo $$ > "$0/cgroup.procs" && exec "$@"`, this.cgroupPath, ...nsenter], spawnOpts)
      : spawn(nsenter[0], nsenter.slice(1), spawnOpts);
    this.track(child);
    return child;
  }

  track(child: ChildProcess): ChildProcess {
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  async teardown(): Promise<void> {
    const waits = [...this.children].map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once('exit', () => resolve());
          c.kill('SIGKILL');
        }),
    );
    await Promise.all(waits);
    this.teardownSync();
  }

  /** Synchronous so it can run from process 'exit' hooks. Idempotent. */
  teardownSync(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    live.delete(this);
    for (const c of this.children) {
      try {
        c.kill('SIGKILL');
      } catch {
        /* already gone */
      }
    }
    try {
      ipBatch(
        this.namespaces.reverse().map((ns) => ['netns', 'del', ns]),
        undefined,
        true,
      );
    } catch {
      /* some already gone (-force deleted the others) */
    }
    removeCgroup(this.cgroupPath);
    rmSync(this.bpffsDir, { recursive: true, force: true });
    for (const d of this.extraDirs) rmSync(d, { recursive: true, force: true });
  }
}

/** Moves stragglers out (killing them) and removes the cgroup; retries while the kernel frees it. */
function removeCgroup(cg: string): void {
  if (!existsSync(cg)) return;
  for (let attempt = 0; attempt < 50; attempt++) {
    try {
      const procs = readFileSync(path.join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      for (const pid of procs) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          /* gone */
        }
      }
      rmdirSync(cg);
      return;
    } catch {
      execFileSync('sleep', ['0.05']);
    }
  }
  // Last resort: leave a clear trace rather than throwing from an exit hook.
  try {
    writeFileSync(path.join(cg, 'cgroup.kill'), '1');
    rmdirSync(cg);
  } catch (err) {
    console.error(`kpr sandbox: could not remove cgroup ${cg}: ${(err as Error).message}`);
  }
}
