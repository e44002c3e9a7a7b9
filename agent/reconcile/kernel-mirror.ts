/**
 * The mirror: what the reconciler knows the kernel's maps hold (entry sets
 * per frontend and scope, with their master entry and slot → backend id;
 * backends by id with refcounts; affinity-match pairs, source ranges,
 * service addresses and names), and the ids it has handed out. Rebuilt from
 * a dump of the pinned maps at start (adoption) and after a failed write or
 * a read-back that found drift (`load(KernelMirror.read(maps))`), so it matches what the
 * kernel really holds.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import {
  IPPROTO,
  SCOPE,
  SVC_FLAG,
  VIP_FLAG,
  type AffinityMatchKey,
  type Backend,
  type MaglevChunk,
  type MaglevKey,
  type MaglevRef,
  type MaglevRefKey,
  type SrcRangeKey,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from '../maps/layout.js';
import { parseIP } from '../net/ip.js';
import { BackendTable } from './backend-table.js';
import { backendValueKey, entrySetId, type FrontendBase } from './desired-frontend.js';
import { frontendKey } from '../plan/types.js';
import { IdAllocator } from './id-allocator.js';
import { TableShares } from '../lb/table-shares.js';

/** Every map the reconciler owns, as read from the kernel. */
export interface KernelContents {
  services: Array<[SvcKey, SvcVal]>;
  backends: Array<[number, Backend]>;
  vips: Array<[string, number]>;
  affs: AffinityMatchKey[];
  metas: Array<[number, SvcMeta]>;
  ranges: SrcRangeKey[];
  maglev: Array<[MaglevKey, MaglevChunk]>;
  maglevRefs: Array<[MaglevRefKey, MaglevRef]>;
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
  /** Masters whose frontendId is 0 or already used by another frontend. */
  badFrontendIds: number;
  /** Affinity-pair, source-range, service-address, name or Maglev entries no frontend accounts for (a Maglev chunk: of a table no reference names). */
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

/** What the maps hold, as last written or read. A map's mirror is named as its table module (tables/<name>.ts). */
export class KernelMirror {
  /** The service map (tables/services.ts): entrySetId(fk, scope) → entry set. */
  readonly entrySets = new Map<string, EntrySet>();
  /** The backend map (tables/backends.ts) by id, and the canonical id per backend tuple (the lowest when the kernel holds duplicates). */
  readonly backends = new BackendTable();
  /** Slots naming ids that are not in the backend map (found by adopt only), id → count. */
  readonly danglingRefs = new Map<number, number>();
  /** Master entries in the mirror. */
  masters = 0;
  /** Slot entries in the mirror (entrySets' slotCount summed), affinity pairs (affinityMatches) and source-range keys (srcRanges). */
  slotEntries = 0;
  affPairs = 0;
  rangeKeys = 0;
  readonly backendIds = new IdAllocator(MAX_BACKEND_ID);
  readonly frontendIds: IdAllocator;
  /** frontendId → the frontend (frontend key) that owns it. */
  readonly frontendIdOwner = new Map<number, string>();
  /** Backend ids that may have lost their last reference. */
  readonly unreferenced = new Set<number>();
  /** The affinity pairs (tables/affinity-matches.ts): frontendId → backend ids paired with it. */
  readonly affinityMatches = new Map<number, Set<number>>();
  /** The source ranges (tables/src-ranges.ts): frontendId → allowed CIDRs. */
  readonly srcRanges = new Map<number, Set<string>>();
  /** Maglev table chunks (tables/maglev.ts): maglevChunkId(tableId, chunk) → slot numbers. */
  readonly maglevChunks = new Map<number, MaglevChunk>();
  /** Maglev table references (tables/maglev.ts): maglevSetId(frontendId, scope) → table id and M. */
  readonly maglevRefs = new Map<number, MaglevRef>();
  /**
   * Who holds which Maglev table (tables/maglev.ts): table id → the key it was
   * written from (null after a load: not read from the kernel), its M and the
   * entry sets whose references name it; one table per key.
   */
  readonly maglevTables = new TableShares<number>();
  /** Maglev table ids in use (in a reference or a chunk); one freed by a sync is reusable only once it is applied. */
  readonly maglevTableIds = new IdAllocator(MAX_MAGLEV_TABLE_ID);
  /** Found by the last read of the maps: Maglev tables with chunks that no reference names. */
  readonly suspectMaglevTables = new Set<number>();
  /** The service addresses (tables/vips.ts): address → flags. */
  readonly vips = new Map<string, number>();
  /** The frontends' names (tables/svc-meta.ts): frontendId → names. */
  readonly svcMeta = new Map<number, SvcMeta>();
  /** ClusterIP frontends programmed, per address: the service-address entry's refcount. */
  readonly vipRefs = new Map<string, number>();
  /** frontend key → the address it counts in vipRefs. */
  readonly vipOf = new Map<string, string>();
  /** Found by the last read of the maps: addresses whose service-address entry disagrees with vipRefs, frontendIds with pairs or names but no frontend. */
  readonly suspectVips = new Set<string>();
  readonly suspectFrontendIds = new Set<number>();

