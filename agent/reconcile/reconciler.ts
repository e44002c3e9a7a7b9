/**
 * The Reconciler: makes the kernel's service and backend maps hold the
 * planned frontends, writing only the difference, in an order that is safe
 * while the BPF programs read the maps.
 *
 * It keeps a mirror of what the kernel holds (frontends with their master
 * entry and slot → backend id, backends by id, refcounts) and the desired
 * frontends per Service. A sync diffs desired against the mirror for the
 * frontends concerned and applies, in this order (the datapath is live):
 *
 *   1. updateBackends  – new backends, before any slot names them;
 *   2. updateServices  – new/changed slots 1..n, before any count covers them;
 *   3. updateServices  – master entries (count, revNatId, flags);
 *   4. deleteServices  – masters of removed frontends first, then slots
 *                        beyond the new count and slots of removed frontends;
 *   5. deleteBackends  – backends no slot names any more.
 *
 * Every prefix of that sequence (even a batch stopped part-way) leaves each
 * master's slots 1..count present and pointing at existing backends. If a
 * call throws, the mirror is rebuilt from a dump of the maps, so it matches
 * what the kernel really holds, and the frontends concerned are re-diffed on
 * the next sync.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import type { Backend, SvcKey, SvcVal } from '../maps/layout.js';
import type { PlanFrontend, SkippedObject } from '../plan/types.js';
import {
  backendValueKey,
  frontendMapKey,
  toDesiredFrontend,
  type DesiredBackend,
  type DesiredFrontend,
  type FrontendBase,
} from './desired-frontend.js';
import { IdAllocator } from './id-allocator.js';

/** The logging the reconciler needs; `console` fits. */
export interface ReconcileLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export interface SyncOptions {
  /** true: `plans` is the whole desired state; frontends not in it are removed. */
  full: boolean;
}

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
  /** Frontends (master entries) in the kernel after the sync. */
  frontends: number;
  /** Backends in the kernel after the sync. */
  backends: number;
  /** Frontends or backends that were not programmed, and why (conflicts, unsupported types…). */
  skipped: SkippedObject[];
}

/** Entries found by adopt() that a correct run never leaves; each is repaired by the next sync that covers it. */
export interface AdoptInconsistencies {
  /** Slot entries whose frontend has no master entry. */
  slotsWithoutMaster: number;
  /** Slot entries numbered above their master's count. */
  slotsBeyondCount: number;
  /** Slots 1..count missing under a master. */
  missingSlots: number;
  /** Slots naming a backend id that is not in the backend map. */
  danglingSlots: number;
  /** Backends no slot names. */
  orphanBackends: number;
  /** Backends with the same (address, port, protocol) as a lower id. */
  duplicateBackends: number;
  /** Masters whose revNatId is 0 or already used by another master. */
  badRevNatIds: number;
}

export interface AdoptResult {
  frontends: number;
  backends: number;
  serviceEntries: number;
  /** Sum of `details`. */
  inconsistencies: number;
  details: AdoptInconsistencies;
}

/** One frontend as the kernel holds it. */
interface KernelFrontend {
  base: FrontendBase;
  master: SvcVal | null;
  /** slots[s] = backend id of slot s (≥ 1); holes where the kernel has no slot entry. */
  slots: number[];
  /** Number of slot entries present (slots may be sparse after adopt). */
  slotCount: number;
}

const MAX_BACKEND_ID = 0xffffffff;
const MAX_REVNAT_ID = 0xffff;

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function svcKey(base: FrontendBase, slot: number): SvcKey {
  return { addr: base.addr, port: base.port, slot, proto: base.proto, scope: base.scope };
}

function sameMaster(a: SvcVal, b: SvcVal): boolean {
  return a.count === b.count && a.revNatId === b.revNatId && a.flags === b.flags && a.backendId === b.backendId;
}

export class Reconciler {
  // ---- mirror of the kernel
  private readonly kFrontends = new Map<string, KernelFrontend>();
  private readonly kBackends = new Map<number, Backend>();
  /** Canonical backend id per backendTupleKey (lowest id when the kernel holds duplicates). */
  private readonly tupleToId = new Map<number, number>();
  /** backendTupleKey of each backend id that is canonical. */
  private readonly idToTuple = new Map<number, number>();
  /** Backend id → number of slots naming it. */
  private readonly refs = new Map<number, number>();
  private readonly backendIds = new IdAllocator(MAX_BACKEND_ID);
  private readonly revNatIds = new IdAllocator(MAX_REVNAT_ID);
  /** revNatId → the frontend (map key) that owns it. */
  private readonly revNatOwner = new Map<number, string>();
  /** Backend ids that may have lost their last reference. */
  private readonly unreferenced = new Set<number>();

