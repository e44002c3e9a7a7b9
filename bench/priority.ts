/**
 * CPU priority of the benchmark harness against the programs it measures.
 *
 * On the 2-CPU machines the benchmark runs on, the harness (the embedded API
 * server holding 10,000 Services, the log reader, their GC threads) shares
 * the CPUs with the program being timed. Reading the agent's
 * /proc/self/task/PID/schedstat around each change's sync showed the slowest
 * syncs spending most of their time runnable but waiting for a CPU (one of
 * 9.2 ms had 9.0 ms of run-queue wait). In a cluster the API server is not on
 * the node, so while the control plane is measured the harness runs at nice
 * HARNESS_NICE and every program under test, the kpr agent and kube-proxy's
 * iptables-restore alike, at nice 0: both sides get the same treatment, and
 * neither waits behind the harness.
 */
import type { ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import os from 'node:os';

export const HARNESS_NICE = 10;
export const UNDER_TEST_NICE = 0;

/**
 * This process's threads. Linux keeps a nice value per thread, and
 * setpriority on the process id moves only its main thread: the V8 worker
 * threads (the harness's concurrent marking, parallel scavenges and sweeping,
 * busy after kube-proxy's rulesets were generated) stayed at nice 0 beside
 * the program under test. A thread created later inherits its creator's.
 */
function threadIds(): number[] {
  try {
    return readdirSync('/proc/self/task')
      .map(Number)
      .filter((tid) => Number.isInteger(tid) && tid > 0);
  } catch {
    return [0];
  }
}

/** Runs `op` on a thread or process; false when it has exited meanwhile (ESRCH), any other error thrown. */
function unlessExited(op: () => void): boolean {
  try {
    op();
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

/** Lowers every thread of this process to HARNESS_NICE; returns the function that restores each one's previous priority (calling it again does nothing). */
export function deprioritizeHarness(): () => void {
  const before = new Map<number, number>();
  for (const tid of threadIds()) {
    let nice = 0;
    if (unlessExited(() => (nice = os.getPriority(tid))) && unlessExited(() => os.setPriority(tid, HARNESS_NICE))) before.set(tid, nice);
  }
  let restored = false;
  return () => {
    if (restored) return;
    restored = true;
    for (const [tid, nice] of before) unlessExited(() => os.setPriority(tid, nice));
  };
}

/**
 * Gives a program under test (spawned by the harness, so born at its nice)
 * UNDER_TEST_NICE. Raising a priority needs CAP_SYS_NICE: the benchmark runs
 * as root. A process that already exited is left alone.
 */
export function asUnderTest<T extends ChildProcess>(child: T): T {
  if (child.pid !== undefined && os.getPriority() !== UNDER_TEST_NICE) {
    const pid = child.pid;
    unlessExited(() => os.setPriority(pid, UNDER_TEST_NICE));
  }
  return child;
}
