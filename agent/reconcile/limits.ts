/**
 * The datapath's hard limits a Service can run into, and how a Service over
 * one is reported. Pure.
 *
 * - backends_per_frontend: a frontend's slot number and count are u16, so
 *   it holds at most MAX_SLOTS (65,535) backends; beyond that the first
 *   65,535 (the planner's order: sorted by address, port) are programmed and
 *   the Service is reported as truncated.
 * - rev_nat_ids: every frontend (address, port, protocol) owns a frontendId
 *   (a u32 in the maps since layout v2), and the id space is sized at run
 *   time: --map-size-frontends, by default one id per four kpr_svc entries
 *   (agent/datapath/map-sizes.ts; 65,535 by default).
 * - svc_map, backend_map, aff_match_map, src_range_map: the max_entries of
 *   kpr_svc, kpr_backend, kpr_aff_match and kpr_src_range.
 *
 * A Service whose new state does not fit one of the last five is refused
 * whole: none of its frontends is programmed (what it had is removed, so it
 * holds no room), every other Service is programmed as usual, and it is
 * retried as soon as a sync frees room of that kind. kpr_vip (one entry per
 * service address) and kpr_svc_meta (one per frontendId) are sized with the id
 * space, one more than there can be frontendIds: they cannot fill.
 */
import type { MapCapacities } from '../maps/capacities.js';

export type LimitName = 'backends_per_frontend' | 'rev_nat_ids' | 'svc_map' | 'backend_map' | 'aff_match_map' | 'src_range_map';

/** Every limit, in the order a Service is checked against them. */
export const LIMIT_NAMES: readonly LimitName[] = ['backends_per_frontend', 'rev_nat_ids', 'svc_map', 'backend_map', 'aff_match_map', 'src_range_map'];

/** Re-exported for the reconciler's modules, which take it from here. */
export type { MapCapacities } from '../maps/capacities.js';

export const UNKNOWN_CAPACITIES: Readonly<MapCapacities> = Object.freeze({ svc: Infinity, backend: Infinity, affinityMatch: Infinity, srcRange: Infinity });

/** One Service over one limit. */
export interface LimitReport {
  /** "namespace/name". */
  service: string;
  limit: LimitName;
  /** refused: nothing of the Service is programmed; truncated: its frontends hold the first `capacity` backends. */
  action: 'refused' | 'truncated';
  /** The limit: max_entries, the id space, or the slots of one frontend. */
  capacity: number;
  /** What the Service needed: new entries or ids (refused), backends of its largest frontend (truncated). */
  needed: number;
  /** refused: what was free when it was refused. */
  free?: number;
}

const WHAT: Record<LimitName, string> = {
  backends_per_frontend: 'backends per frontend (u16 slot count)',
  rev_nat_ids: 'frontend ids (frontends in all: --map-size-frontends)',
  svc_map: 'kpr_svc entries (max_entries)',
  backend_map: 'kpr_backend entries (max_entries)',
  aff_match_map: 'kpr_aff_match entries (max_entries)',
  src_range_map: 'kpr_src_range entries (max_entries)',
};

/** The skip reason / log text of a report. */
export function describeLimit(r: LimitReport): string {
  if (r.action === 'truncated') {
    return `over the limit of ${r.capacity} ${WHAT[r.limit]}: a frontend has ${r.needed} backends, only the first ${r.capacity} are programmed`;
  }
  return `not programmed: over the limit of ${r.capacity} ${WHAT[r.limit]}: needs ${r.needed} more, ${r.free ?? 0} free`;
}

/** The log fields of a report. */
export function limitFields(r: LimitReport): Record<string, unknown> {
  return { service: r.service, limit: r.limit, action: r.action, capacity: r.capacity, needed: r.needed, ...(r.free === undefined ? {} : { free: r.free }) };
}

/** Services over a limit, summed up for /healthz, `kpr status` and the sync loop's summary line. */
export interface LimitSummary {
  /** Some Service is not (or not wholly) programmed for want of room. */
  degraded: boolean;
  /** Services over a limit. */
  services: number;
  /** Services per limit (only the limits some Service is over). */
  byLimit: Partial<Record<LimitName, number>>;
  /** The first `listMax` of them, by key. */
  listed: Array<{ service: string; limit: LimitName; action: LimitReport['action'] }>;
  /** How many more are over a limit than are listed. */
  notListed: number;
}

/** Services named in a summary (the rest are counted): a /healthz body stays small at 10,000 refused Services. */
export const SUMMARY_LIST_MAX = 20;

/** `reports` as SyncResult.limits holds them (sorted by Service). */
export function summarizeLimits(reports: readonly LimitReport[], listMax = SUMMARY_LIST_MAX): LimitSummary {
  const byLimit: Partial<Record<LimitName, number>> = {};
  for (const r of reports) byLimit[r.limit] = (byLimit[r.limit] ?? 0) + 1;
  const listed = reports.slice(0, listMax).map((r) => ({ service: r.service, limit: r.limit, action: r.action }));
  return { degraded: reports.length > 0, services: reports.length, byLimit, listed, notListed: reports.length - listed.length };
}

/** "svc_map 6169, backend_map 2": the counts of a summary, as text. */
export function formatByLimit(byLimit: LimitSummary['byLimit']): string {
  return LIMIT_NAMES.filter((l) => byLimit[l])
    .map((l) => `${l} ${byLimit[l]}`)
    .join(', ');
}
