/**
 * What a sync tells: its report (for metrics and health), its one `sync`
 * log line, the `drift repaired` line of a repair round, and the
 * event-style summary of the Services over a datapath limit.
 */
import type { NoLocalEndpoints } from '../plan/index.js';
import type { SyncResult } from '../reconcile/reconciler.js';
import type { Logger } from '../log/log.js';
import { formatByLimit, summarizeLimits, type LimitReport } from '../reconcile/limits.js';

/** Services named in the over-limit summary line; the rest are counted (each has its own line, logged when it was refused). */
const OVER_LIMIT_PER_LINE = 10;

export interface SyncReport {
  trigger: 'initial' | 'event' | 'periodic' | 'retry';
  full: boolean;
  services: number;
  durationMs: number;
  /** Time from the oldest change in this batch to maps written (event syncs). */
  eventToMapsMs?: number;
  result: SyncResult;
  /** Service ports with a Local policy and no local endpoint, over every Service as last planned (kubeproxy_sync_proxy_rules_no_local_endpoints_total). */
  noLocalEndpoints?: NoLocalEndpoints;
  /** Sliced resyncs: the slices it ran in, their time summed (the resync's own work; durationMs is start → end) and the longest. */
  slices?: number;
  busyMs?: number;
  longestSliceMs?: number;
  /** Sliced resyncs: the longest the event loop was held while it ran (its slices, the event syncs between them, GC pauses), ms, from a 1 ms timer's lateness. */
  loopBlockMs?: number;
  /** Sliced resyncs: Services over a limit it did not re-plan (refused, and no room of their kind made since). */
  overLimitKept?: number;
}

const ms3 = (v: number | undefined) => (v === undefined ? undefined : Number(v.toFixed(3)));

/** The fields of a sync's `sync` log line (and of its `sync failed` line). */
export function syncLogFields(report: SyncReport): Record<string, unknown> {
  const { result } = report;
  return {
    trigger: report.trigger,
    full: report.full,
    services: report.services,
    durationMs: ms3(report.durationMs),
    eventToMapsMs: ms3(report.eventToMapsMs),
    frontends: result.frontends,
    backends: result.backends,
    written: result.servicesWritten + result.backendsWritten,
    deleted: result.servicesDeleted + result.backendsDeleted,
    readBackMs: ms3(result.readBackMs),
    readBackDecoded: result.readBackDecoded,
    // Services refused or cut by a datapath limit (each logged when it started; kpr_services_over_limit).
    overLimit: result.limits?.length ? result.limits.length : undefined,
    slices: report.slices,
    busyMs: ms3(report.busyMs),
    longestSliceMs: ms3(report.longestSliceMs),
    loopBlockMs: ms3(report.loopBlockMs),
    overLimitKept: report.overLimitKept || undefined,
  };
}

/** The log fields of a repair round: per map, entries by kind, and the total. */
export function driftFields(result: SyncResult): Record<string, unknown> {
  const maps: Record<string, Record<string, number>> = {};
  let entries = 0;
  for (const d of result.drift) {
    (maps[d.map] ??= {})[d.kind] = (maps[d.map]?.[d.kind] ?? 0) + d.entries;
    entries += d.entries;
  }
  return { maps, entries, readBackMs: ms3(result.readBackMs) };
}

/**
 * The event-style summary of the Services over a datapath limit: one line
 * when the set changes (a Service newly refused, or programmed again), none
 * while it stays the same, however often the same work is re-examined.
 * Each Service has its own line from the reconciler, once, when it is refused.
 */
export class OverLimitSummary {
  /** Service → the limit it was over after the last sync that reported limits. */
  private overLimit = new Map<string, string>();
  private lastLimits: readonly LimitReport[] | undefined;

  constructor(private readonly log: Logger) {}

  update(limits: readonly LimitReport[] | undefined): void {
    // The reconciler hands out the same list until a Service starts or stops being over a limit.
    if (!limits || limits === this.lastLimits) return;
    this.lastLimits = limits;
    const now = new Map<string, string>();
    for (const l of limits) now.set(l.service, l.limit);
    let newly = 0;
    let back = 0;
    for (const [service, limit] of now) if (this.overLimit.get(service) !== limit) newly++;
    for (const service of this.overLimit.keys()) if (!now.has(service)) back++;
    this.overLimit = now;
    if (newly === 0 && back === 0) return;
    const sum = summarizeLimits(limits, OVER_LIMIT_PER_LINE);
    if (sum.degraded) {
      this.log.warn('Services over the datapath limits are not served', {
        event: 'ServicesOverLimit',
        type: 'Warning',
        message: `${sum.services} Services over a datapath limit (${formatByLimit(sum.byLimit)}) are not served on this node; every other Service is`,
        services: sum.services,
        byLimit: sum.byLimit,
        newlyOverLimit: newly,
        backWithinLimits: back,
        first: sum.listed.map((l) => l.service),
        ...(sum.notListed > 0 ? { notListed: sum.notListed } : {}),
      });
    } else {
      this.log.info('every Service within the datapath limits again', { event: 'ServicesWithinLimits', type: 'Normal', backWithinLimits: back });
    }
  }
}
