/**
 * A clean-up is a list of steps; each step first says what it would remove
 * (plan) and then removes exactly that (apply). `--dry-run` stops after the
 * plans. Steps are idempotent: a second run finds nothing and removes nothing.
 */
export interface CleanupItem {
  /** What kind of thing: 'iptables-chain', 'iptables-rule', 'nft-table', 'bpf-link', 'bpf-map', … */
  kind: string;
  /** Human-readable, unique within a run: what and where. */
  what: string;
}

export interface CleanupStep {
  /** Short name of the step, e.g. "iptables-nft (IPv4)". */
  name: string;
  items: CleanupItem[];
  /** A note to show even when there is nothing to remove ("ipvsadm is not installed: IPVS not checked"). */
  note?: string;
  /** Removes the items. Only called when items is non-empty and not a dry run. */
  apply(): void;
}

export interface CleanupReport {
  dryRun: boolean;
  steps: Array<{ name: string; note?: string; items: CleanupItem[]; error?: string }>;
  /** Items removed (or, in a dry run, that would be). */
  total: number;
  ok: boolean;
}

/** Runs (or, with dryRun, only lists) the steps; one failing step does not stop the others. */
export function runCleanup(steps: CleanupStep[], dryRun: boolean): CleanupReport {
  const report: CleanupReport = { dryRun, steps: [], total: 0, ok: true };
  for (const step of steps) {
    const entry: CleanupReport['steps'][number] = { name: step.name, items: step.items };
    if (step.note) entry.note = step.note;
    if (!dryRun && step.items.length > 0) {
      try {
        step.apply();
      } catch (err) {
        entry.error = (err as Error).message;
        report.ok = false;
      }
    }
    if (!entry.error) report.total += step.items.length;
    report.steps.push(entry);
  }
  return report;
}

export function formatCleanupReport(report: CleanupReport): string {
  const verb = report.dryRun ? 'would remove' : 'removed';
  const out: string[] = [];
  for (const s of report.steps) {
    if (s.note) out.push(`${s.name}: ${s.note}`);
    for (const item of s.items) out.push(`${s.error ? 'FAILED to remove' : verb}: ${s.name}: ${item.kind} ${item.what}`);
    if (s.error) out.push(`${s.name}: error: ${s.error}`);
  }
  if (report.total === 0 && report.ok) out.push('nothing to remove');
  else out.push(`${report.dryRun ? 'would remove' : 'removed'} ${report.total} item(s)${report.ok ? '' : '; some steps failed (see above)'}`);
  return out.join('\n') + '\n';
}
