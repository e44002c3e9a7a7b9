/**
 * The mirror: what the reconciler knows the kernel's maps hold (entry sets
 * per frontend and scope, with their master entry and slot → backend id;
 * backends by id with refcounts; affinity-match pairs, source ranges,
 * service addresses and names), and the ids it has handed out. Rebuilt from
 * a dump of the pinned maps at start (adoption) and after a failed write or
 * a read-back that found drift (loadFromKernel), so it matches what the
 * kernel really holds.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import { IPPROTO, SCOPE, SVC_FLAG, VIP_FLAG, type AffinityMatchKey, type Backend, type SrcRangeKey, type SvcKey, type SvcMeta, type SvcVal } from '../maps/layout.js';
import { parseIP } from '../net/ip.js';
import { BackendTable } from './backend-table.js';
import { backendValueKey, entrySetId, frontendId, type FrontendBase } from './desired-frontend.js';
import { IdAllocator } from './id-allocator.js';

/** Every map the reconciler owns, as read from the kernel. */
export interface KernelContents {
  services: Array<[SvcKey, SvcVal]>;
  backends: Array<[number, Backend]>;
  vips: Array<[string, number]>;
  affs: AffinityMatchKey[];
  metas: Array<[number, SvcMeta]>;
  ranges: SrcRangeKey[];
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
  /** Masters whose revNatId is 0 or already used by another frontend. */
  badRevNatIds: number;
  /** Affinity-pair, service-address or name entries no frontend accounts for. */
  orphanAuxEntries: number;
}

export interface AdoptResult {
  frontends: number;
  backends: number;
  serviceEntries: number;
  /** Sum of `details`. */
  inconsistencies: number;
  details: AdoptInconsistencies;
}

/** One entry set (a frontend in one scope) as the kernel holds it. */
export interface EntrySet {
  fk: string;
  scope: number;
  base: FrontendBase;
  master: SvcVal | null;
  /** slots[s] = backend id of slot s (≥ 1); holes where the kernel has no slot entry. */
  slots: number[];
  /** Number of slot entries present (slots may be sparse after adopt). */
  slotCount: number;
}

const MAX_BACKEND_ID = 0xffffffff;

export class KernelMirror {
  /** entrySetId(fk, scope) → entry set. */
  readonly kSets = new Map<string, EntrySet>();
  /** The backend map by id, and the canonical id per backend tuple (the lowest when the kernel holds duplicates). */
  readonly kBackends = new BackendTable();
  /** Slots naming ids that are not in the backend map (found by adopt only), id → count. */
  readonly danglingRefs = new Map<number, number>();
  /** Master entries in the mirror. */
  masters = 0;
  /** Slot entries in the mirror (kSets' slotCount summed), affinity pairs (kAff) and source-range keys (kRanges). */
  slotEntries = 0;
  affPairs = 0;
  rangeKeys = 0;
  readonly backendIds = new IdAllocator(MAX_BACKEND_ID);
  readonly revNatIds: IdAllocator;
  /** revNatId → the frontend (frontendId) that owns it. */
  readonly revNatOwner = new Map<number, string>();
  /** Backend ids that may have lost their last reference. */
  readonly unreferenced = new Set<number>();
  /** The affinity pairs (tables/affinity-matches.ts): revNatId → backend ids paired with it. */
  readonly kAff = new Map<number, Set<number>>();
  /** The source ranges (tables/src-ranges.ts): revNatId → allowed CIDRs. */
  readonly kRanges = new Map<number, Set<string>>();
  /** The service addresses (tables/vips.ts): address → flags. */
  readonly kVips = new Map<string, number>();
  /** The frontends' names (tables/svc-meta.ts): revNatId → names. */
  readonly kMeta = new Map<number, SvcMeta>();
  /** ClusterIP frontends programmed, per address: the service-address entry's refcount. */
  readonly vipRefs = new Map<string, number>();
  /** frontendId → the address it counts in vipRefs. */
  readonly vipOf = new Map<string, string>();
  /** Found by the last read of the maps: addresses whose service-address entry disagrees with vipRefs, revNatIds with pairs or names but no frontend. */
  readonly suspectVips = new Set<string>();
  readonly suspectRevNats = new Set<number>();

  /** Bumped whenever the mirror is rebuilt from the kernel. */
  generation = 0;

  constructor(readonly maxRevNatId: number) {
    this.revNatIds = new IdAllocator(maxRevNatId);
  }

