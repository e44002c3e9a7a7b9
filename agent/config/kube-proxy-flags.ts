/**
 * kube-proxy's command-line flags on kpr-agent, so a kube-proxy DaemonSet's
 * `command:` can be reused: kubeadm's runs
 * `kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)`.
 *
 * - Flags spelled the same in both (--config, --kubeconfig,
 *   --healthz-bind-address, --metrics-bind-address, --v) need nothing here.
 * - KUBE_PROXY_FLAG_ALIASES are rewritten to kpr's flag of the same meaning.
 * - KUBE_PROXY_IGNORED_FLAGS are accepted with their value and dropped; the
 *   agent names them in one info line (they tune iptables/IPVS/nftables,
 *   kernel sysctls or klog, none of which kpr has).
 * - KUBE_PROXY_REFUSED_FLAGS would change what the process does (another API
 *   server, a one-shot cleanup): an error with kpr's way to do it, never
 *   silently ignored.
 *
 * Syntax as kube-proxy's (Go pflag): `--flag=value` or `--flag value`;
 * boolean flags only as `--flag` or `--flag=true|false`.
 */

/** kube-proxy flag → kpr flag (both take a value). */
export const KUBE_PROXY_FLAG_ALIASES: Readonly<Record<string, string>> = {
  'hostname-override': 'node-name',
  'nodeport-addresses': 'node-port-addresses',
  'conntrack-tcp-timeout-established': 'ct-tcp-timeout',
  'conntrack-udp-timeout': 'ct-udp-timeout',
  // kube-proxy's sync periods of its default (iptables) mode; kpr has one of each.
  'iptables-sync-period': 'sync-period',
  'iptables-min-sync-period': 'min-sync-period',
};

/** kube-proxy flags with no meaning for kpr: name → whether it is boolean (takes no separate value). */
export const KUBE_PROXY_IGNORED_FLAGS: Readonly<Record<string, boolean>> = {
  'bind-address': false,
  'bind-address-hard-fail': true,
  'cluster-cidr': false,
  'config-sync-period': false,
  'conntrack-max-per-core': false,
  'conntrack-min': false,
  'conntrack-tcp-be-liberal': true,
  'conntrack-tcp-timeout-close-wait': false,
  'conntrack-udp-timeout-stream': false,
  'detect-local-mode': false,
  'feature-gates': false,
  'iptables-localhost-nodeports': true,
  'iptables-masquerade-bit': false,
  'ipvs-exclude-cidrs': false,
  'ipvs-min-sync-period': false,
  'ipvs-scheduler': false,
  'ipvs-strict-arp': true,
  'ipvs-sync-period': false,
  'ipvs-tcp-timeout': false,
  'ipvs-tcpfin-timeout': false,
  'ipvs-udp-timeout': false,
  'kube-api-burst': false,
  'kube-api-content-type': false,
  'kube-api-qps': false,
  'log-flush-frequency': false,
  'logging-format': false,
  'masquerade-all': true,
  'oom-score-adj': false,
  'pod-bridge-interface': false,
  'pod-interface-name-prefix': false,
  profiling: true,
  'proxy-mode': false,
  'proxy-port-range': false,
  'show-hidden-metrics-for-version': false,
  'udp-timeout': false,
  vmodule: false,
  'windows-service': true,
};

/** kube-proxy flags kpr refuses, with what to use instead. */
export const KUBE_PROXY_REFUSED_FLAGS: Readonly<Record<string, string>> = {
  master: 'kpr-agent has no --master: use --k8s-service-host/--k8s-service-port or --kubeconfig',
  cleanup: 'kpr-agent has no --cleanup: run `kpr cleanup-kube-proxy` on the node',
  'write-config-to': 'kpr-agent cannot write a kube-proxy config',
  'init-only': 'kpr-agent has no --init-only',
};

export interface TranslatedFlags {
  /** argv with aliases rewritten to kpr's flags and ignored flags removed. */
  argv: string[];
  /** The ignored kube-proxy flags, as "--name", in order, each once. */
  ignored: string[];
  /** The value of the last --proxy-mode (ignored, but it picks kube-proxy's per-mode defaults). */
  proxyMode?: string;
}

/**
 * Rewrites kube-proxy's flags in `argv` to kpr's. `kprFlag(name)` says
 * whether kpr has a flag of that name and whether it takes a value: kpr's
 * own flags pass through untouched (also one spelled like an ignored
 * kube-proxy flag, once kpr has it), and the word after one that takes a
 * value is never mistaken for a flag. Everything after `--` is left alone.
 */
export function translateKubeProxyFlags(argv: readonly string[], kprFlag: (name: string) => 'value' | 'boolean' | undefined): TranslatedFlags {
  const out: string[] = [];
  const ignored: string[] = [];
  let proxyMode: string | undefined;
  // Repeated --nodeport-addresses (a pflag string slice) add up; kpr's flag keeps the last, so they are joined
  // into the first one's place.
  let nodePorts: { at: number; values: string[] } | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^--([^=]+)(?:=([\s\S]*))?$/.exec(arg);
    if (!m) {
      out.push(arg);
      continue;
    }
    const [, name, inline] = m;
    const own = kprFlag(name);
    const refused = own ? undefined : KUBE_PROXY_REFUSED_FLAGS[name];
    if (refused !== undefined) throw new Error(`--${name}: ${refused}`);
    const alias = own ? undefined : KUBE_PROXY_FLAG_ALIASES[name];
    const ignoredBool = own ? undefined : KUBE_PROXY_IGNORED_FLAGS[name];
    if (alias === undefined && ignoredBool === undefined) {
      out.push(arg);
      // One of kpr's own flags (or an unknown one, for parseArgs to refuse): a value (the next word) passes through.
      if (inline === undefined && own === 'value' && i + 1 < argv.length) out.push(argv[++i]);
      continue;
    }
    let value = inline;
    if (value === undefined && ignoredBool !== true) {
      if (i + 1 >= argv.length) throw new Error(`--${name} (a kube-proxy flag) needs a value`);
      value = argv[++i];
    }
    if (alias === undefined) {
      if (value !== undefined && value !== 'true' && value !== 'false' && ignoredBool)
        throw new Error(`--${name} (a kube-proxy flag) is true or false, not "${value}"`);
      if (!ignored.includes(`--${name}`)) ignored.push(`--${name}`);
      if (name === 'proxy-mode') proxyMode = value;
    } else if (name === 'nodeport-addresses') {
      if (nodePorts) nodePorts.values.push(value!);
      else {
        nodePorts = { at: out.length, values: [value!] };
        out.push('');
      }
    } else {
      out.push(`--${alias}=${value}`);
    }
  }
  if (nodePorts) out[nodePorts.at] = `--${KUBE_PROXY_FLAG_ALIASES['nodeport-addresses']}=${nodePorts.values.join(',')}`;
  return { argv: out, ignored, ...(proxyMode ? { proxyMode } : {}) };
}
