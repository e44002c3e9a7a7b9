/**
 * Child cgroups of the run's, one per extra agent a benchmark starts (the
 * NodePort arms, the repeated cold starts): an agent's hooks attach to its
 * own cgroup, and each must be removed before the run's can be.
 */
import { existsSync, mkdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import type { Sandbox } from '../sandbox/netns.js';

const childCgroups = new Set<string>();
let exitHook = false;

/** Removes an empty cgroup directory, retrying while the kernel still releases it (up to ~2 s). */
export function removeCgroupDir(cg: string): void {
  for (let i = 0; i < 40 && existsSync(cg); i++) {
    try {
      rmdirSync(cg);
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
  if (!existsSync(cg)) childCgroups.delete(cg);
}

/** Creates cgroup `name` under the run's, removed on exit if the caller has not removed it. */
export function childCgroup(sandbox: Sandbox, name: string): string {
  const cg = path.join(sandbox.cgroupPath, name);
  mkdirSync(cg);
  childCgroups.add(cg);
  if (!exitHook) {
    exitHook = true;
    // Interrupted runs: the sandbox's own hook could not remove the run cgroup while this child existed.
    process.on('exit', () => {
      for (const c of [...childCgroups]) {
        removeCgroupDir(c);
        removeCgroupDir(path.dirname(c));
      }
    });
  }
  return cg;
}
