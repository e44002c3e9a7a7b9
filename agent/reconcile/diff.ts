/**
 * The diff: one desired frontend (or a removed one) against the mirror,
 * queueing in a write batch what the kernel lacks or holds differently and
 * updating the mirror to what the batch, once applied, leaves there; then
 * what nothing accounts for any more (orphan pairs, ranges, names,
 * addresses, backends). Each map's own diff is its table module's
 * (tables/: entry sets, names, pairs, ranges, Maglev tables, addresses),
 * over its part of the mirror; this module sequences them per frontend and
 * allocates the ids. It also notes the UDP backends that leave a
 * frontend, reported by the next sync that succeeds (udpBackendsLeft).
 */
import { BE_FLAG, IPPROTO, SCOPE, type SvcVal } from '../maps/layout.js';
import type { SkippedObject } from '../plan/types.js';
import type { Admission } from './admission.js';
import { clearIfAny } from './collections.js';
import { desiredFrontendLabel, entrySetId, tupleIPv4, tuplePort, type BackendTuple, type DesiredFrontend } from './desired-frontend.js';
import type { KernelMirror } from './kernel-mirror.js';
import type { UdpBackendLeft } from './sync-types.js';
import { diffAffinityMatches } from './tables/affinity-matches.js';
import { diffSrcRanges } from './tables/src-ranges.js';
import { desiredMaglev } from './maglev-table.js';
import { diffMaglev, dropUnheldMaglevTables, maglevFrontendIds } from './tables/maglev.js';
import { diffEntrySet, entrySetOf, removeEntrySet, type EntrySet } from './tables/services.js';
import { diffSvcMeta, dropSvcMeta, metaOf } from './tables/svc-meta.js';
import { settleVips, touchSuspectVips, vipCountedFor, vipRef, vipUnref } from './tables/vips.js';
import type { BackendWrites, Writes } from './write-batch.js';

const SCOPES = [SCOPE.EXTERNAL, SCOPE.INTERNAL] as const;
const NO_IDS: readonly number[] = [];
const NO_RANGES: readonly string[] = [];
const NO_TUPLES: ReadonlySet<BackendTuple> = new Set();
/** A UDP backend noted leaving a frontend, until a sync that succeeds reports it. */
interface UdpLeaver {
  fk: string;
  tuple: BackendTuple;
  left: UdpBackendLeft;
}

export class MirrorDiff {
  /**
   * Set by a read-back that found drift: frontend → the frontendId it had
   * before, when the kernel lost every master naming it, so the repair gives
   * it back the same id (and its names, pairs and ranges stay valid).
   */
  readonly frontendIdHints = new Map<string, number>();
  /** UDP backends that left a frontend since the last sync that succeeded, by frontend, tuple and frontendId. */
  private readonly udpLeft = new Map<string, UdpLeaver>();

  constructor(
    private readonly m: KernelMirror,
    private readonly admission: Admission,
  ) {}