  /** Bumped whenever the mirror is rebuilt from the kernel. */
  generation = 0;

  constructor(readonly maxFrontendId: number) {
    this.frontendIds = new IdAllocator(maxFrontendId);
  }

  /** The frontendId programmed for a frontend (its EXTERNAL master's), if any. */
  frontendIdOf(address: string, port: number, protocol: 'TCP' | 'UDP' | 'SCTP'): number | undefined {
    const proto = IPPROTO[protocol];
    return this.entrySets.get(entrySetId(frontendKey({ addr: address, port, proto }), SCOPE.EXTERNAL))?.master?.frontendId;
  }

  /** The frontendId this frontend owns in the kernel, if any. */
  ownedFrontendId(fk: string, ext = this.entrySets.get(entrySetId(fk, SCOPE.EXTERNAL)), int = this.entrySets.get(entrySetId(fk, SCOPE.INTERNAL))): number {
    const fid = ext?.master?.frontendId ?? 0;
    if (fid > 0 && this.frontendIdOwner.get(fid) === fk) return fid;
    const fid2 = int?.master?.frontendId ?? 0;
    if (fid2 > 0 && this.frontendIdOwner.get(fid2) === fk) return fid2;
    return 0;
  }

  /** A slot stopped naming backend `id`. */
  unref(id: number): void {
    if (this.backends.has(id)) {
      if (this.backends.dropRef(id) <= 0) this.unreferenced.add(id);
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
      maglev: m.dumpMaglev(),
      maglevRefs: m.dumpMaglevRefs(),
    };
  }

