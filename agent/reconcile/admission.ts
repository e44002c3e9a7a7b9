/**
 * Admission against the datapath's limits (limits.ts): whether a Service
 * fits the room left in each map (and in the frontendId space) before any of
 * it is written; Services refused whole for want of room, Services with a
 * frontend cut to MAX_SLOTS backends, the maps' capacities (declared, and
 * learned when the kernel refused a write as full below them).
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import type { Claims } from './claims.js';
import { clearIfAny } from './collections.js';
import { MAX_SLOTS } from '../lb/selection.js';
import type { BackendTuple, DesiredFrontend } from './desired-frontend.js';
import type { KernelMirror } from './kernel-mirror.js';
import { UNKNOWN_CAPACITIES, describeLimit, limitFields, type LimitName, type LimitReport, type MapCapacities } from './limits.js';
import type { MapFill, ReconcileLogger } from './sync-types.js';
import { affinityPairsHeld, affinityPairsOf } from './tables/affinity-matches.js';
import { CAPACITY_KEYS } from './tables/index.js';
import { entrySetOf, missingServiceEntries, serviceEntriesHeld } from './tables/services.js';
import { srcRangesHeld, srcRangesOf } from './tables/src-ranges.js';
import type { Writes } from './write-batch.js';

/** The limits a Service is admitted against, in check order, and what it needs of each beyond what the kernel holds. */
export type RoomLimit = Exclude<LimitName, 'backends_per_frontend'>;
const ROOM_LIMITS: readonly RoomLimit[] = ['rev_nat_ids', 'svc_map', 'backend_map', 'aff_match_map', 'src_range_map'];
type Need = Record<RoomLimit, number>;

export class Admission {
  /** Services refused whole for want of room (nothing of them is programmed), and Services with a frontend cut to MAX_SLOTS backends. */
  readonly refused = new Map<string, LimitReport>();
  readonly truncated = new Map<string, LimitReport>();
  /** limits(), as last built; undefined when `refused` or `truncated` changed since. */
  limitList: readonly LimitReport[] | undefined;
  /** This pass: Service → whether it was admitted (decided at its first frontend diffed); a new Map per pass (collections.ts). */
  verdicts = new Map<string, boolean>();
  /** Services refused by this sync (reported in its `skipped`). */
  readonly refusedNow = new Set<string>();
  /** The maps' capacities, read at the start of each sync (lowered to what was learned below). */
  caps: MapCapacities = { ...UNKNOWN_CAPACITIES };
  /**
   * A map whose write the kernel refused as full (E2BIG, ENOSPC) below its
   * declared capacity: what it held then, admitted against from then on
   * (until the declared capacity changes: the map was replaced or resized).
   */
  readonly learned = new Map<keyof MapCapacities, { holds: number; declared: number; own: number }>();

  constructor(
    private readonly mirror: KernelMirror,
    private readonly claims: Claims,
    private readonly logger: ReconcileLogger,
    private readonly overrides: Partial<MapCapacities> | undefined,
  ) {}

  /** At the start of a sync: the maps' capacities read (lowered to what was learned below them). */
  begin(maps: DatapathMaps): void {
    const own: MapCapacities = { ...UNKNOWN_CAPACITIES, ...maps.capacities() };
    const declared: MapCapacities = { ...own, ...this.overrides };
    this.caps = { ...declared };
    for (const [key, l] of this.learned) {
      // Resized or replaced (the map's max_entries, or what the reconciler is told): learned again if it fills.
      if (l.declared !== declared[key] || l.own !== own[key]) this.learned.delete(key);
      else this.caps[key] = Math.min(declared[key], l.holds);
    }
    clearIfAny(this.refusedNow);
  }

  /** At the start of each pass of a sync: no Service decided yet. */
  beginPass(): void {
    if (this.verdicts.size > 0) this.verdicts = new Map();
  }

  /** The refused Services the room a sync freed may now fit. */
  retryable(): string[] {
    const retry: string[] = [];
    for (const [service, r] of this.refused) if (this.free(r.limit as RoomLimit) > (r.free ?? 0)) retry.push(service);
    return retry;
  }

