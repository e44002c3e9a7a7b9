/**
 * The agent's service ranges (rule 33 of docs/semantics.md), end to end: the
 * ServiceCIDR watch (agent/k8s/service-cidrs.ts) and --service-cluster-ip-range
 * in, the ranges in force (agent/plan/service-ranges.ts) out to kpr_svc_cidr
 * (agent/datapath/service-ranges-map.ts), /configz and `kpr status`.
 * A bad entry is left out with one log line per distinct entry and counted
 * (kpr_service_range_errors_total); a map write that fails is logged,
 * counted and retried at the next change or periodic sync. Nothing here
 * throws into the agent.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { ApiRequestObserver } from '../k8s/api-requests.js';
import { ServiceCidrWatch, type ServiceCidrAvailability } from '../k8s/service-cidrs.js';
import { effectiveServiceRanges, type ServiceRange, type ServiceRangeProblem } from '../plan/service-ranges.js';
import { ServiceRangesMap, type SvcCidrMap } from '../datapath/service-ranges-map.js';
import type { DriftCount } from '../maps/drift.js';
import type { Logger } from '../log/log.js';

export interface ServiceRangesOptions {
  /** --service-cluster-ip-range's entries. */
  flag: readonly string[];
  map: SvcCidrMap;
  kubeConfig: KubeConfig;
  log: Logger;
  /** A bad entry seen for the first time (source: "flag" or "ServiceCIDR"). */
  onProblem?: (source: 'flag' | 'ServiceCIDR') => void;
  /** A write of kpr_svc_cidr failed. */
  onWriteFailed?: () => void;
  /** The ranges in force changed (count by source kind, for a gauge). */
  onRanges?: (ranges: readonly ServiceRange[]) => void;
  onApiRequest?: ApiRequestObserver;
  /** Longest wait between two ServiceCIDR lists while the kind is not served (tests shorten it). */
  maxRetryMs?: number;
}

/** What /configz says of the service ranges. */
export interface ServiceRangesReport {
  ranges: ServiceRange[];
  /** Whether the API serves ServiceCIDR to kpr (unknown, served, not_served, forbidden). */
  serviceCIDRApi: ServiceCidrAvailability;
  /** Entries left out, each with its reason. */
  invalid: ServiceRangeProblem[];
}

export class ServiceRanges {
  private readonly writer: ServiceRangesMap<ServiceRange>;
  private readonly watch: ServiceCidrWatch;
  private readonly seenProblems = new Set<string>();
  private problems: ServiceRangeProblem[] = [];
  private lastText = '';
  private writeFailing = false;

  constructor(private readonly o: ServiceRangesOptions) {
    this.writer = new ServiceRangesMap<ServiceRange>(o.map);
    this.watch = new ServiceCidrWatch({
      kubeConfig: o.kubeConfig,
      logger: o.log,
      onChange: () => this.update(),
      ...(o.onApiRequest ? { onApiRequest: o.onApiRequest } : {}),
      ...(o.maxRetryMs !== undefined ? { maxRetryMs: o.maxRetryMs } : {}),
    });
  }

  /** Writes the flag's ranges at once, then follows the ServiceCIDR objects. */
  start(): void {
    this.update();
    this.watch.start();
  }

  async stop(): Promise<void> {
    await this.watch.stop();
  }

  report(): ServiceRangesReport {
    return { ranges: [...this.writer.current()], serviceCIDRApi: this.watch.availability(), invalid: this.problems };
  }

  /** Drift repair of kpr_svc_cidr, at every periodic full sync (also retries a failed write). */
  repair(): DriftCount[] {
    try {
      const out = this.writer.repair();
      this.writeOk();
      return out;
    } catch (err) {
      this.writeFailed(err);
      return [];
    }
  }

  /** Re-derives the ranges in force and writes them when they changed. */
  private update(): void {
    const { ranges, problems } = effectiveServiceRanges(this.o.flag, this.watch.list());
    this.problems = problems;
    for (const p of problems) {
      const id = `${p.source}\u0000${p.value}\u0000${p.reason}`;
      if (this.seenProblems.has(id)) continue;
      this.seenProblems.add(id);
      this.o.log.warn('service range ignored', { source: p.source, value: p.value, reason: p.reason });
      this.o.onProblem?.(p.source === 'flag' ? 'flag' : 'ServiceCIDR');
    }
    const text = JSON.stringify(ranges);
    if (text === this.lastText && !this.writeFailing) return;
    try {
      this.writer.set(ranges);
      this.writeOk();
    } catch (err) {
      this.writeFailed(err);
      return;
    }
    if (text !== this.lastText) {
      this.lastText = text;
      this.o.log.info('service ranges', { ranges: ranges.map((r) => `${r.cidr} (${r.source})`), serviceCIDRApi: this.watch.availability() });
      this.o.onRanges?.(ranges);
    }
  }

  private writeOk(): void {
    if (this.writeFailing) this.o.log.info('service ranges written again');
    this.writeFailing = false;
  }

  private writeFailed(err: unknown): void {
    this.o.onWriteFailed?.();
    if (!this.writeFailing)
      this.o.log.error('writing the service ranges failed; retried at the next change or periodic sync', {
        map: 'kpr_svc_cidr',
        error: (err as Error).message,
      });
    this.writeFailing = true;
  }
}