  /**
   * Rebuilds the mirror from `kernel` (a dump of the maps), reserving every
   * id it names. Frontends whose entries are inconsistent go to `dirty`
   * (re-diffed by the next sync); the suspects of the sweep are recorded.
   */
  load(kernel: KernelContents, dirty: Set<string>): AdoptResult {
    const { services, backends, vips, affs, metas, ranges, maglev, maglevRefs } = kernel;

    this.generation++; // a read-back window open now starts again, against the rebuilt mirror
    this.entrySets.clear();
    this.backends.clear();
    this.danglingRefs.clear();
    this.masters = 0;
    this.slotEntries = 0;
    this.backendIds.clear();
    this.frontendIds.clear();
    this.frontendIdOwner.clear();
    this.unreferenced.clear();
    this.affinityMatches.clear();
    this.srcRanges.clear();
    this.maglevChunks.clear();
    this.maglevRefs.clear();
    this.maglevTables.clear();
    this.maglevTableIds.clear();
    this.suspectMaglevTables.clear();
    this.vips.clear();
    this.svcMeta.clear();
    this.vipRefs.clear();
    this.vipOf.clear();
    this.suspectVips.clear();
    this.suspectFrontendIds.clear();
    const d: AdoptInconsistencies = {
      slotsWithoutMaster: 0,
      slotsBeyondCount: 0,
      missingSlots: 0,
      danglingSlots: 0,
      orphanBackends: 0,
      duplicateBackends: 0,
      badFrontendIds: 0,
      orphanAuxEntries: 0,
    };

    this.backends.reserve(backends.length);
    for (const [id, b] of [...backends].sort((x, y) => x[0] - y[0])) {
      // A tuple of null: not something this agent writes (never reused, deleted once unreferenced).
      const tuple = backendValueKey(b);
      const ip = parseIP(b.addr);
      const canonical = this.backends.insert(id, ip && ip.family === 'IPv4' ? (ip.key as number) : -1, b.addr, b.port, b.proto, b.flags, tuple);
      this.backendIds.reserve(id);
      if (tuple !== null && !canonical) d.duplicateBackends++;
    }

    for (const [k, v] of services) {
      const base: FrontendBase = { addr: k.addr, port: k.port, proto: k.proto };
      const fk = frontendKey(base);
      const sid = entrySetId(fk, k.scope);
      let f = this.entrySets.get(sid);
      if (!f) this.entrySets.set(sid, (f = { fk, scope: k.scope, base, master: null, slots: [], slotCount: 0 }));
      if (k.slot === 0) {
        if (!f.master) this.masters++;
        f.master = v;
      } else {
        f.slots[k.slot] = v.backendId;
        f.slotCount++;
        this.slotEntries++;
        if (this.backends.has(v.backendId)) this.backends.addRef(v.backendId);
        else {
          d.danglingSlots++;
          this.danglingRefs.set(v.backendId, (this.danglingRefs.get(v.backendId) ?? 0) + 1);
          this.backendIds.reserve(v.backendId); // never hand out an id a stale slot still names
        }
      }
    }

    const bad = new Set<string>();
    for (const sid of [...this.entrySets.keys()].sort()) {
      const f = this.entrySets.get(sid)!;
      if (f.scope !== SCOPE.EXTERNAL && f.scope !== SCOPE.INTERNAL) bad.add(f.fk); // an unknown scope: removed by the next sync
      if (!f.master) {
        d.slotsWithoutMaster += f.slotCount;
        bad.add(f.fk);
      } else {
        for (let s = f.master.count + 1; s < f.slots.length; s++)
          if (f.slots[s] !== undefined) {
            d.slotsBeyondCount++;
            bad.add(f.fk);
          }
        for (let s = 1; s <= f.master.count; s++)
          if (f.slots[s] === undefined) {
            d.missingSlots++;
            bad.add(f.fk);
          }
        // Both scopes of one frontend share its frontendId; any other sharing is an inconsistency.
        const fid = f.master.frontendId;
        const owner = this.frontendIdOwner.get(fid);
        if (fid > 0 && owner === undefined && this.frontendIds.reserve(fid)) this.frontendIdOwner.set(fid, f.fk);
        else if (owner !== f.fk) {
          d.badFrontendIds++;
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
        if (!this.backends.has(id) || !this.backends.isCanonical(id)) bad.add(f.fk);
      }
    }
    for (const fk of bad) dirty.add(fk);

    for (const k of affs) {
      let s = this.affinityMatches.get(k.frontendId);
      if (!s) this.affinityMatches.set(k.frontendId, (s = new Set()));
      s.add(k.backendId);
      if (!this.frontendIdOwner.has(k.frontendId)) {
        d.orphanAuxEntries++;
        this.suspectFrontendIds.add(k.frontendId);
      }
    }
    for (const k of ranges) {
      let s = this.srcRanges.get(k.frontendId);
      if (!s) this.srcRanges.set(k.frontendId, (s = new Set()));
      s.add(k.cidr);
      if (!this.frontendIdOwner.has(k.frontendId)) {
        d.orphanAuxEntries++;
        this.suspectFrontendIds.add(k.frontendId);
      }
    }
    // Maglev tables: a table is shared by the entry sets whose references name it (tables/maglev.ts), its key unknown until one of them is diffed.
    for (const [k, ref] of maglevRefs) {
      this.maglevRefs.set(maglevSetId(k.frontendId, k.scope), ref);
      this.maglevTableIds.reserve(ref.tableId);
      this.maglevTables.hold(ref.tableId, ref.m);
      if (!this.frontendIdOwner.has(k.frontendId)) {
        d.orphanAuxEntries++;
        this.suspectFrontendIds.add(k.frontendId);
      }
    }
    for (const [k, chunk] of maglev) {
      this.maglevChunks.set(maglevChunkId(k.tableId, k.chunk), chunk);
      this.maglevTableIds.reserve(k.tableId);
      if (this.maglevTables.holders(k.tableId) === 0) {
        d.orphanAuxEntries++;
        this.suspectMaglevTables.add(k.tableId);
      }
    }
    this.affPairs = 0;
    for (const s of this.affinityMatches.values()) this.affPairs += s.size;
    this.rangeKeys = 0;
    for (const s of this.srcRanges.values()) this.rangeKeys += s.size;
    for (const [addr, flags] of vips) {
      this.vips.set(addr, flags);
      if (!this.vipRefs.has(addr)) {
        d.orphanAuxEntries++;
        this.suspectVips.add(addr);
      }
    }
    // A ClusterIP frontend whose address entry is missing (a write that failed part-way).
    for (const addr of this.vipRefs.keys()) if (this.vips.get(addr) !== VIP_FLAG.REFUSE_UNKNOWN_PORT) this.suspectVips.add(addr);
    for (const [fid, m] of metas) {
      this.svcMeta.set(fid, m);
      if (!this.frontendIdOwner.has(fid)) {
        d.orphanAuxEntries++;
        this.suspectFrontendIds.add(fid);
      }
    }

    this.backends.forEachId((id) => {
      if (this.backends.refs(id) === 0) {
        d.orphanBackends++;
        this.unreferenced.add(id);
      }
    });
    // Backends with the same tuple as a lower id are repaired by re-pointing their slots.
    const inconsistencies = Object.values(d).reduce((a, b) => a + b, 0);
    return { frontends: this.masters, backends: this.backends.size, serviceEntries: services.length, inconsistencies, details: d };
  }
}

/** The mirror's key of a Maglev entry set (frontendId, scope). */
export function maglevSetId(frontendId: number, scope: number): number {
  return frontendId * 2 + scope;
}

/** The largest Maglev table id (a u32 in the table's key). */
export const MAX_MAGLEV_TABLE_ID = 0xffffffff;

/** Chunks a Maglev table has at most: ⌈65521 / 1024⌉. */
export const MAGLEV_MAX_CHUNKS = 64;

/** The mirror's key of a Maglev table chunk. */
export function maglevChunkId(tableId: number, chunk: number): number {
  return tableId * MAGLEV_MAX_CHUNKS + chunk;
}

export function sameMaster(a: SvcVal, b: SvcVal): boolean {
  return a.count === b.count && a.frontendId === b.frontendId && a.flags === b.flags && a.backendId === b.backendId;
}

export function sameMeta(a: SvcMeta | undefined, b: SvcMeta): boolean {
  return a !== undefined && a.name === b.name && a.portName === b.portName && a.type === b.type && a.proto === b.proto;
}
