/**
 * The read-back: whether the kernel's maps hold what the mirror says,
 * compared by fingerprint of the raw records (fingerprint.ts, the mirror's
 * side encoded by mirror-records.ts) with no object per entry on either
 * side. A full sync's read-back dumps the two large maps whole (full); a
 * sliced resync reads each map back in slices (step).
 *
 * Every map the reconciler owns — kpr_svc, kpr_backend (210,000 entries at
 * 10,000 Services × 10), kpr_vip and kpr_svc_meta (10,000 each),
 * kpr_aff_match (one pair per backend of a frontend with session affinity:
 * up to 262,144) and kpr_src_range (up to 16,384 ranges) — is read back in
 * steps of READ_BACK_BATCH records, with event syncs writing between them
 * (a "read-back window"):
 * the kernel's map is dumped in resumable batches, then the
 * mirror's entries are hashed the same way, each record kept as its key id
 * and record hash; every key of that map a sync writes or deletes while the
 * window is open is recorded as touched, and at the end both sides are
 * summed without the touched keys (fingerprint.ts). An untouched key's entry
 * is constant in the kernel and in the mirror during the window, and the
 * kernel's walk returns it exactly once (a hash map's batch walk,
 * BpfMap.lookupBatchCursor; the LPM trie's walk by key in post-order,
 * BpfMap.keyWalkCursor, which starts the map's window again when the key it
 * would resume from was deleted), so equal fingerprints mean no drift on an
 * untouched key; a touched key was
 * just written (or deleted) to what the mirror says by the sync that touched
 * it. Two different keys share a 52-bit key id with odds ~2^-52 per pair: an
 * untouched key that shares one with a touched key is left out on both
 * sides, so its drift, if it has any, is missed by this read-back only (the
 * next one has other touched keys), never reported falsely. A difference
 * leads to the decoded compare and repair in one step (repairDrift, the rare path).
 */
import type { DatapathMaps } from '../maps/datapath-maps.js';
import { MAP_NAMES, type SvcMeta } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { EMPTY_STATE, Fingerprint, RecordHashes, TouchedKeys, type RawCursor, type RawCursorMaps, type RawDump, type RawDumpMaps, type RecordSink, type UntouchedSum } from './fingerprint.js';
import { compareWithKernel } from './drift-compare.js';
import { KernelMirror, type EntrySet, type KernelContents } from './kernel-mirror.js';
import { MirrorRecords, SVC_HEAD } from './mirror-records.js';
import { READ_BACK_BATCH, type ReadBackVerdict, type ReconcileLogger, type SyncResult } from './sync-types.js';

const SVC_KEY_SIZE = MAPS.svc.key.size;
const SVC_VAL_SIZE = MAPS.svc.value.size;
const ID_SIZE = MAPS.backend.key.size;
const BACKEND_SIZE = MAPS.backend.value.size;
const META = MAPS.svcMeta.value;
/** Records whose touched check one read-back step does, per record of its batch it could have read or hashed instead (a check is ~1/10 of a read and hash). */
const SUM_STEPS_PER_BATCH = 8;
const AFF = MAPS.affinityMatch;
const RANGE = MAPS.srcRange;

/**
 * The sliced read-back of one map under way: from its first
 * slice to its last, every key of `map` a sync writes or deletes is in
 * `touched`, and both sides leave those keys out at the end.
 */
interface ReadBackWindow {
  map: string;
  /** The mirror's generation it began in: a mirror rebuilt from the kernel meanwhile restarts it. */
  generation: number;
  /** The kernel's batches not yet all read (null once they are). */
  cursor: RawCursor | null;
  kernel: RecordHashes;
  mirror: RecordHashes;
  touched: TouchedKeys;
  /**
   * kpr_svc, kpr_vip, kpr_svc_meta, kpr_aff_match: the mirror's entries
   * still to hash (a live Map iterator: an entry present throughout is
   * visited exactly once).
   */
  iter: Iterator<unknown> | null;
  /** kpr_aff_match, kpr_src_range: the revNatId whose pairs or ranges `members` walks (a live Set iterator). */
  membersOf: number;
  members: Iterator<number | string> | null;
  /** kpr_backend: the next dense backend id to hash. */
  nextId: number;
  mirrorDone: boolean;
  /**
   * Once both sides are complete: their sums, the touched keys' records
   * being taken out a range at a time (`side` 0 the kernel's, 1 the mirror's; `at` the next record).
   */
  sums: { kernel: UntouchedSum; mirror: UntouchedSum; side: number; at: number } | null;
}

