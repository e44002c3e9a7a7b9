/**
 * Every kpr command, one entry each: the single source of its name,
 * arguments, summary, description, flags, exit status 1 and examples, from
 * which its parser, `--help`, manual (`kpr help COMMAND`) and the list of
 * commands are made (command-spec.ts). A new command is one entry here and
 * one line in main.ts's dispatch.
 */
import { AGENT_FLAGS, DEFAULT_BPFFS_DIR } from '../config/agent-config.js';
import { DEFAULT_AGENT_TIMEOUT } from './agent-http.js';
import type { CommandSpec, FlagSpec } from './command-spec.js';
import { EVENT_FLAG_NAMES, EVENT_TYPE_NAMES, VERDICTS } from './monitor-events.js';

const BPFFS: FlagSpec = { name: 'bpffs', value: 'PATH', default: DEFAULT_BPFFS_DIR, help: "kpr's bpffs directory, as the agent's --bpffs" };
const NETNS: FlagSpec = {
  name: 'netns',
  value: 'PATH',
  help: "network namespace whose interfaces are the node's, as the agent's --netns (default: the CLI's own)",
};
const OUTPUT: FlagSpec = { name: 'output', short: 'o', value: 'FORMAT', default: 'table', choices: ['table', 'json'], help: 'table or json' };
const TIMEOUT: FlagSpec = {
  name: 'timeout',
  value: 'DURATION',
  default: DEFAULT_AGENT_TIMEOUT,
  help: "how long each of the agent's servers may take to answer",
};
const METRICS_ADDRESS: FlagSpec = {
  name: 'metrics-address',
  value: 'IP:PORT',
  default: '127.0.0.1:10249',
  help: "the agent's metrics server (its --metrics-bind-address)",
};

const NO_MAPS = 'nothing is pinned under --bpffs (no agent ran), a map cannot be opened (not root), or it is pinned at a layout this kpr does not read';

/** The agent's map size flags, which kpr preflight takes as they are. */
const SIZE_FLAGS = Object.fromEntries(
  Object.entries(AGENT_FLAGS).filter(([name]) => name.startsWith('map-size-') || name === 'bpf-map-dynamic-size-ratio' || name.startsWith('conntrack-')),
);

