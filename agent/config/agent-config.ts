/**
 * The agent's configuration: command-line flags with kube-proxy-like names,
 * defaults resolved from the host (cgroup v2 mount, hostname).
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { expandConfigFile, type FlagTable } from './config-file.js';
import { checkK8sServiceHost } from './k8s-service-host.js';
import { kubeProxyNodePortAddresses, nodePortAddressesForMode, type UnknownConfigFields } from './kube-proxy-config.js';
import { translateKubeProxyFlags } from './kube-proxy-flags.js';
import { parseDuration } from './duration.js';
import { findCgroup2Mount } from '../runtime/cgroup.js';
import { levelFromVerbosity, type LogLevel } from '../log/log.js';
import { defaultBpfObject } from '../runtime/paths.js';
import { parseCIDR } from '../net/ip.js';
import { parseBindAddress } from '../net/listen-address.js';
import { TC_ATTACH_SETTINGS, type TcAttachSetting } from '../datapath/tc-hooks.js';
import type { MapCapacities } from '../maps/capacities.js';
import type { UdpTerminationSetting } from '../datapath/udp-terminator.js';
import {
  CONNTRACK_MAX_PER_CORE_DEFAULT,
  CONNTRACK_MIN_DEFAULT,
  MAP_SIZE_SETTINGS,
  MAP_SIZE_SETTING_NAMES,
  parseMapSize,
  parseSizeRatio,
  type MapSizeOptions,
} from '../datapath/map-sizes.js';

export interface AgentConfig {
  kubeconfig?: string;
  /** API server host the agent uses instead of the `kubernetes` ClusterIP it implements (chart value k8sServiceHost). */
  k8sServiceHost?: string;
  /** API server port to go with k8sServiceHost. */
  k8sServicePort?: number;
  nodeName: string;
  cgroupPath: string;
  bpffsDir: string;
  bpfObject: string;
  logLevel: LogLevel;
  /** Full resync (drift repair) interval, as kube-proxy's syncPeriod. */
  syncPeriodMs: number;
  /** Shortest gap between two syncs; changes arriving meanwhile are coalesced. */
  minSyncPeriodMs: number;
  /** Health server (/healthz, /livez) "IP:port", as kube-proxy's healthzBindAddress; "" disables it. */
  healthzBindAddress: string;
  /** Metrics server (/metrics, /healthz, /proxyMode) "IP:port", as kube-proxy's metricsBindAddress; "" disables it. */
  metricsBindAddress: string;
  /** Network namespace (path) whose interfaces and addresses are the node's; undefined = the agent's own. */
  netns?: string;
  /** Interface name patterns where traffic from outside the node arrives (NodePort, LoadBalancer, externalIPs). */
  externalInterfaces: string[];
  /** Interface name patterns facing local pods (reverse NAT of local backends; service-mesh mode DNAT). */
  podInterfaces: string[];
  /** kube-proxy's nodePortAddresses: CIDRs, or "primary" for the Node's InternalIPs; empty = every node address. */
  nodePortAddresses: string[];
  /** Service-mesh mode: socket hooks serve only the node's own processes; pods go through tc. */
  socketLbHostOnly: boolean;
  /** Only spec.externalIPs inside these CIDRs are programmed; empty = every externalIP (CVE-2020-8554 defence). */
  externalIPCidrs: string[];
  /** Apply loadBalancerSourceRanges to NodePorts and externalIPs as well. */
  sourceRangesAllExternal: boolean;
  /** --lb-algorithm: the node's default backend selection; a Service's annotation overrides it (rule 40 of docs/semantics.md). */
  lbAlgorithm: 'random' | 'maglev';
  /**
   * --service-cluster-ip-range's entries, as given: the service ranges where
   * the API serves no ServiceCIDR. Checked by agent/plan/service-ranges.ts
   * at run time (a bad entry is logged, counted and left out; never fatal).
   */
  serviceClusterIPRange: string[];
  /** Per-frontend datapath counters (kpr_svc_stats, kpr_service_*_total). */
  serviceCounters: boolean;
  /**
   * Pods' traffic is masqueraded where kube-proxy masquerades it (external
   * addresses of eTP=Cluster Services, hairpin): KPR_CFG_F_MASQ_POD, rules 35
   * and 36 of docs/semantics.md. false: the socket path connects pods straight
   * to the endpoint, which sees the pod address.
   */
  masqueradePodTraffic: boolean;
  ctTcpTimeoutS: number;
  ctTcpClosingTimeoutS: number;
  ctUdpTimeoutS: number;
  ctSweepIntervalMs: number;
  /** How tc programs are attached: tcx links (6.6+), clsact filters (any kernel), or auto (tcx when the kernel has it). */
  tcAttach: TcAttachSetting;
  /** How connected UDP sockets of a removed backend are destroyed: auto (bpf_sock_destroy, else netlink sock_diag), bpf, netlink. */
  udpTermination: UdpTerminationSetting;
  /** BPF map capacities: --map-size-*, --bpf-map-dynamic-size-ratio, --conntrack-* (agent/datapath/map-sizes.ts). */
  mapSizeOptions: MapSizeOptions;
  /**
   * Test knob, from the environment (KPR_TEST_MAP_CAPACITIES="svc=40,backend=30"):
   * Services are admitted against these entry counts where they are below the
   * maps' max_entries, so a test can overfill a map of a few entries without
   * making the map itself that small (for that: --map-size-*).
   */
  testMapCapacities?: Partial<MapCapacities>;
  /**
   * kube-proxy settings given to the agent that kpr has no use for: flags
   * ("--cluster-cidr") and set KubeProxyConfiguration fields ("mode",
   * "iptables.masqueradeAll"). The agent names them in one info line.
   */
  ignoredKubeProxySettings: string[];
  /** Per KubeProxyConfiguration file: its fields v1alpha1 does not have, decoded leniently (one warning line each). */
  unknownKubeProxyFields: UnknownConfigFields[];
}

