/**
 * The per-node side of the tc datapath, around the maps the reconciler
 * writes: tc programs on the node's interfaces (re-checked as pods come and
 * go), node-wide settings (SNAT addresses from the Node object, conntrack
 * timeouts, service-mesh mode) and the periodic conntrack sweep.
 */
import path from 'node:path';
import { isCanonicalIPv4, looksLikeIPv6 } from '../net/ip.js';
import type { V1Node } from '@kubernetes/client-node';
import type { BpfObject } from '../../native/index.js';
import type { Logger } from '../log/log.js';
import { CFG_FLAG, MAP_NAMES, encodeConfig } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import type { DriftCount } from '../maps/drift.js';
import { sweepExpiredConntrackSliced, type StillExpiredDeleter } from './ct-sweeper.js';
import { CONFIG_KEY, writeNodeConfig, type Datapath } from './loader.js';
import { TcAttacher } from './tc-attacher.js';
import { tcLinkPinDir } from './pins.js';
import type { PinKeeper } from './pin-keeper.js';
import { tcxPinName, type TcAttachSetting } from './tc-hooks.js';
import { checkCgroupAttachments, type AttachHook, type AttachmentMissing, type AttachmentRepaired } from './attachment-check.js';

const INTERFACE_RESCAN_MS = 2000;

/** The agent's settings this module reads (AgentConfig's members of the same names, agent/config/agent-config.ts). */
export interface NodeDatapathSettings {
  cgroupPath: string;
  bpffsDir: string;
  netns?: string;
  externalInterfaces: string[];
  podInterfaces: string[];
  socketLbHostOnly: boolean;
  serviceCounters: boolean;
  masqueradePodTraffic: boolean;
  ctTcpTimeoutS: number;
  ctTcpClosingTimeoutS: number;
  ctUdpTimeoutS: number;
  ctSweepIntervalMs: number;
  tcAttach: TcAttachSetting;
}

/** The node's SNAT source per family: its first InternalIP, else its first ExternalIP. */
export function snatAddresses(node: V1Node | undefined): { v4: string; v6: string } {
  const addrs = node?.status?.addresses ?? [];
  const ordered = [...addrs.filter((a) => a.type === 'InternalIP'), ...addrs.filter((a) => a.type === 'ExternalIP')].map((a) => a.address);
  return { v4: ordered.find((a) => isCanonicalIPv4(a)) ?? '', v6: ordered.find((a) => looksLikeIPv6(a)) ?? '' };
}

export type TimerOp = 'interface_rescan' | 'conntrack_sweep' | 'cgroup_check' | 'pin_check' | 'attachment_check';

/** What the last attachment check found (agent/health/attachment-health.ts reads it for /healthz). */
export interface AttachmentStatus {
  checkedAt: Date;
  /** The rescan's probe (every 2 s) or a periodic resync. */
  trigger: 'probe' | 'resync';
  /** Attachments in place after the check, by hook. */
  attached: Partial<Record<AttachHook, number>>;
  /** Attachments repaired since the agent started, by hook. */
  repaired: Partial<Record<AttachHook, number>>;
  /** Found missing and not attached again: the node does not serve what they carry. */
  missing: AttachmentMissing[];
}

export interface NodeDatapathOptions {
  /** The node namespace's netns cookie; undefined when this kernel cannot tell it (service-mesh mode degrades). */
  hostNetnsCookie: bigint | undefined;
  /** A periodic timer's run failed (op: interface_rescan, conntrack_sweep, cgroup_check, pin_check); for kpr_node_datapath_errors_total. */
  onTimerError?: (op: TimerOp) => void;
  /** kpr's pins, checked (and re-pinned) after every interface rescan; holds the tcx links too. */
  pins?: PinKeeper;
  /** The socket programs were attached to a re-created --cgroup-path. */
  onCgroupReattached?: () => void;
  /** An attachment found missing (detached behind the agent) was attached again; for kpr_attachments_repaired_total. */
  onAttachmentRepaired?: (hook: AttachHook) => void;
  /**
   * Whether tcx is there, as the kernel feature registry says (it honours
   * KPR_DISABLE_KERNEL_FEATURES), so --tc-attach auto picks what the
   * features line and kpr_kernel_feature report. Default: the kernel asked directly.
   */
  tcxAvailable?: () => boolean;
  /** How the conntrack sweep deletes what it found expired (the native library's when it is built). */
  ctSweepDeleter?: StillExpiredDeleter;
  /**
   * Reserves kpr's SNAT port range on the node at start (agent/snat-ports);
   * told whether the pinned kpr_config says an earlier agent owned the
   * reservation, returns whether this one does (kept in kpr_config for `kpr cleanup`).
   */
  reserveSnatPorts?: (ownedBefore: boolean) => boolean;
}