/**
 * One map a sliced read-back covers: its record sizes, its kernel cursor,
 * and how the mirror's side is hashed, resumably.
 */
interface SlicedMap {
  keySize: number;
  valSize: number;
  cursor(m: RawCursorMaps, batch: number): RawCursor;
  /** Hashes about `budget` more of the mirror's records into w.mirror (at least one); whether all are. */
  hashMirror(w: ReadBackWindow, budget: number): boolean;
  /** Bytes the decoded compare ignores, zeroed in a kernel batch before it is hashed (so raw and decoded agree). */
  normalise?(d: RawDump): void;
}


export function hasRawCursors(m: DatapathMaps): m is DatapathMaps & RawCursorMaps {
  const r = m as Partial<RawCursorMaps>;
  return (
    typeof r.servicesRawCursor === 'function' && typeof r.backendsRawCursor === 'function' && typeof r.vipsRawCursor === 'function' && typeof r.svcMetaRawCursor === 'function'
  );
}

export function hasRawDumps(m: DatapathMaps): m is DatapathMaps & RawDumpMaps {
  const r = m as Partial<RawDumpMaps>;
  return typeof r.dumpServicesRaw === 'function' && typeof r.dumpBackendsRaw === 'function';
}

/**
 * A kpr_svc_meta batch as the decoded compare sees it: the bytes after each
 * name's NUL and the pad zeroed, as encodeSvcMeta writes them (an entry
 * written by another encoder is then no raw difference the decode would not see).
 */
function normaliseSvcMeta(d: RawDump): void {
  const v = d.values;
  for (let r = 0; r < d.count; r++) {
    const o = r * d.valueStride;
    zeroAfterNul(v, o + META.at.name, META.sizes.name);
    zeroAfterNul(v, o + META.at.port_name, META.sizes.port_name);
    v.fill(0, o + META.at.pad, o + META.size);
  }
}

function zeroAfterNul(b: Buffer, off: number, size: number): void {
  const end = off + size;
  for (let i = off; i < end; i++) {
    if (b[i] === 0) {
      b.fill(0, i, end);
      return;
    }
  }
}

export class ReadBack {
  /** The sliced read-back of one map under way, if any. */
  private window: ReadBackWindow | undefined;
  /** The maps read back in slices, by name (slicedMaps()). */
  private sliced: Map<string, SlicedMap> | undefined;
  private readonly records = new MirrorRecords();
  /** Per map, the record hashes of its two sides, reused by every window on it (RecordHashes.clear). */
  private readonly sides = new Map<string, { kernel: RecordHashes; mirror: RecordHashes }>();

  constructor(
    private readonly maps: DatapathMaps,
    private readonly mirror: KernelMirror,
    private readonly logger: ReconcileLogger,
    private readonly batch: number = READ_BACK_BATCH,
  ) {}

  /**
   * The keys of `map` to record as touched: those of the open read-back
   * window's map, while its records are still being read (once both sides
   * are, what a sync writes no longer changes them: the set is final).
   */
  touched(map: string): TouchedKeys | undefined {
    const w = this.window;
    return w?.map === map && !w.sums ? w.touched : undefined;
  }

  /** Ends a sliced read-back left unfinished: keys are no longer recorded. */
  end(): void {
    this.window = undefined;
  }

  /** Sliced read-back: one step of map `map` (Reconciler.readBackMatches); 'unreadable' (logged) if a dump fails. */
  step(map: string): ReadBackVerdict {
    try {
      return this.stepOrThrow(map);
    } catch (err) {
      this.window = undefined;
      this.logger.warn('cannot read the maps back for drift repair', { map, error: err instanceof Error ? err.message : String(err) });
      return 'unreadable';
    }
  }

  private stepOrThrow(map: string): ReadBackVerdict {
    const m = this.maps;
    const how = hasRawCursors(m) ? this.slicedMaps().get(map) : undefined;
    if (how) return this.slice(m as DatapathMaps & RawCursorMaps, map, how);
    if (hasRawDumps(m) && map === MAP_NAMES.svc) return this.svcMapMatches(m) ? 'match' : 'drift';
    if (hasRawDumps(m) && map === MAP_NAMES.backend) return this.backendMapMatches(m) ? 'match' : 'drift';
    const k: KernelContents = { services: [], backends: [], vips: [], affs: [], metas: [], ranges: [] };
    if (map === MAP_NAMES.svc) k.services = m.dumpServices();
    else if (map === MAP_NAMES.backend) k.backends = m.dumpBackends();
    else if (map === MAP_NAMES.vip) k.vips = m.dumpVips();
    else if (map === MAP_NAMES.svcMeta) k.metas = m.dumpSvcMeta();
    else if (map === MAP_NAMES.affinityMatch) k.affs = m.dumpAffinityMatches();
    else if (map === MAP_NAMES.srcRange) k.ranges = m.dumpSrcRanges();
    else throw new Error(`not a map the reconciler owns: ${map}`);
    return compareWithKernel(this.mirror, k, true, map).length === 0 ? 'match' : 'drift';
  }

