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
 * `ignored` for the agent to name in one log line; fields v1alpha1 does not
 * have are returned as `unknown` (lenient decoding, as kube-proxy's).
 *
 * `--config` may be given more than once, e.g. kube-proxy's file (from
 * kube-proxy's own command line) and kpr's (the chart's): every
 * KubeProxyConfiguration comes first, then every kpr file, each kind in
 * command-line order, so a key set in a kpr file wins over kube-proxy's file
 * and the command line wins over both.
 *
 * The file must be a regular file of at most 1 MiB, one YAML document nested at
 * most CONFIG_YAML_LIMITS.maxDepth deep with at most maxAliasCount alias
 * expansions (agent/input/bounded-read.ts, agent/input/bounded-yaml.ts).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { InputFileError, readRegularFile } from '../input/bounded-read.js';
import { parseYamlDocuments, YamlInputError, type YamlLimits } from '../input/bounded-yaml.js';
import { isKubeProxyConfiguration, kubeProxyConfigArgs, KubeProxyConfigError } from './kube-proxy-config.js';

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
  /** KubeProxyConfiguration fields v1alpha1 does not have, decoded leniently; empty for a kpr file. */
  unknown: string[];
  /** Set only for a KubeProxyConfiguration: its `mode` (undefined when unset) and its `conntrack` section. */
  kubeProxy?: { proxyMode?: string; conntrack: Record<string, unknown> };
}

/** Several config files (repeated `--config`): kube-proxy's first, then kpr's (see the top of this file). */
export interface ConfigFilesContents {
  /** The files' argv tokens, in precedence order (later wins). */
  args: string[];
  ignored: string[];
  /** Per KubeProxyConfiguration with fields v1alpha1 does not have: the file and those fields. */
  unknown: Array<{ file: string; fields: string[] }>;
  /** The `mode` of the last KubeProxyConfiguration that sets one. */
  proxyMode?: string;
  /** Each file in precedence order, with its contents (kpr conntrack-sysctls tells the sources apart). */
  files: Array<{ file: string; contents: ConfigFileContents }>;
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
  if (doc === undefined || doc === null) return { args: [], ignored: [], unknown: [] };
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigFileError(`${source}: expected a mapping of flag names to values`);
  if (isKubeProxyConfiguration(doc as Record<string, unknown>)) {
    try {
      const kp = kubeProxyConfigArgs(doc as Record<string, unknown>, source, (flag) => Object.hasOwn(flags, flag.replace(/^--/, '')));
      return {
        args: kp.args,
        ignored: kp.ignored,
        unknown: kp.unknown,
        kubeProxy: { ...(kp.proxyMode === undefined ? {} : { proxyMode: kp.proxyMode }), conntrack: kp.conntrack },
      };
    } catch (err) {
      throw err instanceof KubeProxyConfigError ? new ConfigFileError(err.message) : err;
    }
  }
  const args: string[] = [];
  for (const [key, value] of Object.entries(doc as Record<string, unknown>)) {
    const flag = flags[key];
    if (!flag || NOT_IN_FILE.has(key)) {
      const known = Object.keys(flags)
        .filter((k) => !NOT_IN_FILE.has(k))
        .sort()
        .join(', ');
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
        if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean')
          throw new ConfigFileError(`${source}: key "${key}" must be a string or a number, not ${JSON.stringify(v)}`);
        args.push(`--${key}=${String(v)}`);
      }
    }
  }
  return { args, ignored: [], unknown: [] };
}

/** The config file at `file`, read within the limits above; errors name the file. */
export function readConfigFile(
  file: string,
  flags: FlagTable,
  readFile: (p: string) => string = (p) => readRegularFile(p, CONFIG_MAX_BYTES),
): ConfigFileContents {
  let text: string;
  try {
    text = readFile(file);
  } catch (err) {
    throw new ConfigFileError(`--config ${file}: ${err instanceof InputFileError ? err.reason : (err as Error).message}`);
  }
  return configFileContents(text, flags, file);
}

/** The config files in `files` (command-line order), read and put in precedence order: KubeProxyConfigurations, then kpr files. */
export function readConfigFiles(files: readonly string[], flags: FlagTable, readFile?: (p: string) => string): ConfigFilesContents {
  const read = files.map((file) => ({ file, contents: readConfigFile(file, flags, readFile) }));
  const ordered = [...read.filter((f) => f.contents.kubeProxy), ...read.filter((f) => !f.contents.kubeProxy)];
  let proxyMode: string | undefined;
  for (const f of ordered) proxyMode = f.contents.kubeProxy?.proxyMode ?? proxyMode;
  return {
    args: ordered.flatMap((f) => f.contents.args),
    ignored: ordered.flatMap((f) => f.contents.ignored),
    unknown: ordered.filter((f) => f.contents.unknown.length).map((f) => ({ file: f.file, fields: f.contents.unknown })),
    ...(proxyMode === undefined ? {} : { proxyMode }),
    files: ordered,
  };
}

/** The files of every `--config` in argv, in command-line order (the flag table's `config` is `multiple`). */
export function configFilesOf(argv: string[], flags: FlagTable): string[] {
  if (!flags.config) throw new Error('configFilesOf: the flag table has no "config" flag');
  const { values } = parseArgs({ args: argv, options: flags, strict: true, allowPositionals: false });
  const v = values.config;
  return v === undefined ? [] : Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : typeof v === 'string' ? [v] : [];
}

/**
 * argv with the files named by `--config` expanded in front of it (`args`),
 * and what the files say besides (the kube-proxy settings kpr ignores,
 * unknown fields, kube-proxy's mode). Without `--config`, argv comes back
 * unchanged.
 */
export function expandConfigFile(argv: string[], flags: FlagTable, readFile?: (p: string) => string): ConfigFilesContents {
  const files = configFilesOf(argv, flags);
  if (files.length === 0) return { args: argv, ignored: [], unknown: [], files: [] };
  const contents = readConfigFiles(files, flags, readFile);
  return { ...contents, args: [...contents.args, ...argv] };
}