  /** The revNatId programmed for a frontend (its EXTERNAL master's), if any. */
  revNatIdOf(address: string, port: number, protocol: 'TCP' | 'UDP' | 'SCTP'): number | undefined {
    const proto = IPPROTO[protocol];
    return this.kSets.get(entrySetId(frontendId({ addr: address, port, proto }), SCOPE.EXTERNAL))?.master?.revNatId;
  }

  /** The revNatId this frontend owns in the kernel, if any. */
  ownedRevNat(fk: string, ext = this.kSets.get(entrySetId(fk, SCOPE.EXTERNAL)), int = this.kSets.get(entrySetId(fk, SCOPE.INTERNAL))): number {
    const rn = ext?.master?.revNatId ?? 0;
    if (rn > 0 && this.revNatOwner.get(rn) === fk) return rn;
    const rn2 = int?.master?.revNatId ?? 0;
    if (rn2 > 0 && this.revNatOwner.get(rn2) === fk) return rn2;
    return 0;
  }

  /** A slot stopped naming backend `id`. */
  unref(id: number): void {
    if (this.kBackends.has(id)) {
      if (this.kBackends.dropRef(id) <= 0) this.unreferenced.add(id);
      return;
    }
    const r = (this.danglingRefs.get(id) ?? 0) - 1;
    if (r > 0) this.danglingRefs.set(id, r);
    else {
      this.danglingRefs.delete(id);
      this.unreferenced.add(id);
    }
  }

  /** One batch dump of every map the reconciler owns. Throws if one cannot be read. */
  static read(m: DatapathMaps): KernelContents {
    return {
      services: m.dumpServices(),
      backends: m.dumpBackends(),
      vips: m.dumpVips(),
      affs: m.dumpAffinityMatches(),
      metas: m.dumpSvcMeta(),
      ranges: m.dumpSrcRanges(),
    };
  }

