/**
 * The datapath counters (per-CPU array kpr_stats, one slot per enum kpr_stat)
 * as named metrics: one table says which metric and label each slot feeds, so
 * the Prometheus collector and `kpr stats` agree, and a new counter is one line.
 */
import { sumPerCpuU64, type BpfMap } from '../../native/index.js';
import { STAT, STAT_MAX, mapCodecs } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';

const statIndex = mapCodecs(MAPS.stats).key;

export interface StatMetric {
  /** Prometheus metric name (without the kpr_datapath_ prefix and _total suffix). */
  metric:
    | 'translations'
    | 'refusals'
    | 'backend_missing'
    | 'drops'
    | 'tc_packets'
    | 'affinity_hits'
    | 'sockets_destroyed'
    | 'conntrack_lost_flows'
    | 'conntrack_reply_restored'
    | 'conntrack_syn_retries_kept'
    | 'snat_port_skips'
    | 'snat_ports_exhausted'
    | 'monitor_events_lost'
    | 'masquerade'
    | 'maglev_random_fallbacks'
    | 'other';
  /** The label of this slot, if the metric has one. */
  label?: { name: 'path' | 'reason' | 'action' | 'stat'; value: string };
}

/** enum kpr_stat slot → metric. A slot missing here is still exported, as kpr_datapath_other_total{stat}. */
export const STAT_METRICS: Partial<Record<keyof typeof STAT, StatMetric>> = {
  CONNECT_XLATE: { metric: 'translations', label: { name: 'path', value: 'connect' } },
  SENDMSG_XLATE: { metric: 'translations', label: { name: 'path', value: 'sendmsg' } },
  RECVMSG_XLATE: { metric: 'translations', label: { name: 'path', value: 'recvmsg' } },
  GETPEERNAME_XLATE: { metric: 'translations', label: { name: 'path', value: 'getpeername' } },
  NO_BACKEND: { metric: 'refusals', label: { name: 'reason', value: 'no_backend' } },
  // Not a refusal: kpr_sock.bpf.c returns -ENOENT (SYS_PROCEED, the call goes on untranslated), kpr_tc.bpf.c TC_ACT_UNSPEC (the packet goes on untranslated).
  BACKEND_MISSING: { metric: 'backend_missing' },
  UNKNOWN_PORT: { metric: 'refusals', label: { name: 'reason', value: 'unknown_port' } },
  UNALLOCATED_REFUSED: { metric: 'refusals', label: { name: 'reason', value: 'unallocated' } },
  AFFINITY_HIT: { metric: 'affinity_hits' },
  TC_CT_LOST: { metric: 'conntrack_lost_flows' },
  TC_CT_REPLY_RESTORED: { metric: 'conntrack_reply_restored' },
  TC_SYN_RETRY_KEPT: { metric: 'conntrack_syn_retries_kept' },
  MONITOR_LOST: { metric: 'monitor_events_lost' },
  SOCK_DESTROYED: { metric: 'sockets_destroyed' },
  TC_DNAT: { metric: 'tc_packets', label: { name: 'action', value: 'dnat' } },
  TC_FWD: { metric: 'tc_packets', label: { name: 'action', value: 'forward' } },
  TC_REVNAT: { metric: 'tc_packets', label: { name: 'action', value: 'revnat' } },
  TC_PASS_MALFORMED: { metric: 'tc_packets', label: { name: 'action', value: 'pass_malformed' } },
  TC_DROP_NO_BACKEND: { metric: 'drops', label: { name: 'reason', value: 'no_backend' } },
  TC_DROP_SOURCE_RANGE: { metric: 'drops', label: { name: 'reason', value: 'source_range' } },
  TC_DROP_NO_SNAT_PORT: { metric: 'drops', label: { name: 'reason', value: 'no_snat_port' } },
  TC_DROP_UNALLOCATED: { metric: 'drops', label: { name: 'reason', value: 'unallocated' } },
  TC_DROP_SCTP: { metric: 'drops', label: { name: 'reason', value: 'sctp' } },
  TC_SNAT_SKIP_NODE_SOCKET: { metric: 'snat_port_skips', label: { name: 'reason', value: 'node_socket' } },
  TC_SNAT_SKIP_CONNTRACK: { metric: 'snat_port_skips', label: { name: 'reason', value: 'conntrack' } },
  TC_SNAT_EXHAUSTED: { metric: 'snat_ports_exhausted' },
  SOCK_MASQ_DIVERT: { metric: 'masquerade', label: { name: 'action', value: 'socket_divert' } },
  TC_MASQ_SNAT: { metric: 'masquerade', label: { name: 'action', value: 'tc_snat' } },
  MAGLEV_FALLBACK: { metric: 'maglev_random_fallbacks', label: { name: 'reason', value: 'no_table' } },
  MAGLEV_SOCK_UNBOUND: { metric: 'maglev_random_fallbacks', label: { name: 'reason', value: 'socket_unbound' } },
};

