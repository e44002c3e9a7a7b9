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

/** Something a step found and leaves in place, with why (another owner's chain, a set still in use, …). */
export interface KeptItem extends CleanupItem {
  reason: string;
}

export interface CleanupStep {
  /** Short name of the step, e.g. "iptables-nft (IPv4)". */
  name: string;
  items: CleanupItem[];
  /** A note to show even when there is nothing to remove ("ipvsadm is not installed: IPVS not checked"). */
  note?: string;
  /** What the step leaves, and why; listed by the dry run and the real run alike. */
  kept?: KeptItem[];
  /** The step could not even be planned (a tool failed): nothing of it is removed. */
  error?: string;
  /** Removes the items. Only called when items is non-empty and not a dry run. */
  apply(): void;
}

export interface CleanupReport {
  dryRun: boolean;
  steps: Array<{ name: string; note?: string; items: CleanupItem[]; kept: KeptItem[]; error?: string }>;
  /** Items removed (or, in a dry run, that would be). */
  total: number;
  /** Items kept. */
  kept: number;
  ok: boolean;
}

/** Runs (or, with dryRun, only lists) the steps; one failing step does not stop the others. */
export function runCleanup(steps: CleanupStep[], dryRun: boolean): CleanupReport {
  const report: CleanupReport = { dryRun, steps: [], total: 0, kept: 0, ok: true };
  for (const step of steps) {
    const entry: CleanupReport['steps'][number] = { name: step.name, items: step.items, kept: step.kept ?? [] };
    if (step.note) entry.note = step.note;
    report.kept += entry.kept.length;
    if (step.error) {
      entry.error = step.error;
      report.ok = false;
    } else if (!dryRun && step.items.length > 0) {
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
  const keepVerb = report.dryRun ? 'would keep' : 'kept';
  const out: string[] = [];
  for (const s of report.steps) {
    if (s.note) out.push(`${s.name}: ${s.note}`);
    for (const item of s.items) out.push(`${s.error ? 'FAILED to remove' : verb}: ${s.name}: ${item.kind} ${item.what}`);
    for (const item of s.kept) out.push(`${keepVerb}: ${s.name}: ${item.kind} ${item.what}: ${item.reason}`);
    if (s.error) out.push(`${s.name}: error: ${s.error}`);
  }
  const keptNote = report.kept > 0 ? `; ${report.kept} ${report.dryRun ? 'would be kept' : 'kept'} (see above)` : '';
  if (report.total === 0 && report.ok) out.push(`nothing to remove${keptNote}`);
  else out.push(`${verb} ${report.total} item(s)${keptNote}${report.ok ? '' : '; some steps failed (see above)'}`);
  return out.join('\n') + '\n';
}
