/**
 * The reconciler's public types: what a sync is given (plans, options) and
 * what it returns (SyncResult), its logger, and the read-back's verdicts.
 */
import type { DriftCount } from '../maps/drift.js';
import type { PlanFrontend, SkippedObject } from '../plan/types.js';
import type { LimitReport, MapCapacities } from './limits.js';

/** One limit's use: entries the agent has in the map (or ids in use) against what it holds. */
export interface MapFill {
  limit: string;
  used: number;
  capacity: number;
}
import type { ConflictCount } from './ownership.js';

/** The logging the reconciler needs; `console` fits. */
export interface ReconcileLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * What sync() reads the desired frontends from (a Map fits). get() is called
 * once per key, in key order, before that Service's own frontends are diffed
 * (other Services' may already be): a caller may plan each Service only then,
 * so the planner's output of a 10,000-Service sync is never all alive at once.
 */
export interface PlanSource {
  keys(): Iterable<string>;
  get(service: string): PlanFrontend[] | undefined;
  /**
   * metadata.creationTimestamp (ms) of any Service with desired frontends,
   * listed in keys() or not: decides between claims of the same class on
   * one frontend (the oldest wins; agent/reconcile/ownership.ts). Called
   * only on conflicts. Without it (or undefined), the lowest key wins.
   */
  created?(service: string): number | undefined;
}

export interface SyncOptions {
  /** true: `plans` is the whole desired state; frontends not in it are removed. */
  full: boolean;
  /**
   * Full syncs only: first read every map back from the kernel and compare it
   * with what this agent last wrote; on any difference (drift: an entry
   * changed behind the agent's back) the mirror is rebuilt from the kernel's
   * contents, so the diff below writes back exactly what differs.
   */
  readBack?: boolean | 'decoded';
  /**
   * Incremental syncs only: also do what only a full sync does besides
   * re-diffing everything, from the desired state kept as it is (never
   * cleared): frontends no Service claims (adopted, or inserted behind the
   * agent's back) are removed and every orphan swept (pairs, ranges and names
   * of frontendIds no frontend owns, addresses, backends no slot names). The
   * last step of a sliced resync, whose chunks re-planned every Service.
   * With `readBack: 'decoded'`: the maps are decoded and compared at once (a
   * part was found to differ), and on drift every frontend is re-diffed.
   * 'scanned': the same, with what to remove found beforehand by
   * Reconciler.sweepScan (a batch at a time, syncs between): the frontends it
   * found unclaimed, the orphans it marked.
   */
  sweep?: boolean | 'scanned';
}

/**
 * Records per step of a sliced read-back (a kernel batch, or as many mirror
 * entries hashed): ~0.1–0.5 ms unloaded at 10,000 Services × 10 (the sync
 * loop runs steps until its slice's time is used).
 */
export const READ_BACK_BATCH = 1024;

/** What one call of readBackMatches found; 'pending': the read-back of that map goes on at the next call. */
export type ReadBackVerdict = 'match' | 'drift' | 'unreadable' | 'pending';

export type { DriftCount, DriftKind } from '../maps/drift.js';

export interface SyncResult {
  /** false when a map write failed; the caller should retry later (a full sync is not required). */
  ok: boolean;
  error?: string;
  /** Service-map entries (masters and slots) written. */
  servicesWritten: number;
  /** Service-map entries deleted. */
  servicesDeleted: number;
  backendsWritten: number;
  backendsDeleted: number;
  /** Service-address, affinity-pair, source-range and name entries written. */
  auxWritten: number;
  /** Service-address, affinity-pair, source-range and name entries deleted. */
  auxDeleted: number;
  /** Master entries (one per frontend and scope) in the kernel after the sync. */
  frontends: number;
  /** Backends in the kernel after the sync. */
  backends: number;
  /** Frontends or backends that were not programmed, and why (conflicts, unsupported types…). */
  skipped: SkippedObject[];
  /** readBack syncs: entries the kernel held differently from what the agent last wrote (repaired when ok); empty when none. */
  drift: DriftCount[];
  /** readBack syncs: time spent reading the maps back and comparing them (ms). */
  readBackMs?: number;
  /** readBack syncs: the fingerprints differed, so the dumps were decoded and compared entry by entry. */
  readBackDecoded?: boolean;
  /** Every Service over a datapath limit after the sync (refused, or truncated), by key (limits.ts). */
  limits?: readonly LimitReport[];
  /** How full each limited map (and the frontend id space) is after the sync, as the agent counts its entries. */
  fill?: readonly MapFill[];
  /** Frontends not programmed because another Service owns the address, after this sync (kpr_frontend_conflicts). */
  conflicts?: ConflictCount[];
  /**
   * ok syncs: the UDP backends that left a frontend since the last ok sync
   * (also those of syncs that failed meanwhile, unless the backend is back),
   * each with the frontendId the frontend had: its clients' sockets are
   * terminated (kpr_term). Absent when none.
   */
  udpBackendsLeft?: UdpBackendLeft[];
}

/** A UDP backend (address, port) that left the frontend whose frontendId it was reached by. */
export interface UdpBackendLeft {
  addr: string;
  port: number;
  frontendId: number;
}

/** Limits a test (or a dry run) sets; the maps' own capacities come from DatapathMaps.capacities(). */
export interface ReconcilerOptions {
  /** Highest frontendId (default 65,535: the compiled frontend id space; the agent passes its run-time one, agent/datapath/map-sizes.ts frontendCapacity). */
  maxFrontendId?: number;
  /** Overrides of the maps' capacities. */
  capacities?: Partial<MapCapacities>;
  /** Records per step of a sliced read-back (default READ_BACK_BATCH). */
  readBackBatch?: number;
  /** Mirror entries per step of a sliced sweep (default SWEEP_SCAN_BATCH). */
  sweepScanBatch?: number;
}

/** A result with nothing written yet. */
export function emptySyncResult(): SyncResult {
  return {
    ok: true,
    servicesWritten: 0,
    servicesDeleted: 0,
    backendsWritten: 0,
    backendsDeleted: 0,
    auxWritten: 0,
    auxDeleted: 0,
    frontends: 0,
    backends: 0,
    skipped: [],
    drift: [],
  };
}

/** Adds a later pass's (or step's) result to `total`: counts summed; the kernel's sizes, the limits and the conflicts are the later one's. */
export function addSyncResult(total: SyncResult, r: SyncResult): void {
  total.servicesWritten += r.servicesWritten;
  total.servicesDeleted += r.servicesDeleted;
  total.backendsWritten += r.backendsWritten;
  total.backendsDeleted += r.backendsDeleted;
  total.auxWritten += r.auxWritten;
  total.auxDeleted += r.auxDeleted;
  total.frontends = r.frontends;
  total.backends = r.backends;
  if (r.skipped.length) total.skipped.push(...r.skipped);
  if (r.drift.length) total.drift.push(...r.drift);
  if (r.readBackDecoded) total.readBackDecoded = true;
  if (r.limits) total.limits = r.limits;
  if (r.fill) total.fill = r.fill;
  // Like the counts, what is in force after the last one (kpr_frontend_conflicts is set from it).
  if (r.conflicts) total.conflicts = r.conflicts;
  if (!r.ok) {
    total.ok = false;
    total.error = r.error;
  }
}