export const STAT_METRIC_HELP: Record<StatMetric['metric'], string> = {
  translations:
    'Socket-level service translations by hook (connect: TCP and connected UDP; sendmsg: unconnected UDP; recvmsg/getpeername: reverse translations).',
  refusals:
    'Socket calls to a service address refused (ECONNREFUSED; EPERM before Linux 5.18), by reason (no_backend: the frontend has no backend; unknown_port: a service address on a port no Service defines; unallocated: an address of a service range that no Service holds).',
  backend_missing:
    'Service connections (socket hooks) and new tc flows whose chosen backend was not in the maps (a race with the agent rewriting the Service): let through untranslated, to the service address, not refused.',
  drops:
    'Packets dropped on the tc path, by reason (no_backend, source_range, no_snat_port; unallocated: a new flow to an address of a service range that no Service holds; sctp: an SCTP packet to a frontend, which kpr does not translate).',
  tc_packets: 'Packets handled on the tc path, by action.',
  affinity_hits: 'Backend choices (socket hooks: connections and unconnected UDP sends; tc: new flows) that reused the backend session affinity remembered.',
  sockets_destroyed: 'Connected UDP sockets destroyed because their backend left the service.',
  conntrack_lost_flows:
    'TCP packets without SYN to a frontend that kpr_ct holds no flow for (evicted from the full LRU map, or expired while idle): balanced afresh, so the flow may be reset. Rising: raise --map-size-conntrack (or --conntrack-*).',
  conntrack_reply_restored:
    'tc path: REPLY entries of live flows put back from the ORIGINAL entry on a client packet, because kpr_ct had lost them (the LRU map evicts single entries, not flows) or they had expired while only the client sent; without them the replies would reach the node stack and be reset. Rising with conntrack_lost_flows: raise --map-size-conntrack.',
  conntrack_syn_retries_kept:
    "tc path: SYNs retrying a connect that its client had reset before the backend answered, kept on the flow's backend and SNAT port instead of balanced afresh. Each is a TIME_WAIT connection on the backend that the SNAT port met (kpr reuses a SNAT port once its flow is closed and swept, the backend keeps TIME_WAIT for 60 s): the retry finds the port free. Rising fast: many short connections from outside to few backends through this node.",
  snat_port_skips:
    "tc path: SNAT port candidates skipped for a new flow, by what held the port towards the backend: node_socket (a socket of the node: a collision with the node's own connection avoided), conntrack (another kpr flow).",
  snat_ports_exhausted:
    'tc path: new flows to SNAT for which every SNAT port candidate was taken: they keep the client\'s port if nothing holds it, else they are dropped (drops_total{reason="no_snat_port"}). Rising: too many flows from outside to one backend through this node, or ports of kpr\'s range held by the node.',
  monitor_events_lost:
    'Datapath events kpr monitor did not see: recorded while it ran, but its ring buffer (kpr_events) was full, the reader behind. The decisions themselves are unaffected.',
  masquerade:
    'Pod traffic masqueraded where kube-proxy masquerades it (--masquerade-pod-traffic): socket_divert, pod TCP connections the socket hooks left untranslated for the tc path; tc_snat, new pod flows the tc path SNATed to the node (an external address of an eTP=Cluster Service, or hairpin).',
  maglev_random_fallbacks:
    "Backend choices for a Maglev frontend made at random instead, by reason: no_table (its table, or the entry a flow hashed to, was missing or named a slot past the frontend's count: a race with the agent rewriting it), socket_unbound (the socket path, for a socket with no source port yet: a plain connect; docs/semantics.md rule 40).",
  other: 'Datapath counters without a metric of their own yet, by enum kpr_stat name.',
};

export function statMetric(stat: string): StatMetric {
  return STAT_METRICS[stat as keyof typeof STAT] ?? { metric: 'other', label: { name: 'stat', value: stat.toLowerCase() } };
}

export interface StatValue {
  /** enum kpr_stat name, e.g. "CONNECT_XLATE". */
  stat: string;
  index: number;
  value: bigint;
}

/** Every known counter of kpr_stats, summed over the CPUs (one batch read). */
export function readStats(stats: BpfMap): StatValue[] {
  const { count, keys, values } = stats.lookupBatch();
  const byIndex = new Map<number, bigint>();
  const slot = stats.valueStride / stats.possibleCpus();
  for (let i = 0; i < count; i++) {
    const idx = statIndex.decode(keys, i * statIndex.size);
    byIndex.set(idx, sumPerCpuU64(values.subarray(i * stats.valueStride, (i + 1) * stats.valueStride), slot, 0));
  }
  return (Object.entries(STAT) as Array<[string, number]>)
    .filter(([, index]) => index < STAT_MAX)
    .map(([stat, index]) => ({ stat, index, value: byIndex.get(index) ?? 0n }));
}

function statKey(index: number): Buffer {
  return statIndex.encode(index);
}

/** One counter of kpr_stats, summed over the CPUs. */
export function readStat(stats: BpfMap, index: number): bigint {
  const v = stats.lookup(statKey(index));
  return v ? sumPerCpuU64(v, stats.valueStride / stats.possibleCpus(), 0) : 0n;
}

/**
 * Adds to a kpr_stats counter from user space, for work the agent does on
 * the datapath's behalf (sockets destroyed through netlink sock_diag count in
 * SOCK_DESTROYED, as the iterator's do). The add goes to CPU 0's slot with a
 * read-modify-write of the whole per-CPU value, so it is only for a counter
 * no program bumps meanwhile: SOCK_DESTROYED's only program is the iterator,
 * which the agent does not run while it uses sock_diag.
 */
export function addToStat(stats: BpfMap, index: number, n: number): void {
  if (n <= 0) return;
  const key = statKey(index);
  const v = stats.lookup(key) ?? Buffer.alloc(stats.valueStride);
  v.writeBigUInt64LE(v.readBigUInt64LE(0) + BigInt(n), 0);
  stats.update(key, v);
}
