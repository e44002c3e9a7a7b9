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
import os from 'node:os';

export const HARNESS_NICE = 10;
export const UNDER_TEST_NICE = 0;

/** Lowers this process's priority to HARNESS_NICE; returns the function that restores the previous one (calling it again does nothing). */
export function deprioritizeHarness(): () => void {
  const before = os.getPriority();
  os.setPriority(HARNESS_NICE);
  let restored = false;
  return () => {
    if (restored) return;
    restored = true;
    os.setPriority(before);
  };
}

/**
 * Gives a program under test (spawned by the harness, so born at its nice)
 * UNDER_TEST_NICE. Raising a priority needs CAP_SYS_NICE: the benchmark runs
 * as root. A process that already exited is left alone.
 */
export function asUnderTest<T extends ChildProcess>(child: T): T {
  if (child.pid !== undefined && os.getPriority() !== UNDER_TEST_NICE) {
    try {
      os.setPriority(child.pid, UNDER_TEST_NICE);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  }
  return child;
}