  /**
   * A Service refused for want of room, with no more room of that kind now
   * than when it was last refused (the freeing sync would have retried it):
   * re-planning it again, unchanged, refuses it again.
   */
  refusedWithoutRoom(service: string): boolean {
    const r = this.refused.get(service);
    return r !== undefined && this.free(r.limit as RoomLimit) <= (r.free ?? 0);
  }

  /** What this sync refused, for its `skipped`. */
  refusedSkips(): Array<{ object: string; reason: string }> {
    const out: Array<{ object: string; reason: string }> = [];
    for (const service of this.refusedNow) {
      const r = this.refused.get(service);
      if (r) out.push({ object: `Service ${service}`, reason: describeLimit(r) });
    }
    return out;
  }

  /** A Service with no desired frontend is over no limit. */
  forget(service: string): void {
    if (this.refused.delete(service)) {
      this.limitList = undefined;
      this.refusedNow.delete(service);
    }
  }

  /** After a sweep: a Service gone without its key reaching a sync is no longer over any limit. */
  forgetGone(): void {
    const desired = this.claims.desired;
    for (const service of this.refused.keys()) if (!desired.has(service) && this.refused.delete(service)) this.limitList = undefined;
    for (const service of this.truncated.keys()) if (!desired.has(service) && this.truncated.delete(service)) this.limitList = undefined;
  }

  /**
   * Whether `want` may be diffed: its Service fits the room left (decided
   * once per pass, at its first frontend diffed, for every frontend it wins)
   * and so does the frontend itself (a frontend diffed after other Services
   * took room: one the Service shares with another claimant). A Service that
   * does not fit is refused (reported, and retried when room is freed).
   */
  admitted(want: DesiredFrontend, w: Writes): boolean {
    const service = want.service;
    const ok = this.verdicts.get(service);
    if (ok === undefined) {
      const mine = this.claims.desired.get(service) ?? [want];
      const report = mine.length === 1 && this.fitsBound(want, w) ? null : this.overLimit(service, this.claims.winning(service, mine), w);
      this.verdicts.set(service, report === null);
      if (report) {
        this.refuse(report);
        return false;
      }
      if (this.refused.delete(service)) {
        this.limitList = undefined;
        this.refusedNow.delete(service);
        this.logger.info('Service programmed: within the datapath limits again', { service });
      }
      if (mine.length === 1) return true; // the Service's check was this frontend's
    } else if (!ok) return false;
    if (this.fitsBound(want, w)) return true;
    const report = this.overLimit(service, [want], w);
    if (report === null) return true;
    this.verdicts.set(service, false);
    this.refuse(report);
    return false;
  }

  /** need([d], false) fits: the common case, checked without allocating. */
  private fitsBound(d: DesiredFrontend, w: Writes): boolean {
    const ne = d.tuples.length;
    const ni = d.internalTuples?.length ?? 0;
    return (
      this.free('rev_nat_ids') >= 1 &&
      this.free('svc_map', w) >= ne + 1 + (d.internalTuples ? ni + 1 : 0) &&
      this.free('backend_map') >= ne + ni &&
      (d.affinityTimeout === 0 || this.free('aff_match_map', w) >= ne + ni) &&
      (d.sourceRanges.length === 0 || this.free('src_range_map', w) >= d.sourceRanges.length)
    );
  }

  /** The first limit frontends `ds` of `service` do not fit in, or null: a bound first (no lookup), counted exactly only when the bound does not fit. */
  private overLimit(service: string, ds: readonly DesiredFrontend[], w: Writes): LimitReport | null {
    if (this.firstOver(service, this.need(ds, false), w) === null) return null;
    return this.firstOver(service, this.need(ds, true), w);
  }

  private firstOver(service: string, need: Need, w: Writes): LimitReport | null {
    for (const limit of ROOM_LIMITS) {
      const n = need[limit];
      if (n === 0) continue;
      const free = this.free(limit, w);
      if (n > free) return { service, limit, action: 'refused', capacity: this.capacity(limit), needed: n, free: Math.max(0, free) };
    }
    return null;
  }

