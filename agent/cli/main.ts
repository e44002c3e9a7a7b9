/** Entry point of bin/kpr: inspect the pinned datapath without the agent. */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { CliError } from './pinned-maps.js';
import { mapDump, mapList, statsCommand, type Output } from './map-commands.js';
import { serviceGet, serviceList } from './service-commands.js';
import { CLEANUP_USAGE, cleanupCommand } from './cleanup.js';
import { PREFLIGHT_USAGE, preflightCommand } from './preflight.js';
import { PLAN_USAGE, planCommand } from './plan.js';
import { STATUS_USAGE, statusCommand } from './status.js';
import { TRACE_USAGE, traceCommand } from './trace.js';

const USAGE = `Usage: kpr <command> [flags]
Commands:
${STATUS_USAGE}
  service list            every frontend with its names and backends (ipvsadm -Ln style)
  service get NS/NAME     the frontends of one Service
  map list                every pinned map: type, entries, capacity; kpr's tc attachments (tcx link or clsact filter)
  map dump NAME           the decoded entries of a map (kpr_svc, kpr_backend, kpr_stats, ...)
  stats                   datapath counters, summed over CPUs; kpr's tc attachments
${TRACE_USAGE}
${PREFLIGHT_USAGE}
${PLAN_USAGE}
${CLEANUP_USAGE}
Flags:
  --bpffs PATH            kpr's bpffs directory (default ${DEFAULT_BPFFS_DIR})
  --netns PATH            network namespace whose interfaces are the node's, as the agent's --netns (default: own)
  -o, --output FORMAT     table (default) or json
  -h, --help`;

function run(argv: string[]): string | Promise<string> {
  // Node commands with flags of their own.
  if (argv[0] === 'cleanup' || argv[0] === 'cleanup-kube-proxy') return cleanupCommand(argv[0], argv.slice(1));
  if (argv[0] === 'preflight') return preflightCommand(argv.slice(1));
  if (argv[0] === 'plan') return planCommand(argv.slice(1));
  if (argv[0] === 'status') return statusCommand(argv.slice(1));
  if (argv[0] === 'trace') return traceCommand(argv.slice(1));
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      netns: { type: 'string' },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help || positionals.length === 0) return USAGE + '\n';
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  const command = positionals.join(' ');
  const [verb, sub, arg] = positionals;
  const bpffs = values.bpffs!;
  const output = values.output as Output;
  if (verb === 'service' && sub === 'get' && positionals.length <= 3) return serviceGet(bpffs, arg, output);
  if (verb === 'map' && sub === 'dump' && positionals.length <= 3) return mapDump(bpffs, arg, output);
  switch (command) {
    case 'service list':
      return serviceList(bpffs, output);
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
  else out.then((text) => process.stdout.write(text), fail);
} catch (err) {
  fail(err);
}
