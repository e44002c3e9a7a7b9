/**
 * What a kpr command is, as one record (agent/cli/commands.ts holds them):
 * its name, arguments, summary, description, flags, what its exit status 1
 * means and examples. From it come the command's parser (strict: an unknown
 * flag, a missing value, an extra argument or a value outside a flag's
 * choices is a UsageError, exit 2; -h/--help a HelpRequest), its `--help`
 * and its manual (`kpr help COMMAND`), so the three cannot disagree.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { HelpRequest, UsageError } from './errors.js';

type Options = NonNullable<ParseArgsConfig['options']>;

export interface FlagSpec {
  name: string;
  short?: string;
  /** The value's placeholder (PATH, IP:PORT); none: a switch. */
  value?: string;
  /** May be given more than once (each value kept). */
  multiple?: boolean;
  default?: string;
  /** The values it takes, checked before the command runs. */
  choices?: readonly string[];
  help: string;
  /** Another spelling of a listed flag: parsed, not listed. */
  alias?: boolean;
}

export interface CommandSpec {
  /** "status", "service list". */
  name: string;
  /** The positional arguments as the synopsis writes them ("NS/NAME"), and how many at most; none: it takes none. */
  args?: { synopsis: string; max: number };
  /** One line, lower case, no full stop: the list of commands and the first lines of its usage and manual. */
  summary: string;
  /** The manual's DESCRIPTION: paragraphs separated by blank lines. */
  description: string;
  flags: readonly FlagSpec[];
  /** Options parsed as they are and described in one row (preflight takes the agent's map size flags). */
  moreOptions?: { options: Options; synopsis: string; help: string };
  /** What exit status 1 means for this command. */
  problem: string;
  /** Command lines, each with what it does. */
  examples: ReadonlyArray<readonly [string, string]>;
}

export const HELP_FLAG: FlagSpec = { name: 'help', short: 'h', help: 'this help; `kpr help COMMAND`: the manual' };

export const EXIT_STATUS: ReadonlyArray<readonly [string, string]> = [
  ['0', 'success'],
  ['1', 'the command ran and found a problem'],
  ['2', 'a usage error: an unknown command or flag, a missing or bad argument'],
];

function options(spec: CommandSpec): Options {
  const out: Options = { ...spec.moreOptions?.options };
  for (const f of [...spec.flags, HELP_FLAG]) {
    out[f.name] = {
      type: f.value ? 'string' : 'boolean',
      ...(f.short ? { short: f.short } : {}),
      ...(f.multiple ? { multiple: true } : {}),
      ...(f.default !== undefined ? { default: f.default } : {}),
    };
  }
  return out;
}

/** The flags a command parses and how: for translating kube-proxy's spellings (kpr plan). */
export function flagKind(spec: CommandSpec, name: string): 'value' | 'boolean' | undefined {
  const o = options(spec)[name];
  return o === undefined ? undefined : o.type === 'string' ? 'value' : 'boolean';
}

/** Node's parseArgs errors, as a usage error says them (undefined for any other error). */
export function parseError(err: NodeJS.ErrnoException, command: string): UsageError | undefined {
  if (!err.code?.startsWith('ERR_PARSE_ARGS_')) return undefined;
  const quoted = /'([^']*)'/.exec(err.message)?.[1];
  let what = err.message;
  if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') what = `unknown flag ${quoted ?? ''}`.trim();
  else if (err.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') what = `unexpected argument "${quoted ?? ''}"`;
  else if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && quoted) what = `${quoted.replace(/ <value>$/, '')} needs a value`;
  return new UsageError(`${command}: ${what}`, command);
}

export type ParsedValues = Record<string, string | boolean | Array<string | boolean> | undefined>;

/** argv (after the command's name) parsed by the command's flags. */
export function parseCommand(spec: CommandSpec, argv: readonly string[]): { values: ParsedValues; positionals: string[] } {
  let parsed: { values: ParsedValues; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...argv], options: options(spec), allowPositionals: spec.args !== undefined, strict: true }) as typeof parsed;
  } catch (err) {
    throw parseError(err as NodeJS.ErrnoException, spec.name) ?? err;
  }
  if (parsed.values.help) throw new HelpRequest(commandUsage(spec));
  if (parsed.positionals.length > (spec.args?.max ?? 0))
    throw new UsageError(`${spec.name}: unexpected argument "${parsed.positionals[spec.args?.max ?? 0]}"`, spec.name);
  for (const f of spec.flags) {
    const v = parsed.values[f.name];
    for (const one of f.choices ? (Array.isArray(v) ? v : v === undefined ? [] : [v]) : []) {
      if (!f.choices!.includes(String(one))) throw new UsageError(`${spec.name}: invalid --${f.name} "${one}" (${f.choices!.join(' or ')})`, spec.name);
    }
  }
  return parsed;
}