export { parseDuration };

/** The environment variable of AgentConfig.testMapCapacities. */
export const TEST_MAP_CAPACITIES_ENV = 'KPR_TEST_MAP_CAPACITIES';

/** "svc=40,backend=30" → { svc: 40, backend: 30 }; keys are MapCapacities' (svc, backend, affinityMatch, srcRange). */
export function parseTestMapCapacities(text: string): Partial<MapCapacities> {
  const out: Partial<MapCapacities> = {};
  const keys: ReadonlyArray<keyof MapCapacities> = ['svc', 'backend', 'affinityMatch', 'srcRange'];
  for (const part of list(text)) {
    const m = /^(\w+)=(\d+)$/.exec(part);
    const key = m?.[1] as keyof MapCapacities | undefined;
    if (!m || !key || !keys.includes(key))
      throw new Error(`invalid ${TEST_MAP_CAPACITIES_ENV} entry "${part}" (e.g. svc=40,backend=30; keys: ${keys.join(', ')})`);
    out[key] = Number(m[2]);
  }
  return out;
}

/** The map-size flags' values, each checked now (agent/datapath/map-sizes.ts). */
export function mapSizeOptions(values: Readonly<Record<string, unknown>>): MapSizeOptions {
  const explicit: MapSizeOptions['explicit'] = {};
  for (const setting of MAP_SIZE_SETTING_NAMES) {
    const flag = MAP_SIZE_SETTINGS[setting].flag;
    const v = values[flag];
    if (typeof v === 'string' && v !== '') explicit[setting] = parseMapSize(v, flag);
  }
  const str = (flag: string, dflt: number) => (typeof values[flag] === 'string' && values[flag] !== '' ? (values[flag] as string) : String(dflt));
  return {
    explicit,
    dynamicSizeRatio: parseSizeRatio(str('bpf-map-dynamic-size-ratio', 0)),
    conntrackMaxPerCore: parseMapSize(str('conntrack-max-per-core', CONNTRACK_MAX_PER_CORE_DEFAULT), 'conntrack-max-per-core', 0),
    conntrackMin: parseMapSize(str('conntrack-min', CONNTRACK_MIN_DEFAULT), 'conntrack-min', 0),
  };
}

