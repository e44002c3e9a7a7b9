/**
 * `--config PATH`: a YAML file whose keys are flag names (`node-name`,
 * `sync-period`, `bpffs` …). It is generic over a parseArgs option table, so
 * a flag added to that table is a config-file key at once.
 *
 * The file is turned into argv tokens placed before the command line; parseArgs
 * keeps the last value of a string flag, so the command line overrides the file.
 */
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import yaml from 'js-yaml';

export type FlagTable = NonNullable<ParseArgsConfig['options']>;

/** Flags that make no sense inside the file itself. */
const NOT_IN_FILE = new Set(['config', 'help']);

export class ConfigFileError extends Error {}

/**
 * The argv tokens a config file stands for. Unknown keys and values of the
 * wrong type are errors naming the key and the file.
 */
export function configFileArgs(text: string, flags: FlagTable, source = 'config file'): string[] {
  let doc: unknown;
  try {
    doc = yaml.load(text);
  } catch (err) {
    throw new ConfigFileError(`${source}: not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  if (doc === undefined || doc === null) return [];
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigFileError(`${source}: expected a mapping of flag names to values`);
  const args: string[] = [];
  for (const [key, value] of Object.entries(doc as Record<string, unknown>)) {
    const flag = flags[key];
    if (!flag || NOT_IN_FILE.has(key)) {
      const known = Object.keys(flags).filter((k) => !NOT_IN_FILE.has(k)).sort().join(', ');
      throw new ConfigFileError(`${source}: unknown key "${key}" (known keys: ${known})`);
    }
    if (value === null || value === undefined) continue; // an empty value means "use the default"
    const values = flag.multiple && Array.isArray(value) ? value : [value];
    for (const v of values) {
      if (flag.type === 'boolean') {
        if (typeof v !== 'boolean') throw new ConfigFileError(`${source}: key "${key}" must be true or false, not ${JSON.stringify(v)}`);
        if (v) args.push(`--${key}`);
      } else {
        if (typeof v !== 'string' && typeof v !== 'number') throw new ConfigFileError(`${source}: key "${key}" must be a string or a number, not ${JSON.stringify(v)}`);
        args.push(`--${key}=${String(v)}`);
      }
    }
  }
  return args;
}

/**
 * argv with the file named by `--config` expanded in front of it. Without
 * `--config`, argv comes back unchanged.
 */
export function expandConfigFile(argv: string[], flags: FlagTable, readFile: (p: string) => string = (p) => readFileSync(p, 'utf8')): string[] {
  if (!flags.config) throw new Error('expandConfigFile: the flag table has no "config" flag');
  const { values } = parseArgs({ args: argv, options: flags, strict: true, allowPositionals: false });
  const file = values.config;
  if (typeof file !== 'string') return argv;
  let text: string;
  try {
    text = readFile(file);
  } catch (err) {
    throw new ConfigFileError(`--config ${file}: ${(err as Error).message}`);
  }
  return [...configFileArgs(text, flags, file), ...argv];
}
