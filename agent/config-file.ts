/**
 * `--config PATH`: a YAML file whose keys are flag names (`node-name`,
 * `sync-period`, `bpffs` …). It is generic over a parseArgs option table, so
 * a flag added to that table is a config-file key at once.
 *
 * The file is turned into argv tokens placed before the command line; parseArgs
 * keeps the last value of a string flag, so the command line overrides the file.
 *
 * The file may instead be kube-proxy's own config, a KubeProxyConfiguration
 * (agent/config/kube-proxy-config.ts): its fields become the kpr flags of the
 * same meaning, and the fields that do not apply to kpr are returned as
 * `ignored` for the agent to name in one log line.
 *
 * The file must be a regular file of at most 1 MiB, one YAML document nested at
 * most CONFIG_YAML_LIMITS.maxDepth deep with at most maxAliasCount alias
 * expansions (agent/bounded-read.ts, agent/bounded-yaml.ts).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { InputFileError, readRegularFile } from './bounded-read.js';
import { parseYamlDocuments, YamlInputError, type YamlLimits } from './bounded-yaml.js';
import { isKubeProxyConfiguration, kubeProxyConfigArgs, KubeProxyConfigError } from './config/kube-proxy-config.js';

export type FlagTable = NonNullable<ParseArgsConfig['options']>;

/** Flags that make no sense inside the file itself. */
const NOT_IN_FILE = new Set(['config', 'help']);

export class ConfigFileError extends Error {}

/** Largest config file read (a real one is a few hundred bytes). */
export const CONFIG_MAX_BYTES = 1024 * 1024;
/** A config file is a flat mapping whose values may be lists: 2 levels; the rest is margin. */
export const CONFIG_YAML_LIMITS: YamlLimits = { maxDepth: 100, maxAliasCount: 100, uniqueKeys: true };

/** What a config file stands for: argv tokens, and the kube-proxy settings in it that kpr ignores. */
export interface ConfigFileContents {
  args: string[];
  /** Set KubeProxyConfiguration fields kpr has no use for ("mode", "iptables.masqueradeAll"); empty for a kpr file. */
  ignored: string[];
}

/**
 * The argv tokens a config file stands for. Unknown keys and values of the
 * wrong type are errors naming the key and the file.
 */
export function configFileArgs(text: string, flags: FlagTable, source = 'config file'): string[] {
  return configFileContents(text, flags, source).args;
}

/** configFileArgs, with the ignored kube-proxy settings of a KubeProxyConfiguration. */
export function configFileContents(text: string, flags: FlagTable, source = 'config file'): ConfigFileContents {
  let docs: unknown[];
  try {
    docs = parseYamlDocuments(text, CONFIG_YAML_LIMITS);
  } catch (err) {
    if (!(err instanceof YamlInputError)) throw err;
    throw new ConfigFileError(`${source}: not valid YAML: ${err.message}`);
  }
  if (docs.length > 1) throw new ConfigFileError(`${source}: expected one YAML document, found ${docs.length}`);
  const doc = docs[0];
  if (doc === undefined || doc === null) return { args: [], ignored: [] };
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigFileError(`${source}: expected a mapping of flag names to values`);
  if (isKubeProxyConfiguration(doc as Record<string, unknown>)) {
    try {
      return kubeProxyConfigArgs(doc as Record<string, unknown>, source, (flag) => Object.hasOwn(flags, flag.replace(/^--/, '')));
    } catch (err) {
      throw err instanceof KubeProxyConfigError ? new ConfigFileError(err.message) : err;
    }
  }
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
        // A boolean is a string flag's "true"/"false" (--service-counters=false).
        if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') throw new ConfigFileError(`${source}: key "${key}" must be a string or a number, not ${JSON.stringify(v)}`);
        args.push(`--${key}=${String(v)}`);
      }
    }
  }
  return { args, ignored: [] };
}

/** The config file at `file`, read within the limits above; errors name the file. */
export function readConfigFile(file: string, flags: FlagTable, readFile: (p: string) => string = (p) => readRegularFile(p, CONFIG_MAX_BYTES)): ConfigFileContents {
  let text: string;
  try {
    text = readFile(file);
  } catch (err) {
    throw new ConfigFileError(`--config ${file}: ${err instanceof InputFileError ? err.reason : (err as Error).message}`);
  }
  return configFileContents(text, flags, file);
}

/**
 * argv with the file named by `--config` expanded in front of it (`args`),
 * and the kube-proxy settings of the file kpr ignores. Without `--config`,
 * argv comes back unchanged.
 */
export function expandConfigFile(argv: string[], flags: FlagTable, readFile?: (p: string) => string): ConfigFileContents {
  if (!flags.config) throw new Error('expandConfigFile: the flag table has no "config" flag');
  const { values } = parseArgs({ args: argv, options: flags, strict: true, allowPositionals: false });
  const file = values.config;
  if (typeof file !== 'string') return { args: argv, ignored: [] };
  const contents = readConfigFile(file, flags, readFile);
  return { args: [...contents.args, ...argv], ignored: contents.ignored };
}
