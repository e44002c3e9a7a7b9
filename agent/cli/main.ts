/** Entry point of bin/kpr: inspect the pinned datapath without the agent (and the chart's uninstall clean-up). */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { CliError } from './pinned-maps.js';
import { mapDump, mapList, statsCommand, type Output } from './map-commands.js';
import { SERVICE_GET_USAGE, SERVICE_LIST_USAGE, serviceGet, serviceList } from './service-commands.js';
import { CLEANUP_USAGE, cleanupCommand } from './cleanup.js';
import { CLEANUP_NODES_USAGE, cleanupNodesCommand } from './cleanup-nodes.js';
import { PREFLIGHT_USAGE, preflightCommand } from './preflight.js';
import { PLAN_USAGE, planCommand } from './plan.js';
import { CONNTRACK_SYSCTLS_USAGE, conntrackSysctlsCommand } from './conntrack-sysctls.js';
import { STATUS_USAGE, statusCommand } from './status.js';
import { TRACE_USAGE, traceCommand } from './trace.js';
import { MONITOR_USAGE, monitorCommand } from './monitor.js';
import { VERSION_USAGE, versionCommand } from './version.js';

const MAP_LIST_USAGE = `  map list                every pinned map: type, entries, capacity; kpr's tc attachments (tcx link or clsact filter)`;
const MAP_DUMP_USAGE = `  map dump NAME           the decoded entries of a map (kpr_svc, kpr_backend, kpr_stats, ...)`;
const STATS_USAGE = `  stats                   datapath counters, summed over CPUs; kpr's tc attachments`;
const COMMON_FLAGS = `Flags:
  --bpffs PATH            kpr's bpffs directory (default ${DEFAULT_BPFFS_DIR})
  --netns PATH            network namespace whose interfaces are the node's, as the agent's --netns (default: own)
  -o, --output FORMAT     table (default) or json
  -h, --help`;

/** The usage of the map-reading commands parsed here, by command. */
const MAP_COMMAND_USAGE: Record<string, string> = {
  'service list': SERVICE_LIST_USAGE,
  'service get': SERVICE_GET_USAGE,
  'map list': MAP_LIST_USAGE,
  'map dump': MAP_DUMP_USAGE,
  stats: STATS_USAGE,
};

const USAGE = `Usage: kpr <command> [flags]
Commands:
${STATUS_USAGE}
${SERVICE_LIST_USAGE}
${SERVICE_GET_USAGE}
${MAP_LIST_USAGE}
${MAP_DUMP_USAGE}
${STATS_USAGE}
${TRACE_USAGE}
${MONITOR_USAGE}
${PREFLIGHT_USAGE}
${PLAN_USAGE}
${CLEANUP_USAGE}
${CLEANUP_NODES_USAGE}
${CONNTRACK_SYSCTLS_USAGE}
${VERSION_USAGE}
${COMMON_FLAGS}
Every command answers --help with its own usage.`;

/** What a command prints: its text, or chunks of it (written as they come: stdout is synchronous for files and pipes on Linux), or a promise of it. */
function run(argv: string[]): string | Iterable<string | Uint8Array> | Promise<string> {
  // Node commands with flags of their own.
  if (argv[0] === 'cleanup' || argv[0] === 'cleanup-kube-proxy') return cleanupCommand(argv[0], argv.slice(1));
  if (argv[0] === 'cleanup-nodes') return cleanupNodesCommand(argv.slice(1));
  if (argv[0] === 'preflight') return preflightCommand(argv.slice(1));
  if (argv[0] === 'plan') return planCommand(argv.slice(1));
  if (argv[0] === 'conntrack-sysctls') return conntrackSysctlsCommand(argv.slice(1));
  if (argv[0] === 'status') return statusCommand(argv.slice(1));
  if (argv[0] === 'trace') return traceCommand(argv.slice(1));
  if (argv[0] === 'monitor') return monitorCommand(argv.slice(1));
  if (argv[0] === 'version') return versionCommand(argv.slice(1));
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      netns: { type: 'string' },
      frontend: { type: 'string' },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (positionals.length === 0) return USAGE + '\n';
  if (values.help) {
    const usage = MAP_COMMAND_USAGE[positionals.slice(0, 2).join(' ')] ?? MAP_COMMAND_USAGE[positionals[0]];
    return usage ? `Usage: kpr\n${usage}\n${COMMON_FLAGS}\n` : USAGE + '\n';
  }
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  const command = positionals.join(' ');
  const [verb, sub, arg] = positionals;
  const bpffs = values.bpffs!;
  const output = values.output as Output;
  if (verb === 'service' && sub === 'get' && positionals.length <= 3) return serviceGet(bpffs, arg, output);
  if (verb === 'map' && sub === 'dump' && positionals.length <= 3) return mapDump(bpffs, arg, output);
  if (values.frontend !== undefined && command !== 'service list') throw new CliError('--frontend belongs to service list');
  switch (command) {
    case 'service list':
      return serviceList(bpffs, output, values.frontend);
    case 'map list':
      return mapList(bpffs, output, values.netns || undefined);
    case 'stats':
      return statsCommand(bpffs, output, values.netns || undefined);
    default:
      throw new CliError(`unknown command "${command}"\n${USAGE}`);
  }
}

function fail(err: unknown): never {
  process.stderr.write(`kpr: ${(err as Error).message}\n`);
  process.exit(err instanceof CliError ? 2 : 1);
}

try {
  const out = run(process.argv.slice(2));
  if (typeof out === 'string') process.stdout.write(out);
  else if (Symbol.iterator in out) for (const chunk of out) process.stdout.write(chunk);
  else out.then((text) => process.stdout.write(text), fail);
} catch (err) {
  fail(err);
}
