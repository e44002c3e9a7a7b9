/** `kpr preflight`: checks this node has what kpr needs; exits 1 when a required check fails. */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { defaultBpfObject } from '../paths.js';
import { formatPreflight, runPreflight } from '../preflight/checks.js';
import { CliError } from './pinned-maps.js';

export const PREFLIGHT_USAGE = `  preflight [--bpffs PATH] [--cgroup-path PATH] [--bpf-object PATH] [-o json]
                          check this node: kernel, BTF, cgroup v2, bpffs, capabilities, libbpf, a trial load`;

export function preflightCommand(argv: string[]): string {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      'cgroup-path': { type: 'string' },
      'bpf-object': { type: 'string' },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return `Usage: kpr\n${PREFLIGHT_USAGE}\n`;
  if (positionals.length > 0) throw new CliError(`preflight: unexpected argument "${positionals[0]}"`);
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  const report = runPreflight({ bpffsDir: values.bpffs!, cgroupPath: values['cgroup-path'], bpfObject: values['bpf-object'] ?? defaultBpfObject() });
  if (!report.ok) process.exitCode = 1;
  return values.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatPreflight(report);
}
