/**
 * `kpr service list -o json` timed against the agent's maps at the bench's
 * scale, as an operator runs it: bin/kpr (the CLI bundle) in a fresh
 * process, its output redirected to a file (`kpr service list -o json >
 * out.json`), wall time from spawn to exit. The CLI runs at the priority of
 * a program under test (bench/priority.ts). The last run's output is parsed
 * afterwards, off the clock, to check that every frontend was listed.
 */
import { closeSync, mkdtempSync, openSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Sandbox } from '../sandbox/netns.js';
import { cliBin } from '../sandbox/repo.js';
import { median, round } from './report.js';
import { timedRun } from './ruleset-load.js';

export interface ServiceListTiming {
  runsMs: number[];
  medianMs: number;
  /** Size of the JSON printed. */
  bytes: number;
  /** Frontends in it. */
  frontends: number;
}

/** One run with stdout to `outFile`; resolves with the wall time in ms. */
async function runOnce(args: string[], outFile: string, timeoutMs: number): Promise<number> {
  const fd = openSync(outFile, 'w');
  try {
    return await timedRun(cliBin, args, { stdoutFd: fd, timeoutMs }, `kpr ${args.join(' ')}`);
  } finally {
    closeSync(fd);
  }
}

/** `kpr service list -o json` `runs` times against the maps pinned in `bpffsDir`. */
export async function timeServiceList(sandbox: Sandbox, bpffsDir: string, runs: number, timeoutMs: number): Promise<ServiceListTiming> {
  const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-cli-`)));
  const outFile = path.join(dir, 'services.json');
  const args = ['service', 'list', '--bpffs', bpffsDir, '-o', 'json'];
  const runsMs: number[] = [];
  for (let i = 0; i < runs; i++) runsMs.push(round(await runOnce(args, outFile, timeoutMs)));
  const bytes = statSync(outFile).size;
  const views = JSON.parse(readFileSync(outFile, 'utf8')) as unknown[];
  return { runsMs, medianMs: round(median(runsMs)), bytes, frontends: views.length };
}
