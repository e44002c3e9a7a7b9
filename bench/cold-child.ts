/**
 * One first sync in a fresh node process (bench/cold-sync.ts --child): what
 * the cold-path tools and `make bench` time, with V8's compilers cold and
 * the node flags of that build's bin/kpr-agent. The child runs at the priority of a program under
 * test (bench/priority.ts), whatever the harness's.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { agentNodeFlags } from './agent-flags.js';
import { asUnderTest } from './priority.js';

export const COLD_SYNC_MODES = ['full', 'plan', 'reconcile', 'floor'] as const;
export type ColdSyncMode = (typeof COLD_SYNC_MODES)[number];

export interface ColdSyncChildResult {
  ms: number;
  /** Heap in use after the sync (no GC forced), MiB. */
  heapMiB: number;
  frontends: number;
  backends: number;
}

const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'cold-sync.js');
const CHILD_TIMEOUT_MS = 120_000;

/** Runs `mode` on the build whose dist/ is `root`; rejects with the child's output when it fails. */
export function runColdSyncChild(root: string, mode: ColdSyncMode, services: number, endpoints: number): Promise<ColdSyncChildResult> {
  const args = [...agentNodeFlags(root), script, '--child', '--dist', root, '--modes', mode, '--services', String(services), '--endpoints', String(endpoints)];
  return new Promise((resolve, reject) => {
    const child = asUnderTest(spawn(process.execPath, args, { env: { ...process.env, MALLOC_ARENA_MAX: '1' }, stdio: ['ignore', 'pipe', 'pipe'] }));
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`cold-sync child (${mode}, ${root}) failed (${signal ?? `exit ${code}`}): ${err || out}`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop()!) as ColdSyncChildResult);
      } catch {
        reject(new Error(`cold-sync child (${mode}, ${root}) printed no result: ${out}`));
      }
    });
  });
}
