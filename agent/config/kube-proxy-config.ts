/**
 * kube-proxy's own config file as `--config`: a
 * `kubeproxy.config.k8s.io/v1alpha1` KubeProxyConfiguration, what kubeadm
 * stores in the kube-proxy ConfigMap (key `config.conf`). Each field kpr has
 * a meaning for becomes the kpr flag of that meaning (KUBE_PROXY_CONFIG_FIELDS,
 * the table of docs/configuration.md, "kube-proxy's flags and config file", shows); a field that
 * does not apply to kpr (iptables/IPVS/nftables/Windows tuning, kernel
 * sysctls, klog, feature gates) is accepted and, when set, named in one info
 * line. A field that is not in v1alpha1 is decoded leniently, as kube-proxy
 * does for v1alpha1 ("Using lenient decoding as strict decoding failed",
 * cmd/kube-proxy/app/options.go): it is ignored and its path returned in
 * `unknown`, for the agent's one warning line. A value of the wrong type for
 * a known field stays an error naming its path.
 *
 * As kube-proxy's defaulting does, an empty, zero or null value means "the
 * default", and the default is kpr's (e.g. healthzBindAddress "" is
 * 0.0.0.0:10256, syncPeriod 0s is 30s).
 */
import { DurationError, parseGoDuration } from './duration.js';

export const KUBE_PROXY_CONFIG_GROUP = 'kubeproxy.config.k8s.io';
export const KUBE_PROXY_CONFIG_API_VERSION = `${KUBE_PROXY_CONFIG_GROUP}/v1alpha1`;
export const KUBE_PROXY_CONFIG_KIND = 'KubeProxyConfiguration';

/** kube-proxy's default ports, appended to a bind address given without one (proxyutil.AppendPortIfNeeded). */
const HEALTHZ_PORT = 10256;
const METRICS_PORT = 10249;

type ValueType = 'string' | 'bool' | 'int' | 'number' | 'duration' | 'strings' | 'boolMap' | 'object';

/** A leaf: its Go type, and either the kpr flag it becomes or why it does not apply. */
interface Leaf {
  type: ValueType;
  /** The kpr flag (`--name`) this field sets; with `ignored` too, only when the agent has that flag. */
  flag?: string;
  /** Why kpr ignores it (docs/configuration.md's table); with `flag`, while the agent has no such flag. */
  ignored?: string;
  /** Only for sync periods: the proxy mode whose section is read (kube-proxy's conversion picks by mode). */
  mode?: 'iptables' | 'ipvs' | 'nftables';
}
interface Section {
  fields: Record<string, Leaf>;
}
type Field = Leaf | Section;

const isSection = (f: Field): f is Section => 'fields' in f;

const PROXY_RULES = 'kube-proxy rule programming; kpr has no iptables/IPVS/nftables rules';
const syncPeriods = (mode: 'iptables' | 'ipvs' | 'nftables') =>
  ({
    syncPeriod: { type: 'duration', flag: '--sync-period', mode },
    minSyncPeriod: { type: 'duration', flag: '--min-sync-period', mode },
  }) satisfies Record<string, Leaf>;

/**
 * Every v1alpha1 field (k8s.io/kube-proxy/config/v1alpha1/types.go), as kpr reads it.
 * The sync periods of the section of `mode` (iptables when mode is unset or
 * anything else) are kpr's --sync-period/--min-sync-period, the other
 * sections' are ignored: kube-proxy's own v1alpha1 conversion does the same.
 */