  /**
   * What frontends `ds` need of each limit beyond what the kernel holds: new
   * frontendIds, service-map entries (masters and slots), backends,
   * affinity-match pairs and source ranges. `exact` false: an upper bound
   * from the lengths alone (as if nothing were programmed).
   */
  private need(ds: readonly DesiredFrontend[], exact: boolean): Need {
    const n: Need = { rev_nat_ids: 0, svc_map: 0, backend_map: 0, aff_match_map: 0, src_range_map: 0 };
    let fresh: Set<BackendTuple> | null = null;
    for (const d of ds) {
      const ne = d.tuples.length;
      const ni = d.internalTuples?.length ?? 0;
      if (!exact) {
        n.rev_nat_ids++;
        n.svc_map += ne + 1 + (d.internalTuples ? ni + 1 : 0);
        n.backend_map += ne + ni;
        if (d.affinityTimeout > 0) n.aff_match_map += ne + ni;
        n.src_range_map += d.sourceRanges.length;
        continue;
      }
      const fid = this.mirror.ownedFrontendId(d.fk);
      if (fid === 0) n.rev_nat_ids++;
      const m = this.mirror;
      n.svc_map += missingServiceEntries(entrySetOf(m, d.extSid), ne) + (d.internalTuples ? missingServiceEntries(entrySetOf(m, d.intSid), ni) : 0);
      const pairs = d.affinityTimeout > 0 ? ((fid > 0 ? affinityPairsOf(m, fid) : undefined) ?? new Set<number>()) : null;
      const seen = pairs && d.internalTuples ? new Set<BackendTuple>() : null;
      const newTuples = (fresh ??= new Set());
      for (const tuples of d.internalTuples ? [d.tuples, d.internalTuples] : [d.tuples]) {
        for (const t of tuples) {
          const id = this.mirror.backends.idOf(t);
          if (id < 0) newTuples.add(t);
          if (pairs === null || seen?.has(t)) continue;
          seen?.add(t);
          if (id < 0 || !pairs.has(id)) n.aff_match_map++;
        }
      }
      const ranges = fid > 0 ? srcRangesOf(m, fid) : undefined;
      for (const cidr of d.sourceRanges) if (!ranges?.has(cidr)) n.src_range_map++;
    }
    if (fresh) n.backend_map = fresh.size;
    return n;
  }

  /** Room left of a limit: the entries queued for deletion (`w`) still count, as they are deleted after every write. */
  /** Each limit's use and capacity, from the mirror (no kernel read). */
  fill(): MapFill[] {
    const cap: Record<RoomLimit, number> = {
      rev_nat_ids: this.mirror.maxFrontendId,
      svc_map: this.caps.svc,
      backend_map: this.caps.backend,
      aff_match_map: this.caps.affinityMatch,
      src_range_map: this.caps.srcRange,
    };
    return ROOM_LIMITS.filter((l) => Number.isFinite(cap[l])).map((limit) => ({ limit, used: cap[limit] - this.free(limit), capacity: cap[limit] }));
  }

  free(limit: RoomLimit, w?: Writes): number {
    switch (limit) {
      case 'rev_nat_ids':
        return this.mirror.maxFrontendId - this.mirror.frontendIds.size;
      case 'svc_map':
        return this.caps.svc - serviceEntriesHeld(this.mirror) - (w ? w.masterDeletes.length + w.slotDeletes.length : 0);
      case 'backend_map':
        return this.caps.backend - this.mirror.backends.size;
      case 'aff_match_map':
        return this.caps.affinityMatch - affinityPairsHeld(this.mirror) - (w ? w.affDeletes.length : 0);
      case 'src_range_map':
        return this.caps.srcRange - srcRangesHeld(this.mirror) - (w ? w.rangeDeletes.length : 0);
    }
  }

  /** The backend map's capacity as admitted against (Infinity when unknown). */
  get backendCapacity(): number {
    return this.caps.backend;
  }

