/**
 * The kernel features kpr can use and what happens without each: pure data
 * and the registry of what this node has. Every feature is probed once at
 * start (kernel-probes.ts, the edge); its state is then
 *  - `active`: the kernel has it and kpr uses it;
 *  - `fallback`: the kernel lacks it and kpr uses another mechanism (named);
 *  - `off`: neither; `lost` says what the node does not get.
 * The agent logs the list at start, exports it as kpr_kernel_feature and
 * `kpr preflight` prints the same words (formatFeature).
 *
 * KPR_DISABLE_KERNEL_FEATURES=a,b makes the probes treat features as absent
 * (to exercise fallbacks on a kernel that has them); KPR_FAIL_KERNEL_FEATURES=a,b
 * leaves them present but makes every use throw (to exercise the agent's
 * recovery from a facility failing at run time).
 */

export const KERNEL_FEATURE_NAMES = [
  'netns-cookie-sockopt',
  'tcx',
  'bpf-sock-destroy',
  'batch-map-ops',
  'cgroup-recvmsg',
  'cgroup-getpeername',
  'lru-hash',
  'btf',
] as const;

export type KernelFeature = (typeof KERNEL_FEATURE_NAMES)[number];

/** Without tcx the tc programs attach as clsact qdisc filters (agent/datapath/tc-attacher.ts). */
export const TCX_FALLBACK = 'clsact/cls_bpf';
/** Without bpf_sock_destroy connected UDP sockets are destroyed through netlink sock_diag (agent/datapath/udp-terminator.ts). */
export const SOCK_DESTROY_FALLBACK = 'netlink SOCK_DESTROY';

export interface FeatureSpec {
  /** What the facility is, in a few words. */
  what: string;
  /** The kernel version that added it: an explanation only, never the test. */
  since: string;
  /** Fallbacks kpr knows (the component that implements one says when it is in use). */
  fallbacks: string[];
  /** What is lost when the feature is off (no fallback in use). */
  lost: string;
  /** Without it kpr cannot serve at all: preflight fails. */
  required?: boolean;
}

export const KERNEL_FEATURES: Record<KernelFeature, FeatureSpec> = {
  'netns-cookie-sockopt': {
    what: 'getsockopt(SO_NETNS_COOKIE), the node network namespace cookie',
    since: '5.14',
    fallbacks: ['cgroup sock_create probe'],
    lost: 'service-mesh mode (--socket-lb-host-only) cannot tell node processes from pods: the socket hooks serve every caller',
  },
  tcx: {
    what: 'tcx links for the tc programs',
    since: '6.6',
    fallbacks: [TCX_FALLBACK],
    lost: 'no tc path: NodePort, LoadBalancer and externalIP traffic from outside the node, and service-mesh mode pod traffic, are not translated',
  },
  'bpf-sock-destroy': {
    what: 'bpf_sock_destroy kfunc (kpr_sock_term.bpf.o loads)',
    since: '6.5',
    fallbacks: [SOCK_DESTROY_FALLBACK],
    lost: 'connected UDP sockets of a removed backend are not destroyed: their clients keep sending to it until they reconnect',
  },
  'batch-map-ops': {
    what: 'batch map operations (bpf_map_lookup_batch on a hash map)',
    since: '5.6',
    fallbacks: [],
    lost: 'map syncs cannot be written (kpr writes its maps in batches); every sync fails',
    required: true,
  },
  'cgroup-recvmsg': {
    what: 'cgroup recvmsg4/recvmsg6 hooks',
    since: '5.2',
    fallbacks: [],
    lost: 'unconnected UDP replies show the backend address instead of the service address',
  },
  'cgroup-getpeername': {
    what: 'cgroup getpeername4/getpeername6 hooks',
    since: '5.8',
    fallbacks: [],
    lost: 'getpeername() on a translated socket shows the backend address instead of the service address',
  },
  'lru-hash': {
    what: 'LRU hash maps',
    since: '4.10',
    fallbacks: [],
    lost: 'the datapath object (kpr_revnat, kpr_affinity, kpr_ct are LRU maps) does not load',
    required: true,
  },
  btf: {
    what: 'kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF), for CO-RE and kfuncs',
    since: '5.4',
    fallbacks: [],
    lost: 'objects that read kernel structs (the UDP socket iterator) do not load',
  },
};

export type FeatureState = 'active' | 'fallback' | 'off';

/** What a probe found. */
export interface ProbeResult {
  present: boolean;
  /** How it was decided, e.g. "getsockopt SO_NETNS_COOKIE: ENOPROTOOPT (errno 92)". */
  detail: string;
}

export interface FeatureStatus {
  feature: KernelFeature;
  state: FeatureState;
  /** The fallback in use (state fallback). */
  fallback?: string;
  /** What the node does not get (state off). */
  lost?: string;
  /** The probe's finding, and since when the kernel has it. */
  detail: string;
  required: boolean;
}

export const DISABLE_ENV = 'KPR_DISABLE_KERNEL_FEATURES';
export const FAIL_ENV = 'KPR_FAIL_KERNEL_FEATURES';

