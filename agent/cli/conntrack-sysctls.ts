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
import { HelpRequest, UsageError } from './errors.js';
import { commandUsage, parseError } from './command-spec.js';
import { commandSpec } from './commands.js';

function row(r: StepResult, dryRun: boolean): string[] {
  const s: SysctlStep = r.step;
  const action = s.action === 'write' ? (dryRun ? 'would write' : (r.outcome ?? '')) : s.action;
  return [s.name, s.current === undefined ? '-' : String(s.current), s.want === undefined ? '-' : String(s.want), action, s.why];
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return (
    rows
      .map((r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

/** Runs the command; `warn` takes the lines for stderr. */
export function conntrackSysctlsCommand(argv: string[], warn: (line: string) => void = (line) => process.stderr.write(line)): string {
  let parsed;
  try {
    parsed = conntrackSysctlsArgs(argv);
  } catch (err) {
    if (err instanceof ConntrackSettingsError) throw new UsageError(`conntrack-sysctls: ${err.message}`, 'conntrack-sysctls');
    throw parseError(err as NodeJS.ErrnoException, 'conntrack-sysctls') ?? err;
    throw err;
  }
  if (parsed.help) throw new HelpRequest(commandUsage(commandSpec('conntrack-sysctls')));
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
