/** `kpr preflight`: checks this node has what kpr needs; exits 1 when a required check fails. */
import os from 'node:os';
import { possibleCpus } from '../../native/index.js';
import { mapSizeOptions } from '../config/agent-config.js';
import { computeMapSizes } from '../datapath/map-sizes.js';
import { defaultBpfObject } from '../runtime/paths.js';
import { formatPreflight, runPreflight } from '../preflight/checks.js';
import { UsageError } from './errors.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';

export function preflightCommand(argv: string[]): string {
  const { values } = parseCommand(commandSpec('preflight'), argv);
  let sizeOpts;
  try {
    sizeOpts = mapSizeOptions(values);
  } catch (err) {
    throw new UsageError((err as Error).message, 'preflight');
  }
  let possible = 1; // without libbpf (reported below) LRU sizes are not rounded
  try {
    possible = possibleCpus();
  } catch {
    /* the libbpf row says why */
  }
  const mapSizes = computeMapSizes(sizeOpts, { totalMemoryBytes: os.totalmem(), cpus: os.availableParallelism(), possibleCpus: possible }).byMapName;
  const report = runPreflight({
    bpffsDir: values.bpffs as string,
    cgroupPath: values['cgroup-path'] as string | undefined,
    bpfObject: (values['bpf-object'] as string | undefined) ?? defaultBpfObject(),
    mapSizes,
  });
  if (!report.ok) process.exitCode = 1;
  return values.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatPreflight(report);
}