  /**
   * Step 0 of a full (or sweep) sync with readBack: dumps the maps, counts what differs from the
   * mirror (result.drift) and, if anything does, rebuilds the mirror from
   * the dump (what adopt() does at start), keeping the desired state. The
   * full diff that follows then writes the difference in the usual safe
   * order. A dump that fails leaves the mirror as it was (logged; the sync
   * goes on, the next period reads again).
   */
  full(result: SyncResult, decoded: boolean, dirty: Set<string>, revNatHints: Map<string, number>): void {
    const started = performance.now();
    let kernel: KernelContents;
    try {
      // The common case, no drift, decodes nothing of the two large maps.
      if (!decoded && this.matchesRaw() === true) {
        result.readBackMs = performance.now() - started;
        return;
      }
      result.readBackDecoded = true;
      kernel = KernelMirror.read(this.maps);
    } catch (err) {
      this.logger.warn('cannot read the maps back for drift repair', { error: err instanceof Error ? err.message : String(err) });
      return;
    }
    result.drift = compareWithKernel(this.mirror, kernel);
    if (result.drift.length > 0) {
      const before = new Map(this.mirror.revNatOwner);
      this.mirror.load(kernel, dirty);
      // A frontend whose masters all went keeps its revNatId if nothing else took it.
      for (const [rn, fk] of before) {
        if (!this.mirror.revNatIds.has(rn) && this.mirror.ownedRevNat(fk) === 0) revNatHints.set(fk, rn);
      }
    }
    result.readBackMs = performance.now() - started;
  }

  /**
   * A full sync's read-back, the common case (no drift) decoding nothing of
   * the two large maps: whether every map holds exactly the mirror's
   * entries; undefined when the maps cannot dump raw. Throws if a dump fails.
   */
  matchesRaw(): boolean | undefined {
    const m = this.maps;
    if (!hasRawDumps(m)) return undefined;
    return this.svcMapMatches(m) && this.backendMapMatches(m) && this.smallMapsMatch();
  }

  /**
   * One slice of a map's sliced read-back: the next kernel batch, or the
   * next mirror entries, about `batch` records; once both sides are
   * complete, their fingerprints without the touched keys.
   */
  private slice(m: RawCursorMaps, map: string, how: SlicedMap): ReadBackVerdict {
    const batch = Math.max(1, this.batch);
    let w = this.window;
    if (!w || w.map !== map || w.generation !== this.mirror.generation) {
      let sides = this.sides.get(map);
      if (!sides) this.sides.set(map, (sides = { kernel: new RecordHashes(), mirror: new RecordHashes() }));
      sides.kernel.clear();
      sides.mirror.clear();
      w = this.window = {
        map,
        generation: this.mirror.generation,
        cursor: how.cursor(m, batch),
        kernel: sides.kernel,
        mirror: sides.mirror,
        touched: new TouchedKeys(),
        iter: null,
        membersOf: 0,
        members: null,
        nextId: 0,
        mirrorDone: false,
        sums: null,
      };
    }
    let work = 0;
    while (w.cursor && work < batch) {
      const d = w.cursor.next();
      if (!d) {
        w.cursor = null;
        break;
      }
      if (d.restart) {
        // A walk by key lost its place (kpr_src_range: the key it resumes from was deleted by a sync): read this map again.
        this.window = undefined;
        return 'pending';
      }
      how.normalise?.(d);
      w.kernel.addBatch(d.count, d.keys, how.keySize, d.values, how.valSize, d.valueStride);
      work += Math.max(1, d.count);
    }
    if (w.cursor) return 'pending';
    if (!w.mirrorDone) {
      w.mirrorDone = how.hashMirror(w, batch - work);
      if (!w.mirrorDone) return 'pending';
    }
    // Both sides summed as they came; the touched keys' records (the set final from here on) come out of the sums in steps too (210,000 records a side for kpr_svc).
    const s = (w.sums ??= { kernel: w.kernel.totals(), mirror: w.mirror.totals(), side: 0, at: 0 });
    let left = batch * SUM_STEPS_PER_BATCH - work;
    while (s.side < 2 && left > 0) {
      const side = s.side === 0 ? w.kernel : w.mirror;
      const end = Math.min(side.length, s.at + left);
      side.subtractTouched(w.touched, s.side === 0 ? s.kernel : s.mirror, s.at, end);
      left -= end - s.at;
      s.at = end;
      if (end >= side.length) {
        s.side++;
        s.at = 0;
      }
    }
    if (s.side < 2) return 'pending';
    this.window = undefined;
    const { kernel, mirror } = s;
    return kernel.a === mirror.a && kernel.b === mirror.b && kernel.count === mirror.count ? 'match' : 'drift';
  }

