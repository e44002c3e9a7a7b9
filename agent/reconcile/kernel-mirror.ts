/**
 * The mirror: what the reconciler knows the kernel's maps hold, and the ids
 * it has handed out. Each map's part is owned by its table module
 * (tables/<map>.ts: a state class with the operations the phases need);
 * this class composes them, with what crosses maps: the frontendIds and
 * their owners, the backends' references, the backend ids. Rebuilt from a
 * dump of the pinned maps at start (adoption) and after a failed write or a
 * read-back that found drift (`load(KernelMirror.read(maps))`), so it
 * matches what the kernel really holds.
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import { IPPROTO, SCOPE, SVC_FLAG } from '../maps/layout.js';
import { parseIP } from '../net/ip.js';
import { BackendTable } from './backend-table.js';
import { backendValueKey, entrySetId } from './desired-frontend.js';
import { frontendKey } from '../plan/types.js';
import { IdAllocator } from './id-allocator.js';
import type { KernelContents } from './kernel-contents.js';
import { AffinityMatchesMirror } from './tables/affinity-matches.js';
import { MaglevMirror, releaseMaglevTableIds } from './tables/maglev.js';
import { ServicesMirror, type EntrySet } from './tables/services.js';
import { SrcRangesMirror } from './tables/src-ranges.js';
import { SvcMetaMirror } from './tables/svc-meta.js';
import type { ByFrontendId } from './tables/table.js';
import { VipsMirror } from './tables/vips.js';
import type { Writes } from './write-batch.js';

export type { KernelContents } from './kernel-contents.js';

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

const MAX_BACKEND_ID = 0xffffffff;

/** What the maps hold, as last written or read. A map's part is named as its table module (tables/<name>.ts) and is that module's state. */
export class KernelMirror {
  /** The service map (tables/services.ts): the entry sets by entrySetId(fk, scope), masters and slots counted. */
  readonly entrySets = new ServicesMirror();
  /** The backend map (tables/backends.ts) by id, and the canonical id per backend tuple (the lowest when the kernel holds duplicates). */
  readonly backends = new BackendTable();
  /** Slots naming ids that are not in the backend map (found by adopt only), id → count. */
  readonly danglingRefs = new Map<number, number>();
  readonly backendIds = new IdAllocator(MAX_BACKEND_ID);
  readonly frontendIds: IdAllocator;
  /** frontendId → the frontend (frontend key) that owns it. */
  readonly frontendIdOwner = new Map<number, string>();
  /** Backend ids that may have lost their last reference. */
  readonly unreferenced = new Set<number>();
  /** The affinity pairs (tables/affinity-matches.ts). */
  readonly affinityMatches = new AffinityMatchesMirror();
  /** The source ranges (tables/src-ranges.ts). */
  readonly srcRanges = new SrcRangesMirror();
  /** The Maglev tables and their references (tables/maglev.ts). */
  readonly maglev = new MaglevMirror();
  /** The service addresses (tables/vips.ts), with the ClusterIP frontends counted per address. */
  readonly vips = new VipsMirror();
  /** The frontends' names (tables/svc-meta.ts). */
  readonly svcMeta = new SvcMetaMirror();
  /** The parts kept by frontendId whose keys the sweep checks against frontendIdOwner (the Maglev references aside: tables/maglev.ts). */
  readonly byFrontendId: readonly ByFrontendId[] = [this.affinityMatches, this.srcRanges, this.svcMeta];
  /** Found by the last read of the maps (or the sweep scan): frontendIds with pairs, ranges, names or Maglev references but no frontend. */
  readonly suspectFrontendIds = new Set<number>();

  /** Bumped whenever the mirror is rebuilt from the kernel. */
  generation = 0;

  constructor(readonly maxFrontendId: number) {
    this.frontendIds = new IdAllocator(maxFrontendId);
  }

  /** The frontendId programmed for a frontend (its EXTERNAL master's), if any. */
  frontendIdOf(address: string, port: number, protocol: 'TCP' | 'UDP' | 'SCTP'): number | undefined {
    const proto = IPPROTO[protocol];
    return this.entrySets.sets.get(entrySetId(frontendKey({ addr: address, port, proto }), SCOPE.EXTERNAL))?.master?.frontendId;
  }

  /** The frontendId this frontend owns in the kernel, if any. */
  ownedFrontendId(
    fk: string,
    ext: EntrySet | undefined = this.entrySets.sets.get(entrySetId(fk, SCOPE.EXTERNAL)),
    int: EntrySet | undefined = this.entrySets.sets.get(entrySetId(fk, SCOPE.INTERNAL)),
  ): number {
    const fid = ext?.master?.frontendId ?? 0;
    if (fid > 0 && this.frontendIdOwner.get(fid) === fk) return fid;
    const fid2 = int?.master?.frontendId ?? 0;
    if (fid2 > 0 && this.frontendIdOwner.get(fid2) === fk) return fid2;
    return 0;
  }

  /** Master entries in the mirror (the frontends' entry sets programmed). */
  get masters(): number {
    return this.entrySets.masters;
  }

  /** After a sync is applied: the ids it freed become reusable. */
  releaseIds(w: Writes): void {
    for (const id of w.releaseFrontendId) this.frontendIds.release(id);
    for (const id of w.releaseBackendIds) this.backendIds.release(id);
    releaseMaglevTableIds(this, w.releaseMaglevTableIds);
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
    this.backendIds.clear();
    this.frontendIds.clear();
    this.frontendIdOwner.clear();
    this.unreferenced.clear();
    this.affinityMatches.clear();
    this.srcRanges.clear();
    this.maglev.clear();
    this.vips.clear();
    this.svcMeta.clear();
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

    this.entrySets.load(services, (id) => {
      if (this.backends.has(id)) this.backends.addRef(id);
      else {
        d.danglingSlots++;
        this.danglingRefs.set(id, (this.danglingRefs.get(id) ?? 0) + 1);
        this.backendIds.reserve(id); // never hand out an id a stale slot still names
      }
    });

    const sets = this.entrySets.sets;
    const bad = new Set<string>();
    for (const sid of [...sets.keys()].sort()) {
      const f = sets.get(sid)!;
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
        if (f.scope === SCOPE.EXTERNAL && f.master.flags & SVC_FLAG.CLUSTER_IP) this.vips.count(f.fk, f.base.addr);
      }
      // A slot naming a dangling, foreign or duplicate backend is re-pointed by the next sync.
      for (const id of f.slots) {
        if (id === undefined) continue;
        if (!this.backends.has(id) || !this.backends.isCanonical(id)) bad.add(f.fk);
      }
    }
    for (const fk of bad) dirty.add(fk);

    // The maps kept by frontendId, and the service addresses (against the frontends counted above).
    const owners = this.frontendIdOwner;
    const suspects = this.suspectFrontendIds;
    d.orphanAuxEntries += this.affinityMatches.load(affs, owners, suspects);
    d.orphanAuxEntries += this.srcRanges.load(ranges, owners, suspects);
    d.orphanAuxEntries += this.maglev.load(maglevRefs, maglev, owners, suspects);
    d.orphanAuxEntries += this.vips.load(vips);
    d.orphanAuxEntries += this.svcMeta.load(metas, owners, suspects);

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