  // ---- desired state
  /** Service → its valid desired frontends (unique map keys). */
  private readonly desired = new Map<string, DesiredFrontend[]>();
  /** Frontend map key → the Service(s) that want it (the lowest key wins); an array only on conflict. */
  private readonly claimants = new Map<string, string | string[]>();
  /** Whether `desired` is complete (a full sync has happened). */
  private haveFullDesired = false;
  /** Adopted frontends no Service has claimed yet: only a full sync may remove them. */
  private readonly adoptedUnclaimed = new Set<string>();
  /** Frontends to re-diff on the next sync (after a failure or an inconsistent adopt). */
  private readonly dirty = new Set<string>();
  /** The mirror could not be rebuilt after a failure; the next sync must reload first. */
  private stale = false;

  constructor(
    private readonly maps: DatapathMaps,
    private readonly logger: ReconcileLogger,
  ) {}

  /** Number of frontends (master entries) the kernel holds, as far as the reconciler knows. */
  get frontendCount(): number {
    let n = 0;
    for (const f of this.kFrontends.values()) if (f.master) n++;
    return n;
  }

  get backendCount(): number {
    return this.kBackends.size;
  }

  /** The revNatId programmed for a frontend ("addr:port/PROTO" as frontendKey()), if any. */
  revNatIdOf(address: string, port: number, protocol: 'TCP' | 'UDP'): number | undefined {
    const proto = protocol === 'TCP' ? 6 : 17;
    return this.kFrontends.get(frontendMapKey({ addr: address, port, proto, scope: 0 }))?.master?.revNatId;
  }

  /**
   * Rebuilds the in-memory state from the maps (pinned by a previous run),
   * without writing anything. The next full sync then diffs against what the
   * kernel really holds and repairs the inconsistencies counted here.
   * Throws if the maps cannot be read.
   */
  adopt(): AdoptResult {
    const result = this.loadFromKernel();
    this.desired.clear();
    this.claimants.clear();
    this.haveFullDesired = false;
    this.adoptedUnclaimed.clear();
    for (const mk of this.kFrontends.keys()) this.adoptedUnclaimed.add(mk);
    this.logger.info('adopted datapath maps', {
      frontends: result.frontends,
      backends: result.backends,
      inconsistencies: result.inconsistencies,
      ...(result.inconsistencies > 0 ? result.details : {}),
    });
    return result;
  }

