/** Entry point of bin/kpr: inspect the pinned datapath without the agent. */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { BpfDatapathMaps } from '../maps/bpf-datapath-maps.js';
import { MAP_NAMES } from '../maps/layout.js';
import { CliError, openPinnedMap } from './pinned-maps.js';
import { formatServiceTable, joinServices } from './service-view.js';

const USAGE = `Usage: kpr <command> [flags]
Commands:
  service list            every frontend with its backends (ipvsadm -Ln style)
Flags:
  --bpffs PATH            kpr's bpffs directory (default ${DEFAULT_BPFFS_DIR})
  -o, --output FORMAT     table (default) or json
  -h, --help`;

function serviceList(bpffsDir: string, output: string): string {
  const svcMap = openPinnedMap(bpffsDir, MAP_NAMES.svc);
  const backendMap = openPinnedMap(bpffsDir, MAP_NAMES.backend);
  try {
    const maps = new BpfDatapathMaps(svcMap, backendMap);
    const views = joinServices(maps.dumpServices(), maps.dumpBackends());
    return output === 'json' ? JSON.stringify(views, null, 2) + '\n' : formatServiceTable(views);
  } finally {
    svcMap.close();
    backendMap.close();
  }
}

function run(argv: string[]): string {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help || positionals.length === 0) return USAGE + '\n';
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  const command = positionals.join(' ');
  switch (command) {
    case 'service list':
      return serviceList(values.bpffs!, values.output!);
    default:
      throw new CliError(`unknown command "${command}"\n${USAGE}`);
  }
}

try {
  process.stdout.write(run(process.argv.slice(2)));
} catch (err) {
  process.stderr.write(`kpr: ${(err as Error).message}\n`);
  process.exit(err instanceof CliError ? 2 : 1);
}