  /**
   * Rebuilds the mirror from `kernel` (a dump of the maps), reserving every
   * id it names. Frontends whose entries are inconsistent go to `dirty`
   * (re-diffed by the next sync); the suspects of the sweep are recorded.
   */
  load(kernel: KernelContents, dirty: Set<string>): AdoptResult {
    const { services, backends, vips, affs, metas, ranges } = kernel;

    this.generation++; // a read-back window open now starts again, against the rebuilt mirror
    this.kSets.clear();
    this.kBackends.clear();
    this.danglingRefs.clear();
    this.masters = 0;
    this.slotEntries = 0;
    this.backendIds.clear();
    this.revNatIds.clear();
    this.revNatOwner.clear();
    this.unreferenced.clear();
    this.kAff.clear();
    this.kRanges.clear();
    this.kVips.clear();
    this.kMeta.clear();
    this.vipRefs.clear();
    this.vipOf.clear();
    this.suspectVips.clear();
    this.suspectRevNats.clear();
    const d: AdoptInconsistencies = {
      slotsWithoutMaster: 0,
      slotsBeyondCount: 0,
      missingSlots: 0,
      danglingSlots: 0,
      orphanBackends: 0,
      duplicateBackends: 0,
      badRevNatIds: 0,
      orphanAuxEntries: 0,
    };

    this.kBackends.reserve(backends.length);
    for (const [id, b] of [...backends].sort((x, y) => x[0] - y[0])) {
      // A tuple of null: not something this agent writes (never reused, deleted once unreferenced).
      const tuple = backendValueKey(b);
      const ip = parseIP(b.addr);
      const canonical = this.kBackends.insert(id, ip && ip.family === 'IPv4' ? (ip.key as number) : -1, b.addr, b.port, b.proto, b.flags, tuple);
      this.backendIds.reserve(id);
      if (tuple !== null && !canonical) d.duplicateBackends++;
    }

    for (const [k, v] of services) {
      const base: FrontendBase = { addr: k.addr, port: k.port, proto: k.proto };
      const fk = frontendId(base);
      const sid = entrySetId(fk, k.scope);
      let f = this.kSets.get(sid);
      if (!f) this.kSets.set(sid, (f = { fk, scope: k.scope, base, master: null, slots: [], slotCount: 0 }));
      if (k.slot === 0) {
        if (!f.master) this.masters++;
        f.master = v;
      } else {
        f.slots[k.slot] = v.backendId;
        f.slotCount++;
        this.slotEntries++;
        if (this.kBackends.has(v.backendId)) this.kBackends.addRef(v.backendId);
        else {
          d.danglingSlots++;
          this.danglingRefs.set(v.backendId, (this.danglingRefs.get(v.backendId) ?? 0) + 1);
          this.backendIds.reserve(v.backendId); // never hand out an id a stale slot still names
        }
      }
    }

    const bad = new Set<string>();
    for (const sid of [...this.kSets.keys()].sort()) {
      const f = this.kSets.get(sid)!;
      if (f.scope !== SCOPE.EXTERNAL && f.scope !== SCOPE.INTERNAL) bad.add(f.fk); // an unknown scope: removed by the next sync
      if (!f.master) {
        d.slotsWithoutMaster += f.slotCount;
        bad.add(f.fk);
      } else {
        for (let s = f.master.count + 1; s < f.slots.length; s++) if (f.slots[s] !== undefined) {
          d.slotsBeyondCount++;
          bad.add(f.fk);
        }
        for (let s = 1; s <= f.master.count; s++) if (f.slots[s] === undefined) {
          d.missingSlots++;
          bad.add(f.fk);
        }
        // Both scopes of one frontend share its revNatId; any other sharing is an inconsistency.
        const rn = f.master.revNatId;
        const owner = this.revNatOwner.get(rn);
        if (rn > 0 && owner === undefined && this.revNatIds.reserve(rn)) this.revNatOwner.set(rn, f.fk);
        else if (owner !== f.fk) {
          d.badRevNatIds++;
          bad.add(f.fk);
        }
        if (f.scope === SCOPE.EXTERNAL && f.master.flags & SVC_FLAG.CLUSTER_IP) {
          this.vipOf.set(f.fk, f.base.addr);
          this.vipRefs.set(f.base.addr, (this.vipRefs.get(f.base.addr) ?? 0) + 1);
        }
      }
      // A slot naming a dangling, foreign or duplicate backend is re-pointed by the next sync.
      for (const id of f.slots) {
        if (id === undefined) continue;
        if (!this.kBackends.has(id) || !this.kBackends.isCanonical(id)) bad.add(f.fk);
      }
    }
    for (const fk of bad) dirty.add(fk);

    for (const k of affs) {
      let s = this.kAff.get(k.revNatId);
      if (!s) this.kAff.set(k.revNatId, (s = new Set()));
      s.add(k.backendId);
      if (!this.revNatOwner.has(k.revNatId)) {
        d.orphanAuxEntries++;
        this.suspectRevNats.add(k.revNatId);
      }
    }
    for (const k of ranges) {
      let s = this.kRanges.get(k.revNatId);
      if (!s) this.kRanges.set(k.revNatId, (s = new Set()));
      s.add(k.cidr);
      if (!this.revNatOwner.has(k.revNatId)) {
        d.orphanAuxEntries++;
        this.suspectRevNats.add(k.revNatId);
      }
    }
    this.affPairs = 0;
    for (const s of this.kAff.values()) this.affPairs += s.size;
    this.rangeKeys = 0;
    for (const s of this.kRanges.values()) this.rangeKeys += s.size;
    for (const [addr, flags] of vips) {
      this.kVips.set(addr, flags);
      if (!this.vipRefs.has(addr)) {
        d.orphanAuxEntries++;
        this.suspectVips.add(addr);
      }
    }
    // A ClusterIP frontend whose address entry is missing (a write that failed part-way).
    for (const addr of this.vipRefs.keys()) if (this.kVips.get(addr) !== VIP_FLAG.REFUSE_UNKNOWN_PORT) this.suspectVips.add(addr);
    for (const [rn, m] of metas) {
      this.kMeta.set(rn, m);
      if (!this.revNatOwner.has(rn)) {
        d.orphanAuxEntries++;
        this.suspectRevNats.add(rn);
      }
    }

    this.kBackends.forEachId((id) => {
      if (this.kBackends.refs(id) === 0) {
        d.orphanBackends++;
        this.unreferenced.add(id);
      }
    });
    // Backends with the same tuple as a lower id are repaired by re-pointing their slots.
    const inconsistencies = Object.values(d).reduce((a, b) => a + b, 0);
    return { frontends: this.masters, backends: this.kBackends.size, serviceEntries: services.length, inconsistencies, details: d };
  }
}

export function sameMaster(a: SvcVal, b: SvcVal): boolean {
  return a.count === b.count && a.revNatId === b.revNatId && a.flags === b.flags && a.backendId === b.backendId;
}

export function sameMeta(a: SvcMeta | undefined, b: SvcMeta): boolean {
  return a !== undefined && a.name === b.name && a.portName === b.portName && a.type === b.type && a.proto === b.proto;
}
