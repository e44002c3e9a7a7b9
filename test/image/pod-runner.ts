/**
 * The kubelet's part for one pod, over podman: prepares the volumes on the
 * node as their types say, runs the init containers one after the other to
 * completion (a failed one stops the pod), then starts the containers
 * attached (their output is the pod's log), runs their probes
 * (probes.ts), and kills, stops, restarts (a new container, as the kubelet
 * does: init containers do not run again) and execs into them.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { trackAgentLogs, type AgentProcess } from '../../sandbox/agent-logs.js';
import { podmanRunArgs, type ContainerPlan, type PodPlan, type VolumePrep } from './pod-to-podman.js';
import { ContainerProbes } from './probes.js';
import type { CommandResult, Podman } from './podman.js';

/** Prepares one volume on the node, with the kubelet's hostPath type checks. */
export function prepareVolume(v: VolumePrep): void {
  if (v.kind === 'files') {
    mkdirSync(v.dir, { recursive: true });
    for (const f of v.files) {
      const file = path.join(v.dir, f.path);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, f.content);
      chmodSync(file, f.mode);
    }
    return;
  }
  if (v.kind === 'emptyDir') {
    mkdirSync(v.dir, { recursive: true });
    return;
  }
  const st = existsSync(v.path) ? statSync(v.path) : undefined;
  const fail = (why: string) => {
    throw new Error(`hostPath volume ${v.volume} (${v.path}, type ${v.type}): ${why}: the kubelet does not start the pod`);
  };
  switch (v.type) {
    case '':
      return;
    case 'DirectoryOrCreate':
      if (!st) mkdirSync(v.path, { recursive: true, mode: 0o755 });
      else if (!st.isDirectory()) fail('exists and is not a directory');
      return;
    case 'Directory':
      if (!st?.isDirectory()) fail('no such directory');
      return;
    case 'FileOrCreate':
      if (!st) {
        if (!existsSync(path.dirname(v.path))) fail('its parent directory does not exist (FileOrCreate does not create it)');
        writeFileSync(v.path, '', { mode: 0o644 });
      } else if (!st.isFile()) fail('exists and is not a file');
      return;
    case 'File':
      if (!st?.isFile()) fail('no such file');
      return;
    case 'Socket':
      if (!st?.isSocket()) fail('no such socket');
      return;
    case 'CharDevice':
      if (!st?.isCharacterDevice()) fail('no such character device');
      return;
    case 'BlockDevice':
      if (!st?.isBlockDevice()) fail('no such block device');
      return;
  }
}

export interface InitResult extends CommandResult {
  name: string;
}

export class RunningContainer {
  readonly logs: AgentProcess;
  readonly probes: ContainerProbes;
  stdout = '';
  exitCode: number | null | undefined;
  /** When podman was asked, when the container's process ran, when it was ready (ms since the epoch). */
  readonly times: { run: number; process?: number; ready?: number } = { run: Date.now() };
  readonly exited: Promise<number | null>;

  constructor(
    readonly plan: ContainerPlan,
    readonly runtimeName: string,
    private readonly podman: Podman,
    private readonly pidFile: string,
    child: import('node:child_process').ChildProcess,
  ) {
    this.logs = trackAgentLogs(runtimeName, child);
    child.stdout!.on('data', (d) => (this.stdout += d));
    this.exited = once(child, 'exit').then(([code]) => {
      this.exitCode = code as number | null;
      this.probes.stop();
      return code as number | null;
    });
    this.probes = new ContainerProbes(plan.probes, (command, timeoutMs) => this.exec(command, timeoutMs).then((r) => r.code ?? -1));
  }

  get child() {
    return this.logs.child;
  }

  /** Why the container is not running any more, or undefined while it runs. */
  gone(): string | undefined {
    return this.exitCode === undefined ? undefined : `the container exited (${this.exitCode}); its last log lines: ${JSON.stringify(this.logs.logs.slice(-6))}`;
  }

  /** Resolves once started (startup probe) and ready (readiness probe); rejects when a probe gives up or the container exits. */
  async waitReady(deadlineMs: number): Promise<void> {
    await this.probes.waitReady(deadlineMs, () => this.gone());
    this.times.ready ??= Date.now();
  }

  /** "podman run → process 21.3 s → ready 14.2 s", for a step's log. */
  timeline(): string {
    const s = (a: number | undefined, b: number | undefined) => (a && b ? `${((b - a) / 1000).toFixed(1)} s` : '?');
    return `${this.runtimeName}: podman run → process ${s(this.times.run, this.times.process)} → ready ${s(this.times.process, this.times.ready)}`;
  }