/** "tcx, netns-cookie-sockopt" → the known names; unknown names are returned apart. */
export function parseFeatureList(text: string | undefined): { features: Set<KernelFeature>; unknown: string[] } {
  const features = new Set<KernelFeature>();
  const unknown: string[] = [];
  for (const name of (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    if ((KERNEL_FEATURE_NAMES as readonly string[]).includes(name)) features.add(name as KernelFeature);
    else unknown.push(name);
  }
  return { features, unknown };
}

/** The error a use of a feature named in KPR_FAIL_KERNEL_FEATURES throws. */
export class InjectedFeatureFailure extends Error {
  constructor(readonly feature: KernelFeature) {
    super(`${feature}: failure injected by ${FAIL_ENV}`);
    this.name = 'InjectedFeatureFailure';
  }
}

/** One feature's state in words, the same in the agent's log and in `kpr preflight`. */
export function formatFeature(s: FeatureStatus): string {
  const state = s.state === 'fallback' ? `fallback (${s.fallback})` : s.state;
  const lost = s.state === 'off' ? `; lost: ${s.lost}` : '';
  return `${s.feature}: ${state}${lost} [${s.detail}]`;
}

/** The whole list on one line: "tcx=active netns-cookie-sockopt=fallback(cgroup sock_create probe) ...". */
export function summarizeFeatures(list: FeatureStatus[]): string {
  return list.map((s) => `${s.feature}=${s.state === 'fallback' ? `fallback(${s.fallback})` : s.state}`).join(' ');
}

export interface DatapathFallbackChoice {
  /** --tc-attach: tcx (no fallback), or auto / tc (the clsact filters stand in for a missing tcx). */
  tcAttach: 'auto' | 'tcx' | 'tc';
  /**
   * Whether connected UDP sockets are destroyed through netlink SOCK_DESTROY:
   * null when they are, else why not (undefined: nothing to add, the feature
   * stays as probed). Asked only when bpf_sock_destroy is missing.
   */
  sockDestroyNetlink: () => string | null | undefined;
  /** What each fallback's detail adds (kpr preflight names the setting that takes it). */
  tcxDetail?: string;
  sockDestroyDetail?: string;
}

/**
 * The fallbacks for a kernel without tcx or without bpf_sock_destroy, in the
 * registry: decided here once for the agent (from what its TcAttacher and
 * UdpTerminator use) and for `kpr preflight` (from what the agent would use).
 */
export function recordDatapathFallbacks(features: KernelFeatures, c: DatapathFallbackChoice): void {
  if (!features.present('tcx') && c.tcAttach !== 'tcx') features.useFallback('tcx', TCX_FALLBACK, c.tcxDetail);
  if (!features.present('bpf-sock-destroy')) {
    const netlinkMissing = c.sockDestroyNetlink();
    if (netlinkMissing === null) features.useFallback('bpf-sock-destroy', SOCK_DESTROY_FALLBACK, c.sockDestroyDetail);
    else if (netlinkMissing !== undefined) features.turnOff('bpf-sock-destroy', `${SOCK_DESTROY_FALLBACK} unavailable: ${netlinkMissing}`);
  }
}

export type FeatureListener = (status: FeatureStatus) => void;

/**
 * The node's features: probe results, then what the components report (a
 * fallback in use, a fallback that failed). Listeners hear every change.
 */
export class KernelFeatures {
  private readonly statuses = new Map<KernelFeature, FeatureStatus>();
  private readonly listeners: FeatureListener[] = [];
  private readonly unprobed = new Set<KernelFeature>();

  constructor(
    probes: Partial<Record<KernelFeature, ProbeResult>>,
    private readonly failing: ReadonlySet<KernelFeature> = new Set(),
  ) {
    for (const f of KERNEL_FEATURE_NAMES) {
      const p = probes[f];
      this.record(f, p ?? { present: false, detail: 'not probed' });
      if (!p) this.unprobed.add(f);
    }
  }

  /** False for a feature left to a component that probes it by using it (e.g. the loader). */
  probed(feature: KernelFeature): boolean {
    return !this.unprobed.has(feature);
  }

  /** Sets a feature from a probe (components that probe by loading, e.g. the loader, call it late). */
  record(feature: KernelFeature, probe: ProbeResult): void {
    this.unprobed.delete(feature);
    const spec = KERNEL_FEATURES[feature];
    const detail = `${probe.detail}; kernel ${spec.since}+`;
    this.set(
      probe.present
        ? { feature, state: 'active', detail, required: !!spec.required }
        : { feature, state: 'off', lost: spec.lost, detail, required: !!spec.required },
    );
  }

  /** A component took over for an absent feature with `fallback` (one of the spec's names). */
  useFallback(feature: KernelFeature, fallback: string, detail?: string): void {
    const cur = this.status(feature);
    this.set({ feature, state: 'fallback', fallback, detail: detail ? `${cur.detail}; ${detail}` : cur.detail, required: cur.required });
  }

  /** Neither the feature nor a fallback works (e.g. the fallback failed). */
  turnOff(feature: KernelFeature, why: string): void {
    const cur = this.status(feature);
    this.set({ feature, state: 'off', lost: KERNEL_FEATURES[feature].lost, detail: `${cur.detail}; ${why}`, required: cur.required });
  }

  present(feature: KernelFeature): boolean {
    return this.status(feature).state === 'active';
  }

  status(feature: KernelFeature): FeatureStatus {
    return this.statuses.get(feature)!;
  }

  list(): FeatureStatus[] {
    return KERNEL_FEATURE_NAMES.map((f) => this.status(f));
  }

  /** Throws when KPR_FAIL_KERNEL_FEATURES names the feature; call right before using it. */
  use(feature: KernelFeature): void {
    if (this.failing.has(feature)) throw new InjectedFeatureFailure(feature);
  }

  onChange(fn: FeatureListener): void {
    this.listeners.push(fn);
  }

  private set(s: FeatureStatus): void {
    const before = this.statuses.get(s.feature);
    this.statuses.set(s.feature, s);
    if (before && (before.state !== s.state || before.fallback !== s.fallback)) for (const l of this.listeners) l(s);
  }
}