  /** The maps read back in slices (every map but kpr_src_range; kpr_aff_match when the maps have its cursor), each read and hashed its way. */
  private slicedMaps(): Map<string, SlicedMap> {
    if (this.sliced) return this.sliced;
    const mirror = this.mirror;
    const records = this.records;
    /** Hashes the next entries of a live iterator over `entries`, `record` giving each one's bytes (key then value). */
    const fromMap =
      <K, V>(entries: () => Map<K, V>, keySize: number, valSize: number, record: (k: K, v: V) => Buffer) =>
      (w: ReadBackWindow, budget: number): boolean => {
        const it = (w.iter ??= entries().entries()) as Iterator<[K, V]>;
        let work = 0;
        do {
          const next = it.next();
          if (next.done) return true;
          w.mirror.addFrom(EMPTY_STATE, record(next.value[0], next.value[1]), 0, keySize, valSize);
        } while (++work < budget);
        return false;
      };
    const vip = MAPS.vip;
    const meta = MAPS.svcMeta;
    this.sliced = new Map<string, SlicedMap>([
      [MAP_NAMES.svc, { keySize: SVC_KEY_SIZE, valSize: SVC_VAL_SIZE, cursor: (m, b) => m.servicesRawCursor(b), hashMirror: (w, budget) => this.hashMirrorSets(w, budget) }],
      [MAP_NAMES.backend, { keySize: ID_SIZE, valSize: BACKEND_SIZE, cursor: (m, b) => m.backendsRawCursor(b), hashMirror: (w, budget) => this.hashMirrorBackends(w, budget) }],
      [
        MAP_NAMES.vip,
        {
          keySize: vip.key.size,
          valSize: vip.value.size,
          cursor: (m, b) => m.vipsRawCursor(b),
          hashMirror: fromMap(() => mirror.kVips, vip.key.size, vip.value.size, (addr: string, flags: number) => records.vip(addr, flags)),
        },
      ],
      [
        MAP_NAMES.svcMeta,
        {
          keySize: meta.key.size,
          valSize: meta.value.size,
          cursor: (m, b) => m.svcMetaRawCursor(b),
          normalise: normaliseSvcMeta,
          hashMirror: fromMap(() => mirror.kMeta, meta.key.size, meta.value.size, (rn: number, names: SvcMeta) => records.svcMeta(rn, names)),
        },
      ],
    ]);
    // The maps the mirror keeps as revNatId → a set of members (pairs, ranges): when the maps can walk them in batches.
    const maps = this.maps as Partial<RawCursorMaps>;
    const members = <T extends number | string>(spec: typeof AFF | typeof RANGE, cursor: ((batch: number) => RawCursor) | undefined, sets: Map<number, Set<T>>, record: (rn: number, m: T) => Buffer) => {
      if (typeof cursor !== 'function') return;
      const keySize = spec.key.size;
      const valSize = spec.value.size;
      return { keySize, valSize, cursor: (_: RawCursorMaps, b: number) => cursor.call(maps, b), hashMirror: (w: ReadBackWindow, budget: number) => this.hashMirrorMembers(w, budget, sets, record, keySize, valSize) };
    };
    const aff = members(AFF, maps.affinityMatchesRawCursor, mirror.kAff, (rn, id) => records.affinityMatch(rn, id));
    const ranges = members(RANGE, maps.srcRangesRawCursor, mirror.kRanges, (rn, cidr) => records.srcRange(rn, cidr));
    if (aff) this.sliced.set(MAP_NAMES.affinityMatch, aff);
    if (ranges) this.sliced.set(MAP_NAMES.srcRange, ranges);
    return this.sliced;
  }