export const KUBE_PROXY_CONFIG_FIELDS: Record<string, Field> = {
  featureGates: { type: 'boolMap', ignored: "kube-proxy's feature gates" },
  clientConnection: {
    fields: {
      kubeconfig: { type: 'string', flag: '--kubeconfig' },
      acceptContentTypes: { type: 'string', ignored: 'kpr speaks JSON to the API server' },
      contentType: { type: 'string', ignored: 'kpr speaks JSON to the API server' },
      qps: { type: 'number', ignored: 'kpr only lists and watches; no client-side rate limiter' },
      burst: { type: 'int', ignored: 'kpr only lists and watches; no client-side rate limiter' },
    },
  },
  logging: { type: 'object', ignored: 'klog settings; kpr logs JSON, see --log-level and -v' },
  hostnameOverride: { type: 'string', flag: '--node-name' },
  bindAddress: { type: 'string', ignored: "kube-proxy's idea of the node IP; kpr reads the Node object" },
  healthzBindAddress: { type: 'string', flag: '--healthz-bind-address' },
  metricsBindAddress: { type: 'string', flag: '--metrics-bind-address' },
  bindAddressHardFail: { type: 'bool', ignored: 'kpr always retries a busy port every 5 s (bindAddressHardFail: false)' },
  enableProfiling: { type: 'bool', ignored: 'no /debug/pprof' },
  showHiddenMetricsForVersion: { type: 'string', ignored: "kube-proxy's metrics" },
  mode: {
    type: 'string',
    ignored: "kpr is its own mode (eBPF); it picks which section's syncPeriod is read, and nftables makes nodePortAddresses default to primary",
  },
  iptables: {
    fields: {
      masqueradeBit: { type: 'int', ignored: PROXY_RULES },
      masqueradeAll: { type: 'bool', ignored: PROXY_RULES },
      localhostNodePorts: { type: 'bool', ignored: PROXY_RULES },
      snatNodeInternalIP: { type: 'bool', ignored: PROXY_RULES },
      ...syncPeriods('iptables'),
    },
  },
  ipvs: {
    fields: {
      ...syncPeriods('ipvs'),
      scheduler: { type: 'string', ignored: PROXY_RULES },
      excludeCIDRs: { type: 'strings', ignored: PROXY_RULES },
      strictARP: { type: 'bool', ignored: PROXY_RULES },
      tcpTimeout: { type: 'duration', ignored: PROXY_RULES },
      tcpFinTimeout: { type: 'duration', ignored: PROXY_RULES },
      udpTimeout: { type: 'duration', ignored: PROXY_RULES },
    },
  },
  nftables: {
    fields: {
      masqueradeBit: { type: 'int', ignored: PROXY_RULES },
      masqueradeAll: { type: 'bool', ignored: PROXY_RULES },
      ...syncPeriods('nftables'),
    },
  },
  winkernel: {
    fields: {
      networkName: { type: 'string', ignored: 'Windows' },
      sourceVip: { type: 'string', ignored: 'Windows' },
      enableDSR: { type: 'bool', ignored: 'Windows' },
      rootHnsEndpointName: { type: 'string', ignored: 'Windows' },
      forwardHealthCheckVip: { type: 'bool', ignored: 'Windows' },
    },
  },
  detectLocalMode: { type: 'string', ignored: 'kpr tells local traffic by interface (--pod-interfaces), not by CIDR' },
  detectLocal: {
    fields: {
      bridgeInterface: { type: 'string', ignored: 'see --pod-interfaces' },
      interfaceNamePrefix: { type: 'string', ignored: 'see --pod-interfaces' },
    },
  },
  clusterCIDR: { type: 'string', ignored: 'kpr tells local traffic by interface (--pod-interfaces), not by CIDR' },
  nodePortAddresses: { type: 'strings', flag: '--node-port-addresses' },
  oomScoreAdj: { type: 'int', ignored: "set the pod's resources instead" },
  conntrack: {
    fields: {
      // kube-proxy sizes the kernel's nf_conntrack_max from these; kpr's own conntrack map takes them where the agent has the flags.
      maxPerCore: { type: 'int', flag: '--conntrack-max-per-core', ignored: "the kernel's nf_conntrack_max sysctl; kpr does not change sysctls" },
      min: { type: 'int', flag: '--conntrack-min', ignored: "the kernel's nf_conntrack_max sysctl; kpr does not change sysctls" },
      tcpEstablishedTimeout: { type: 'duration', flag: '--ct-tcp-timeout' },
      tcpCloseWaitTimeout: { type: 'duration', ignored: "the kernel's CLOSE_WAIT sysctl; kpr's own after-FIN timeout is --ct-tcp-closing-timeout" },
      tcpBeLiberal: { type: 'bool', ignored: "the kernel's nf_conntrack_tcp_be_liberal sysctl" },
      udpTimeout: { type: 'duration', flag: '--ct-udp-timeout' },
      udpStreamTimeout: { type: 'duration', ignored: "the kernel's UDP stream sysctl; kpr has one UDP timeout (--ct-udp-timeout)" },
    },
  },
  configSyncPeriod: { type: 'duration', ignored: "the informers' periodic resync; kpr's watches relist only on errors, --sync-period repairs the maps" },
  portRange: { type: 'string', ignored: 'unused by kube-proxy too (the userspace proxy)' },
  windowsRunAsService: { type: 'bool', ignored: 'Windows' },
  udpIdleTimeout: { type: 'duration', ignored: 'a field of older v1alpha1 versions (the userspace proxy)' },
};