  diffFrontend(want: DesiredFrontend, w: Writes, touchedVips: Set<string>, skipped: SkippedObject[]): void {
    const fk = want.fk;
    // Each entry set looked up once for the whole diff.
    const extSet = entrySetOf(this.m, want.extSid);
    const intSet = entrySetOf(this.m, want.intSid);
    let frontendId = this.m.ownedFrontendId(fk, extSet, intSet);
    const udpBefore = frontendId > 0 ? this.udpSlots(extSet, intSet) : null;
    const udpFrontendId = frontendId;
    if (frontendId === 0 && this.frontendIdHints.size > 0) {
      const hint = this.frontendIdHints.get(fk);
      if (hint !== undefined && this.m.frontendIds.reserve(hint)) {
        frontendId = hint;
        this.m.frontendIdOwner.set(hint, fk);
      }
    }
    if (frontendId === 0) {
      const id = this.m.frontendIds.allocate();
      if (id === undefined) {
        // admitted() counted the ids: not reached unless the count was wrong. Leaves any existing entry as it is.
        this.admission.refuse({ service: want.service, limit: 'rev_nat_ids', action: 'refused', capacity: this.m.maxFrontendId, needed: 1, free: 0 });
        return;
      }
      frontendId = id;
      this.m.frontendIdOwner.set(id, fk);
    }

    // Names first (no reader depends on them, the CLI does).
    diffSvcMeta(this.m, frontendId, metaOf(want.service, want.portName, want.feType, want.base.proto), w);

    // Backend ids of both sets, so the affinity pairs can be written before any slot names them.
    const ext = this.backendsFor(want.tuples, want.locals, want.texts, want.base.proto, w);
    const int = want.internalTuples ? this.backendsFor(want.internalTuples, want.internalLocals, want.internalTexts, want.base.proto, w) : null;
    if (want.affinityTimeout > 0) diffAffinityMatches(this.m, frontendId, int ? ext.concat(int) : ext, w);
    else diffAffinityMatches(this.m, frontendId, NO_IDS, w);
    diffSrcRanges(this.m, frontendId, want.sourceRanges, w);

    if (udpBefore) this.noteUdpLeft(fk, udpFrontendId, udpBefore, new Set(want.internalTuples ? want.tuples.concat(want.internalTuples) : want.tuples));

    const master = (n: number): SvcVal => ({ backendId: want.affinityTimeout, count: n, frontendId, flags: want.flags });
    diffEntrySet(this.m, extSet, want.extSid, fk, SCOPE.EXTERNAL, want.base, ext, master(ext.length), w);
    if (int) diffEntrySet(this.m, intSet, want.intSid, fk, SCOPE.INTERNAL, want.base, int, master(int.length), w);
    else if (intSet) removeEntrySet(this.m, SCOPE.INTERNAL, want.intSid, w);

    // Maglev tables of the entry sets (rule 40 of docs/semantics.md; tables/maglev.ts), written with the slots.
    this.maglevOf(want, frontendId, SCOPE.EXTERNAL, want.maglev && ext.length > 0 ? desiredMaglev(want.tuples, want.texts) : null, w, skipped);
    this.maglevOf(
      want,
      frontendId,
      SCOPE.INTERNAL,
      want.maglev && int && int.length > 0 ? desiredMaglev(want.internalTuples!, want.internalTexts) : null,
      w,
      skipped,
    );

    // The service address (tables/vips.ts): a ClusterIP address refuses unknown ports while one of its frontends is programmed.
    const counted = vipCountedFor(this.m, fk);
    if (want.clusterIP && counted === undefined) vipRef(this.m, fk, want.base.addr, touchedVips);
    else if (!want.clusterIP && counted !== undefined) vipUnref(this.m, fk, touchedVips);
  }

  /** One entry set's Maglev table; one that does not fit in kpr_maglev is reported, and its frontend balanced at random by the datapath. */
  private maglevOf(
    want: DesiredFrontend,
    frontendId: number,
    scope: number,
    table: ReturnType<typeof desiredMaglev> | null,
    w: Writes,
    skipped: SkippedObject[],
  ): void {
    if (diffMaglev(this.m, frontendId, scope, table, w, this.maglevCapacity)) return;
    this.maglevNotWritten.push(desiredFrontendLabel(want));
    skipped.push({
      object: `Service ${want.service}`,
      reason: `Maglev table of ${desiredFrontendLabel(want)} not written: kpr_maglev is full (--map-size-maglev); its new connections are balanced at random`,
    });
  }

  /** kpr_maglev's capacity in chunks (the reconciler sets it from the maps). */
  maglevCapacity = Infinity;
  private maglevNotWritten: string[] = [];

  /** The frontends whose Maglev table did not fit since the last call (the reconciler logs them once a sync). */
  takeMaglevNotWritten(): string[] {
    const out = this.maglevNotWritten;
    if (out.length > 0) this.maglevNotWritten = [];
    return out;
  }

