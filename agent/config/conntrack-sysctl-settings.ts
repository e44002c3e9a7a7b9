/**
 * The settings of `kpr conntrack-sysctls`: what kube-proxy would have set the
 * node's netfilter conntrack sysctls to, read from the agent's own command
 * line (so the chart's init container runs it with the agent's arguments).
 *
 * Seven settings, kube-proxy's `conntrack.*` fields and flags:
 *
 * | setting | KubeProxyConfiguration | kube-proxy flag | kpr flag (same meaning) | kube-proxy's default |
 * |---|---|---|---|---|
 * | maxPerCore | conntrack.maxPerCore | --conntrack-max-per-core | --conntrack-max-per-core | 32768 |
 * | min | conntrack.min | --conntrack-min | --conntrack-min | 131072 |
 * | tcpEstablishedTimeout | conntrack.tcpEstablishedTimeout | --conntrack-tcp-timeout-established | --ct-tcp-timeout | 24h |
 * | tcpCloseWaitTimeout | conntrack.tcpCloseWaitTimeout | --conntrack-tcp-timeout-close-wait | – | 1h |
 * | tcpBeLiberal | conntrack.tcpBeLiberal | --conntrack-tcp-be-liberal | – | false |
 * | udpTimeout | conntrack.udpTimeout | --conntrack-udp-timeout | --ct-udp-timeout | 0 (left alone) |
 * | udpStreamTimeout | conntrack.udpStreamTimeout | --conntrack-udp-timeout-stream | – | 0 (left alone) |
 *
 * Precedence is the agent's: kube-proxy's default < a KubeProxyConfiguration
 * (`--config`) < a kpr config file's key < the command line. Unlike the
 * agent's own reading, a KubeProxyConfiguration is read with kube-proxy's
 * meaning of zero: null is "the default", while an explicit 0 of a pointer
 * field (maxPerCore, min, the TCP timeouts) is "leave the kernel's value"; a
 * duration 0 on the command line means the same, as kube-proxy's flags do.
 * Every value carries where it came from, for `--dry-run`'s "why".
 */
import { parseArgs } from 'node:util';
import { AGENT_FLAGS } from './agent-config.js';
import { configFilesOf, readConfigFiles, type FlagTable } from './config-file.js';
import { parseDuration } from './duration.js';
import { translateKubeProxyFlags } from './kube-proxy-flags.js';

/** One setting's value and where it came from ("kube-proxy's default", "FILE: conntrack.min", "--conntrack-min"). */
export interface Sourced<T> {
  value: T;
  from: string;
}

/** Counts are entries; timeouts whole seconds (0: leave the kernel's value). */
export interface ConntrackSysctlSettings {
  maxPerCore: Sourced<number>;
  min: Sourced<number>;
  tcpEstablishedTimeoutS: Sourced<number>;
  tcpCloseWaitTimeoutS: Sourced<number>;
  tcpBeLiberal: Sourced<boolean>;
  udpTimeoutS: Sourced<number>;
  udpStreamTimeoutS: Sourced<number>;
}

type Key = keyof ConntrackSysctlSettings;

/** Per setting: the option it is read from (after kube-proxy's flag spellings became kpr's), its config field, its kind and kube-proxy's default. */
const SETTINGS: Record<Key, { option: string; field: string; kind: 'count' | 'duration' | 'bool'; dflt: number | boolean; pointer: boolean }> = {
  maxPerCore: { option: 'conntrack-max-per-core', field: 'maxPerCore', kind: 'count', dflt: 32768, pointer: true },
  min: { option: 'conntrack-min', field: 'min', kind: 'count', dflt: 131072, pointer: true },
  tcpEstablishedTimeoutS: { option: 'ct-tcp-timeout', field: 'tcpEstablishedTimeout', kind: 'duration', dflt: 86400, pointer: true },
  tcpCloseWaitTimeoutS: { option: 'conntrack-tcp-timeout-close-wait', field: 'tcpCloseWaitTimeout', kind: 'duration', dflt: 3600, pointer: true },
  tcpBeLiberal: { option: 'conntrack-tcp-be-liberal', field: 'tcpBeLiberal', kind: 'bool', dflt: false, pointer: false },
  udpTimeoutS: { option: 'ct-udp-timeout', field: 'udpTimeout', kind: 'duration', dflt: 0, pointer: false },
  udpStreamTimeoutS: { option: 'conntrack-udp-timeout-stream', field: 'udpStreamTimeout', kind: 'duration', dflt: 0, pointer: false },
};

/** kube-proxy's conntrack flags kpr-agent accepts and ignores, which this command reads. tcp-be-liberal is a string here ("true"/"false"). */
const SYSCTL_ONLY_FLAGS = {
  'conntrack-tcp-timeout-close-wait': { type: 'string' },
  'conntrack-tcp-be-liberal': { type: 'string' },
  'conntrack-udp-timeout-stream': { type: 'string' },
} satisfies FlagTable;

/** The command's flags: the agent's (without defaults: only what is given counts), kube-proxy's three above, and its own. */
export const CONNTRACK_SYSCTLS_FLAGS: FlagTable = {
  ...Object.fromEntries(Object.entries(AGENT_FLAGS).map(([k, v]) => [k, { ...v, default: undefined }])),
  ...SYSCTL_ONLY_FLAGS,
  'dry-run': { type: 'boolean' },
};

export class ConntrackSettingsError extends Error {}

const INT32_MAX = 2 ** 31 - 1;