export class KubeProxyConfigError extends Error {}

export interface KubeProxyConfigArgs {
  /** kpr flag tokens ("--node-name=n1"), to be parsed like a kpr --config file's. */
  args: string[];
  /** Paths of set fields kpr ignores ("mode", "iptables.masqueradeAll", "featureGates"), in file order. */
  ignored: string[];
  /** Paths of fields v1alpha1 does not have ("conntrack.tcpTimeout"), decoded leniently (ignored), in file order. */
  unknown: string[];
  /** The file's `mode`, when set ("nftables"): it picks kube-proxy's per-mode defaults (nodePortAddressesForMode). */
  proxyMode?: string;
  /** The file's `conntrack` section as written (type-checked; unknown fields left out): kpr conntrack-sysctls reads it. */
  conntrack: Record<string, unknown>;
}

/** True when a --config document is a KubeProxyConfiguration (its apiVersion or kind says so). */
export function isKubeProxyConfiguration(doc: Record<string, unknown>): boolean {
  return doc.kind === KUBE_PROXY_CONFIG_KIND || (typeof doc.apiVersion === 'string' && doc.apiVersion.startsWith(`${KUBE_PROXY_CONFIG_GROUP}/`));
}

/**
 * kube-proxy's nodePortAddresses keywords in kpr's terms: "all" is every
 * address (0.0.0.0/0 and ::/0), "primary" stays (kpr has it), CIDRs stay;
 * "localhost" (NodePorts on loopback, iptables mode only) kpr does not serve.
 */
export function kubeProxyNodePortAddresses(values: readonly string[], where: string): string[] {
  const out: string[] = [];
  for (const v of values
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter(Boolean)) {
    if (v === 'all') out.push('0.0.0.0/0', '::/0');
    else if (v === 'localhost') throw new KubeProxyConfigError(`${where}: "localhost" (NodePorts on loopback addresses) is not served by kpr; remove it`);
    else out.push(v);
  }
  return out;
}

/**
 * kube-proxy's per-mode default of nodePortAddresses: with none given, the
 * nftables mode serves NodePorts on the node's primary addresses only
 * (`primary`); iptables, IPVS and an unset mode on every address (empty).
 * `mode` is kube-proxy's (`--proxy-mode` or the config file's `mode`).
 */
export function nodePortAddressesForMode(addresses: readonly string[], mode: string | undefined): string[] {
  if (addresses.length === 0 && mode === 'nftables') return ['primary'];
  return [...addresses];
}

/** "0.0.0.0" → "0.0.0.0:10256", "::" → "[::]:10256"; one with a port stays (proxyutil.AppendPortIfNeeded). */
function appendPortIfNeeded(addr: string, port: number): string {
  if (/^\[.*\]:\d+$/.test(addr) || /^[^:]+:\d+$/.test(addr)) return addr;
  const bare = addr.replace(/^\[(.*)\]$/, '$1');
  return bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
}