  /** Backend ids of one scope of a desired frontend (its tuples, locals and texts) in order, allocating (and queueing writes of) what the kernel lacks. */
  backendsFor(tuples: readonly BackendTuple[], locals: readonly number[], texts: readonly string[] | null, proto: number, w: Writes): number[] {
    const n = tuples.length;
    const ids = new Array<number>(n);
    let l = 0; // the next of `locals` (ascending)
    for (let i = 0; i < n; i++) {
      const local = l < locals.length && locals[l] === i;
      if (local) l++;
      ids[i] = this.backendFor(tuples[i], local, texts === null ? '' : texts[i], proto, w.backendWrites);
    }
    return ids;
  }

  removeFrontend(fk: string, w: Writes, touchedVips: Set<string>): void {
    const fid = this.m.ownedFrontendId(fk);
    const udpBefore = fid > 0 ? this.udpSlots(entrySetOf(this.m, entrySetId(fk, SCOPE.EXTERNAL)), entrySetOf(this.m, entrySetId(fk, SCOPE.INTERNAL))) : null;
    if (udpBefore) this.noteUdpLeft(fk, fid, udpBefore, NO_TUPLES);
    for (const scope of SCOPES) removeEntrySet(this.m, scope, entrySetId(fk, scope), w);
    if (fid > 0) {
      this.clearFrontendIdEntries(fid, w);
      this.m.frontendIdOwner.delete(fid);
      w.releaseFrontendId.push(fid);
    }
    vipUnref(this.m, fk, touchedVips);
  }

  /**
   * Affinity pairs, Maglev references and names of frontendIds no frontend
   * owns, Maglev tables no reference names, service addresses whose entry
   * disagrees with the frontends, backends no slot names: the
   * suspects the last read of the maps found, or (full sync) everything.
   */
  sweepOrphans(w: Writes, touchedVips: Set<string>, full: boolean): void {
    const m = this.m;
    if (full) {
      // Each map walked in turn (a frontendId's pairs, ranges and name all go at its first visit; Maps
      // iterate safely past deleted entries), not merged into one Set: at 100,000 frontends that was
      // an array and a Set of 100,000 ids.
      for (const part of m.byFrontendId) for (const fid of part.frontendIds()) this.dropOrphanFrontendId(fid, w);
      for (const fid of maglevFrontendIds(m)) this.dropOrphanFrontendId(fid, w);
    } else for (const fid of m.suspectFrontendIds) this.dropOrphanFrontendId(fid, w);
    // Maglev tables no reference names (after the references of orphan frontendIds went, with their tables).
    dropUnheldMaglevTables(m, w, full);
    touchSuspectVips(m, touchedVips, full);
    if (full) {
      m.backends.forEachId((id) => {
        if (m.backends.refs(id) === 0) m.unreferenced.add(id);
      });
    }
    clearIfAny(this.m.suspectFrontendIds);
  }

  /** Maglev tables, affinity pairs, source ranges and name of `fid` when no frontend owns it. */
  private dropOrphanFrontendId(fid: number, w: Writes): void {
    if (!this.m.frontendIdOwner.has(fid)) this.clearFrontendIdEntries(fid, w);
  }

  /** Queues the deletion of everything keyed by frontend id `fid` besides the entry sets: Maglev tables, affinity pairs, source ranges, its name. */
  private clearFrontendIdEntries(fid: number, w: Writes): void {
    for (const scope of SCOPES) diffMaglev(this.m, fid, scope, null, w);
    diffAffinityMatches(this.m, fid, NO_IDS, w);
    diffSrcRanges(this.m, fid, NO_RANGES, w);
    dropSvcMeta(this.m, fid, w);
  }

