/**
 * The per-node side of the tc datapath, around the maps the reconciler
 * writes: tc programs on the node's interfaces (re-checked as pods come and
 * go), node-wide settings (SNAT addresses from the Node object, conntrack
 * timeouts, service-mesh mode) and the periodic conntrack sweep.
 */
import path from 'node:path';
import { isIPv4, isIPv6 } from 'node:net';
import type { V1Node } from '@kubernetes/client-node';
import type { AgentConfig } from '../config.js';
import type { Logger } from '../log.js';
import { CFG_FLAG } from '../maps/layout.js';
import { sweepExpiredConntrack } from './ct-sweeper.js';
import { nodeNetnsCookie, writeNodeConfig, type Datapath } from './loader.js';
import { TcAttacher } from './tc-attacher.js';
import { tcLinkPinDir } from './pins.js';

const INTERFACE_RESCAN_MS = 2000;

/** The node's SNAT source per family: its first InternalIP, else its first ExternalIP. */
export function snatAddresses(node: V1Node | undefined): { v4: string; v6: string } {
  const addrs = node?.status?.addresses ?? [];
  const ordered = [...addrs.filter((a) => a.type === 'InternalIP'), ...addrs.filter((a) => a.type === 'ExternalIP')].map((a) => a.address);
  return { v4: ordered.find((a) => isIPv4(a)) ?? '', v6: ordered.find((a) => isIPv6(a)) ?? '' };
}

export class NodeDatapath {
  private readonly attacher: TcAttacher;
  private readonly hostNetnsCookie: bigint;
  private timers: NodeJS.Timeout[] = [];
  private lastConfig = '';

  constructor(
    private readonly dp: Datapath,
    private readonly cfg: AgentConfig,
    private readonly log: Logger,
  ) {
    this.hostNetnsCookie = nodeNetnsCookie(cfg.netns);
    this.attacher = new TcAttacher({
      tcObject: dp.tcObject,
      pinDir: tcLinkPinDir(cfg.bpffsDir),
      netns: cfg.netns,
      externalInterfaces: cfg.externalInterfaces,
      podInterfaces: cfg.podInterfaces,
      attachMode: cfg.tcAttach,
      log,
    });
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
    this.nodeChanged(node);
    this.attacher.sync();
    const rescan = setInterval(() => this.attacher.sync(), INTERFACE_RESCAN_MS);
    const sweep = setInterval(() => {
      try {
        const n = sweepExpiredConntrack(this.dp.maps.ct);
        if (n > 0) this.log.debug('expired conntrack entries removed', { entries: n });
      } catch (err) {
        this.log.warn('conntrack sweep failed', { error: (err as Error).message });
      }
    }, this.cfg.ctSweepIntervalMs);
    this.timers = [rescan, sweep];
    for (const t of this.timers) t.unref();
  }

  /** Re-derives the node-wide settings; writes them only when they changed. */
  nodeChanged(node: V1Node | undefined): void {
    const snat = snatAddresses(node);
    const config = {
      hostNetnsCookie: this.hostNetnsCookie,
      snatV4: snat.v4,
      snatV6: snat.v6,
      tcpTimeoutS: this.cfg.ctTcpTimeoutS,
      tcpClosingTimeoutS: this.cfg.ctTcpClosingTimeoutS,
      udpTimeoutS: this.cfg.ctUdpTimeoutS,
      flags: this.cfg.socketLbHostOnly ? CFG_FLAG.SOCK_HOST_ONLY : 0,
    };
    const text = JSON.stringify(config, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    if (text === this.lastConfig) return;
    writeNodeConfig(this.dp.maps.config, config);
    this.lastConfig = text;
    this.log.info('node datapath settings', { snatV4: snat.v4 || null, snatV6: snat.v6 || null, socketLbHostOnly: this.cfg.socketLbHostOnly });
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }
}
