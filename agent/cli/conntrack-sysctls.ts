/**
 * `kpr conntrack-sysctls`: sets the node's netfilter conntrack sysctls as
 * kube-proxy did at start (agent/conntrack-sysctls/plan.ts), from the
 * agent's own arguments (agent/config/conntrack-sysctl-settings.ts). The
 * chart runs it in an init container (conntrackSysctls.enabled). A write
 * the kernel refuses is reported and does not fail the command: the agent
 * must start anyway.
 */
import os from 'node:os';
import { conntrackSysctlsArgs, ConntrackSettingsError } from '../config/conntrack-sysctl-settings.js';
import { UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE } from '../config/kube-proxy-config.js';
import { planConntrackSysctls, type SysctlStep } from '../conntrack-sysctls/plan.js';
import { applyConntrackSteps, readConntrackFacts, type StepResult } from '../conntrack-sysctls/proc-sys.js';
import { CliError } from './pinned-maps.js';

export const CONNTRACK_SYSCTLS_USAGE = `  conntrack-sysctls [--dry-run] [AGENT FLAGS…]
                          set the node's netfilter conntrack sysctls as kube-proxy did at start, from the
                          agent's flags and --config files (kube-proxy's included): nf_conntrack_max =
                          max(conntrack.maxPerCore x CPUs, conntrack.min), only raised, only from the
                          host's network namespace (then the nf_conntrack hashsize to a quarter of it);
                          nf_conntrack_tcp_timeout_established, _close_wait, nf_conntrack_udp_timeout,
                          _udp_timeout_stream (0: left as is) and nf_conntrack_tcp_be_liberal (true: 1).
                          kube-proxy's defaults: 32768 per core, min 131072, established 24h, close_wait
                          1h, the rest left as is. Also kube-proxy's --conntrack-* flags. --dry-run lists
                          what it would write and why; a write the kernel refuses is reported, not fatal`;

function row(r: StepResult, dryRun: boolean): string[] {
  const s: SysctlStep = r.step;
  const action = s.action === 'write' ? (dryRun ? 'would write' : r.outcome ?? '') : s.action;
  return [s.name, s.current === undefined ? '-' : String(s.current), s.want === undefined ? '-' : String(s.want), action, s.why];
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n') + '\n';
}

/** Runs the command; `warn` takes the lines for stderr. */
export function conntrackSysctlsCommand(argv: string[], warn: (line: string) => void = (line) => process.stderr.write(line)): string {
  let parsed;
  try {
    parsed = conntrackSysctlsArgs(argv);
  } catch (err) {
    if (err instanceof ConntrackSettingsError) throw new CliError(`conntrack-sysctls: ${err.message}`);
    throw err;
  }
  if (parsed.help) return `Usage: kpr${CONNTRACK_SYSCTLS_USAGE.slice(1)}\n`;
  for (const u of parsed.unknown) warn(`kpr: warning: ${u.file}: ${UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE}: ${u.fields.join(', ')}\n`);
  // The machine's online CPUs, as kube-proxy counts them (its CPU topology from sysfs), whatever the container's CPU limit.
  const steps = planConntrackSysctls(parsed.settings, readConntrackFacts(Math.max(1, os.cpus().length)));
  const results: StepResult[] = parsed.dryRun ? steps.map((step) => ({ step, ok: true })) : applyConntrackSteps(steps);
  const failed = results.filter((r) => !r.ok);
  let out = table([['SYSCTL', 'NOW', 'WANT', 'ACTION', 'WHY'], ...results.map((r) => row(r, parsed.dryRun))]);
  const skipped = results.filter((r) => r.step.action === 'skip');
  if (failed.length || skipped.length) {
    out += `\n${failed.length + skipped.length} of kube-proxy's settings not applied (see ACTION and WHY); the node keeps the kernel's values for them\n`;
    for (const r of [...skipped, ...failed]) warn(`kpr: warning: ${r.step.name}: ${r.outcome ?? r.step.why}\n`);
  }
  return out;
}
