/**
 * One first sync in a fresh node process (bench/cold-sync.ts --child): what
 * the cold-path tools and `make bench` time, with V8's compilers cold and
 * the node flags of that build's bin/kpr-agent. The child runs at the priority of a program under
 * test (bench/priority.ts), whatever the harness's.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBenchChild } from './bench-child.js';

export const COLD_SYNC_MODES = ['full', 'plan', 'reconcile', 'floor'] as const;
export type ColdSyncMode = (typeof COLD_SYNC_MODES)[number];

export interface ColdSyncChildResult {
  ms: number;
  /**
   * CPU time of the child's threads (the batch writer's included) during
   * the sync, ms: on a machine shared with other work, wall time also
   * counts the waits for a CPU, this does not.
   */
  cpuMs: number;
  /** Heap in use after the sync (no GC forced), MiB. */
  heapMiB: number;
  /**
   * Pages the child faulted in during the sync: on a VM whose host backs a
   * page only at its first touch (this machine: ~12 µs a page) these are
   * what a cold sync pays beyond its CPU work.
   */
  minorFaults: number;
  /** Node free memory taken during the sync, MiB (the kernel's allocations included; other processes add noise). */
  freshMiB: number;
  frontends: number;
  backends: number;
}

const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'cold-sync.js');
const CHILD_TIMEOUT_MS = 120_000;

/** Runs `mode` on the build whose dist/ is `root`; rejects with the child's output when it fails. */
export function runColdSyncChild(root: string, mode: ColdSyncMode, services: number, endpoints: number): Promise<ColdSyncChildResult> {
  const args = ['--child', '--dist', root, '--modes', mode, '--services', String(services), '--endpoints', String(endpoints)];
  return runBenchChild(`cold-sync child (${mode}, ${root})`, root, script, args, CHILD_TIMEOUT_MS);
}
