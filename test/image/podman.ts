/**
 * podman as the image test drives it inside a kernel-matrix guest: the
 * host's podman (Debian's, with crun and conmon), no systemd (cgroupfs
 * cgroup manager, no events journal), its own storage on the guest's tmpfs,
 * and the image read from a read-only image store that `podman load`
 * filled on the host before the guest booted (loading the image inside the
 * emulated guest took minutes; see test/image-e2e/run.ts).
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export class Podman {
  readonly env: NodeJS.ProcessEnv;
  readonly global = ['--cgroup-manager', 'cgroupfs', '--events-backend', 'none', '--log-level', 'error'];

  /** `dir`: podman's own state (tmpfs); `imageStore`: the read-only store holding the image. */
  constructor(
    readonly dir: string,
    readonly imageStore: string,
  ) {
    mkdirSync(dir, { recursive: true });
    const conf = path.join(dir, 'storage.conf');
    writeFileSync(
      conf,
      [
        '[storage]',
        'driver = "overlay"',
        `runroot = "${path.join(dir, 'run')}"`,
        `graphroot = "${path.join(dir, 'root')}"`,
        '[storage.options]',
        `additionalimagestores = ["${imageStore}"]`,
        '',
      ].join('\n'),
    );
    this.env = { ...process.env, CONTAINERS_STORAGE_CONF: conf, TMPDIR: path.join(dir, 'tmp') };
    mkdirSync(path.join(dir, 'tmp'), { recursive: true });
  }

  spawn(args: string[], opts: SpawnOptions = {}): ChildProcess {
    return spawn('podman', [...this.global, ...args], { env: this.env, stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  }

  /** Runs podman to its end (killed after timeoutMs). */
  run(args: string[], timeoutMs = 300_000): Promise<CommandResult> {
    return new Promise((resolve) => {
      const child = this.spawn(args);
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d) => (stdout += d));
      child.stderr!.on('data', (d) => (stderr += d));
      const timer = setTimeout(() => {
        stderr += `\n(podman ${args[0]} killed after ${timeoutMs} ms)`;
        child.kill('SIGKILL');
      }, timeoutMs);
      child.on('error', (err) => {
        clearTimeout(timer);
        resolve({ code: null, stdout, stderr: `${stderr}${err.message}` });
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  async mustRun(args: string[], timeoutMs?: number): Promise<string> {
    const r = await this.run(args, timeoutMs);
    if (r.code !== 0) throw new Error(`podman ${args.join(' ')}: exit ${r.code}: ${r.stderr.trim()}`);
    return r.stdout;
  }
}
