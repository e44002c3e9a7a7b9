/**
 * The read-back of one map in steps, event syncs writing between them (a
 * "read-back window"; why it is exact: read-back.ts): its kernel side in
 * resumable batches, its mirror side hashed a batch at a time, both summed
 * as they come, the touched keys' records taken out at the end in steps.
 * One table says, per map, its record sizes, its kernel cursor and how its
 * mirror side is walked (slicedMaps()).
 */
import type { DatapathMaps, RawCursor, RawDump } from '../maps/datapath-maps.js';
import { MAP_NAMES, type SvcMeta } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { EMPTY_STATE, Fingerprint, RecordHashes, TouchedKeys, type RecordSink, type UntouchedSum } from './fingerprint.js';
import type { EntrySet, KernelMirror } from './kernel-mirror.js';
import { SVC_HEAD, type MirrorRecords } from './mirror-records.js';
import type { ReadBackVerdict } from './sync-types.js';

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
  cursor(m: DatapathMaps, batch: number): RawCursor;
  /** Hashes about `budget` more of the mirror's records into w.mirror (at least one); whether all are. */
  hashMirror(w: ReadBackWindow, budget: number): boolean;
  /** Bytes the decoded compare ignores, zeroed in a kernel batch before it is hashed (so raw and decoded agree). */
  normalise?(d: RawDump): void;
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

export class SlicedReadBack {
  /** The sliced read-back of one map under way, if any. */
  private window: ReadBackWindow | undefined;
  /** The maps read back in slices, by name (slicedMaps()). */
  private sliced: Map<string, SlicedMap> | undefined;
  /** Per map, the record hashes of its two sides, reused by every window on it (RecordHashes.clear). */
  private readonly sides = new Map<string, { kernel: RecordHashes; mirror: RecordHashes }>();

  constructor(
    private readonly maps: DatapathMaps,
    private readonly mirror: KernelMirror,
    private readonly records: MirrorRecords,
    private readonly batch: number,
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

  /** One step of `map`'s read-back ('pending' until its last). Throws if a dump fails (the caller ends the window) or `map` is not one the reconciler owns. */
  step(map: string): ReadBackVerdict {
    const how = this.slicedMaps().get(map);
    if (!how) throw new Error(`not a map the reconciler owns: ${map}`);
    return this.slice(map, how);
  }

  /**
   * One slice of a map's sliced read-back: the next kernel batch, or the
   * next mirror entries, about `batch` records; once both sides are
   * complete, their fingerprints without the touched keys.
   */
  private slice(map: string, how: SlicedMap): ReadBackVerdict {
    const m = this.maps;
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

  /** The maps read back in slices (every map the reconciler owns), each read and hashed its way. */
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
    // The maps the mirror keeps as revNatId → a set of members (pairs, ranges).
    const members = <T extends number | string>(spec: typeof AFF | typeof RANGE, cursor: (m: DatapathMaps, batch: number) => RawCursor, sets: Map<number, Set<T>>, record: (rn: number, m: T) => Buffer): SlicedMap => {
      const keySize = spec.key.size;
      const valSize = spec.value.size;
      return { keySize, valSize, cursor, hashMirror: (w: ReadBackWindow, budget: number) => this.hashMirrorMembers(w, budget, sets, record, keySize, valSize) };
    };
    this.sliced.set(MAP_NAMES.affinityMatch, members(AFF, (m, b) => m.affinityMatchesRawCursor(b), mirror.kAff, (rn, id) => records.affinityMatch(rn, id)));
    this.sliced.set(MAP_NAMES.srcRange, members(RANGE, (m, b) => m.srcRangesRawCursor(b), mirror.kRanges, (rn, cidr) => records.srcRange(rn, cidr)));
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
      work += hashEntrySet(this.records, next.value, w.mirror);
    } while (work < budget);
    return false;
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
}

/** Adds one entry set's kpr_svc records to `out`: address and port hashed once, then per record the rest of its key and its value. */
export function hashEntrySet(records: MirrorRecords, f: EntrySet, out: RecordSink): number {
  let state = EMPTY_STATE;
  return records.svcSet(f, (rec, first) => {
    if (first) state = Fingerprint.prefix(rec, 0, SVC_HEAD);
    out.addFrom(state, rec, SVC_HEAD, SVC_KEY_SIZE - SVC_HEAD, SVC_VAL_SIZE);
  });
}