  /**
   * Makes the maps hold `plans` (Service "ns/name" → its frontends).
   * full: `plans` is everything; any other frontend is removed.
   * incremental: only the listed Services change; one mapped to [] loses its frontends.
   * Never throws for a failed map write: returns ok=false and stays consistent.
   */
  sync(plans: Map<string, PlanFrontend[]>, opts: SyncOptions): SyncResult {
    const skipped: SkippedObject[] = [];
    const result: SyncResult = {
      ok: true,
      servicesWritten: 0,
      servicesDeleted: 0,
      backendsWritten: 0,
      backendsDeleted: 0,
      frontends: 0,
      backends: 0,
      skipped,
    };
    // ---- 1. update the desired state; collect the frontends it concerns
    const affected = new Set<string>(this.dirty);
    const services = [...plans.keys()].sort(cmp);
    if (opts.full) {
      for (const mk of this.kFrontends.keys()) affected.add(mk);
      for (const mk of this.claimants.keys()) affected.add(mk);
      this.desired.clear();
      this.claimants.clear();
      this.adoptedUnclaimed.clear();
      this.haveFullDesired = true;
    }
    for (const service of services) this.setDesired(service, plans.get(service) ?? [], affected, skipped);

    // The mirror is unknown after an earlier failure: read the maps first. The
    // desired state above is kept either way, so nothing asked for is lost.
    if (this.stale && !this.reload()) {
      for (const mk of affected) this.dirty.add(mk);
      return this.finish(result, 'datapath maps could not be read back after an earlier failure');
    }
    for (const mk of this.dirty) affected.add(mk); // a reload may have marked more
    if (opts.full) for (const mk of this.kFrontends.keys()) affected.add(mk);

    // ---- 2. diff each concerned frontend against the mirror, updating the mirror
    const backendWrites: Array<[number, Backend]> = [];
    const slotWrites: Array<[SvcKey, SvcVal]> = [];
    const masterWrites: Array<[SvcKey, SvcVal]> = [];
    const masterDeletes: SvcKey[] = [];
    const slotDeletes: SvcKey[] = [];
    const backendDeletes: number[] = [];
    const releaseRevNat: number[] = [];
    const releaseBackendIds: number[] = [];

    for (const mk of [...affected].sort(cmp)) {
      const want = this.winner(mk, skipped);
      const have = this.kFrontends.get(mk);
      if (want) {
        this.adoptedUnclaimed.delete(mk);
        this.diffFrontend(want, have, { backendWrites, slotWrites, masterWrites, slotDeletes }, skipped);
      } else if (have && (this.haveFullDesired || !this.adoptedUnclaimed.has(mk))) {
        this.removeFrontend(mk, have, masterDeletes, slotDeletes, releaseRevNat);
      }
    }

    // ---- 3. backends nothing names any more
    if (opts.full) for (const id of this.kBackends.keys()) if (!this.refs.has(id)) this.unreferenced.add(id);
    for (const id of [...this.unreferenced].sort((a, b) => a - b)) {
      if (this.refs.has(id)) continue;
      if (this.kBackends.delete(id)) backendDeletes.push(id);
      const tuple = this.idToTuple.get(id);
      if (tuple !== undefined) {
        this.idToTuple.delete(id);
        this.tupleToId.delete(tuple);
      }
      releaseBackendIds.push(id);
    }
    this.unreferenced.clear();

    // ---- 4. apply, in the order that keeps the live datapath consistent
    try {
      if (backendWrites.length) {
        this.maps.updateBackends(backendWrites);
        result.backendsWritten += backendWrites.length;
      }
      if (slotWrites.length) {
        this.maps.updateServices(slotWrites);
        result.servicesWritten += slotWrites.length;
      }
      if (masterWrites.length) {
        this.maps.updateServices(masterWrites);
        result.servicesWritten += masterWrites.length;
      }
      if (masterDeletes.length || slotDeletes.length) {
        this.maps.deleteServices(masterDeletes.concat(slotDeletes));
        result.servicesDeleted += masterDeletes.length + slotDeletes.length;
      }
      if (backendDeletes.length) {
        this.maps.deleteBackends(backendDeletes);
        result.backendsDeleted += backendDeletes.length;
      }
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.logger.error('datapath map write failed; re-reading the maps, will retry', { error: message, frontends: affected.size });
      for (const mk of affected) this.dirty.add(mk);
      this.reload();
      return this.finish(result, message);
    }

    // ---- 5. commit: ids freed by this sync become reusable only now, so no
    //         entry was ever re-pointed at a different backend or frontend mid-sync.
    for (const id of releaseRevNat) this.revNatIds.release(id);
    for (const id of releaseBackendIds) this.backendIds.release(id);
    this.dirty.clear();
    return this.finish(result);
  }

  // ------------------------------------------------------------------ desired state

  /** Replaces one Service's desired frontends; adds every frontend it had or has to `affected`. */
  private setDesired(service: string, frontends: PlanFrontend[], affected: Set<string>, skipped: SkippedObject[]): void {
    const old = this.desired.get(service);
    if (old) {
      for (const d of old) {
        affected.add(d.mk);
        this.unclaim(d.mk, service);
      }
      this.desired.delete(service);
    }
    const mine: DesiredFrontend[] = [];
    for (const f of frontends) {
      const d = toDesiredFrontend(service, f, skipped);
      if (!d) continue;
      if (mine.some((x) => x.mk === d.mk)) {
        skipped.push({ object: `Service ${service}`, reason: `frontend ${d.label} is listed twice; the first is used` });
        continue;
      }
      mine.push(d);
      affected.add(d.mk);
      this.claim(d.mk, service);
    }
    if (mine.length) this.desired.set(service, mine);
  }

  private claim(mk: string, service: string): void {
    const c = this.claimants.get(mk);
    if (c === undefined) this.claimants.set(mk, service);
    else if (typeof c === 'string') this.claimants.set(mk, [c, service]);
    else c.push(service);
  }

  private unclaim(mk: string, service: string): void {
    const c = this.claimants.get(mk);
    if (c === service) this.claimants.delete(mk);
    else if (Array.isArray(c)) {
      const rest = c.filter((s) => s !== service);
      this.claimants.set(mk, rest.length === 1 ? rest[0] : rest);
    }
  }

