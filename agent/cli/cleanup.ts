/**
 * `kpr cleanup` and `kpr cleanup-kube-proxy`: remove what kpr, or kube-proxy,
 * left on this node. Both list before they remove, and `--dry-run` stops there.
 */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { kprCleanupSteps } from '../cleanup/kpr-state.js';
import { kubeProxyCleanupSteps } from '../cleanup/kube-proxy.js';
import { formatCleanupReport, runCleanup } from '../cleanup/types.js';
import { CliError } from './pinned-maps.js';

const KPR_CLEANUP_USAGE = `  cleanup [--bpffs PATH] [--netns PATH] [--dry-run]
                          remove everything kpr put on this node: detach and unpin its links, remove its clsact
                          filters (kpr's handle/priority only; the qdisc stays), unpin its maps, remove its bpffs
                          directory (stop the agent first); --netns as the agent's`;
const KUBE_PROXY_CLEANUP_USAGE = `  cleanup-kube-proxy [--dry-run] [--ipvs-flush] [-o table|json]
                          remove kube-proxy's leftovers in this network namespace, by kube-proxy's own names:
                          its iptables chains and its jumps to them from the built-in chains (iptables-nft and
                          -legacy, IPv4/IPv6), nftables tables ip/ip6 kube-proxy, IPVS virtual servers on kube-ipvs0
                          (all with --ipvs-flush), kube-ipvs0, the IPVS mode's ipsets; lists what it keeps and why
                          (kubelet's and kube-router's chains, other tables and sets)`;
export const CLEANUP_USAGE = `${KPR_CLEANUP_USAGE}\n${KUBE_PROXY_CLEANUP_USAGE}`;

export function cleanupCommand(command: 'cleanup' | 'cleanup-kube-proxy', argv: string[]): string {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      netns: { type: 'string' },
      'dry-run': { type: 'boolean', default: false },
      'ipvs-flush': { type: 'boolean', default: false },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return `Usage: kpr\n${command === 'cleanup' ? KPR_CLEANUP_USAGE : KUBE_PROXY_CLEANUP_USAGE}\n`;
  if (positionals.length > 0) throw new CliError(`${command}: unexpected argument "${positionals[0]}"`);
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  if (command === 'cleanup-kube-proxy' && argv.some((a) => a.startsWith('--bpffs'))) throw new CliError('cleanup-kube-proxy takes no --bpffs');
  if (command === 'cleanup' && values['ipvs-flush']) throw new CliError('--ipvs-flush belongs to cleanup-kube-proxy');
  if (command === 'cleanup-kube-proxy' && values.netns) throw new CliError('cleanup-kube-proxy takes no --netns (run it inside the namespace)');
  const steps = command === 'cleanup' ? kprCleanupSteps(values.bpffs!, { netns: values.netns || undefined }) : kubeProxyCleanupSteps({ ipvsFlush: values['ipvs-flush'] });
  const report = runCleanup(steps, values['dry-run']!);
  if (!report.ok) process.exitCode = 1;
  return values.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatCleanupReport(report);
}