export const COMMANDS: readonly CommandSpec[] = [
  {
    name: 'status',
    summary: "the node as its agent sees it: health, last sync, API server and watch state, kernel features, config, every map's fill",
    description: `Asks the agent on this node for /healthz (healthy; Services over a datapath limit, so not served here) and, from its metrics server, /metrics (the last sync and the sync results, API server requests by code, each cache's age and the relists, the kernel features in effect) and /configz (its effective configuration), and reads the fill of every pinned map from bpffs, with or without the agent.

Scriptable like a probe: the exit status is 0 only when the agent answered 200 and serves every Service.`,
    flags: [
      { name: 'healthz-address', value: 'IP:PORT', default: '127.0.0.1:10256', help: "the agent's health server (its --healthz-bind-address)" },
      METRICS_ADDRESS,
      TIMEOUT,
      { name: 'show-config', help: 'every setting of /configz, one a line (the table shows the main ones)' },
      BPFFS,
      OUTPUT,
    ],
    problem: 'the agent did not answer 200, or leaves a Service unserved (over a datapath limit)',
    examples: [
      ['kpr status', 'the node, one line per part, then the maps'],
      ['kpr status -o json --timeout 2s', 'the same as one JSON object, each agent server given 2 s'],
    ],
  },
  {
    name: 'service list',
    summary: 'every frontend with its names and backends (ipvsadm -Ln style)',
    description:
      "Joins the pinned service, backend and service-name maps: one line per frontend (protocol, address:port, id, backend count, type, the Service's namespace/name:port) and one per backend. Reads the maps directly; no agent is needed, but root is.",
    flags: [{ name: 'frontend', value: 'VIP[:PORT]', help: 'only the frontends on this address (and port); IPv6 as [addr]:port' }, BPFFS, OUTPUT],
    problem: NO_MAPS,
    examples: [
      ['kpr service list', 'every frontend'],
      ['kpr service list --frontend 198.19.0.10:80 -o json', 'the frontends of one address and port, as JSON'],
    ],
  },
  {
    name: 'service get',
    args: { synopsis: 'NS/NAME', max: 1 },
    summary: 'the frontends of one Service',
    description: 'As kpr service list, for the frontends whose service-name entry names the Service NS/NAME.',
    flags: [BPFFS, OUTPUT],
    problem: `the Service is not programmed on this node, or ${NO_MAPS}`,
    examples: [['kpr service get default/kubernetes', "the API server's Service"]],
  },
  {
    name: 'map list',
    summary: "every pinned map: type, key and value size, entries, capacity; kpr's tc attachments",
    description:
      "Every map pinned under --bpffs with what the kernel reports of it (a map pinned at an older layout is named with it), then kpr's tc attachments in the node's network namespace: interface, mode (tcx link or clsact filter), role, program and program id.",
    flags: [BPFFS, NETNS, OUTPUT],
    problem: NO_MAPS,
    examples: [['kpr map list -o json', '{"maps": [...], "tcAttachments": [...]}']],
  },
  {
    name: 'map dump',
    args: { synopsis: 'NAME', max: 1 },
    summary: 'the decoded entries of one map (kpr_svc, kpr_backend, kpr_stats, ...)',
    description:
      "Every entry of the map NAME, decoded by its layout; a map pinned at an older layout (a node still on the previous release) is converted to this release's. Ring buffers are read by kpr monitor.",
    flags: [BPFFS, OUTPUT],
    problem: NO_MAPS,
    examples: [['kpr map dump kpr_backend', 'every backend: id, address, port, state']],
  },
  {
    name: 'stats',
    summary: "datapath counters, summed over CPUs; kpr's tc attachments",
    description:
      "The datapath's counters (kpr_stats), each summed over the CPUs with the metric it feeds, then kpr's tc attachments as kpr map list prints them.",
    flags: [BPFFS, NETNS, OUTPUT],
    problem: NO_MAPS,
    examples: [['kpr stats', 'the counters as a table']],
  },
  {
    name: 'trace',
    summary: 'what the datapath does with one flow, step by step, and what a new connection would get',
    description: `Reads this node's pinned maps and prints, step by step, what kpr's datapath does with one flow: the frontend it matches, source ranges, backends, session affinity, the conntrack entry, and what a new connection would get.

The socket path is a process or pod of this node connecting (cgroup hooks); the tc path a packet arriving on a node interface, decided by the client address. kpr trace reads only the maps of the node it runs on.`,
    flags: [
      { name: 'to', value: 'ADDR:PORT', help: 'the address called, [v6]:port for IPv6 (required)' },
      { name: 'from', value: 'IP[:PORT]', help: 'the client; required on the tc path. With a port, its conntrack entry decides' },
      { name: 'proto', value: 'PROTO', default: 'tcp', help: 'tcp, udp or sctp' },
      { name: 'path', value: 'PATH', help: 'socket or tc (default: tc with --from, socket without)' },
      { name: 'role', value: 'ROLE', default: 'ext', help: 'on the tc path: from the network (ext) or from a pod of this node (pod)' },
      { name: 'node', value: 'NAME', help: 'the node to trace: refused unless it is this one' },
      BPFFS,
      OUTPUT,
    ],
    problem: NO_MAPS,
    examples: [
      ['kpr trace --to 198.19.0.10:80', 'a connection from this node to a ClusterIP'],
      ['kpr trace --to 198.18.0.2:30080 --from 203.0.113.7', 'a packet from outside to a NodePort, on the tc path'],
    ],
  },
  {
    name: 'monitor',
    summary: "a live stream of the datapath's decisions (translations, refusals, drops), on while it runs",
    description: `Turns this node's datapath events on while it runs and prints one line (or JSON object) per decision: each new connection or datagram on the socket path, each new flow on the tc path (packets of known flows and replies make none).

It stops on --count, --duration, SIGINT or SIGTERM and turns the events off. Killed, it leaves them on for at most 5 s (its lease). A node has one event stream: two monitors at once each get part of it. Events the ring had no room for are counted (kpr_datapath_monitor_events_lost_total) and reported at exit.`,
    flags: [
      { name: 'count', value: 'N', help: 'stop after N events (of those the filters keep)' },
      { name: 'duration', value: 'D', help: 'stop after D (30s, 5m, ...)' },
      { name: 'frontend', value: 'VIP[:PORT]', help: 'only events for this frontend address (and port); [v6]:port for IPv6' },
      {
        name: 'type',
        value: 'LIST',
        help: `only these, comma separated: event types (${EVENT_TYPE_NAMES.join(', ')}), verdicts (${VERDICTS.join(', ')}) or flags (${EVENT_FLAG_NAMES.join(', ')})`,
      },
      BPFFS,
      { ...OUTPUT, help: 'table or json (one object per line)' },
    ],
    problem: `the agent on this node has no event stream (an older release), or ${NO_MAPS}`,
    examples: [['kpr monitor --frontend 198.19.0.10:80 --count 20', 'the next 20 decisions about one frontend']],
  },
  {
    name: 'preflight',
    summary: "check this node: kernel, BTF, cgroup v2, bpffs, capabilities, libbpf, and a trial load at the agent's map sizes",
    description: `Checks what kpr needs on this node (kernel version, BTF, cgroup v2, the BPF filesystem, capabilities, libbpf), which kernel features are active, fall back or are off, a trial load of the datapath at the map sizes the agent would use, and those sizes against the maps pinned under --bpffs (a layout this release would refuse is named).

The map sizes come from the same flags as the agent's, so run it with the agent's --map-size-*, --bpf-map-dynamic-size-ratio and --conntrack-* flags.`,
    flags: [
      BPFFS,
      { name: 'cgroup-path', value: 'PATH', help: 'the cgroup v2 directory the socket hooks would attach to (default: the cgroup2 mount)' },
      { name: 'bpf-object', value: 'PATH', help: "the datapath's BPF object (default: the installation's)" },
      OUTPUT,
    ],
    moreOptions: {
      options: SIZE_FLAGS,
      synopsis: '--map-size-*, --bpf-map-dynamic-size-ratio, --conntrack-*',
      help: "the agent's map size flags, as the agent takes them",
    },
    problem: 'a required check failed',
    examples: [
      ['kpr preflight', 'a table of checks'],
      ['kpr preflight --map-size-backends 200000 -o json', 'the checks at a larger backend map, as JSON'],
    ],
  },
  {
    name: 'plan',
    summary: 'what the agent would program on a node, from Service, EndpointSlice and Node manifests (no cluster, no root)',
    description: `Runs the agent's own code on manifests (files or directories of YAML or JSON): its validation of each object, its planner, and its reconciler's first sync over maps in memory of the agent's sizes. Prints the frontends the agent would program on node NAME, and every object or frontend it would skip or refuse with why: invalid objects, a frontend another Service owns (ownership rules: an externalIP or LoadBalancer address that is another Service's ClusterIP, say), Services over a datapath limit.

--config reads the agent's config file (kpr's own or a KubeProxyConfiguration; given twice, both, kpr's keys winning) for node-name, node-port-addresses, external-ip-cidrs, source-ranges-all-external and the map sizes; flags override it. A KubeProxyConfiguration field kpr does not know is named in a warning and ignored, as kube-proxy's lenient decoding does. A KubeProxyConfiguration's mode (or --proxy-mode) nftables makes NodePorts default to the primary addresses, as kube-proxy's nftables mode. kube-proxy's --hostname-override, --nodeport-addresses and --proxy-mode are accepted too.`,
    flags: [
      { name: 'node', value: 'NAME', help: 'the node to plan for (required, or from --config)' },
      { name: 'node-name', value: 'NAME', help: 'as --node', alias: true },
      { name: 'file', short: 'f', value: 'PATH', multiple: true, help: 'a manifest file or directory (at least one; repeat for more)' },
      { name: 'config', value: 'PATH', multiple: true, help: "the agent's config file (kpr's or a KubeProxyConfiguration); twice: both" },
      { name: 'node-port-addresses', value: 'CIDR|primary[,...]', multiple: true, help: "as the agent's: the addresses NodePorts are served on" },
      { name: 'source-ranges-all-external', help: "as the agent's: loadBalancerSourceRanges apply to every external address" },
      { name: 'source-ranges-for-all-external', help: 'as --source-ranges-all-external', alias: true },
      { name: 'external-ip-cidrs', value: 'CIDR[,...]', multiple: true, help: "as the agent's: the externalIPs served" },
      { name: 'map-size-services', value: 'N', help: "as the agent's: kpr_svc entries (Services over a limit are listed as skipped)" },
      { name: 'map-size-frontends', value: 'N', help: "as the agent's: frontend ids" },
      { name: 'map-size-backends', value: 'N', help: "as the agent's: kpr_backend and kpr_aff_match entries" },
      { name: 'map-size-source-ranges', value: 'N', help: "as the agent's: kpr_src_range entries" },
      {
        name: 'lb-algorithm',
        value: 'ALG',
        help: "as the agent's: random or maglev, the node's default backend selection (a Service's kpr.dev/lb-algorithm annotation overrides it)",
      },
      OUTPUT,
    ],
    problem: 'a manifest or the config file cannot be read or parsed',
    examples: [['kpr plan --node node-1 -f manifests/ -o json', 'the frontends node-1 would get, as JSON']],
  },
  {
    name: 'cleanup',
    summary: 'remove everything kpr put on this node (stop the agent first)',
    description:
      "Detaches and unpins kpr's links, removes its clsact filters (kpr's handle and priority only; the qdisc stays), unpins its maps and removes its bpffs directory. It lists before it removes; --dry-run stops there. It refuses a path that is not inside a BPF filesystem or is its root, and a second run finds nothing.",
    flags: [BPFFS, NETNS, { name: 'dry-run', help: 'list what would be removed, remove nothing' }, OUTPUT],
    problem: 'something could not be removed (each step says why)',
    examples: [
      ['kpr cleanup --dry-run', 'what would be removed'],
      ['kpr cleanup --bpffs /host/sys/fs/bpf/kpr', "from a debug pod with the node's root at /host"],
    ],
  },
  {
    name: 'cleanup-kube-proxy',
    summary: "remove kube-proxy's leftovers in this network namespace, by kube-proxy's own names; list what stays and why",
    description:
      "Removes what kube-proxy left, known by kube-proxy's own chain, set and table names (never by the KUBE- prefix): its iptables chains and its jumps to them from the built-in chains, in every table (iptables-nft and iptables-legacy, IPv4 and IPv6), the nftables tables ip and ip6 kube-proxy, IPVS virtual servers on kube-ipvs0 (all of them with --ipvs-flush), the kube-ipvs0 interface and the IPVS mode's ipsets. Everything else stays, and the report lists it with why: kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-MARK-DROP, KUBE-IPTABLES-HINT), kube-router's firewall, other tables (inet kube-network-policies), an operator's rules, and a kube-proxy chain or set that something kept still references. The legacy back end takes the xtables lock ($XTABLES_LOCKFILE, else /run/xtables.lock: the chart mounts the node's). Run it inside the network namespace to clean (the kpr pod is in the host's). It lists before it removes; --dry-run stops there.",
    flags: [
      { name: 'dry-run', help: 'list what would be removed and what stays, remove nothing' },
      { name: 'ipvs-flush', help: 'remove every IPVS virtual server, as kube-proxy --cleanup does, not only those on kube-ipvs0' },
      OUTPUT,
    ],
    problem: 'something could not be removed (each step says why)',
    examples: [['kpr cleanup-kube-proxy --dry-run', 'what kube-proxy left on this node']],
  },
  {
    name: 'cleanup-nodes',
    summary: "the chart's uninstall clean-up: stop the agents, run kpr cleanup on every node they ran on",
    description:
      'A pre-delete hook Job of the chart: deletes the agent DaemonSet and waits until its pods are gone, creates the clean-up DaemonSet of --cleanup-daemonset (its pods run kpr cleanup) and waits until every pod is ready, then deletes it. Its only API writes are these DaemonSets.',
    flags: [
      { name: 'namespace', value: 'NS', help: 'the release namespace (required)' },
      { name: 'agent-daemonset', value: 'NAME', help: 'the agent DaemonSet (required)' },
      { name: 'agent-selector', value: 'SELECTOR', help: "the agent pods' label selector (required)" },
      { name: 'cleanup-daemonset', value: 'FILE', help: 'the clean-up DaemonSet manifest (required)' },
      { name: 'timeout', value: 'DURATION', default: '240s', help: 'give up after this long' },
      { name: 'poll-interval', value: 'DURATION', default: '2s', help: 'how often to look' },
      { name: 'kubeconfig', value: 'PATH', help: 'kubeconfig file (default: in-cluster config)' },
      { name: 'k8s-service-host', value: 'HOST', help: 'API server host, instead of the kubernetes Service ClusterIP' },
      { name: 'k8s-service-port', value: 'PORT', help: 'API server port to go with --k8s-service-host' },
    ],
    problem: 'the API server refused a request, or --timeout ran out (the nodes not done are named)',
    examples: [
      [
        'kpr cleanup-nodes --namespace kube-system --agent-daemonset kpr --agent-selector app.kubernetes.io/name=kpr --cleanup-daemonset /etc/kpr/cleanup.yaml',
        "as the chart's hook runs it",
      ],
    ],
  },
  {
    name: 'conntrack-sysctls',
    summary: "set the node's netfilter conntrack sysctls as kube-proxy did at start, from the agent's flags and config",
    description: `Reads the agent's own arguments (its flags and --config files, kube-proxy's config.conf and --conntrack-* flags included) and sets what kube-proxy set at every start, through /proc/sys and /sys/module: nf_conntrack_max = max(conntrack.maxPerCore x CPUs, conntrack.min), only raised and only from the host's network namespace (then the nf_conntrack hashsize to a quarter of it); nf_conntrack_tcp_timeout_established and _close_wait, nf_conntrack_udp_timeout and _udp_timeout_stream (0: left as is), and nf_conntrack_tcp_be_liberal (true: 1). kube-proxy's defaults: 32768 per core, min 131072, established 24h, close_wait 1h, the rest left as is.

These sysctls govern the node's netfilter conntrack (the CNI's and every iptables/nftables rule's traffic), not kpr's own kpr_ct. A write the kernel refuses (not the host's network namespace, a read-only /proc/sys) is reported on stderr and is not an error: the chart runs this command in an init container before the agent, which must start anyway.`,
    flags: [{ name: 'dry-run', help: 'list each sysctl, its value now, the value wanted and why; write nothing' }],
    moreOptions: {
      options: {},
      synopsis: 'AGENT FLAGS…',
      help: "the agent's flags and --config files, as the agent takes them (kube-proxy's --conntrack-* flags too)",
    },
    problem: 'never: a refused write is reported, not fatal (a bad flag or config file is a usage error, 2)',
    examples: [
      ['kpr conntrack-sysctls --dry-run --config=/var/lib/kube-proxy/config.conf', "what kube-proxy's config would set on this node"],
      ['kpr conntrack-sysctls --conntrack-max-per-core 65536', 'raise nf_conntrack_max to 65536 per CPU'],
    ],
  },
  {
    name: 'version',
    summary: "the CLI's version and commit, the SHA-256 of each BPF object the agent loads, the running agent's version",
    description:
      "The CLI's version (package.json) and the git commit it was built from, the SHA-256 of each BPF object the agent would load from this installation, and the running agent's version from its metrics endpoint (kpr_build_info), when it answers.",
    flags: [{ name: 'bpf-object', value: 'PATH', help: "the datapath's BPF object (default: the installation's)" }, METRICS_ADDRESS, TIMEOUT, OUTPUT],
    problem: 'never: an agent that does not answer is reported in the output',
    examples: [['kpr version -o json', 'all of it as JSON']],
  },
];

/** The entry named `name` ("service list"). */
export function commandSpec(name: string): CommandSpec {
  const spec = COMMANDS.find((c) => c.name === name);
  if (!spec) throw new Error(`no command ${name} in the registry`);
  return spec;
}