  /**
   * Hashes the mirror's records of a map kept as revNatId → set (kpr_aff_match's pairs, kpr_src_range's ranges)
   * into w.mirror, about `budget` of them; whether all are.
   */
  private hashMirrorMembers<T extends number | string>(w: ReadBackWindow, budget: number, sets: Map<number, Set<T>>, record: (rn: number, member: T) => Buffer, keySize: number, valSize: number): boolean {
    const byRevNat = (w.iter ??= sets.entries()) as Iterator<[number, Set<T>]>;
    let work = 0;
    for (;;) {
      if (!w.members) {
        const next = byRevNat.next();
        if (next.done) return true;
        w.membersOf = next.value[0];
        w.members = next.value[1].values();
      }
      const members = w.members as Iterator<T>;
      for (let m = members.next(); !m.done; m = members.next()) {
        w.mirror.addFrom(EMPTY_STATE, record(w.membersOf, m.value), 0, keySize, valSize);
        if (++work >= budget) return false;
      }
      w.members = null;
    }
  }

  /** Hashes the mirror's kpr_svc entries into w.mirror, about `budget` of them (at least one entry set); whether all are. */
  private hashMirrorSets(w: ReadBackWindow, budget: number): boolean {
    const sets = (w.iter ??= this.mirror.kSets.values()) as Iterator<EntrySet>;
    let work = 0;
    do {
      const next = sets.next();
      if (next.done) return true;
      work += this.hashEntrySet(next.value, w.mirror);
    } while (work < budget);
    return false;
  }

  /** Adds one entry set's kpr_svc records to `out`: address and port hashed once, then per record the rest of its key and its value. */
  private hashEntrySet(f: EntrySet, out: RecordSink): number {
    let state = EMPTY_STATE;
    return this.records.svcSet(f, (rec, first) => {
      if (first) state = Fingerprint.prefix(rec, 0, SVC_HEAD);
      out.addFrom(state, rec, SVC_HEAD, SVC_KEY_SIZE - SVC_HEAD, SVC_VAL_SIZE);
    });
  }

  /** Hashes the mirror's kpr_backend rows into w.mirror, by id, about `budget` ids of them; whether all are. */
  private hashMirrorBackends(w: ReadBackWindow, budget: number): boolean {
    const rows = this.mirror.kBackends;
    const add = (id: number) => w.mirror.addFrom(EMPTY_STATE, this.records.backendRow(rows, id), 0, ID_SIZE, BACKEND_SIZE);
    // Dense ids by range (a row added meanwhile has a touched key, so where the range ends does not matter), then the few far ones at once.
    const end = Math.min(rows.denseEnd, w.nextId + Math.max(1, budget));
    rows.forEachDenseId(w.nextId, end, add);
    w.nextId = end;
    if (end < rows.denseEnd) return false;
    rows.forEachFarId(add);
    return true;
  }

  /** Whether kpr_svc holds exactly the mirror's entries, by fingerprint of the raw records. */
  private svcMapMatches(m: RawDumpMaps): boolean {
    const svc = m.dumpServicesRaw();
    const kernel = new Fingerprint();
    kernel.addBatch(svc.count, svc.keys, SVC_KEY_SIZE, svc.values, SVC_VAL_SIZE, svc.valueStride);
    const mirror = new Fingerprint();
    for (const f of this.mirror.kSets.values()) this.hashEntrySet(f, mirror);
    return kernel.equals(mirror);
  }

  /** Whether kpr_backend holds exactly the mirror's rows, by fingerprint of the raw records. */
  private backendMapMatches(m: RawDumpMaps): boolean {
    const be = m.dumpBackendsRaw();
    const kernel = new Fingerprint();
    kernel.addBatch(be.count, be.keys, ID_SIZE, be.values, BACKEND_SIZE, be.valueStride);
    const mirror = new Fingerprint();
    const rows = this.mirror.kBackends;
    rows.forEachId((id) => mirror.addFrom(EMPTY_STATE, this.records.backendRow(rows, id), 0, ID_SIZE, BACKEND_SIZE));
    return kernel.equals(mirror);
  }

  /** Whether the small maps (a few entries per frontend at most) hold exactly the mirror's, compared decoded. */
  private smallMapsMatch(): boolean {
    const m = this.maps;
    const small: KernelContents = { services: [], backends: [], vips: m.dumpVips(), affs: m.dumpAffinityMatches(), metas: m.dumpSvcMeta(), ranges: m.dumpSrcRanges() };
    return compareWithKernel(this.mirror, small, false).length === 0;
  }
}
