/**
 * `kpr cleanup` and `kpr cleanup-kube-proxy`: remove what kpr, or kube-proxy,
 * left on this node. Both list before they remove, and `--dry-run` stops there.
 */
import { kprCleanupSteps } from '../cleanup/kpr-state.js';
import { kubeProxyCleanupSteps } from '../cleanup/kube-proxy.js';
import { formatCleanupReport, runCleanup } from '../cleanup/types.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';

export function cleanupCommand(command: 'cleanup' | 'cleanup-kube-proxy', argv: string[]): string {
  const { values } = parseCommand(commandSpec(command), argv);
  const dryRun = values['dry-run'] === true;
  const steps =
    command === 'cleanup'
      ? kprCleanupSteps(values.bpffs as string, { netns: (values.netns as string | undefined) || undefined })
      : kubeProxyCleanupSteps({ ipvsFlush: values['ipvs-flush'] === true });
  const report = runCleanup(steps, dryRun);
  if (!report.ok) process.exitCode = 1;
  return values.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatCleanupReport(report);
}