export class NodeDatapath {
  private readonly attacher: TcAttacher;
  private readonly hostNetnsCookie: bigint | undefined;
  private timers: NodeJS.Timeout[] = [];
  private lastConfig = '';
  /** The Node object the settings were last derived from (re-derived after each interface rescan). */
  private lastNode: V1Node | undefined;
  /** The kpr_config value last written (what drift repair compares the map with). */
  private written: Buffer | undefined;
  /** Per timer, the message of the error it is failing with (logged once per distinct error). */
  private readonly failing = new Map<TimerOp, string>();
  /** The last attachment check's result (undefined before the first). */
  private attachmentState: AttachmentStatus | undefined;
  private readonly repairedByHook: Partial<Record<AttachHook, number>> = {};
  /** The missing attachments last logged (each distinct set logged once). */
  private missingLogged = '[]';
  /** kpr added its SNAT range to the node's reserved ports (CFG_FLAG.SNAT_PORTS_RESERVED). */
  private snatPortsOwned = false;

  constructor(
    private readonly dp: Datapath,
    private readonly cfg: NodeDatapathSettings,
    private readonly log: Logger,
    private readonly opts: NodeDatapathOptions,
  ) {
    this.hostNetnsCookie = opts.hostNetnsCookie;
    if (cfg.socketLbHostOnly && opts.hostNetnsCookie === undefined) {
      log.warn('service-mesh mode degraded: the node network namespace cookie is unknown on this kernel, so the socket hooks serve every caller (pods too)');
    }
    if (cfg.masqueradePodTraffic && opts.hostNetnsCookie === undefined) {
      log.warn(
        'pod masquerade off: the node network namespace cookie is unknown on this kernel, so the socket hooks cannot tell pods from node processes; pods reach endpoints with their own address (docs/semantics.md, rules 35 and 36)',
      );
    }
    this.attacher = new TcAttacher({
      tcObject: dp.tcObject,
      pinDir: tcLinkPinDir(cfg.bpffsDir),
      netns: cfg.netns,
      externalInterfaces: cfg.externalInterfaces,
      podInterfaces: cfg.podInterfaces,
      attachMode: cfg.tcAttach,
      ...(opts.tcxAvailable ? { tcxAvailable: opts.tcxAvailable } : {}),
      log,
    });
  }

  /** The tc programs of `tcObject` on every interface in place of the current ones (a finished map migration); the interfaces it failed on. */
  swapTcObject(tcObject: BpfObject): string[] {
    const failed = this.attacher.swapObject(tcObject);
    this.keepTcxLinks(this.attacher.attachedInterfaces().map((a) => a.ifname));
    return failed;
  }

  /** How the tc programs are attached on this node (tcx links or clsact filters). */
  tcAttachMode(): 'tcx' | 'tc' {
    return this.attacher.mode();
  }

  /** For the kpr_tc_* metrics. */
  tcStatus(): { mode: 'tcx' | 'tc'; interfaces: number; failures: number } {
    return { mode: this.attacher.mode(), interfaces: this.attacher.attachedInterfaces().length, failures: this.attacher.attachFailures() };
  }

