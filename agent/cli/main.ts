/**
 * Entry point of bin/kpr: inspect the pinned datapath without the agent (and
 * the chart's uninstall clean-up). The commands, their flags and texts are the
 * registry's (commands.ts); this module finds the command, runs it and turns
 * its end into an exit status: 0 success (and --help, help), 1 a problem
 * found, 2 a usage error.
 */
import { EXIT_PROBLEM, EXIT_USAGE, HelpRequest, UsageError } from './errors.js';
import { COMMANDS, commandSpec } from './commands.js';
import { commandManual, EXIT_STATUS, parseCommand, wrap, type CommandSpec } from './command-spec.js';
import { mapDump, mapList, statsCommand, type Output } from './map-commands.js';
import { serviceGet, serviceList } from './service-commands.js';
import { cleanupCommand } from './cleanup.js';
import { cleanupNodesCommand } from './cleanup-nodes.js';
import { preflightCommand } from './preflight.js';
import { planCommand } from './plan.js';
import { statusCommand } from './status.js';
import { traceCommand } from './trace.js';
import { monitorCommand } from './monitor.js';
import { versionCommand } from './version.js';
import { conntrackSysctlsCommand } from './conntrack-sysctls.js';

/** What a command prints: its text, or chunks of it (written as they come: stdout is synchronous for files and pipes on Linux), or a promise of it. */
type CommandOutput = string | Iterable<string | Uint8Array> | Promise<string>;

/** The map-reading commands' common flags, parsed. */
function mapFlags(name: string, argv: string[]) {
  const { values, positionals } = parseCommand(commandSpec(name), argv);
  return {
    bpffs: values.bpffs as string,
    output: values.output as Output,
    netns: (values.netns as string | undefined) || undefined,
    frontend: values.frontend as string | undefined,
    arg: positionals[0],
  };
}

/** Each command's code, by its name in the registry. */
const RUN: Record<string, (argv: string[]) => CommandOutput> = {
  status: statusCommand,
  'service list': (argv) => {
    const f = mapFlags('service list', argv);
    return serviceList(f.bpffs, f.output, f.frontend);
  },
  'service get': (argv) => {
    const f = mapFlags('service get', argv);
    return serviceGet(f.bpffs, f.arg, f.output);
  },
  'map list': (argv) => {
    const f = mapFlags('map list', argv);
    return mapList(f.bpffs, f.output, f.netns);
  },
  'map dump': (argv) => {
    const f = mapFlags('map dump', argv);
    return mapDump(f.bpffs, f.arg, f.output);
  },
  stats: (argv) => {
    const f = mapFlags('stats', argv);
    return statsCommand(f.bpffs, f.output, f.netns);
  },
  trace: (argv) => traceCommand(argv),
  monitor: monitorCommand,
  preflight: preflightCommand,
  plan: planCommand,
  cleanup: (argv) => cleanupCommand('cleanup', argv),
  'cleanup-kube-proxy': (argv) => cleanupCommand('cleanup-kube-proxy', argv),
  'cleanup-nodes': (argv) => cleanupNodesCommand(argv),
  'conntrack-sysctls': (argv) => conntrackSysctlsCommand(argv),
  version: versionCommand,
};

/** `kpr --help`: every command with its summary. */
export function usage(): string {
  const rows: Array<[string, string]> = [
    ...COMMANDS.map((c): [string, string] => [c.args ? `${c.name} ${c.args.synopsis}` : c.name, c.summary]),
    ['help [COMMAND]', 'this list, or the manual of COMMAND'],
  ];
  const col = Math.max(...rows.map(([n]) => n.length)) + 3;
  const out = ['Usage: kpr COMMAND [flags]', "Inspect kpr's datapath on this node, plan from manifests, clean up.", '', 'Commands:'];
  for (const [name, summary] of rows) {
    const text = wrap(summary, 110, ' '.repeat(col + 2));
    out.push(`  ${name.padEnd(col)}${text[0].trimStart()}`, ...text.slice(1));
  }
  out.push('', "`kpr COMMAND --help` lists a command's flags; `kpr help COMMAND` prints its manual.");
  out.push(`Exit status: ${EXIT_STATUS.map(([code, what]) => `${code} ${what}`).join('; ')}.`);
  return out.join('\n') + '\n';
}

/** The command `words` start with, and the words after its name. */
function resolve(words: string[]): { spec: CommandSpec; rest: string[] } {
  for (const n of [2, 1]) {
    const spec = COMMANDS.find((c) => c.name === words.slice(0, n).join(' '));
    if (spec && words.length >= n) return { spec, rest: words.slice(n) };
  }
  const group = COMMANDS.filter((c) => c.name.startsWith(`${words[0]} `));
  if (group.length) throw new UsageError(`"${words[0]}" needs a subcommand: ${group.map((c) => c.name).join(', ')}`);
  throw new UsageError(`unknown command "${words[0]}" (kpr --help lists them)`);
}

function run(argv: string[]): CommandOutput {
  if (argv.length === 0) throw new UsageError(`no command\n${usage()}`);
  if (argv.length === 1 && (argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help')) return usage();
  if (argv[0] === 'help') {
    const { spec, rest } = resolve(argv.slice(1));
    if (rest.length) throw new UsageError(`help: unexpected argument "${rest[0]}"`);
    return commandManual(spec);
  }
  const { spec, rest } = resolve(argv);
  return RUN[spec.name](rest);
}

function fail(err: unknown): never {
  if (err instanceof HelpRequest) {
    process.stdout.write(err.text);
    process.exit(0);
  }
  const usageError = err instanceof UsageError || ((err as NodeJS.ErrnoException)?.code ?? '').startsWith('ERR_PARSE_ARGS_');
  process.stderr.write(`kpr: ${(err as Error).message}\n`);
  if (err instanceof UsageError && err.command) process.stderr.write(`See 'kpr ${err.command} --help'.\n`);
  process.exit(usageError ? EXIT_USAGE : EXIT_PROBLEM);
}

try {
  const out = run(process.argv.slice(2));
  if (typeof out === 'string') process.stdout.write(out);
  else if (Symbol.iterator in out) for (const chunk of out) process.stdout.write(chunk);
  else out.then((text) => process.stdout.write(text), fail);
} catch (err) {
  fail(err);
}