const TYPE_NAMES: Record<ValueType, string> = {
  string: 'a string',
  bool: 'true or false',
  int: 'an integer',
  number: 'a number',
  duration: 'a duration string such as 30s or 24h0m0s',
  strings: 'a list of strings',
  boolMap: 'a mapping of names to true/false',
  object: 'a mapping',
};

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Whether `value` has the Go type `type` (null is every type's zero value). */
function typeOk(type: ValueType, value: unknown): boolean {
  if (value === null) return true;
  switch (type) {
    case 'string':
    case 'duration':
      return typeof value === 'string';
    case 'bool':
      return typeof value === 'boolean';
    case 'int':
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'strings':
      return Array.isArray(value) && value.every((s) => typeof s === 'string');
    case 'boolMap':
      return isRecord(value) && Object.values(value).every((b) => typeof b === 'boolean');
    case 'object':
      return isRecord(value);
  }
}

/** Whether a value is set, i.e. not its type's zero (kube-proxy's defaulting replaces those). */
function isSet(type: ValueType, value: unknown): boolean {
  if (value === null || value === undefined || value === '' || value === false || value === 0) return false;
  if (type === 'duration') return parseGoDuration(value as string) !== 0n;
  if (Array.isArray(value)) return value.length > 0;
  if (isRecord(value)) return Object.values(value).some((v) => isSet('object', v));
  if (type === 'object' && value === '0') return false; // a resource quantity "0" (logging's infoBufferSize)
  return true;
}

/** Whether a field sets a kpr flag, given which flags the agent has (`hasFlag("--sync-period")`). */
export function mapsToFlag(leaf: Leaf, hasFlag: (flag: string) => boolean): boolean {
  return leaf.flag !== undefined && (leaf.ignored === undefined || hasFlag(leaf.flag));
}

/**
 * A KubeProxyConfiguration document → kpr flag tokens and the ignored fields
 * that are set. `source` names the file in errors; `hasFlag` says which kpr
 * flags exist (a field whose flag the agent lacks is ignored).
 */
export function kubeProxyConfigArgs(doc: Record<string, unknown>, source: string, hasFlag: (flag: string) => boolean = () => true): KubeProxyConfigArgs {
  const fail = (msg: string) => new KubeProxyConfigError(`${source}: ${msg}`);
  if (doc.apiVersion !== KUBE_PROXY_CONFIG_API_VERSION) {
    throw fail(`apiVersion ${JSON.stringify(doc.apiVersion ?? null)} is not supported (kpr reads ${KUBE_PROXY_CONFIG_API_VERSION})`);
  }
  if (doc.kind !== KUBE_PROXY_CONFIG_KIND) throw fail(`kind ${JSON.stringify(doc.kind ?? null)}: expected ${KUBE_PROXY_CONFIG_KIND}`);
  const mode = typeof doc.mode === 'string' && (doc.mode === 'ipvs' || doc.mode === 'nftables') ? doc.mode : 'iptables';
  const args: string[] = [];
  const ignored: string[] = [];
  const unknown: string[] = [];
  let conntrack: Record<string, unknown> = {};

  const leaf = (path: string, spec: Leaf, value: unknown) => {
    if (!typeOk(spec.type, value)) throw fail(`${path}: expected ${TYPE_NAMES[spec.type]}, not ${JSON.stringify(value)}`);
    if (spec.type === 'duration' && typeof value === 'string') {
      let ns: bigint;
      try {
        ns = parseGoDuration(value);
      } catch (err) {
        if (err instanceof DurationError) throw fail(`${path}: ${err.message}`);
        throw err;
      }
      if (ns < 0n) throw fail(`${path}: ${JSON.stringify(value)} is negative`);
    }
    const set = isSet(spec.type, value);
    if (!mapsToFlag(spec, hasFlag) || (spec.mode !== undefined && spec.mode !== mode)) {
      if (set) ignored.push(path);
      return;
    }
    if (!set) return; // zero: the default (kpr's)
    switch (spec.flag) {
      case '--healthz-bind-address':
        args.push(`${spec.flag}=${appendPortIfNeeded(value as string, HEALTHZ_PORT)}`);
        break;
      case '--metrics-bind-address':
        args.push(`${spec.flag}=${appendPortIfNeeded(value as string, METRICS_PORT)}`);
        break;
      case '--node-port-addresses':
        args.push(`${spec.flag}=${kubeProxyNodePortAddresses(value as string[], `${source}: ${path}`).join(',')}`);
        break;
      default:
        args.push(`${spec.flag}=${String(value)}`);
    }
  };

  const walk = (obj: Record<string, unknown>, fields: Record<string, Field>, prefix: string) => {
    for (const [key, value] of Object.entries(obj)) {
      const path = prefix + key;
      if (!prefix && (key === 'apiVersion' || key === 'kind')) continue;
      const spec = Object.hasOwn(fields, key) ? fields[key] : undefined;
      if (!spec) {
        unknown.push(path); // kube-proxy's lenient decoding of v1alpha1: an unknown field is dropped
        continue;
      }
      if (isSection(spec)) {
        if (value === null) continue;
        if (!isRecord(value)) throw fail(`${path}: expected a mapping, not ${JSON.stringify(value)}`);
        walk(value, spec.fields, `${path}.`);
        if (path === 'conntrack') conntrack = Object.fromEntries(Object.entries(value).filter(([k]) => Object.hasOwn(spec.fields, k)));
      } else {
        leaf(path, spec, value);
      }
    }
  };
  walk(doc, KUBE_PROXY_CONFIG_FIELDS, '');
  const proxyMode = typeof doc.mode === 'string' && doc.mode !== '' ? doc.mode : undefined;
  return { args, ignored, unknown, ...(proxyMode === undefined ? {} : { proxyMode }), conntrack };
}

/** Every leaf of KUBE_PROXY_CONFIG_FIELDS as [path, leaf] (docs/configuration.md's table; tests). */
export function kubeProxyConfigLeaves(): Array<[string, Leaf]> {
  const out: Array<[string, Leaf]> = [];
  const walk = (fields: Record<string, Field>, prefix: string) => {
    for (const [k, f] of Object.entries(fields)) {
      if (isSection(f)) walk(f.fields, `${prefix}${k}.`);
      else out.push([prefix + k, f]);
    }
  };
  walk(KUBE_PROXY_CONFIG_FIELDS, '');
  return out;
}

/** The message of the one info line naming the ignored kube-proxy settings. */
export const IGNORED_KUBE_PROXY_SETTINGS_MESSAGE = 'kube-proxy settings that do not apply to kpr, ignored';

/** Logs the ignored kube-proxy flags and config fields (AgentConfig.ignoredKubeProxySettings) in one info line, if any. */
export function logIgnoredKubeProxySettings(settings: readonly string[], log: { info(msg: string, fields?: Record<string, unknown>): void }): void {
  if (settings.length) log.info(IGNORED_KUBE_PROXY_SETTINGS_MESSAGE, { settings: settings.join(', ') });
}

/** The message of the warning line naming a kube-proxy config file's fields that v1alpha1 does not have. */
export const UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE = `kube-proxy config fields not in ${KUBE_PROXY_CONFIG_API_VERSION}, ignored (lenient decoding, as kube-proxy)`;

/** A config file's fields that its kind does not have, decoded leniently. */
export interface UnknownConfigFields {
  file: string;
  fields: string[];
}

/** One warning line per file with unknown kube-proxy config fields (AgentConfig.unknownKubeProxyFields). */
export function logUnknownKubeProxyFields(files: readonly UnknownConfigFields[], log: { warn(msg: string, fields?: Record<string, unknown>): void }): void {
  for (const f of files) if (f.fields.length) log.warn(UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE, { file: f.file, fields: f.fields.join(', ') });
}
