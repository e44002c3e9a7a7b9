/**
 * Waits for the machine to go quiet before kpr's control plane is timed.
 * At 100,000 Services the kube-proxy cold loads before it run out of their
 * bound, and the machine stayed busy for a minute or two after (load average
 * 3.7-4.1 on the 2 CPUs, the cold path's floor timed at 3.6, 3.0 and then 1.8 s
 * against 1.3 s on a quiet machine): whatever the cause (the harness's GC of
 * the generated rulesets, the kernel's clean-up), kpr's figures would carry it.
 */
import { readFileSync } from 'node:fs';

/** Idle and total jiffies of all CPUs (/proc/stat's first line). */
function cpuTimes(): { idle: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal
  const idle = fields[3]! + (fields[4] ?? 0);
  return { idle, total: fields.slice(0, 8).reduce((a, b) => a + b, 0) };
}

export interface Settled {
  /** How long it waited, ms. */
  waitedMs: number;
  /** The idle share of the CPUs over the last window. */
  idle: number;
  /** False when maxMs ran out first. */
  quiet: boolean;
}

/** Resolves once the CPUs were at least `idleShare` idle over a window of `windowMs`, or after `maxMs`. */
export async function waitForQuiet(idleShare = 0.85, windowMs = 2000, maxMs = 120_000): Promise<Settled> {
  const t0 = Date.now();
  let idle: number;
  for (;;) {
    const a = cpuTimes();
    await new Promise((r) => setTimeout(r, windowMs));
    const b = cpuTimes();
    idle = b.total > a.total ? (b.idle - a.idle) / (b.total - a.total) : 1;
    const waitedMs = Date.now() - t0;
    if (idle >= idleShare) return { waitedMs, idle, quiet: true };
    if (waitedMs >= maxMs) return { waitedMs, idle, quiet: false };
  }
}