  start(node: V1Node | undefined): void {
    if (this.opts.reserveSnatPorts) {
      // Read before nodeChanged writes kpr_config: what the previous agent left there.
      const have = this.dp.maps.config.lookup(CONFIG_KEY);
      const before = have ? have.readUInt32LE(MAPS.config.value.at.flags) : 0;
      this.snatPortsOwned = this.opts.reserveSnatPorts((before & CFG_FLAG.SNAT_PORTS_RESERVED) !== 0);
    }
    this.nodeChanged(node);
    this.attacher.sync();
    this.keepTcxLinks();
    // Pod masquerade needs kpr_tc_pod on a pod interface: re-decided now that they are attached.
    this.nodeChanged(node);
    // Each rescan also checks the node's other attachments: the socket programs'
    // cgroup (removed and created again) and kpr's pins (removed, replaced, bpffs gone).
    const rescan = setInterval(() => {
      const rescanned = this.tick('interface_rescan', () => {
        this.keepTcxLinks(this.attacher.sync());
        this.nodeChanged(this.lastNode);
      });
      this.tick('cgroup_check', () => this.checkCgroup());
      // The tc side needs the node namespace, as the rescan does: when that failed, it says why.
      this.tick('attachment_check', () => this.checkAttachments('probe', rescanned));
      const pins = this.opts.pins;
      if (pins) this.tick('pin_check', () => pins.check());
    }, INTERFACE_RESCAN_MS);
    // Sliced (ct-sweeper.ts); a sweep still running when the next is due is not started twice.
    let sweeping = false;
    const sweep = setInterval(() => {
      if (sweeping) return;
      sweeping = true;
      sweepExpiredConntrackSliced(this.dp.maps.ct, undefined, undefined, this.opts.ctSweepDeleter)
        .then(
          (s) => {
            this.tick('conntrack_sweep', () => {});
            if (s.removed > 0)
              this.log.debug('expired conntrack entries removed', {
                entries: s.removed,
                slices: s.slices,
                longestSliceMs: Math.round(s.longestSliceMs * 10) / 10,
              });
          },
          (err: unknown) => {
            // The agent stopping closes the map under a sweep in flight: not a failure.
            if (this.dp.maps.ct.closed) return;
            this.tick('conntrack_sweep', () => {
              throw err;
            });
          },
        )
        .finally(() => (sweeping = false));
    }, this.cfg.ctSweepIntervalMs);
    this.timers = [rescan, sweep];
    for (const t of this.timers) t.unref();
  }

  /** The tcx links the attacher holds now are the ones the pin keeper keeps (clsact filters have no pin). */
  private keepTcxLinks(attachedNow: string[] = []): void {
    if (!this.opts.pins || this.attacher.mode() !== 'tcx') return;
    const dir = tcLinkPinDir(this.cfg.bpffsDir);
    const attached = this.attacher.attachedInterfaces();
    const pinOf = (a: { role: 'external' | 'pod'; ifname: string }) => path.join(dir, tcxPinName(a.role, a.ifname));
    this.opts.pins.syncLinksUnder(dir, attached.map(pinOf), attached.filter((a) => attachedNow.includes(a.ifname)).map(pinOf));
  }

  private checkCgroup(): void {
    if (!this.dp.reattachIfCgroupRecreated()) return;
    for (const a of this.dp.attachments) this.opts.pins?.keepLink(a.linkPinPath);
    this.opts.onCgroupReattached?.();
    this.log.warn('socket programs attached to the re-created cgroup', { cgroup: this.cfg.cgroupPath, links: this.dp.attachments.map((a) => a.linkId) });
  }

  /** The last attachment check (/healthz "attachments", kpr status); undefined before the first. */
  attachmentStatus(): AttachmentStatus | undefined {
    return this.attachmentState;
  }

  /**
   * The attachment check of a periodic resync: a cgroup created anew is
   * handled first as the rescan does (kpr_cgroup_reattached_total), then
   * every attachment is checked. Never throws: a failure is left to the
   * rescan's own check (the timer logs and counts it, and its recovery), so
   * the order of what the log says does not depend on which ran first.
   */
  checkAttachmentsAtResync(trigger: 'probe' | 'resync' = 'resync'): void {
    try {
      this.checkCgroup();
    } catch {
      /* the cgroup is gone: the attachment check reports it */
    }
    try {
      this.checkAttachments(trigger, !this.failing.has('interface_rescan'));
    } catch (err) {
      this.log.debug('attachment check failed; the next rescan retries it', { trigger, error: (err as Error).message });
    }
  }

