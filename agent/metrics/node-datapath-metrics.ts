/**
 * The metrics of the node's datapath as the agent keeps it: its timers'
 * failures, pins put back, the cgroup re-attached, attachments repaired, tc attachments, UDP socket
 * termination, the kernel features probed at start and the map sizes.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { FeatureStatus } from '../datapath/kernel-features.js';

export interface TcAttachStatus {
  mode: 'tcx' | 'tc';
  interfaces: number;
  failures: number;
}

export class NodeDatapathMetrics {
  private readonly nodeErrors: Counter<'op'>;
  private readonly pinsRestored: Counter<'object' | 'reason'>;
  private readonly cgroupReattached: Counter;
  private readonly attachmentsRepaired: Counter<'hook'>;
  private readonly udpDestroyed: Counter<'mechanism'>;
  private readonly udpMode: Gauge<'mode'>;
  private tcSource: (() => TcAttachStatus) | undefined;
  private kernelFeatureList: () => FeatureStatus[] = () => [];
  private mapSizeGauge: Gauge<string> | undefined;

  constructor(private readonly registry: Registry) {
    const registers = [registry];
    this.nodeErrors = new Counter({
      name: 'kpr_node_datapath_errors_total',
      help: "Failed runs of the node datapath timers (interface_rescan, conntrack_sweep, cgroup_check, pin_check, attachment_check), e.g. while the node network namespace, the socket programs' cgroup or the bpffs is gone; retried at the next tick.",
      labelNames: ['op'],
      registers,
    });
    this.pinsRestored = new Counter({
      name: 'kpr_pins_restored_total',
      help: 'kpr pins put back: object (map, link), reason (missing: the pin was removed or its bpffs re-mounted; replaced: another object was pinned there while the agent ran; incompatible: found at start with another type or size, replaced by a new map).',
      labelNames: ['object', 'reason'],
      registers,
    });
    this.cgroupReattached = new Counter({
      name: 'kpr_cgroup_reattached_total',
      help: 'Times the socket programs were attached to --cgroup-path again because the cgroup was removed and created anew.',
      registers,
    });
    this.attachmentsRepaired = new Counter({
      name: 'kpr_attachments_repaired_total',
      help: 'kpr attachments found missing by the attachment check (every 2 s and at each periodic resync) and attached again, by hook (cgroup: a socket program on --cgroup-path; tcx: a tcx link; tc: a clsact filter), e.g. a pinned link detached with bpftool link detach.',
      labelNames: ['hook'],
      registers,
    });
    for (const hook of ['cgroup', 'tcx', 'tc']) this.attachmentsRepaired.inc({ hook }, 0);
    const tc = () => this.tcSource?.();
    new Gauge({
      name: 'kpr_tc_attached_interfaces',
      help: 'Interfaces carrying a kpr tc program, by attach mode (tcx: tcx link, tc: clsact filter).',
      labelNames: ['mode'],
      registers,
      collect() {
        this.reset();
        const s = tc();
        if (s) this.set({ mode: s.mode }, s.interfaces);
      },
    });
    let failuresSeen = 0;
    new Counter({
      name: 'kpr_tc_attach_failures_total',
      help: 'Attempts to attach a tc program to an interface that failed (retried at every interface rescan).',
      registers,
      collect() {
        const n = tc()?.failures ?? failuresSeen;
        if (n > failuresSeen) this.inc(n - failuresSeen);
        failuresSeen = n;
      },
    });
    this.udpDestroyed = new Counter({
      name: 'kpr_udp_sockets_destroyed_total',
      help: 'Connected UDP sockets of a removed backend the agent destroyed, by mechanism (bpf_sock_destroy: the iter/udp program; netlink: sock_diag SOCK_DESTROY). kpr_datapath_sockets_destroyed_total counts both too.',
      labelNames: ['mechanism'],
      registers,
    });
    this.udpMode = new Gauge({
      name: 'kpr_udp_termination_mode',
      help: 'How connected UDP sockets of a removed backend are destroyed: 1 for the mode in use (bpf_sock_destroy, netlink or off).',
      labelNames: ['mode'],
      registers,
    });
    const features = new Gauge({
      name: 'kpr_kernel_feature',
      help: 'Optional kernel features as probed at start: one series per feature with its state (active, fallback with the fallback in use, off); always 1.',
      labelNames: ['feature', 'state', 'fallback'],
      registers,
      collect: () => {
        features.reset();
        for (const f of this.kernelFeatureList()) features.set({ feature: f.feature, state: f.state, fallback: f.fallback ?? '' }, 1);
      },
    });
  }

  /** Where kpr_tc_* come from (the node datapath's TcAttacher), read at scrape time. */
  tcAttacher(source: () => TcAttachStatus): void {
    this.tcSource = source;
  }

  /** A node datapath timer failed (op: interface_rescan, conntrack_sweep, cgroup_check, pin_check, attachment_check). */
  nodeDatapathFailed(op: string): void {
    this.nodeErrors.inc({ op });
  }

  pinRestored(object: 'map' | 'link', reason: 'missing' | 'replaced' | 'incompatible'): void {
    this.pinsRestored.inc({ object, reason });
  }

  cgroupReattachedOnce(): void {
    this.cgroupReattached.inc();
  }

  /** An attachment found missing was attached again. */
  attachmentRepaired(hook: 'cgroup' | 'tcx' | 'tc'): void {
    this.attachmentsRepaired.inc({ hook });
  }

  /** Where kpr_kernel_feature reads the features at scrape time. */
  kernelFeatures(list: () => FeatureStatus[]): void {
    this.kernelFeatureList = list;
  }

  /**
   * The map sizes the agent was configured with (kpr_bpf_map_configured_capacity);
   * kpr_bpf_map_capacity says the size in use (the same: a map pinned at
   * another size is migrated to it at start).
   */
  mapSizes(configured: Readonly<Record<string, number>>): void {
    this.mapSizeGauge ??= new Gauge({
      name: 'kpr_bpf_map_configured_capacity',
      help: 'max_entries each run-time sized BPF map is configured with (--map-size-*, --bpf-map-dynamic-size-ratio, --conntrack-*).',
      labelNames: ['map'],
      registers: [this.registry],
    });
    const g = this.mapSizeGauge;
    g.reset();
    for (const [map, n] of Object.entries(configured)) g.set({ map }, n);
  }

  udpTerminationMode(mode: 'bpf_sock_destroy' | 'netlink' | 'off'): void {
    this.udpMode.reset();
    this.udpMode.set({ mode }, 1);
  }

  udpSocketsDestroyed(mechanism: string, sockets: number): void {
    this.udpDestroyed.inc({ mechanism }, sockets);
  }
}