/** Words of `text` in lines of at most `width` columns, each after `indent`. */
export function wrap(text: string, width: number, indent: string): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line && indent.length + line.length + 1 + word.length > width) {
      lines.push(indent + line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(indent + line);
  return lines;
}

const flagLabel = (f: FlagSpec) => `${f.short ? `-${f.short}, ` : ''}--${f.name}${f.value ? ` ${f.value}` : ''}`;
const flagHelp = (f: FlagSpec) => `${f.help}${f.default !== undefined && f.default !== '' ? ` (default ${f.default})` : ''}`;
const listed = (spec: CommandSpec) => spec.flags.filter((f) => !f.alias);

/** `Usage: kpr NAME [ARGS] [flags]`, the summary, and the flags table: what `--help` prints. */
export function commandUsage(spec: CommandSpec): string {
  const rows: Array<[string, string]> = listed(spec).map((f) => [flagLabel(f), flagHelp(f)]);
  if (spec.moreOptions) rows.push([spec.moreOptions.synopsis, spec.moreOptions.help]);
  rows.push([flagLabel(HELP_FLAG), HELP_FLAG.help]);
  const col = Math.max(...rows.map(([l]) => l.length)) + 3;
  const out = [
    `Usage: kpr ${spec.name}${spec.args ? ` ${spec.args.synopsis}` : ''} [flags]`,
    `${spec.summary[0].toUpperCase()}${spec.summary.slice(1)}.`,
    '',
    'Flags:',
  ];
  for (const [label, help] of rows) {
    const text = wrap(help, 110, ' '.repeat(col + 2));
    out.push(`  ${label.padEnd(col)}${text[0].trimStart()}`, ...text.slice(1));
  }
  return out.join('\n') + '\n';
}

/** The synopsis line: the command, its arguments, each listed flag in brackets. */
export function synopsis(spec: CommandSpec): string {
  const flags = listed(spec).map((f) => `[${f.short ? `-${f.short}` : `--${f.name}`}${f.value ? ` ${f.value}` : ''}]`);
  if (spec.moreOptions) flags.push(`[${spec.moreOptions.synopsis}]`);
  return [`kpr ${spec.name}`, ...(spec.args ? [spec.args.synopsis] : []), ...flags].join(' ');
}

/** `kpr help NAME`: the manual, in a man page's sections. */
export function commandManual(spec: CommandSpec): string {
  const ind = '    ';
  const out = ['NAME', `${ind}kpr ${spec.name} - ${spec.summary}`, '', 'SYNOPSIS', ...wrap(synopsis(spec), 100, ind), '', 'DESCRIPTION'];
  spec.description.split(/\n\s*\n/).forEach((para, i) => out.push(...(i ? [''] : []), ...wrap(para, 100, ind)));
  out.push('', 'OPTIONS');
  const rows: Array<[string, string]> = listed(spec).map((f) => [flagLabel(f), flagHelp(f)]);
  if (spec.moreOptions) rows.push([spec.moreOptions.synopsis, spec.moreOptions.help]);
  rows.push([flagLabel(HELP_FLAG), HELP_FLAG.help]);
  for (const [label, help] of rows) out.push(`${ind}${label}`, ...wrap(help, 100, ind + ind));
  out.push('', 'EXIT STATUS');
  for (const [code, what] of EXIT_STATUS)
    out.push(
      ...wrap(code === '1' ? `${what}: ${spec.problem}` : what, 100, `${ind}${code}   `).map((l, i) => (i ? ind + '    ' + l.slice(ind.length + 4) : l)),
    );
  out.push('', 'EXAMPLES');
  spec.examples.forEach(([cmd, what], i) => out.push(...(i ? [''] : []), `${ind}${cmd}`, ...wrap(what, 100, ind + ind)));
  return out.join('\n') + '\n';
}