/** --udp-termination values. */
export const UDP_TERMINATION_SETTINGS = ['auto', 'bpf', 'netlink'] as const satisfies readonly UdpTerminationSetting[];

export const DEFAULT_BPFFS_DIR = '/sys/fs/bpf/kpr';

export const USAGE = `Usage: kpr-agent [flags]
  --config PATH            YAML file of flag values (keys are flag names), or kube-proxy's own config file
                           (a KubeProxyConfiguration, e.g. kubeadm's config.conf); flags given here override it.
                           Twice: kube-proxy's file and kpr's; kpr's keys win over kube-proxy's fields
  --kubeconfig PATH        kubeconfig file (default: in-cluster config, then ~/.kube/config)
  --k8s-service-host HOST  API server host, instead of the kubernetes Service ClusterIP (needed in-cluster without kube-proxy)
  --k8s-service-port PORT  API server port to go with --k8s-service-host
  --node-name NAME         this node's name (default: $NODE_NAME, then the hostname)
  --cgroup-path PATH       cgroup v2 directory the socket hooks attach to (default: the cgroup2 mount)
  --bpffs PATH             directory in the BPF filesystem for kpr's pins (default: ${DEFAULT_BPFFS_DIR})
  --bpf-object PATH        compiled datapath object (default: build/kpr_sock.bpf.o); the other objects and
                           libkpr_batch_writer.so are found beside it
  --sync-period DURATION   full resync interval (default: 30s)
  --min-sync-period DUR    coalescing window between syncs (default: 0s)
  --healthz-bind-address A health server IP:port, /healthz and /livez (default: 0.0.0.0:10256; empty disables)
  --metrics-bind-address A metrics server IP:port, /metrics (default: 127.0.0.1:10249; empty disables)
  --netns PATH             network namespace whose interfaces are the node's (default: the agent's own)
  --external-interfaces L  interface patterns where outside traffic arrives, e.g. "eth0,ens*" (default: eth*,ens*,enp*,eno*,bond*)
  --pod-interfaces L       interface patterns facing local pods, e.g. "veth*,cni0" (default: veth*,lxc*,cali*,cni*,eni*,vlan*)
  --node-port-addresses L  CIDRs or "primary" for the Node's InternalIPs (default: every node address; "primary"
                           when kube-proxy's mode, --proxy-mode or the config's mode, is nftables)
  --external-ip-cidrs L    only program spec.externalIPs inside these CIDRs, e.g. "203.0.113.0/24,2001:db8:1::/48"
                           (default: every externalIP; see CVE-2020-8554 in docs/architecture.md)
  --service-cluster-ip-range L  the cluster's service ranges, as kube-apiserver's flag, e.g. "198.18.0.0/16,2001:db8::/108"
                           (at most one per family); used where the API serves no ServiceCIDR objects. Unallocated
                           addresses of a range are refused (socket hooks) and dropped (tc) (default: none)
  --socket-lb-host-only    service-mesh mode: socket hooks serve only host processes; pod traffic is balanced by tc
  --source-ranges-all-external  enforce loadBalancerSourceRanges on NodePorts and externalIPs too
  --lb-algorithm ALG       random|maglev: how a new connection picks a backend; maglev gives every node the same
                           backend for a client's flow; a Service's kpr.dev/lb-algorithm annotation overrides it
                           (default: random)
  --service-counters B     true|false: per-Service datapath counters, kpr_service_*_total (default: true)
  --masquerade-pod-traffic B  true|false: a pod's traffic to a NodePort, LoadBalancer IP or externalIP of an
                           externalTrafficPolicy=Cluster Service, and hairpin traffic, reach the endpoint from a node
                           address, as with kube-proxy (default: true; false: the endpoint sees the pod address)
  --ct-tcp-timeout DUR     conntrack timeout of established TCP flows on the tc path (default: 86400s, as kube-proxy)
  --ct-tcp-closing-timeout DUR  after FIN/RST (default: 10s)
  --ct-udp-timeout DUR     UDP flows (default: 30s)
  --ct-sweep-interval DUR  how often expired conntrack entries are removed (default: 10s)
  --tc-attach MODE         auto|tcx|tc: how tc programs attach; tcx links (kernel 6.6+) or a clsact qdisc with a
                           cls_bpf filter (older kernels); auto picks tcx when the kernel has it (default: auto)
  --udp-termination MODE   destroying connected UDP sockets of a removed backend: auto (bpf_sock_destroy on 6.5+,
                           else netlink sock_diag), bpf, netlink (default: auto)
  --map-size-services N    kpr_svc entries: a frontend plus one per backend of each frontend (default: 262144)
  --map-size-frontends N   frontend ids (Service ports x addresses): kpr_svc_meta, kpr_svc_stats, kpr_vip
                           (default: a quarter of --map-size-services)
  --map-size-backends N    kpr_backend entries, one per distinct backend; also kpr_aff_match (default: 262144)
  --map-size-revnat N      kpr_revnat entries, translated UDP sockets (LRU, default: 262144)
  --map-size-affinity N    kpr_affinity entries, ClientIP session affinity (LRU, default: 65536)
  --map-size-conntrack N   kpr_ct entries, flows on the tc path (LRU; default: from --conntrack-* as kube-proxy's
                           nf_conntrack_max)
  --map-size-source-ranges N  kpr_src_range entries, loadBalancerSourceRanges CIDRs per frontend (default: 16384)
  --map-size-maglev N      kpr_maglev entries, Maglev table chunks of 1024 slots, 2 KiB each, preallocated
                           (default: 4096)
  --bpf-map-dynamic-size-ratio R  size kpr_ct, kpr_revnat and kpr_affinity from R x the node's memory (0-1, e.g.
                           0.0025; never below their defaults; default 0: off)
  --conntrack-max-per-core N  kpr_ct = max(N x CPUs, --conntrack-min), as kube-proxy (default: ${CONNTRACK_MAX_PER_CORE_DEFAULT};
                           0: the compiled size)
  --conntrack-min N        (default: ${CONNTRACK_MIN_DEFAULT})
  --log-level LEVEL        error|warn|info|debug|trace (default: info)
  -v N                     klog-style verbosity (2 = debug, 4 = trace)
  -h, --help
kube-proxy's flags work too: --hostname-override (= --node-name), --nodeport-addresses (= --node-port-addresses),
--conntrack-tcp-timeout-established, --conntrack-udp-timeout, --iptables-sync-period, --iptables-min-sync-period;
those that do not apply to kpr (--cluster-cidr, --proxy-mode, --masquerade-all, …) are accepted and ignored.
Durations are Go durations (300ms, 30s, 1m30s, 24h0m0s) or a bare number of seconds.`;

