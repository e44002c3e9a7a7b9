/**
 * What the iptables and nftables sides of the benchmark share: running a
 * rules tool inside a throwaway namespace of the run's sandbox, bounded in
 * time and fed its input with back-pressure (timedRun also times the kpr
 * CLI), and the cold loads into fresh namespaces.
 */
import { spawn } from 'node:child_process';
import { ip, nsPath, type Sandbox } from '../sandbox/netns.js';
import { asUnderTest } from './priority.js';

/** A bounded step that ran out of time (the process was killed). */
export class NotFinishedError extends Error {
  constructor(
    readonly what: string,
    readonly limitMs: number,
  ) {
    super(`${what}: not finished within ${(limitMs / 1000).toFixed(0)} s`);
  }
}

/** What to report for a load that did not complete: "not finished within X s", or the failure's first line. */
export function loadFailure(err: unknown): string {
  return err instanceof NotFinishedError ? `not finished within ${(err.limitMs / 1000).toFixed(0)} s` : `failed: ${(err as Error).message.split('\n')[0]}`;
}

export interface TimedRun {
  /** Fed to stdin (one string or chunks); none: stdin is closed. */
  input?: string | Iterable<string>;
  /** Each chunk of stdout (otherwise ignored, or written to stdoutFd). */
  onStdout?: (chunk: string) => void;
  /** A file descriptor stdout goes to. */
  stdoutFd?: number;
  timeoutMs: number;
}

/** Runs `bin args` in namespace `ns`; resolves with its wall time in ms, rejects with NotFinishedError when it runs out of time. */
export function timedRunIn(ns: string, bin: string, args: string[], opts: TimedRun): Promise<number> {
  return timedRun('nsenter', [`--net=${nsPath(ns)}`, bin, ...args], opts, `${bin} ${args.join(' ')} in ${ns}`);
}

/** Runs `bin args` at the priority of a program under test; resolves with its wall time in ms, rejects with NotFinishedError when it runs out of time. */
export function timedRun(bin: string, args: string[], opts: TimedRun, what = `${bin} ${args.join(' ')}`): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const stdout = opts.onStdout ? 'pipe' : (opts.stdoutFd ?? 'ignore');
    const child = asUnderTest(spawn(bin, args, { stdio: [opts.input === undefined ? 'ignore' : 'pipe', stdout, 'pipe'] }));
    let err = '';
    let timedOut = false;
    child.stderr!.on('data', (d) => {
      if (err.length < 4000) err += d;
    });
    if (opts.onStdout) {
      child.stdout!.setEncoding('utf8');
      child.stdout!.on('data', opts.onStdout);
    }
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (timedOut) reject(new NotFinishedError(what, opts.timeoutMs));
      else if (code === 0) resolve(ms);
      else reject(new Error(`${what} failed (${signal ?? code}): ${err.trim().slice(0, 2000)}`));
    });
    const input = opts.input;
    if (input === undefined) return;
    const stdin = child.stdin!;
    stdin.on('error', () => {
      /* reported through close */
    });
    if (typeof input === 'string') {
      stdin.end(input);
      return;
    }
    const it = input[Symbol.iterator]();
    const pump = () => {
      for (;;) {
        const next = it.next();
        if (next.done) {
          stdin.end();
          return;
        }
        if (!stdin.write(next.value)) {
          stdin.once('drain', pump);
          return;
        }
      }
    };
    pump();
  });
}

/** Bytes and lines of a generated ruleset. */
export function inputSize(chunks: readonly string[]): { inputBytes: number; inputLines: number } {
  let inputBytes = 0;
  let inputLines = 0;
  for (const c of chunks) {
    inputBytes += Buffer.byteLength(c);
    for (let i = c.indexOf('\n'); i !== -1; i = c.indexOf('\n', i + 1)) inputLines++;
  }
  return { inputBytes, inputLines };
}

/** `repeats` cold loads, each into a fresh namespace named `prefix`N (the previous one removed); the last stays for the changes. */
export async function coldLoads(
  sandbox: Sandbox,
  prefix: string,
  repeats: number,
  load: (ns: string) => Promise<number>,
  log: (m: string) => void,
): Promise<{ coldMs: number[]; ns: string }> {
  const coldMs: number[] = [];
  let ns = '';
  for (let r = 0; r < repeats; r++) {
    if (ns) {
      try {
        ip('netns', 'del', ns);
      } catch {
        /* the sandbox retries at teardown */
      }
    }
    ns = sandbox.addNamespace(`${prefix}${r}`);
    const ms = await load(ns);
    coldMs.push(ms);
    log(`${prefix} cold load ${r + 1}/${repeats}: ${ms.toFixed(0)} ms`);
  }
  return { coldMs, ns };
}