  /**
   * The backend id of one checked backend (its tuple, whether it is on this
   * node, its address text unless IPv4), allocating it (and queueing its
   * write) if the kernel lacks it or holds other flags.
   */
  backendFor(tuple: BackendTuple, local: boolean, text: string, proto: number, writes: BackendWrites): number {
    const flags = local ? BE_FLAG.LOCAL : 0;
    const rows = this.m.backends;
    const known = rows.idOf(tuple);
    if (known >= 0) {
      if (rows.flags(known) !== flags) {
        // The endpoint moved to or from this node (an IP reused): same address, new LOCAL flag.
        rows.setFlags(known, flags);
        writes.push(known);
      }
      return known;
    }
    const id = this.m.backendIds.allocate();
    if (id === undefined) throw new Error('backend id space exhausted'); // 2^32 - 1 backends: not reachable
    // A numeric tuple is an IPv4 backend: its address is the tuple's top 32 bits.
    rows.insert(id, tupleIPv4(tuple), text, tuplePort(tuple), proto, flags, tuple);
    writes.push(id);
    return id;
  }

  // ------------------------------------------------------------------ the end of a pass

  /** Service-address entries (tables/vips.ts) of the addresses touched: present while a ClusterIP frontend is programmed there, absent otherwise. */
  settleVips(touchedVips: Set<string>, w: Writes): void {
    settleVips(this.m, touchedVips, w);
  }

  /** Backends no slot names any more: deleted, their ids released once the batch is applied. */
  dropUnreferenced(w: Writes): void {
    const m = this.m;
    if (m.unreferenced.size === 0) return;
    const unreferenced = [...m.unreferenced];
    if (unreferenced.length > 1) unreferenced.sort((a, b) => a - b);
    for (const id of unreferenced) {
      if (m.danglingRefs.has(id)) continue;
      if (m.backends.has(id)) {
        if (m.backends.refs(id) > 0) continue;
        w.backendDeletes.push(id);
      }
      w.releaseBackendIds.push(id);
    }
    clearIfAny(m.unreferenced);
  }

  // ------------------------------------------------------------------ UDP backends leaving

  /** The backend ids the slots of a UDP frontend's entry sets name (both scopes), before the diff; null for another protocol or none. */
  private udpSlots(ext: EntrySet | undefined, int: EntrySet | undefined): number[] | null {
    const proto = (ext ?? int)?.base.proto;
    if (proto !== IPPROTO.UDP) return null;
    const ids: number[] = [];
    for (const f of [ext, int]) if (f) for (let s = 1; s < f.slots.length; s++) if (f.slots[s] !== undefined) ids.push(f.slots[s]);
    return ids.length > 0 ? ids : null;
  }

  /** Notes the backends of `before` (slot ids) whose tuples are not among `now`'s: they left frontend `fk` (frontendId `frontendId`). */
  private noteUdpLeft(fk: string, frontendId: number, before: readonly number[], now: ReadonlySet<BackendTuple>): void {
    const rows = this.m.backends;
    for (const id of before) {
      if (!rows.has(id)) continue; // a dangling slot: no backend to tell about
      const tuple = rows.tuple(id);
      if (tuple === null || now.has(tuple)) continue;
      const key = `${fk}\u0000${tuple}\u0000${frontendId}`;
      if (!this.udpLeft.has(key)) this.udpLeft.set(key, { fk, tuple, left: { addr: rows.addr(id), port: rows.port(id), frontendId } });
    }
  }

  /**
   * After a sync that succeeded: the UDP backends noted leaving since the
   * last one, less those back in their frontend by now; forgotten once
   * returned. After a failed sync they wait (the retry reports them).
   */
  takeUdpLeft(): UdpBackendLeft[] {
    if (this.udpLeft.size === 0) return [];
    const out: UdpBackendLeft[] = [];
    const rows = this.m.backends;
    for (const { fk, tuple, left } of this.udpLeft.values()) {
      const id = rows.idOf(tuple);
      if (id >= 0 && this.names(fk, id)) continue;
      out.push(left);
    }
    this.udpLeft.clear();
    return out;
  }

  /** Whether a slot of frontend `fk` (either scope) names backend `id`. */
  private names(fk: string, id: number): boolean {
    for (const scope of SCOPES) if (entrySetOf(this.m, entrySetId(fk, scope))?.slots.includes(id)) return true;
    return false;
  }
}