  private capacity(limit: RoomLimit): number {
    switch (limit) {
      case 'rev_nat_ids':
        return this.mirror.maxFrontendId;
      case 'svc_map':
        return this.caps.svc;
      case 'backend_map':
        return this.caps.backend;
      case 'aff_match_map':
        return this.caps.affinityMatch;
      case 'src_range_map':
        return this.caps.srcRange;
    }
  }

  /**
   * After a write the kernel refused because a map is full (E2BIG, ENOSPC)
   * although admission counted room in it (its capacity unknown, or the
   * kernel holding fewer entries than max_entries says): what the map holds
   * now, re-read, becomes its capacity, so the retry refuses what does not
   * fit (as any Service over a limit) instead of failing the same way again.
   */
  learnFullMap(err: unknown, maps: DatapathMaps): void {
    const e = err as { code?: unknown; map?: unknown };
    if (e.code !== 'E2BIG' && e.code !== 'ENOSPC') return;
    const key = CAPACITY_KEYS.get(String(e.map));
    if (key === undefined) return;
    const holds = this.held(key);
    if (!(holds < this.caps[key])) return;
    const own = { ...UNKNOWN_CAPACITIES, ...maps.capacities() }[key];
    this.learned.set(key, { holds, declared: { [key]: own, ...this.overrides }[key] ?? own, own });
    this.logger.error('datapath map full below its capacity: Services are admitted against what it holds', {
      map: String(e.map),
      error: e.code,
      capacity: Number.isFinite(this.caps[key]) ? this.caps[key] : 'unknown',
      holds,
    });
  }

  /** Entries a capacity-limited map holds, as the mirror counts them. */
  private held(key: keyof MapCapacities): number {
    switch (key) {
      case 'svc':
        return serviceEntriesHeld(this.mirror);
      case 'backend':
        return this.mirror.backends.size;
      case 'affinityMatch':
        return affinityPairsHeld(this.mirror);
      case 'srcRange':
        return srcRangesHeld(this.mirror);
    }
  }

  /**
   * Every Service over a limit, sorted by key: built again only when a
   * Service starts or stops being over one (a resync of 30,000 Services,
   * 6,000 of them refused, runs 300 syncs; sorting the list in each cost
   * ~0.2 s). Shared by the results that report it: never changed in place.
   */
  limits(): readonly LimitReport[] {
    if (this.limitList) return this.limitList;
    const limits = [...this.truncated.values(), ...this.refused.values()];
    this.limitList = limits.length > 1 ? limits.sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0)) : limits;
    return this.limitList;
  }

  /** Records (and, when it is new, logs) that a Service was refused. */
  refuse(r: LimitReport): void {
    const before = this.refused.get(r.service);
    this.refusedNow.add(r.service);
    if (before?.limit === r.limit) {
      Object.assign(before, r); // the same refusal, its counts now: the list of limits stays as built
      return;
    }
    this.refused.set(r.service, r);
    this.limitList = undefined;
    this.logger.error('Service refused: over a datapath limit', { ...limitFields(r), reason: describeLimit(r) });
  }

  /** Records (and logs, when it changes) whether a Service's new desired frontends were cut to MAX_SLOTS backends. */
  noteTruncation(service: string, mine: readonly DesiredFrontend[]): void {
    let most = 0;
    for (let i = 0; i < mine.length; i++) if (mine[i].truncatedFrom > most) most = mine[i].truncatedFrom;
    if (most === 0) {
      if (this.truncated.delete(service)) {
        this.limitList = undefined;
        if (mine.length > 0) this.logger.info('Service programmed: within the datapath limits again', { service, limit: 'backends_per_frontend' });
      }
      return;
    }
    const r: LimitReport = { service, limit: 'backends_per_frontend', action: 'truncated', capacity: MAX_SLOTS, needed: most };
    const before = this.truncated.get(service);
    if (before) {
      before.needed = most;
      return;
    }
    this.truncated.set(service, r);
    this.limitList = undefined;
    this.logger.error('Service truncated: over a datapath limit', { ...limitFields(r), reason: describeLimit(r) });
  }
}
