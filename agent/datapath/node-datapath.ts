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
import { writeNodeConfig, type Datapath } from './loader.js';
import { TcAttacher } from './tc-attacher.js';

const INTERFACE_RESCAN_MS = 2000;

/** The node's SNAT source per family: its first InternalIP, else its first ExternalIP. */
export function snatAddresses(node: V1Node | undefined): { v4: string; v6: string } {
  const addrs = node?.status?.addresses ?? [];
  const ordered = [...addrs.filter((a) => a.type === 'InternalIP'), ...addrs.filter((a) => a.type === 'ExternalIP')].map((a) => a.address);
  return { v4: ordered.find((a) => isIPv4(a)) ?? '', v6: ordered.find((a) => isIPv6(a)) ?? '' };
}

export interface NodeDatapathOptions {
  /** The node namespace's netns cookie; undefined when this kernel cannot tell it (service-mesh mode degrades). */
  hostNetnsCookie: bigint | undefined;
  /** A periodic job failed (it runs again on its next tick); for the metric. */
  onFailure?: (task: string, error: Error) => void;
}

export class NodeDatapath {
  private readonly attacher: TcAttacher;
  private readonly hostNetnsCookie: bigint | undefined;
  private readonly onFailure: (task: string, error: Error) => void;
  private timers: NodeJS.Timeout[] = [];
  private lastConfig = '';

  constructor(
    private readonly dp: Datapath,
    private readonly cfg: AgentConfig,
    private readonly log: Logger,
    opts: NodeDatapathOptions,
  ) {
    this.hostNetnsCookie = opts.hostNetnsCookie;
    this.onFailure = opts.onFailure ?? (() => undefined);
    if (cfg.socketLbHostOnly && opts.hostNetnsCookie === undefined) {
      log.warn('service-mesh mode degraded: the node network namespace cookie is unknown on this kernel, so the socket hooks serve every caller (pods too)');
    }
    this.attacher = new TcAttacher({
      tcObject: dp.tcObject,
      pinDir: path.join(cfg.bpffsDir, 'links', 'tc'),
      netns: cfg.netns,
      externalInterfaces: cfg.externalInterfaces,
      podInterfaces: cfg.podInterfaces,
      log,
    });
  }

  start(node: V1Node | undefined): void {
    this.nodeChanged(node);
    this.attacher.sync();
    const rescan = setInterval(() => {
      try {
        this.attacher.sync();
      } catch (err) {
        // Retried on the next rescan.
        this.onFailure('tc-rescan', err as Error);
        this.log.warn('tc interface rescan failed, will retry', { error: (err as Error).message, retryInMs: INTERFACE_RESCAN_MS });
      }
    }, INTERFACE_RESCAN_MS);
    const sweep = setInterval(() => {
      try {
        const n = sweepExpiredConntrack(this.dp.maps.ct);
        if (n > 0) this.log.debug('expired conntrack entries removed', { entries: n });
      } catch (err) {
        this.onFailure('ct-sweep', err as Error);
        this.log.warn('conntrack sweep failed', { error: (err as Error).message });
      }
    }, this.cfg.ctSweepIntervalMs);
    this.timers = [rescan, sweep];
    for (const t of this.timers) t.unref();
  }

  /** Re-derives the node-wide settings; writes them only when they changed. */
  nodeChanged(node: V1Node | undefined): void {
    const snat = snatAddresses(node);
    const hostOnly = this.cfg.socketLbHostOnly && this.hostNetnsCookie !== undefined;
    const config = {
      hostNetnsCookie: this.hostNetnsCookie ?? 0n,
      snatV4: snat.v4,
      snatV6: snat.v6,
      tcpTimeoutS: this.cfg.ctTcpTimeoutS,
      tcpClosingTimeoutS: this.cfg.ctTcpClosingTimeoutS,
      udpTimeoutS: this.cfg.ctUdpTimeoutS,
      flags: hostOnly ? CFG_FLAG.SOCK_HOST_ONLY : 0,
    };
    const text = JSON.stringify(config, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    if (text === this.lastConfig) return;
    writeNodeConfig(this.dp.maps.config, config);
    this.lastConfig = text;
    this.log.info('node datapath settings', { snatV4: snat.v4 || null, snatV6: snat.v6 || null, socketLbHostOnly: this.cfg.socketLbHostOnly, socketHooksHostOnly: hostOnly });
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }
}