  /** The desired frontend for a map key: the claim of the lowest Service key; the others are reported. */
  private winner(mk: string, skipped: SkippedObject[]): DesiredFrontend | undefined {
    const c = this.claimants.get(mk);
    if (c === undefined) return undefined;
    const first = typeof c === 'string' ? c : c.reduce((a, b) => (b < a ? b : a));
    const want = this.desired.get(first)!.find((d) => d.mk === mk)!;
    if (typeof c !== 'string') {
      for (const s of [...c].sort(cmp)) {
        if (s === first) continue;
        const reason = `frontend ${want.label} is also claimed by Service ${first}, which wins (first by key)`;
        skipped.push({ object: `Service ${s}`, reason });
        this.logger.warn('frontend conflict', { frontend: want.label, winner: first, loser: s });
      }
    }
    return want;
  }

  // ------------------------------------------------------------------ diff

  private diffFrontend(
    want: DesiredFrontend,
    have: KernelFrontend | undefined,
    out: {
      backendWrites: Array<[number, Backend]>;
      slotWrites: Array<[SvcKey, SvcVal]>;
      masterWrites: Array<[SvcKey, SvcVal]>;
      slotDeletes: SvcKey[];
    },
    skipped: SkippedObject[],
  ): void {
    const f: KernelFrontend = have ?? { base: want.base, master: null, slots: [], slotCount: 0 };

    // revNatId: keep the one the kernel has if this frontend owns it.
    let revNatId = f.master?.revNatId ?? 0;
    if (!(revNatId > 0 && this.revNatOwner.get(revNatId) === want.mk)) {
      const id = this.revNatIds.allocate();
      if (id === undefined) {
        skipped.push({ object: `Service ${want.service}`, reason: `frontend ${want.label}: no free revNatId (${MAX_REVNAT_ID} frontends)` });
        return; // leaves any existing entry as it is
      }
      revNatId = id;
      this.revNatOwner.set(id, want.mk);
    }
    if (!have) this.kFrontends.set(want.mk, f);

    // Slots 1..n: slot i+1 names backends[i].
    const n = want.backends.length;
    const proto = want.base.proto;
    for (let i = 0; i < n; i++) {
      const id = this.backendIdFor(want.backends[i], proto, out.backendWrites);
      const slot = i + 1;
      const old = f.slots[slot];
      if (old === id) continue;
      out.slotWrites.push([svcKey(f.base, slot), { backendId: id, count: 0, revNatId: 0, flags: 0 }]);
      f.slots[slot] = id;
      this.ref(id);
      if (old !== undefined) this.unref(old);
      else f.slotCount++;
    }

    const master: SvcVal = { backendId: 0, count: n, revNatId, flags: want.flags };
    if (!f.master || !sameMaster(f.master, master)) {
      out.masterWrites.push([svcKey(f.base, 0), master]);
      f.master = master;
    }

    // Slots beyond the new count go after the master is lowered.
    if (f.slotCount > n) {
      for (let s = n + 1; s < f.slots.length; s++) {
        const id = f.slots[s];
        if (id === undefined) continue;
        out.slotDeletes.push(svcKey(f.base, s));
        this.unref(id);
        f.slotCount--;
      }
      f.slots.length = n + 1;
    }
  }

  private removeFrontend(mk: string, f: KernelFrontend, masterDeletes: SvcKey[], slotDeletes: SvcKey[], releaseRevNat: number[]): void {
    if (f.master) {
      masterDeletes.push(svcKey(f.base, 0));
      const rn = f.master.revNatId;
      if (this.revNatOwner.get(rn) === mk) {
        this.revNatOwner.delete(rn);
        releaseRevNat.push(rn);
      }
    }
    for (let s = 1; s < f.slots.length; s++) {
      const id = f.slots[s];
      if (id === undefined) continue;
      slotDeletes.push(svcKey(f.base, s));
      this.unref(id);
    }
    this.kFrontends.delete(mk);
  }

  /** The id of a backend tuple, allocating it (and queueing its write) if the kernel lacks it. */
  private backendIdFor(b: DesiredBackend, proto: number, writes: Array<[number, Backend]>): number {
    const known = this.tupleToId.get(b.tuple);
    if (known !== undefined) return known;
    const id = this.backendIds.allocate();
    if (id === undefined) throw new Error('backend id space exhausted'); // 2^32 - 1 backends: not reachable
    const val: Backend = { addr: b.addr, port: b.port, proto, flags: 0 };
    this.tupleToId.set(b.tuple, id);
    this.idToTuple.set(id, b.tuple);
    this.kBackends.set(id, val);
    writes.push([id, val]);
    return id;
  }

