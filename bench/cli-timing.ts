/**
 * `kpr service list -o json` timed against the agent's maps at the bench's
 * scale, as an operator runs it: bin/kpr (the CLI bundle) in a fresh
 * process, its output redirected to a file (`kpr service list -o json >
 * out.json`), wall time from spawn to exit. The CLI runs at the priority of
 * a program under test (bench/priority.ts). The last run's output is parsed
 * afterwards, off the clock, to check that every frontend was listed.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Sandbox } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import { asUnderTest } from './priority.js';
import { median, round } from './report.js';

export interface ServiceListTiming {
  runsMs: number[];
  medianMs: number;
  /** Size of the JSON printed. */
  bytes: number;
  /** Frontends in it. */
  frontends: number;
}

const KPR_CLI = path.join(repoRoot, 'bin', 'kpr');

/** One run with stdout to `outFile`; resolves with the wall time in ms. */
function runOnce(sandbox: Sandbox, args: string[], outFile: string, timeoutMs: number): Promise<number> {
  const out = openSync(outFile, 'w');
  const t0 = process.hrtime.bigint();
  const child = asUnderTest(sandbox.track(spawn(KPR_CLI, args, { stdio: ['ignore', out, 'pipe'] })));
  closeSync(out);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (code === 0) resolve(ms);
      else reject(new Error(`kpr ${args.join(' ')} ${signal === 'SIGKILL' ? `not finished within ${timeoutMs / 1000} s` : `failed (${signal ?? `exit ${code}`})`}: ${err.trim().split('\n').slice(-3).join(' / ')}`));
    });
  });
}

/** `kpr service list -o json` `runs` times against the maps pinned in `bpffsDir`. */
export async function timeServiceList(sandbox: Sandbox, bpffsDir: string, runs: number, timeoutMs: number): Promise<ServiceListTiming> {
  const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-cli-`)));
  const outFile = path.join(dir, 'services.json');
  const args = ['service', 'list', '--bpffs', bpffsDir, '-o', 'json'];
  const runsMs: number[] = [];
  for (let i = 0; i < runs; i++) runsMs.push(round(await runOnce(sandbox, args, outFile, timeoutMs)));
  const bytes = statSync(outFile).size;
  const views = JSON.parse(readFileSync(outFile, 'utf8')) as unknown[];
  return { runsMs, medianMs: round(median(runsMs)), bytes, frontends: views.length };
}
