/** `kpr preflight`: checks this node has what kpr needs; exits 1 when a required check fails. */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { possibleCpus } from '../../native/index.js';
import { AGENT_FLAGS, DEFAULT_BPFFS_DIR, mapSizeOptions } from '../config.js';
import { computeMapSizes } from '../datapath/map-sizes.js';
import { defaultBpfObject } from '../paths.js';
import { formatPreflight, runPreflight } from '../preflight/checks.js';
import { CliError } from './pinned-maps.js';

export const PREFLIGHT_USAGE = `  preflight [--bpffs PATH] [--cgroup-path PATH] [--bpf-object PATH] [-o json] [map size flags]
                          check this node: kernel, BTF, cgroup v2, bpffs, capabilities, libbpf, a trial load at
                          the map sizes the agent's --map-size-*, --bpf-map-dynamic-size-ratio and --conntrack-*
                          give (same flags), and those sizes against the maps pinned under --bpffs`;

/** The agent's map-size flags, accepted by preflight as they are by the agent. */
const SIZE_FLAGS = Object.fromEntries(
  Object.entries(AGENT_FLAGS).filter(([name]) => name.startsWith('map-size-') || name === 'bpf-map-dynamic-size-ratio' || name.startsWith('conntrack-')),
);

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
      ...SIZE_FLAGS,
    },
  });
  if (values.help) return `Usage: kpr\n${PREFLIGHT_USAGE}\n`;
  if (positionals.length > 0) throw new CliError(`preflight: unexpected argument "${positionals[0]}"`);
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  let sizeOpts;
  try {
    sizeOpts = mapSizeOptions(values);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  let possible = 1; // without libbpf (reported below) LRU sizes are not rounded
  try {
    possible = possibleCpus();
  } catch {
    /* the libbpf row says why */
  }
  const mapSizes = computeMapSizes(sizeOpts, { totalMemoryBytes: os.totalmem(), cpus: os.availableParallelism(), possibleCpus: possible }).byMapName;
  const report = runPreflight({ bpffsDir: values.bpffs!, cgroupPath: values['cgroup-path'], bpfObject: values['bpf-object'] ?? defaultBpfObject(), mapSizes });
  if (!report.ok) process.exitCode = 1;
  return values.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatPreflight(report);
}