  private ref(id: number): void {
    this.refs.set(id, (this.refs.get(id) ?? 0) + 1);
  }

  private unref(id: number): void {
    const r = (this.refs.get(id) ?? 0) - 1;
    if (r > 0) this.refs.set(id, r);
    else {
      this.refs.delete(id);
      this.unreferenced.add(id);
    }
  }

  // ------------------------------------------------------------------ mirror from kernel

  /** After a failed write: rebuild the mirror from the maps. False (and stale) if they cannot be read. */
  private reload(): boolean {
    try {
      const r = this.loadFromKernel();
      this.stale = false;
      if (r.inconsistencies > 0) this.logger.warn('datapath maps re-read with inconsistencies', { ...r.details });
      return true;
    } catch (err) {
      this.stale = true;
      this.logger.error('cannot read the datapath maps', { error: err instanceof Error ? err.message : String(err) });
      return false;
    }
  }

  private loadFromKernel(): AdoptResult {
    const services = this.maps.dumpServices();
    const backends = this.maps.dumpBackends();

    this.kFrontends.clear();
    this.kBackends.clear();
    this.tupleToId.clear();
    this.idToTuple.clear();
    this.refs.clear();
    this.backendIds.clear();
    this.revNatIds.clear();
    this.revNatOwner.clear();
    this.unreferenced.clear();
    const d: AdoptInconsistencies = {
      slotsWithoutMaster: 0,
      slotsBeyondCount: 0,
      missingSlots: 0,
      danglingSlots: 0,
      orphanBackends: 0,
      duplicateBackends: 0,
      badRevNatIds: 0,
    };

    for (const [id, b] of [...backends].sort((x, y) => x[0] - y[0])) {
      this.kBackends.set(id, b);
      this.backendIds.reserve(id);
      const tuple = backendValueKey(b);
      if (tuple === null) continue; // not something this agent writes: never reused, deleted once unreferenced
      if (this.tupleToId.has(tuple)) d.duplicateBackends++;
      else {
        this.tupleToId.set(tuple, id);
        this.idToTuple.set(id, tuple);
      }
    }

    for (const [k, v] of services) {
      const base: FrontendBase = { addr: k.addr, port: k.port, proto: k.proto, scope: k.scope };
      const mk = frontendMapKey(base);
      let f = this.kFrontends.get(mk);
      if (!f) this.kFrontends.set(mk, (f = { base, master: null, slots: [], slotCount: 0 }));
      if (k.slot === 0) f.master = v;
      else {
        f.slots[k.slot] = v.backendId;
        f.slotCount++;
        this.ref(v.backendId);
        if (!this.kBackends.has(v.backendId)) {
          d.danglingSlots++;
          this.backendIds.reserve(v.backendId); // never hand out an id a stale slot still names
        }
      }
    }

    for (const mk of [...this.kFrontends.keys()].sort(cmp)) {
      const f = this.kFrontends.get(mk)!;
      let bad = false;
      if (!f.master) {
        d.slotsWithoutMaster += f.slotCount;
        bad = true;
      } else {
        for (let s = f.master.count + 1; s < f.slots.length; s++) if (f.slots[s] !== undefined) (d.slotsBeyondCount++, (bad = true));
        for (let s = 1; s <= f.master.count; s++) if (f.slots[s] === undefined) (d.missingSlots++, (bad = true));
        const rn = f.master.revNatId;
        if (rn > 0 && this.revNatIds.reserve(rn)) this.revNatOwner.set(rn, mk);
        else (d.badRevNatIds++, (bad = true));
      }
      for (const id of f.slots) if (id !== undefined && !this.idToTuple.has(id)) bad = true;
      if (bad) this.dirty.add(mk);
    }

    for (const id of this.kBackends.keys()) {
      if (!this.refs.has(id)) {
        d.orphanBackends++;
        this.unreferenced.add(id);
      }
    }
    // Backends with the same tuple as a lower id are repaired by re-pointing their slots.
    const inconsistencies = Object.values(d).reduce((a, b) => a + b, 0);
    return { frontends: this.frontendCount, backends: this.kBackends.size, serviceEntries: services.length, inconsistencies, details: d };
  }

  private finish(result: SyncResult, error?: string): SyncResult {
    if (error !== undefined) {
      result.ok = false;
      result.error = error;
    }
    result.frontends = this.frontendCount;
    result.backends = this.kBackends.size;
    return result;
  }
}