const LEVELS: LogLevel[] = ['error', 'warn', 'info', 'debug', 'trace'];

/** "a, b,,c" → ["a", "b", "c"]. */
function list(text: string | undefined): string[] {
  return (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** A comma-separated CIDR list, each checked now (a typo must not silently allow or deny addresses). */
function cidrList(text: string | undefined, flag: string): string[] {
  const out = list(text);
  for (const c of out) if (!parseCIDR(c)) throw new Error(`invalid ${flag} entry "${c}" (a CIDR such as 203.0.113.0/24 or 2001:db8::/64)`);
  return out;
}

/** A bind address, validated now so a typo fails at start rather than in the server. */
function checkedBind(text: string, flag: string): string {
  parseBindAddress(text, flag);
  return text;
}

/** Whole seconds of a duration, at least 1 (the datapath counts in seconds). */
function seconds(text: string, flag: string): number {
  return Math.max(1, Math.round(parseDuration(text, flag) / 1000));
}

/**
 * The agent's flags (node:util parseArgs options). `--config` files are read
 * against this same table (agent/config/config-file.ts), so every flag added here is
 * also a config-file key.
 */
export const AGENT_FLAGS = {
  config: { type: 'string', multiple: true },
  kubeconfig: { type: 'string' },
  'k8s-service-host': { type: 'string' },
  'k8s-service-port': { type: 'string' },
  'node-name': { type: 'string' },
  'cgroup-path': { type: 'string' },
  bpffs: { type: 'string' },
  'bpf-object': { type: 'string' },
  'sync-period': { type: 'string', default: '30s' },
  'min-sync-period': { type: 'string', default: '0s' },
  'healthz-bind-address': { type: 'string', default: '0.0.0.0:10256' },
  'metrics-bind-address': { type: 'string', default: '127.0.0.1:10249' },
  netns: { type: 'string' },
  'external-interfaces': { type: 'string', default: 'eth*,ens*,enp*,eno*,bond*' },
  'pod-interfaces': { type: 'string', default: 'veth*,lxc*,cali*,cni*,eni*,vlan*' },
  'node-port-addresses': { type: 'string', default: '' },
  'external-ip-cidrs': { type: 'string', default: '' },
  'service-cluster-ip-range': { type: 'string', default: '' },
  'socket-lb-host-only': { type: 'boolean', default: false },
  'source-ranges-all-external': { type: 'boolean', default: false },
  'lb-algorithm': { type: 'string', default: 'random' },
  'service-counters': { type: 'string', default: 'true' },
  'masquerade-pod-traffic': { type: 'string', default: 'true' },
  'ct-tcp-timeout': { type: 'string', default: '86400s' },
  'ct-tcp-closing-timeout': { type: 'string', default: '10s' },
  'ct-udp-timeout': { type: 'string', default: '30s' },
  'ct-sweep-interval': { type: 'string', default: '10s' },
  'tc-attach': { type: 'string', default: 'auto' },
  'udp-termination': { type: 'string', default: 'auto' },
  // ---- BPF map sizes (agent/datapath/map-sizes.ts)
  'map-size-services': { type: 'string' },
  'map-size-frontends': { type: 'string' },
  'map-size-backends': { type: 'string' },
  'map-size-revnat': { type: 'string' },
  'map-size-affinity': { type: 'string' },
  'map-size-conntrack': { type: 'string' },
  'map-size-source-ranges': { type: 'string' },
  'map-size-maglev': { type: 'string' },
  'bpf-map-dynamic-size-ratio': { type: 'string', default: '0' },
  'conntrack-max-per-core': { type: 'string', default: String(CONNTRACK_MAX_PER_CORE_DEFAULT) },
  'conntrack-min': { type: 'string', default: String(CONNTRACK_MIN_DEFAULT) },
  'log-level': { type: 'string' },
  v: { type: 'string', short: 'v' },
  help: { type: 'boolean', short: 'h' },
} satisfies FlagTable;

function lbAlgorithm(text: string): 'random' | 'maglev' {
  if (text === 'random' || text === 'maglev') return text;
  throw new Error(`invalid --lb-algorithm "${text}" (random or maglev)`);
}

function trueOrFalse(text: string, flag: string): boolean {
  if (text === 'true') return true;
  if (text === 'false') return false;
  throw new Error(`invalid ${flag} "${text}" (true or false)`);
}

/** Whether `name` is one of the agent's flags, and whether it takes a value. */
const agentFlag = (name: string) => {
  const type = Object.hasOwn(AGENT_FLAGS, name) ? (AGENT_FLAGS as FlagTable)[name].type : undefined;
  return type === 'string' ? 'value' : type === 'boolean' ? 'boolean' : undefined;
};

export function parseAgentArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): AgentConfig | 'help' {
  const fromKubeProxy = translateKubeProxyFlags(argv, agentFlag);
  const expanded = expandConfigFile(fromKubeProxy.argv, AGENT_FLAGS);
  const { values } = parseArgs({
    args: expanded.args,
    options: AGENT_FLAGS,
  });
  if (values.help) return 'help';
  let logLevel: LogLevel = 'info';
  if (values.v !== undefined) logLevel = levelFromVerbosity(Number(values.v));
  if (values['log-level'] !== undefined) {
    if (!LEVELS.includes(values['log-level'] as LogLevel)) throw new Error(`invalid --log-level "${values['log-level']}" (one of ${LEVELS.join(', ')})`);
    logLevel = values['log-level'] as LogLevel;
  }
  const tcAttach = values['tc-attach']! as TcAttachSetting;
  if (!TC_ATTACH_SETTINGS.includes(tcAttach)) throw new Error(`invalid --tc-attach "${tcAttach}" (one of ${TC_ATTACH_SETTINGS.join(', ')})`);
  const nodeName = values['node-name'] ?? env.NODE_NAME ?? os.hostname();
  const udpTermination = values['udp-termination']!;
  if (!(UDP_TERMINATION_SETTINGS as readonly string[]).includes(udpTermination)) {
    throw new Error(`invalid --udp-termination "${udpTermination}" (one of ${UDP_TERMINATION_SETTINGS.join(', ')})`);
  }
  const port = values['k8s-service-port'];
  if (port !== undefined && !(/^\d+$/.test(port) && Number(port) >= 1 && Number(port) <= 65535)) {
    throw new Error(`invalid --k8s-service-port "${port}" (a port number, 1-65535)`);
  }
  const serviceHost = values['k8s-service-host'] || undefined;
  return {
    kubeconfig: values.kubeconfig ?? env.KUBECONFIG,
    k8sServiceHost: serviceHost === undefined ? undefined : checkK8sServiceHost(serviceHost),
    k8sServicePort: port === undefined ? undefined : Number(port),
    nodeName,
    cgroupPath: values['cgroup-path'] ?? findCgroup2Mount(),
    bpffsDir: values.bpffs ?? DEFAULT_BPFFS_DIR,
    bpfObject: values['bpf-object'] ?? defaultBpfObject(),
    logLevel,
    syncPeriodMs: parseDuration(values['sync-period']!, '--sync-period'),
    minSyncPeriodMs: parseDuration(values['min-sync-period']!, '--min-sync-period'),
    healthzBindAddress: checkedBind(values['healthz-bind-address']!, '--healthz-bind-address'),
    metricsBindAddress: checkedBind(values['metrics-bind-address']!, '--metrics-bind-address'),
    netns: values.netns || undefined,
    externalInterfaces: list(values['external-interfaces']),
    podInterfaces: list(values['pod-interfaces']),
    nodePortAddresses: nodePortAddressesForMode(
      kubeProxyNodePortAddresses(list(values['node-port-addresses']), '--node-port-addresses'),
      fromKubeProxy.proxyMode ?? expanded.proxyMode,
    ),
    externalIPCidrs: cidrList(values['external-ip-cidrs'], '--external-ip-cidrs'),
    socketLbHostOnly: values['socket-lb-host-only'] ?? false,
    sourceRangesAllExternal: values['source-ranges-all-external'] ?? false,
    lbAlgorithm: lbAlgorithm(values['lb-algorithm']!),
    serviceClusterIPRange: list(values['service-cluster-ip-range']),
    serviceCounters: trueOrFalse(values['service-counters']!, '--service-counters'),
    masqueradePodTraffic: trueOrFalse(values['masquerade-pod-traffic']!, '--masquerade-pod-traffic'),
    ctTcpTimeoutS: seconds(values['ct-tcp-timeout']!, '--ct-tcp-timeout'),
    ctTcpClosingTimeoutS: seconds(values['ct-tcp-closing-timeout']!, '--ct-tcp-closing-timeout'),
    ctUdpTimeoutS: seconds(values['ct-udp-timeout']!, '--ct-udp-timeout'),
    ctSweepIntervalMs: parseDuration(values['ct-sweep-interval']!, '--ct-sweep-interval'),
    tcAttach,
    udpTermination: udpTermination as UdpTerminationSetting,
    mapSizeOptions: mapSizeOptions(values),
    ...(env[TEST_MAP_CAPACITIES_ENV] ? { testMapCapacities: parseTestMapCapacities(env[TEST_MAP_CAPACITIES_ENV]) } : {}),
    ignoredKubeProxySettings: [...fromKubeProxy.ignored, ...expanded.ignored],
    unknownKubeProxyFields: expanded.unknown,
  };
}