  /**
   * Asks the kernel whether every attachment kpr owns is in place (the
   * socket programs on the cgroup, the tc programs on each interface:
   * attachment-check.ts, TcAttacher.verify) and attaches again what is not.
   * Each repair is counted and logged; what cannot be repaired is logged once
   * per distinct set and reported by attachmentStatus() until it is.
   * `withTc` false: the tc attachments are not asked about this time (the
   * interface rescan failed: the node namespace is out of reach).
   */
  checkAttachments(trigger: 'probe' | 'resync', withTc = true): AttachmentStatus {
    const cg = checkCgroupAttachments({
      cgroupPath: this.cfg.cgroupPath,
      attachments: () => this.dp.attachments,
      reattach: (program) => this.dp.reattachSockProgram(program),
    });
    for (const r of cg.repaired) this.opts.pins?.keepLink(r.attachment.linkPinPath);
    const repaired: AttachmentRepaired[] = cg.repaired.map(({ attachment: _a, ...r }) => r);
    let tcError: unknown;
    try {
      const tc = withTc ? this.attacher.verify() : undefined;
      if (tc) repaired.push(...tc.repaired);
      if (tc?.renewed.length) this.keepTcxLinks(tc.renewed);
    } catch (err) {
      tcError = err;
    }
    for (const r of repaired) {
      this.repairedByHook[r.hook] = (this.repairedByHook[r.hook] ?? 0) + 1;
      this.opts.onAttachmentRepaired?.(r.hook);
      this.log.warn('attachment missing; attached again', { ...r, trigger });
    }
    const missing = [...cg.missing, ...this.attacher.missing()];
    const status: AttachmentStatus = {
      checkedAt: new Date(),
      trigger,
      attached: { cgroup: cg.checked - cg.missing.length, [this.attacher.mode()]: this.attacher.attachedInterfaces().length },
      repaired: { ...this.repairedByHook },
      missing,
    };
    this.attachmentState = status;
    const key = JSON.stringify(missing.map((m) => [m.hook, m.target, m.program, m.error]));
    if (key !== this.missingLogged) {
      if (missing.length) this.log.error('attachments missing and not attached again; retried every 2 s, /healthz is 503 meanwhile', { missing, trigger });
      else this.log.info('every attachment in place again', { trigger });
      this.missingLogged = key;
    }
    if (tcError !== undefined) throw tcError;
    return status;
  }

  /** Re-derives the node-wide settings; writes them only when they changed. */
  nodeChanged(node: V1Node | undefined): void {
    this.lastNode = node;
    const snat = snatAddresses(node);
    const hostOnly = this.cfg.socketLbHostOnly && this.hostNetnsCookie !== undefined;
    // The socket hooks leave masqueraded pod connections to kpr_tc_pod: only once it runs on a pod
    // interface, or they would leave the pod untranslated (rules 35 and 36 of docs/semantics.md).
    const masq = this.cfg.masqueradePodTraffic && this.hostNetnsCookie !== undefined && this.attacher.attachedInterfaces().some((a) => a.role === 'pod');
    const config = {
      hostNetnsCookie: this.hostNetnsCookie ?? 0n,
      snatV4: snat.v4,
      snatV6: snat.v6,
      tcpTimeoutS: this.cfg.ctTcpTimeoutS,
      tcpClosingTimeoutS: this.cfg.ctTcpClosingTimeoutS,
      udpTimeoutS: this.cfg.ctUdpTimeoutS,
      flags:
        (hostOnly ? CFG_FLAG.SOCK_HOST_ONLY : 0) |
        (this.cfg.serviceCounters ? 0 : CFG_FLAG.NO_SVC_STATS) |
        (this.dp.migrating() ? CFG_FLAG.MIGRATING : 0) |
        (masq ? CFG_FLAG.MASQ_POD : 0) |
        (this.snatPortsOwned ? CFG_FLAG.SNAT_PORTS_RESERVED : 0),
    };
    const text = JSON.stringify(config, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    if (text === this.lastConfig) return;
    writeNodeConfig(this.dp.maps.config, config);
    this.written = encodeConfig(config);
    this.lastConfig = text;
    this.log.info('node datapath settings', {
      snatV4: snat.v4 || null,
      snatV6: snat.v6 || null,
      socketLbHostOnly: this.cfg.socketLbHostOnly,
      socketHooksHostOnly: hostOnly,
      masqueradePodTraffic: masq,
    });
  }

  /**
   * Drift repair of kpr_config (an array: its one entry is always there, so
   * only `changed` is possible): rewrites the value last written if the map
   * holds another. Called at every periodic full sync.
   */
  repairConfig(): DriftCount[] {
    if (!this.written) return [];
    const have = this.dp.maps.config.lookup(CONFIG_KEY);
    if (have && have.equals(this.written)) return [];
    this.dp.maps.config.update(CONFIG_KEY, this.written);
    return [{ map: MAP_NAMES.config, kind: 'changed', entries: 1 }];
  }

  /**
   * One run of a periodic timer. A failure (the --netns path unmounted, an
   * interface gone mid-scan) is logged once per distinct error, counted, and
   * retried at the next tick; the first run that succeeds again says so.
   * Nothing a timer throws may end the agent.
   */
  private tick(op: TimerOp, run: () => void): boolean {
    try {
      run();
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.opts.onTimerError?.(op);
      if (this.failing.get(op) !== message) {
        this.failing.set(op, message);
        this.log.error('node datapath timer failed; retrying every tick', { op, error: message });
      }
      return false;
    }
    if (this.failing.delete(op)) this.log.info('node datapath timer recovered', { op });
    return true;
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }
}