  /** The container's first process, as the node sees it (podman's --pidfile). */
  async pid(timeoutMs = 120_000): Promise<number> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      if (existsSync(this.pidFile)) {
        const pid = Number(readFileSync(this.pidFile, 'utf8').trim());
        if (pid > 0) {
          this.times.process ??= Date.now();
          return pid;
        }
      }
      if (this.exitCode !== undefined) throw new Error(`${this.runtimeName}: ${this.gone()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`${this.runtimeName}: no pid file after ${timeoutMs} ms`);
  }

  /** `kubectl exec`: a command in the running container. */
  exec(command: string[], timeoutMs = 180_000): Promise<CommandResult> {
    return this.podman.run(['exec', this.runtimeName, ...command], timeoutMs);
  }

  /** The runtime kills the container (SIGKILL unless told): a crash, an OOM kill. */
  async kill(signal = 'KILL'): Promise<number | null> {
    const r = await this.podman.run(['kill', '--signal', signal, this.runtimeName]);
    if (r.code !== 0 && this.exitCode === undefined) throw new Error(`podman kill ${this.runtimeName}: ${r.stderr}`);
    return this.exited;
  }

  /**
   * The kubelet's stop: SIGTERM, SIGKILL after the grace period. A container
   * podman is still creating (a restart under way) is stopped once it exists.
   */
  async stop(graceSeconds: number, timeoutMs = 300_000): Promise<number | null> {
    this.probes.stop();
    const end = Date.now() + timeoutMs;
    while (this.exitCode === undefined) {
      const r = await this.podman.run(['stop', '--time', String(graceSeconds), this.runtimeName], (graceSeconds + 180) * 1000);
      if (r.code === 0 || this.exitCode !== undefined) break;
      const last = r.stderr.trim();
      if (Date.now() > end) throw new Error(`podman stop ${this.runtimeName}: ${last}`);
      await new Promise((res) => setTimeout(res, 1000));
    }
    return this.exited;
  }
}

/** One pod on this node. */
export class PodRun {
  readonly containers = new Map<string, RunningContainer>();
  readonly initResults: InitResult[] = [];
  private attempts = new Map<string, number>();

  constructor(
    readonly plan: PodPlan,
    readonly name: string,
    private readonly podman: Podman,
    private readonly runDir: string,
  ) {
    mkdirSync(runDir, { recursive: true });
  }

  prepareVolumes(): void {
    for (const v of this.plan.volumes) prepareVolume(v);
  }

  private runtimeName(container: string): string {
    const n = (this.attempts.get(container) ?? -1) + 1;
    this.attempts.set(container, n);
    return `${this.name}_${container}_${n}`.replace(/[^a-zA-Z0-9_.-]/g, '-');
  }

  /** Every init container in order, each to its end; the first non-zero exit throws with its output. */
  async runInitContainers(timeoutMs = 600_000): Promise<InitResult[]> {
    for (const c of this.plan.initContainers) {
      const r = await this.podman.run(podmanRunArgs(c, this.runtimeName(c.name), ['--rm']), timeoutMs);
      const result = { name: c.name, ...r };
      this.initResults.push(result);
      if (r.code !== 0)
        throw new Error(`init container ${c.name} exited ${r.code}: the pod does not start. stdout: ${r.stdout.trim()} stderr: ${r.stderr.trim()}`);
    }
    return this.initResults;
  }

  /** Starts (or restarts: a new container) one container, attached; its probes start with it. */
  startContainer(name: string): RunningContainer {
    const plan = this.plan.containers.find((c) => c.name === name);
    if (!plan) throw new Error(`pod ${this.name} has no container ${name}`);
    const runtimeName = this.runtimeName(name);
    const pidFile = path.join(this.runDir, `${runtimeName}.pid`);
    const child = this.podman.spawn(podmanRunArgs(plan, runtimeName, ['--rm', '--pidfile', pidFile]));
    const c = new RunningContainer(plan, runtimeName, this.podman, pidFile, child);
    this.containers.set(name, c);
    // The kubelet starts probing once the runtime reports the container started.
    void c.pid().then(
      () => c.probes.start(),
      () => c.probes.notify(),
    );
    void c.exited.then(() => c.probes.notify());
    return c;
  }

  /** Starts every container of the pod (after the init containers). */
  startAll(): RunningContainer[] {
    return this.plan.containers.map((c) => this.startContainer(c.name));
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.containers.values()].map((c) => c.stop(this.plan.terminationGracePeriodSeconds)));
  }
}