function count(text: string, from: string): number {
  if (!/^\d+$/.test(text) || Number(text) > INT32_MAX) throw new ConntrackSettingsError(`${from}: "${text}" is not a whole number from 0 to ${INT32_MAX}`);
  return Number(text);
}

function durationSeconds(text: string, from: string): number {
  try {
    return Math.floor(parseDuration(text, from) / 1000); // kube-proxy: int(Duration / time.Second)
  } catch (err) {
    throw new ConntrackSettingsError((err as Error).message);
  }
}

/** A KubeProxyConfiguration's conntrack section as option tokens, with kube-proxy's meaning of null and zero. */
function kubeProxyConntrackTokens(conntrack: Record<string, unknown>): Array<{ token: string; field: string }> {
  const out: Array<{ token: string; field: string }> = [];
  for (const spec of Object.values(SETTINGS)) {
    const v = conntrack[spec.field];
    if (v === null || v === undefined) continue; // kube-proxy's defaulting fills it
    if (spec.kind === 'bool') {
      if (v === true) out.push({ token: `--${spec.option}=true`, field: spec.field });
      continue;
    }
    // A non-pointer field's zero is its default (unset); a pointer field's explicit zero is kept ("leave as is").
    const zero = spec.kind === 'count' ? v === 0 : durationSeconds(String(v), spec.field) === 0;
    if (zero && !spec.pointer) continue;
    out.push({ token: `--${spec.option}=${String(v)}`, field: spec.field });
  }
  return out;
}

/** kube-proxy's boolean `--conntrack-tcp-be-liberal` (bare, or `=true|false`) as this command's string option. */
function normalizeBeLiberal(argv: readonly string[]): string[] {
  return argv.map((a) => (a === '--conntrack-tcp-be-liberal' ? '--conntrack-tcp-be-liberal=true' : a));
}

export interface ConntrackSysctlsArgs {
  settings: ConntrackSysctlSettings;
  dryRun: boolean;
  help: boolean;
  /** Per KubeProxyConfiguration: its fields v1alpha1 does not have (decoded leniently, as the agent does). */
  unknown: Array<{ file: string; fields: string[] }>;
}

/**
 * The agent's argv (kube-proxy's flags and `--config` files included) →
 * the seven settings, each with its source. Bad values are errors naming
 * the flag or field.
 */
/** Node's own parse errors (an unknown flag, a missing value) go on as they are: the CLI words them as usage errors. */
function rethrowParseArgsError(err: unknown): void {
  if (((err as NodeJS.ErrnoException).code ?? '').startsWith('ERR_PARSE_ARGS_')) throw err;
}

export function conntrackSysctlsArgs(argv: readonly string[], readFile?: (p: string) => string): ConntrackSysctlsArgs {
  const table = CONNTRACK_SYSCTLS_FLAGS;
  const kind = (name: string) => {
    const t = Object.hasOwn(table, name) ? table[name].type : undefined;
    return t === 'string' ? 'value' : t === 'boolean' ? 'boolean' : undefined;
  };
  let cmdline: string[];
  try {
    cmdline = translateKubeProxyFlags(normalizeBeLiberal(argv), kind).argv;
  } catch (err) {
    rethrowParseArgsError(err);
    throw new ConntrackSettingsError((err as Error).message);
  }
  let files;
  try {
    files = readConfigFiles(configFilesOf(cmdline, table), AGENT_FLAGS, readFile);
  } catch (err) {
    rethrowParseArgsError(err);
    throw new ConntrackSettingsError((err as Error).message);
  }
  // Tokens in precedence order, each with its source.
  const tokens: string[] = [];
  const sources: string[] = [];
  for (const { file, contents } of files.files) {
    if (contents.kubeProxy) {
      for (const t of kubeProxyConntrackTokens(contents.kubeProxy.conntrack)) {
        tokens.push(t.token);
        sources.push(`${file}: conntrack.${t.field}`);
      }
    } else {
      for (const t of contents.args) {
        tokens.push(t);
        sources.push(`${file}: ${t.replace(/^--([^=]+).*$/, '$1')}`);
      }
    }
  }
  const fromCmdline = tokens.length;
  tokens.push(...cmdline);
  let parsed;
  try {
    parsed = parseArgs({ args: tokens, options: table, strict: true, allowPositionals: false, tokens: true });
  } catch (err) {
    rethrowParseArgsError(err);
    throw new ConntrackSettingsError((err as Error).message);
  }
  const last = new Map<string, { value: string; from: string }>();
  for (const t of parsed.tokens) {
    if (t.kind !== 'option' || typeof t.value !== 'string') continue;
    last.set(t.name, { value: t.value, from: t.index >= fromCmdline ? `command line --${t.name}` : sources[t.index] });
  }
  const settings = {} as Record<Key, Sourced<number | boolean>>;
  for (const [key, spec] of Object.entries(SETTINGS) as Array<[Key, (typeof SETTINGS)[Key]]>) {
    const given = last.get(spec.option);
    if (!given) {
      settings[key] = { value: spec.dflt, from: "kube-proxy's default" };
      continue;
    }
    let value: number | boolean;
    if (spec.kind === 'count') value = count(given.value, given.from);
    else if (spec.kind === 'duration') value = durationSeconds(given.value, given.from);
    else if (given.value === 'true' || given.value === 'false') value = given.value === 'true';
    else throw new ConntrackSettingsError(`${given.from}: "${given.value}" is not true or false`);
    settings[key] = { value, from: given.from };
  }
  return {
    settings: settings as unknown as ConntrackSysctlSettings,
    dryRun: parsed.values['dry-run'] === true,
    help: parsed.values.help === true,
    unknown: files.unknown,
  };
}
