/**
 * The Reconciler: makes the kernel's maps hold the planned frontends,
 * writing only the difference, in an order that is safe while the BPF
 * programs read the maps.
 *
 * It keeps a mirror of what the kernel holds (entry sets per frontend and
 * scope, with their master entry and slot → backend id; backends by id with
 * refcounts; affinity-match pairs, service addresses and names) and the
 * desired frontends per Service. A frontend (address, port, protocol) owns
 * one revNatId, shared by its EXTERNAL and (optional) INTERNAL entry sets. A
 * sync diffs desired against the mirror for the frontends concerned and
 * applies, in this order (the datapath is live):
 *
 *   1. updateBackends        – new backends (and LOCAL flag changes), before any slot names them;
 *   2. updateAffinityMatches – new (backend, revNatId) pairs, before any slot of an AFFINITY master names them;
 *      updateSrcRanges       – allowed client ranges, before a master with SOURCE_RANGES publishes;
 *   3. updateServices        – new/changed slots 1..n, before any count covers them;
 *   4. updateSvcMeta         – names of new revNatIds, before a master carries them;
 *   5. updateServices        – master entries (count, revNatId, flags, affinity timeout);
 *   6. updateVips            – service addresses, once a frontend answers on them;
 *   7. deleteServices        – masters of removed entry sets first, then slots
 *                              beyond the new count and slots of removed sets;
 *   8. deleteAffinityMatches – pairs no master with AFFINITY names any more;
 *      deleteSrcRanges       – ranges no master allows any more;
 *   9. deleteVips            – addresses whose last ClusterIP frontend went;
 *  10. deleteSvcMeta         – names of released revNatIds;
 *  11. deleteBackends        – backends no slot names any more.
 *
 * A large sync writes steps 1–6 in rounds while it diffs (every 16,384
 * queued entries), each round in that order; steps 7–11 all wait for the end.
 *
 * Every prefix of that sequence (even a batch stopped part-way) leaves each
 * master's slots 1..count present and pointing at existing backends, and
 * every backend an AFFINITY master names paired in kpr_aff_match. If a call
 * throws, the mirror is rebuilt from a dump of the maps, so it matches what
 * the kernel really holds, and the frontends concerned are re-diffed on the
 * next sync.
 *
 * Drift (entries changed behind the agent's back): a full sync with
 * `readBack` first compares the maps with the mirror (readBack) and, on a
 * difference, rebuilds the mirror from them, so the same sync repairs it.
 *
 * A sliced resync (the sync loop's periodic one) never clears the desired
 * state: it checks the maps one at a time (readBackMatches), on a
 * difference repairs in one step (repairDrift), re-plans the Services in
 * chunks as incremental syncs, and ends with a `sweep` sync: what only a full
 * sync did otherwise (frontends no Service claims removed, every orphan swept).
 *
 * kpr_aff_match and kpr_src_range (sets of keys, a few per Service with
 * affinity or source ranges) are dumped and compared in one step each.
 * kpr_svc, kpr_backend (210,000 entries at 10,000 Services × 10), kpr_vip
 * and kpr_svc_meta (10,000 each) go through one path (slicedMaps()): read
 * back in slices of READ_BACK_BATCH records, with event syncs writing between them
 * (a "read-back window", see ReadBackWindow): the kernel's map is dumped in
 * resumable batches, then the mirror's entries are hashed the same way,
 * each record kept as its key id and record hash; every key of that map a
 * sync writes or deletes while the window is open is recorded as touched,
 * and at the end both sides are summed without the touched keys
 * (fingerprint.ts). An untouched key's entry is constant in the kernel and
 * in the mirror during the window, and the kernel's batch walk returns it
 * exactly once (BpfMap.lookupBatchCursor), so equal fingerprints mean no
 * drift on an untouched key; a touched key was just written (or deleted) to
 * what the mirror says by the sync that touched it. Two different keys
 * share a 52-bit key id with odds ~2^-52 per pair: an untouched key that
 * shares one with a touched key is left out on both sides, so its drift, if
 * it has any, is missed by this read-back only (the next one has other
 * touched keys), never reported falsely. A difference leads to the decoded
 * compare and repair in one step (repairDrift, the rare path).
 */
import type { BackendColumns, DatapathMaps } from '../maps/datapath-maps.js';
import { Fingerprint, RecordHashes, TouchedKeys, type HashState, type RawCursor, type RawCursorMaps, type RawDump, type RawDumpMaps } from './fingerprint.js';
import {
  BACKEND,
  BACKEND_ID_SIZE,
  BE_FLAG,
  FE_TYPE,
  IPPROTO,
  MAP_NAMES,
  SCOPE,
  SVC_FLAG,
  SVC_KEY,
  SVC_VAL,
  SVC_META,
  VIP_FLAG,
  VIP_KEY,
  VIP_VAL,
  encodeAddr,
  encodeSvcMeta,
  encodeBackendId,
  encodeIPv4Num,
  encodeSvcKey,
  type AffinityMatchKey,
  type Backend,
  type SrcRangeKey,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from '../maps/layout.js';
import { parseIP } from '../net/ip.js';
import type { PlanBackend, PlanFrontend, SkippedObject } from '../plan/types.js';
import {
  backendValueKey,
  entrySetId,
  frontendId,
  frontendLabel,
  MAX_SLOTS,
  toDesiredFrontend,
  tupleIPv4,
  type BackendTuple,
  type DesiredFrontend,
  type FrontendBase,
} from './desired-frontend.js';
import { IdAllocator } from './id-allocator.js';
import { BackendTable } from './backend-table.js';
import { UNKNOWN_CAPACITIES, describeLimit, limitFields, type LimitName, type LimitReport, type MapCapacities } from './limits.js';
import { OncePerVersion } from '../log-dedupe.js';
import { ConflictLog, claimClass, conflictSkip, isAssertedClaim, outranks, type Claim, type ConflictCount, type FrontendConflict } from './ownership.js';

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
   * of revNatIds no frontend owns, addresses, backends no slot names). The
   * last step of a sliced resync, whose chunks re-planned every Service.
   * With `readBack: 'decoded'`: the maps are decoded and compared at once (a
   * part was found to differ), and on drift every frontend is re-diffed.
   */
  sweep?: boolean;
}

/** The maps a sliced read-back compares one at a time (readBackMatches), in its order. */
export const READ_BACK_MAPS: readonly string[] = [MAP_NAMES.svc, MAP_NAMES.backend, MAP_NAMES.vip, MAP_NAMES.svcMeta, MAP_NAMES.affinityMatch, MAP_NAMES.srcRange];

/** Records per slice of a sliced read-back (a kernel batch, or as many mirror entries hashed): ~1–3 ms. */
export const READ_BACK_BATCH = 8192;

/** What one call of readBackMatches found; 'pending': the read-back of that map goes on at the next call. */
export type ReadBackVerdict = 'match' | 'drift' | 'unreadable' | 'pending';

/** How an entry of a map differs from what the agent last wrote. */
export type DriftKind = 'missing' | 'changed' | 'extra';

/** Entries of one map found to differ in one way. */
export interface DriftCount {
  map: string;
  kind: DriftKind;
  entries: number;
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
  /** kpr_vip, kpr_aff_match and kpr_svc_meta entries written. */
  auxWritten: number;
  /** kpr_vip, kpr_aff_match and kpr_svc_meta entries deleted. */
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
  /** Frontends not programmed because another Service owns the address, after this sync (kpr_frontend_conflicts). */
  conflicts?: ConflictCount[];
}

/** Limits a test (or a dry run) sets; the maps' own capacities come from DatapathMaps.capacities(). */
export interface ReconcilerOptions {
  /** Highest revNatId (default 65,535: the u16). */
  maxRevNatId?: number;
  /** Overrides of the maps' capacities. */
  capacities?: Partial<MapCapacities>;
  /** Records per slice of a sliced read-back (default READ_BACK_BATCH). */
  readBackBatch?: number;
}

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
   * kpr_svc, kpr_vip, kpr_svc_meta: the mirror's entries still to hash (a
   * live Map iterator: an entry present throughout is visited exactly once).
   */
  iter: Iterator<unknown> | null;
  /** kpr_backend: the next dense backend id to hash. */
  nextId: number;
  mirrorDone: boolean;
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

/** What `capacities()` a DatapathMaps may have (BpfDatapathMaps and MemoryDatapathMaps do): the maps' max_entries. */
interface CapacityMaps {
  capacities(): Partial<MapCapacities>;
}

function hasCapacities(m: DatapathMaps): m is DatapathMaps & CapacityMaps {
  return typeof (m as Partial<CapacityMaps>).capacities === 'function';
}

/** The limits a Service is admitted against, in check order, and what it needs of each beyond what the kernel holds. */
type RoomLimit = Exclude<LimitName, 'backends_per_frontend'>;
const ROOM_LIMITS: readonly RoomLimit[] = ['rev_nat_ids', 'svc_map', 'backend_map', 'aff_match_map', 'src_range_map'];
type Need = Record<RoomLimit, number>;

/** The capacity each map with a limit on its entries gives, by map name. */
const CAPACITY_KEYS: Readonly<Record<string, keyof MapCapacities>> = {
  [MAP_NAMES.svc]: 'svc',
  [MAP_NAMES.backend]: 'backend',
  [MAP_NAMES.affinityMatch]: 'affinityMatch',
  [MAP_NAMES.srcRange]: 'srcRange',
};

/** A PlanSource with nothing in it: the retry pass re-diffs refused Services from the desired state. */
const NO_PLANS: PlanSource = { keys: () => [], get: () => undefined };

/** Every map the reconciler owns, as read from the kernel. */
interface KernelContents {
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
  /** kpr_aff_match, kpr_vip or kpr_svc_meta entries no frontend accounts for. */
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
interface EntrySet {
  fk: string;
  scope: number;
  base: FrontendBase;
  master: SvcVal | null;
  /** slots[s] = backend id of slot s (≥ 1); holes where the kernel has no slot entry. */
  slots: number[];
  /** Number of slot entries present (slots may be sparse after adopt). */
  slotCount: number;
}

/**
 * Service-map writes kept by column (the frontend's key base, scope and
 * slot, the value), so a full sync builds no key object or pair per entry:
 * a DatapathMaps with updateServiceColumns encodes them straight into its
 * batch; any other gets entries() (the same entries, in the same order).
 * The first `length` elements of the columns are the queue: a write round
 * resets it and the next one overwrites in place, so a full sync's rounds
 * do not each grow (and drop) arrays of thousands of elements.
 */
class SvcWrites {
  readonly bases: FrontendBase[] = [];
  /** scope * 0x10000 + slot. */
  readonly scopeSlots: number[] = [];
  /** The value, or for a slot just its backend id (see slotValue). */
  readonly vals: Array<SvcVal | number> = [];
  length = 0;

  push(base: FrontendBase, scope: number, slot: number, val: SvcVal | number): void {
    const i = this.length++;
    this.bases[i] = base;
    this.scopeSlots[i] = scope * 0x10000 + slot;
    this.vals[i] = val;
  }

  /** Empties the queue, keeping the columns' room. */
  reset(): void {
    this.length = 0;
  }

  entries(): Array<[SvcKey, SvcVal]> {
    const n = this.length;
    const out = new Array<[SvcKey, SvcVal]>(n);
    for (let i = 0; i < n; i++) {
      const ss = this.scopeSlots[i];
      const v = this.vals[i];
      out[i] = [svcKey(this.bases[i], Math.floor(ss / 0x10000), ss % 0x10000), typeof v === 'number' ? slotValue(v) : v];
    }
    return out;
  }
}

/** The service-map value of a slot naming backend `id`. */
function slotValue(id: number): SvcVal {
  return { backendId: id, count: 0, revNatId: 0, flags: 0 };
}

/**
 * Backend-map writes: the ids, whose values the mirror's BackendTable holds
 * (read when the batch is encoded); the first `length` are the queue, as in SvcWrites.
 */
class BackendWrites {
  readonly ids: number[] = [];
  length = 0;

  push(id: number): void {
    this.ids[this.length++] = id;
  }

  reset(): void {
    this.length = 0;
  }

  entries(rows: BackendTable): Array<[number, Backend]> {
    const n = this.length;
    const out = new Array<[number, Backend]>(n);
    for (let i = 0; i < n; i++) out[i] = [this.ids[i], rows.backend(this.ids[i])];
    return out;
  }
}

/**
 * Optional batch writes by column (BpfDatapathMaps has them): the same
 * entries as updateServices/updateBackends with the same arrays zipped, in
 * the same order, with the same failure behaviour.
 */
export interface ColumnWriteMaps {
  /**
   * Entry i: key (bases[i], scope = scopeSlots[i] >> 16, slot = scopeSlots[i] & 0xffff),
   * value vals[i]; a number n as value stands for slotValue(n). `count`
   * entries (default: all, and the columns must then be of one length).
   */
  updateServiceColumns(bases: readonly FrontendBase[], scopeSlots: readonly number[], vals: ReadonlyArray<SvcVal | number>, count?: number): void;
  /** Entry i: ids[i] → the row of `rows` with that id, for the first `count` ids (default: all). */
  updateBackendColumns(ids: readonly number[], rows: BackendColumns, count?: number): void;
}

function hasRawCursors(m: DatapathMaps): m is DatapathMaps & RawCursorMaps {
  const r = m as Partial<RawCursorMaps>;
  return (
    typeof r.servicesRawCursor === 'function' && typeof r.backendsRawCursor === 'function' && typeof r.vipsRawCursor === 'function' && typeof r.svcMetaRawCursor === 'function'
  );
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
    zeroAfterNul(v, o + SVC_META.at.name, SVC_META.sizes.name);
    zeroAfterNul(v, o + SVC_META.at.port_name, SVC_META.sizes.port_name);
    v.fill(0, o + SVC_META.at.pad, o + SVC_META.size);
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

/** The hash state of no bytes (a record hashed from its first byte). */
const EMPTY_STATE: HashState = Fingerprint.prefix(new Uint8Array(0), 0, 0);

function hasRawDumps(m: DatapathMaps): m is DatapathMaps & RawDumpMaps {
  const r = m as Partial<RawDumpMaps>;
  return typeof r.dumpServicesRaw === 'function' && typeof r.dumpBackendsRaw === 'function';
}

function hasColumnWrites(m: DatapathMaps): m is DatapathMaps & ColumnWriteMaps {
  const c = m as Partial<ColumnWriteMaps>;
  return typeof c.updateServiceColumns === 'function' && typeof c.updateBackendColumns === 'function';
}

/** Upserts queued beyond this many service/backend entries are written before the diff goes on (see flushUpserts). */
const FLUSH_ENTRIES = 16384;

/** Empty queues of the entries written (upserts: steps 1–6) and deleted. */
function newWrites(): Writes {
  return {
    backendWrites: new BackendWrites(),
    affWrites: [],
    rangeWrites: [],
    slotWrites: new SvcWrites(),
    metaWrites: [],
    masterWrites: new SvcWrites(),
    vipWrites: [],
    masterDeletes: [],
    slotDeletes: [],
    affDeletes: [],
    rangeDeletes: [],
    vipDeletes: [],
    metaDeletes: [],
    backendDeletes: [],
    releaseRevNat: [],
    releaseBackendIds: [],
  };
}

/** The batches one sync applies, in apply order. */
interface Writes {
  backendWrites: BackendWrites;
  affWrites: AffinityMatchKey[];
  rangeWrites: SrcRangeKey[];
  slotWrites: SvcWrites;
  metaWrites: Array<[number, SvcMeta]>;
  masterWrites: SvcWrites;
  vipWrites: Array<[string, number]>;
  masterDeletes: SvcKey[];
  slotDeletes: SvcKey[];
  affDeletes: AffinityMatchKey[];
  rangeDeletes: SrcRangeKey[];
  vipDeletes: string[];
  metaDeletes: number[];
  backendDeletes: number[];
  /** Ids freed by this sync: reusable only once it is applied. */
  releaseRevNat: number[];
  releaseBackendIds: number[];
}

const MAX_BACKEND_ID = 0xffffffff;
const MAX_REVNAT_ID = 0xffff;
const SCOPES = [SCOPE.EXTERNAL, SCOPE.INTERNAL] as const;
const NO_IDS: readonly number[] = [];
/** kpr_svc_meta's name field holds 95 bytes of text, its port name 31. */
const META_NAME_MAX = 95;
const META_PORT_MAX = 31;

function svcKey(base: FrontendBase, scope: number, slot: number): SvcKey {
  return { addr: base.addr, port: base.port, slot, proto: base.proto, scope };
}

function sameMaster(a: SvcVal, b: SvcVal): boolean {
  return a.count === b.count && a.revNatId === b.revNatId && a.flags === b.flags && a.backendId === b.backendId;
}

/** Text as kpr_svc_meta stores it (cut to the field), so a dump compares equal to what was written. */
function cut(text: string, max: number): string {
  // A UTF-16 unit is at most 3 bytes of UTF-8, so a short text fits without measuring.
  if (text.length * 3 <= max) return text;
  return text.length <= max && Buffer.byteLength(text) <= max ? text : Buffer.from(text).subarray(0, max).toString('utf8').replace(/\uFFFD+$/, '');
}

/** Service-map entries an entry set lacks to hold a master and slots 1..n. */
function missingEntries(f: EntrySet | undefined, n: number): number {
  if (!f) return n + 1;
  let missing = f.master ? 0 : 1;
  for (let s = 1; s <= n; s++) if (f.slots[s] === undefined) missing++;
  return missing;
}

function sameMeta(a: SvcMeta | undefined, b: SvcMeta): boolean {
  return a !== undefined && a.name === b.name && a.portName === b.portName && a.type === b.type && a.proto === b.proto;
}

export class Reconciler {
  // ---- mirror of the kernel
  /** entrySetId(fk, scope) → entry set. */
  private readonly kSets = new Map<string, EntrySet>();
  /** The backend map by id, and the canonical id per backend tuple (the lowest when the kernel holds duplicates). */
  private readonly kBackends = new BackendTable();
  /** Slots naming ids that are not in the backend map (found by adopt only), id → count. */
  private readonly danglingRefs = new Map<number, number>();
  /** Master entries in the mirror. */
  private masters = 0;
  /** Slot entries in the mirror (kSets' slotCount summed), kpr_aff_match pairs (kAff) and kpr_src_range keys (kRanges). */
  private slotEntries = 0;
  private affPairs = 0;
  private rangeKeys = 0;
  private readonly backendIds = new IdAllocator(MAX_BACKEND_ID);
  private readonly revNatIds: IdAllocator;
  private readonly maxRevNatId: number;
  /** revNatId → the frontend (frontendId) that owns it. */
  private readonly revNatOwner = new Map<number, string>();
  /** Backend ids that may have lost their last reference. */
  private readonly unreferenced = new Set<number>();
  /** kpr_aff_match: revNatId → backend ids paired with it. */
  private readonly kAff = new Map<number, Set<number>>();
  /** kpr_src_range: revNatId → allowed CIDRs. */
  private readonly kRanges = new Map<number, Set<string>>();
  /** kpr_vip: address → flags. */
  private readonly kVips = new Map<string, number>();
  /** kpr_svc_meta: revNatId → names. */
  private readonly kMeta = new Map<number, SvcMeta>();
  /** ClusterIP frontends programmed, per address: kpr_vip's refcount. */
  private readonly vipRefs = new Map<string, number>();
  /** frontendId → the address it counts in vipRefs. */
  private readonly vipOf = new Map<string, string>();
  /** Found by the last read of the maps: addresses whose kpr_vip entry disagrees with vipRefs, revNatIds with pairs or names but no frontend. */
  private readonly suspectVips = new Set<string>();
  private readonly suspectRevNats = new Set<number>();

  // ---- desired state
  /** Service → its valid desired frontends (unique frontend ids). */
  private readonly desired = new Map<string, DesiredFrontend[]>();
  /** frontendId → the Service(s) that want it (winner() decides between them); an array only on conflict. */
  private readonly claimants = new Map<string, string | string[]>();
  /** ClusterIP addresses of the desired frontends: address → Service → its ClusterIP frontends there. */
  private readonly clusterAddrs = new Map<string, Map<string, number>>();
  /** LoadBalancer and ExternalIP frontends claimed, per address (re-decided when the address becomes or stops being a ClusterIP). */
  private readonly assertedByAddr = new Map<string, Set<string>>();
  /** frontendId → the claims on it that lost, as last decided. */
  private readonly conflicts = new Map<string, FrontendConflict[]>();
  private readonly conflictLog: ConflictLog;
  /** Where this sync() reads creationTimestamps (its plans), and what it read, on conflicts only. */
  private ages: PlanSource | undefined;
  private readonly createdCache = new Map<string, number>();
  /** Whether `desired` is complete (a full sync has happened). */
  private haveFullDesired = false;
  /** Adopted frontends no Service has claimed yet: only a full sync may remove them. */
  private readonly adoptedUnclaimed = new Set<string>();
  /** Frontends to re-diff on the next sync (after a failure or an inconsistent adopt). */
  private readonly dirty = new Set<string>();
  /** The mirror could not be rebuilt after a failure; the next sync must reload first. */
  private stale = false;
  /**
   * Set by a read-back that found drift: frontend → the revNatId it had
   * before, when the kernel lost every master naming it, so the repair gives
   * it back the same id (and its names, pairs and ranges stay valid).
   */
  private readonly revNatHints = new Map<string, number>();

  // ---- limits (limits.ts)
  /** Services refused whole for want of room (nothing of them is programmed), and Services with a frontend cut to MAX_SLOTS backends. */
  private readonly refused = new Map<string, LimitReport>();
  private readonly truncated = new Map<string, LimitReport>();
  /** limits(), as last built; undefined when `refused` or `truncated` changed since. */
  private limitList: readonly LimitReport[] | undefined;
  /** This pass: Service → whether it was admitted (decided at its first frontend diffed). */
  private readonly verdicts = new Map<string, boolean>();
  /** Services refused by this sync (reported in its `skipped`). */
  private readonly refusedNow = new Set<string>();
  /** The maps' capacities, read at the start of each sync (lowered to what was learned below). */
  private caps: MapCapacities = { ...UNKNOWN_CAPACITIES };
  /**
   * A map whose write the kernel refused as full (E2BIG, ENOSPC) below its
   * declared capacity: what it held then, admitted against from then on
   * (until the declared capacity changes: the map was replaced or resized).
   */
  private readonly learned = new Map<keyof MapCapacities, { holds: number; declared: number; own: number }>();

  // ---- sliced read-back
  /** The sliced read-back of one map under way, if any. */
  private window: ReadBackWindow | undefined;
  /** The maps read back in slices, by name (slicedMaps()). */
  private sliced: ReadonlyMap<string, SlicedMap> | undefined;
  /** Bumped whenever the mirror is rebuilt from the kernel. */
  private generation = 0;
  /** A key's bytes, encoded to record it as touched. */
  private readonly keyScratch = Buffer.alloc(SVC_KEY.size);

  constructor(
    private readonly maps: DatapathMaps,
    private readonly logger: ReconcileLogger,
    private readonly options: ReconcilerOptions = {},
  ) {
    this.maxRevNatId = options.maxRevNatId ?? MAX_REVNAT_ID;
    this.revNatIds = new IdAllocator(this.maxRevNatId);
    this.conflictLog = new ConflictLog(new OncePerVersion(), logger);
  }

  /** Number of master entries (frontends × scopes) the kernel holds, as far as the reconciler knows. */
  get frontendCount(): number {
    return this.masters;
  }

  get backendCount(): number {
    return this.kBackends.size;
  }

  /** The revNatId programmed for a frontend, if any. */
  revNatIdOf(address: string, port: number, protocol: 'TCP' | 'UDP'): number | undefined {
    const proto = protocol === 'TCP' ? 6 : 17;
    return this.kSets.get(entrySetId(frontendId({ addr: address, port, proto }), SCOPE.EXTERNAL))?.master?.revNatId;
  }

  /** The Services the desired state holds frontends for (a sliced resync re-plans them with the cluster's). */
  desiredServices(): IterableIterator<string> {
    return this.desired.keys();
  }

  /**
   * One step of a sliced read-back: whether kernel map `map` (one of
   * READ_BACK_MAPS) holds exactly what the mirror says. kpr_svc,
   * kpr_backend, kpr_vip and kpr_svc_meta, when the maps can dump them in
   * resumable batches, are read back over several calls ('pending' until the last; syncs may run between
   * them, see the top comment) and compared by fingerprint; when they can
   * only dump raw, by fingerprint in this one call; the other maps are
   * dumped and compared decoded in this one call. 'unreadable': the dump
   * failed (logged; nothing changes, the next period reads again). With a
   * stale mirror (re-read by the next sync anyway): 'match'.
   */
  readBackMatches(map: string): ReadBackVerdict {
    if (this.stale) {
      this.window = undefined;
      return 'match';
    }
    const m = this.maps;
    try {
      const how = hasRawCursors(m) ? this.slicedMaps().get(map) : undefined;
      if (how) return this.readBackSlice(m as DatapathMaps & RawCursorMaps, map, how);
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
      return this.compareWithKernel(k, true, map).length === 0 ? 'match' : 'drift';
    } catch (err) {
      this.window = undefined;
      this.logger.warn('cannot read the maps back for drift repair', { map, error: err instanceof Error ? err.message : String(err) });
      return 'unreadable';
    }
  }

  /** Ends a sliced read-back left unfinished (its resync ended early): keys are no longer recorded. */
  endReadBack(): void {
    this.window = undefined;
  }

  /**
   * One slice of a map's sliced read-back: the next kernel batch, or the
   * next mirror entries, about READ_BACK_BATCH records; once both sides are
   * complete, their fingerprints without the touched keys.
   */
  private readBackSlice(m: RawCursorMaps, map: string, how: SlicedMap): ReadBackVerdict {
    const batch = Math.max(1, this.options.readBackBatch ?? READ_BACK_BATCH);
    let w = this.window;
    if (!w || w.map !== map || w.generation !== this.generation) {
      w = this.window = {
        map,
        generation: this.generation,
        cursor: how.cursor(m, batch),
        kernel: new RecordHashes(),
        mirror: new RecordHashes(),
        touched: new TouchedKeys(),
        iter: null,
        nextId: 0,
        mirrorDone: false,
      };
    }
    let work = 0;
    while (w.cursor && work < batch) {
      const d = w.cursor.next();
      if (!d) {
        w.cursor = null;
        break;
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
    this.window = undefined;
    return w.kernel.sum(w.touched).equals(w.mirror.sum(w.touched)) ? 'match' : 'drift';
  }

  /** The maps read back in slices (every map but the two small key sets), each read and hashed its way. */
  private slicedMaps(): ReadonlyMap<string, SlicedMap> {
    if (this.sliced) return this.sliced;
    const rec = Buffer.alloc(VIP_KEY.size + SVC_META.size);
    /** Hashes the next entries of a live iterator over `entries`, `encode` writing each record (key then value) into `rec`. */
    const fromMap = <K, V>(entries: () => Map<K, V>, keySize: number, valSize: number, encode: (k: K, v: V) => void) => (w: ReadBackWindow, budget: number): boolean => {
      const it = (w.iter ??= entries().entries()) as Iterator<[K, V]>;
      let work = 0;
      do {
        const next = it.next();
        if (next.done) return true;
        encode(next.value[0], next.value[1]);
        w.mirror.addFrom(EMPTY_STATE, rec, 0, keySize, valSize);
      } while (++work < budget);
      return false;
    };
    this.sliced = new Map<string, SlicedMap>([
      [MAP_NAMES.svc, { keySize: SVC_KEY.size, valSize: SVC_VAL.size, cursor: (m, b) => m.servicesRawCursor(b), hashMirror: (w, budget) => this.hashMirrorSets(w, budget) }],
      [MAP_NAMES.backend, { keySize: BACKEND_ID_SIZE, valSize: BACKEND.size, cursor: (m, b) => m.backendsRawCursor(b), hashMirror: (w, budget) => this.hashMirrorBackends(w, budget) }],
      [
        MAP_NAMES.vip,
        {
          keySize: VIP_KEY.size,
          valSize: VIP_VAL.size,
          cursor: (m, b) => m.vipsRawCursor(b),
          hashMirror: fromMap(() => this.kVips, VIP_KEY.size, VIP_VAL.size, (addr, flags) => {
            encodeAddr(addr, rec, 0);
            rec.writeUInt32LE(flags >>> 0, VIP_KEY.size);
          }),
        },
      ],
      [
        MAP_NAMES.svcMeta,
        {
          keySize: BACKEND_ID_SIZE,
          valSize: SVC_META.size,
          cursor: (m, b) => m.svcMetaRawCursor(b),
          normalise: normaliseSvcMeta,
          hashMirror: fromMap(() => this.kMeta, BACKEND_ID_SIZE, SVC_META.size, (rn, meta) => {
            rec.writeUInt32LE(rn, 0);
            encodeSvcMeta(meta, rec, BACKEND_ID_SIZE);
          }),
        },
      ],
    ]);
    return this.sliced;
  }

  /** Hashes the mirror's kpr_svc entries into w.mirror, about `budget` of them (at least one entry set); whether all are. */
  private hashMirrorSets(w: ReadBackWindow, budget: number): boolean {
    const sets = (w.iter ??= this.kSets.values()) as Iterator<EntrySet>;
    const head = Buffer.alloc(18);
    const tail = new Uint8Array(18);
    let work = 0;
    do {
      const next = sets.next();
      if (next.done) return true;
      work += this.hashEntrySet(next.value, w.mirror, head, tail);
    } while (work < budget);
    return false;
  }

  /**
   * Adds one entry set's kpr_svc records to `out`, as the kernel holds them:
   * the 18 bytes of address and port hashed once, then per entry its last 6
   * key bytes (slot, proto, scope, pad) and its 12 value bytes. Returns the
   * number of records.
   */
  private hashEntrySet(f: EntrySet, out: RecordHashes, head: Buffer, tail: Uint8Array): number {
    encodeAddr(f.base.addr, head, 0);
    head[16] = f.base.port >>> 8; // __be16
    head[17] = f.base.port & 0xff;
    const state = Fingerprint.prefix(head, 0, 18);
    tail.fill(0);
    tail[2] = f.base.proto;
    tail[3] = f.scope;
    let n = 0;
    const m = f.master;
    if (m) {
      // slot 0 (bytes 0-1 of the tail stay 0); value: backend_id, count, rev_nat_id, flags, little endian.
      tail[6] = m.backendId & 0xff;
      tail[7] = (m.backendId >>> 8) & 0xff;
      tail[8] = (m.backendId >>> 16) & 0xff;
      tail[9] = m.backendId >>> 24;
      tail[10] = m.count & 0xff;
      tail[11] = m.count >>> 8;
      tail[12] = m.revNatId & 0xff;
      tail[13] = m.revNatId >>> 8;
      tail[14] = m.flags & 0xff;
      tail[15] = m.flags >>> 8;
      out.addFrom(state, tail, 0, 6, 12);
      tail.fill(0, 6);
      n++;
    }
    const slots = f.slots;
    for (let s = 1; s < slots.length; s++) {
      const id = slots[s];
      if (id === undefined) continue;
      tail[0] = s & 0xff;
      tail[1] = s >>> 8;
      tail[6] = id & 0xff;
      tail[7] = (id >>> 8) & 0xff;
      tail[8] = (id >>> 16) & 0xff;
      tail[9] = id >>> 24;
      out.addFrom(state, tail, 0, 6, 12);
      n++;
    }
    return n;
  }

  /** Hashes the mirror's kpr_backend rows into w.mirror, by id, about `budget` ids of them; whether all are. */
  private hashMirrorBackends(w: ReadBackWindow, budget: number): boolean {
    const rows = this.kBackends;
    const rec = Buffer.alloc(BACKEND_ID_SIZE + BACKEND.size);
    const add = (id: number) => this.encodeBackendRecord(id, rec) && w.mirror.addFrom(EMPTY_STATE, rec, 0, BACKEND_ID_SIZE, BACKEND.size);
    // Dense ids by range (a row added meanwhile has a touched key, so where the range ends does not matter), then the few far ones at once.
    const end = Math.min(rows.denseEnd, w.nextId + Math.max(1, budget));
    rows.forEachDenseId(w.nextId, end, add);
    w.nextId = end;
    if (end < rows.denseEnd) return false;
    rows.forEachFarId(add);
    return true;
  }

  /** Backend `id`'s record as kpr_backend holds it: the u32 key, then the value. */
  private encodeBackendRecord(id: number, rec: Buffer): boolean {
    const rows = this.kBackends;
    rec.writeUInt32LE(id, 0);
    const v4 = rows.ipv4(id);
    if (v4 >= 0) encodeIPv4Num(v4, rec, BACKEND_ID_SIZE);
    else encodeAddr(rows.addr(id), rec, BACKEND_ID_SIZE);
    rec.writeUInt16BE(rows.port(id), BACKEND_ID_SIZE + 16);
    rec[BACKEND_ID_SIZE + 18] = rows.proto(id);
    rec[BACKEND_ID_SIZE + 19] = rows.flags(id);
    return true;
  }

  /** While kpr_svc's read-back window is open: records service-map keys being written or deleted. */
  private touchSvcColumns(sw: SvcWrites): void {
    const t = this.window?.map === MAP_NAMES.svc ? this.window.touched : undefined;
    if (!t) return;
    const k = this.keyScratch;
    for (let i = 0; i < sw.length; i++) {
      const base = sw.bases[i];
      const ss = sw.scopeSlots[i];
      encodeSvcKey(svcKey(base, Math.floor(ss / 0x10000), ss % 0x10000), k, 0);
      t.add(k, 0, SVC_KEY.size);
    }
  }

  private touchSvcKeys(keys: readonly SvcKey[]): void {
    const t = this.window?.map === MAP_NAMES.svc ? this.window.touched : undefined;
    if (!t) return;
    const k = this.keyScratch;
    for (const key of keys) {
      encodeSvcKey(key, k, 0);
      t.add(k, 0, SVC_KEY.size);
    }
  }

  /** While kpr_backend's read-back window is open: records backend ids being written or deleted. */
  private touchBackends(ids: readonly number[], count = ids.length): void {
    const t = this.window?.map === MAP_NAMES.backend ? this.window.touched : undefined;
    if (!t) return;
    const k = this.keyScratch;
    for (let i = 0; i < count; i++) {
      encodeBackendId(ids[i], k, 0);
      t.add(k, 0, BACKEND_ID_SIZE);
    }
  }

  /** While kpr_vip's read-back window is open: records addresses being written or deleted. */
  private touchVips(addrs: ReadonlyArray<string | readonly [string, number]>): void {
    const t = this.window?.map === MAP_NAMES.vip ? this.window.touched : undefined;
    if (!t) return;
    const k = this.keyScratch;
    for (const a of addrs) {
      encodeAddr(typeof a === 'string' ? a : a[0], k, 0);
      t.add(k, 0, VIP_KEY.size);
    }
  }

  /** While kpr_svc_meta's read-back window is open: records revNatIds whose names are being written or deleted. */
  private touchSvcMeta(ids: ReadonlyArray<number | readonly [number, SvcMeta]>): void {
    const t = this.window?.map === MAP_NAMES.svcMeta ? this.window.touched : undefined;
    if (!t) return;
    const k = this.keyScratch;
    for (const id of ids) {
      k.writeUInt32LE(typeof id === 'number' ? id : id[0], 0);
      t.add(k, 0, BACKEND_ID_SIZE);
    }
  }

  /**
   * The rare path of a sliced read-back (readBackMatches found a map
   * differing), in one step: every map dumped, decoded and compared with the
   * mirror (result.drift); on drift the mirror is rebuilt from the dumps and
   * every frontend re-diffed from the desired state (not re-planned), with
   * the sweep of a `sweep` sync, writing the difference in the usual safe order.
   */
  repairDrift(): SyncResult {
    return this.sync(NO_PLANS, { full: false, sweep: true, readBack: 'decoded' });
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
    this.clusterAddrs.clear();
    this.assertedByAddr.clear();
    this.haveFullDesired = false;
    this.adoptedUnclaimed.clear();
    for (const s of this.kSets.values()) this.adoptedUnclaimed.add(s.fk);
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
   *
   * A Service that does not fit a limit (limits.ts) is refused whole and the
   * others programmed; when the sync frees room of the kind a refused Service
   * lacked, a second pass, after the first is applied, retries it.
   */
  sync(plans: PlanSource, opts: SyncOptions): SyncResult {
    const own: MapCapacities = { ...UNKNOWN_CAPACITIES, ...(hasCapacities(this.maps) ? this.maps.capacities() : {}) };
    const declared: MapCapacities = { ...own, ...this.options.capacities };
    this.caps = { ...declared };
    for (const [key, l] of this.learned) {
      // Resized or replaced (the map's max_entries, or what the reconciler is told): learned again if it fills.
      if (l.declared !== declared[key] || l.own !== own[key]) this.learned.delete(key);
      else this.caps[key] = Math.min(declared[key], l.holds);
    }
    this.refusedNow.clear();
    this.ages = plans; // both passes decide same-class conflicts by the same creationTimestamps
    try {
      return this.syncPasses(plans, opts);
    } finally {
      this.ages = undefined;
      this.createdCache.clear();
    }
  }

  private syncPasses(plans: PlanSource, opts: SyncOptions): SyncResult {
    const result = this.syncPass(plans, opts);
    if (result.ok && this.refused.size > 0) {
      const retry: string[] = [];
      for (const [service, r] of this.refused) if (this.free(r.limit as RoomLimit) > (r.free ?? 0)) retry.push(service);
      if (retry.length > 0) {
        for (const service of retry) for (const d of this.desired.get(service) ?? []) this.dirty.add(d.fk);
        const again = this.syncPass(NO_PLANS, { full: false });
        result.ok = again.ok;
        if (again.error !== undefined) result.error = again.error;
        result.servicesWritten += again.servicesWritten;
        result.servicesDeleted += again.servicesDeleted;
        result.backendsWritten += again.backendsWritten;
        result.backendsDeleted += again.backendsDeleted;
        result.auxWritten += again.auxWritten;
        result.auxDeleted += again.auxDeleted;
        result.frontends = again.frontends;
        result.backends = again.backends;
        result.skipped.push(...again.skipped);
        result.conflicts = again.conflicts;
      }
    }
    for (const service of this.refusedNow) {
      const r = this.refused.get(service);
      if (r) result.skipped.push({ object: `Service ${service}`, reason: describeLimit(r) });
    }
    result.limits = this.limits();
    return result;
  }

  /** One pass of sync(): the diff of `plans` (and of the frontends marked dirty), applied. */
  private syncPass(plans: PlanSource, opts: SyncOptions): SyncResult {
    this.verdicts.clear();
    const skipped: SkippedObject[] = [];
    const result: SyncResult = {
      ok: true,
      servicesWritten: 0,
      servicesDeleted: 0,
      backendsWritten: 0,
      backendsDeleted: 0,
      auxWritten: 0,
      auxDeleted: 0,
      frontends: 0,
      backends: 0,
      skipped,
      drift: [],
    };
    // ---- 0. drift: what the kernel holds against what this agent last wrote
    const sweep = opts.full || opts.sweep === true;
    if (sweep && opts.readBack && !this.stale) this.readBack(result, opts.readBack === 'decoded');
    // ---- 1. update the desired state; collect the frontends it concerns
    const affected = new Set<string>(this.dirty);
    // Keys are strings: sort()'s default order (UTF-16 code units) is the key order, with no comparator call per comparison.
    const services = [...plans.keys()].sort();
    if (opts.full) {
      for (const s of this.kSets.values()) affected.add(s.fk);
      for (const fk of this.claimants.keys()) affected.add(fk);
      this.desired.clear();
      this.claimants.clear();
      this.clusterAddrs.clear();
      this.assertedByAddr.clear();
      this.adoptedUnclaimed.clear();
      this.haveFullDesired = true;
    } else if (sweep) {
      // The desired state stays: only what no Service claims goes, and after
      // a repaired drift (the mirror rebuilt from the kernel) everything is re-diffed.
      const all = result.drift.length > 0;
      for (const s of this.kSets.values()) if (all || !this.claimants.has(s.fk)) affected.add(s.fk);
      if (all) for (const fk of this.claimants.keys()) affected.add(fk);
      this.adoptedUnclaimed.clear();
      this.haveFullDesired = true;
    }
    const w = newWrites();
    const touchedVips = new Set<string>();
    // A ClusterIP or NodePort frontend only this Service claims is diffed as
    // soon as the Service is read: the API server allocates those addresses
    // and ports uniquely, so no later claimant can win it in a real cluster
    // (one that does, from broken input, is re-diffed below in the same sync).
    // LoadBalancer and ExternalIP claims wait for the pass below, when every
    // claim is known: they lose to a ClusterIP claimed later in key order, and
    // may not use a ClusterIP address at all (ownership.ts). The planner's output and the
    // desired backends then die young instead of all living until a second
    // pass, which at 10,000 Services is most of the sync's garbage. Contested
    // and removed frontends wait for the pass below. Not after a failure: the
    // mirror must be re-read first.
    // Frontends diffed while streaming are kept in `diffed` only (not in
    // `affected`): at 10,000 Services that is ~40,000 set operations fewer.
    const diffed = new Set<string>();
    try {
      const streaming = !this.stale;
      for (const service of services) {
        const mine = this.setDesired(service, plans.get(service) ?? [], affected, skipped);
        for (let i = 0; i < mine.length; i++) {
          const d = mine[i];
          if (!streaming || this.claimants.get(d.fk) !== service || isAssertedClaim(d.feType)) {
            affected.add(d.fk);
            continue;
          }
          if (this.adoptedUnclaimed.size > 0) this.adoptedUnclaimed.delete(d.fk);
          this.diffQueued(d, w, touchedVips, skipped, result);
          diffed.add(d.fk);
        }
      }

      // The mirror is unknown after an earlier failure: read the maps first. The
      // desired state above is kept either way, so nothing asked for is lost.
      if (this.stale) {
        if (!this.reload()) {
          for (const fk of affected) this.dirty.add(fk);
          return this.finish(result, 'datapath maps could not be read back after an earlier failure');
        }
        for (const fk of this.dirty) affected.add(fk); // the reload may have marked more
        if (opts.full) for (const s of this.kSets.values()) affected.add(s.fk);
        else if (sweep) for (const s of this.kSets.values()) if (!this.claimants.has(s.fk)) affected.add(s.fk);
      }

      // ---- 2. diff each remaining concerned frontend against the mirror, updating the mirror
      const order: string[] = [];
      for (const fk of affected) if (!diffed.has(fk) || Array.isArray(this.claimants.get(fk))) order.push(fk);
      if (order.length > 1) order.sort();
      for (const fk of order) {
        const want = this.winner(fk, skipped);
        if (want) {
          this.adoptedUnclaimed.delete(fk);
          this.diffQueued(want, w, touchedVips, skipped, result);
        } else if (this.haveFullDesired || !this.adoptedUnclaimed.has(fk)) {
          this.removeFrontend(fk, w, touchedVips);
        }
      }
      // Frontends diffed while streaming and still claimed by one Service only: any conflict they had is over.
      if (this.conflicts.size > 0) {
        for (const fk of [...this.conflicts.keys()]) if (diffed.has(fk) && typeof this.claimants.get(fk) === 'string') this.setConflicts(fk, []);
      }

      // ---- 3. what nothing accounts for any more
      this.sweepOrphans(w, touchedVips, sweep);
      for (const addr of touchedVips) {
        const wanted = (this.vipRefs.get(addr) ?? 0) > 0;
        const have = this.kVips.get(addr);
        if (wanted && have !== VIP_FLAG.REFUSE_UNKNOWN_PORT) {
          w.vipWrites.push([addr, VIP_FLAG.REFUSE_UNKNOWN_PORT]);
          this.kVips.set(addr, VIP_FLAG.REFUSE_UNKNOWN_PORT);
        } else if (!wanted && have !== undefined) {
          w.vipDeletes.push(addr);
          this.kVips.delete(addr);
        }
      }
      const unreferenced = [...this.unreferenced];
      if (unreferenced.length > 1) unreferenced.sort((a, b) => a - b);
      for (const id of unreferenced) {
        if (this.danglingRefs.has(id)) continue;
        if (this.kBackends.has(id)) {
          if (this.kBackends.refs(id) > 0) continue;
          w.backendDeletes.push(id);
        }
        w.releaseBackendIds.push(id);
      }
      this.unreferenced.clear();

      // ---- 4. apply what is still queued, in the order that keeps the live datapath consistent
      this.applyUpserts(w, result);
      this.applyDeletes(w, result);
      this.maps.flush?.(); // queued writes reach the kernel (or fail) before the sync counts as done
      // The rows of deleted backends leave the mirror only now: a write queued
      // for one earlier in this sync was encoded from its row.
      for (const id of w.backendDeletes) this.kBackends.remove(id);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.logger.error('datapath sync failed; re-reading the maps, will retry', { error: message, frontends: affected.size + diffed.size });
      for (const fk of affected) this.dirty.add(fk);
      for (const fk of diffed) this.dirty.add(fk);
      this.revNatHints.clear();
      if (this.reload()) this.learnFullMap(err);
      return this.finish(result, message);
    }
    this.revNatHints.clear();

    // ---- 5. commit: ids freed by this sync become reusable only now, so no
    //         entry was ever re-pointed at a different backend or frontend mid-sync.
    for (const id of w.releaseRevNat) this.revNatIds.release(id);
    for (const id of w.releaseBackendIds) this.backendIds.release(id);
    this.dirty.clear();
    if (sweep) {
      // A Service gone without its key reaching a sync is no longer over any limit.
      for (const service of this.refused.keys()) if (!this.desired.has(service) && this.refused.delete(service)) this.limitList = undefined;
      for (const service of this.truncated.keys()) if (!this.desired.has(service) && this.truncated.delete(service)) this.limitList = undefined;
    }
    return this.finish(result);
  }

  /**
   * Writes the upserts queued so far and starts new queues, so a sync of
   * 10,000 Services never holds 200,000 queued entries (megabytes of columns
   * that would outlive it in the heap until a full GC). Safe mid-diff: every
   * master queued so far has its slots and backends queued before it, and
   * applyUpserts keeps that order; deletions all wait for the end.
   */
  private flushUpserts(w: Writes, result: SyncResult): void {
    this.applyUpserts(w, result);
    w.backendWrites.reset();
    w.slotWrites.reset();
    w.masterWrites.reset();
    w.affWrites = [];
    w.rangeWrites = [];
    w.metaWrites = [];
    w.vipWrites = [];
  }

  /** diffFrontend (or, for a Service that does not fit, removeFrontend), then a round of writes if enough is queued. */
  private diffQueued(want: DesiredFrontend, w: Writes, touchedVips: Set<string>, skipped: SkippedObject[], result: SyncResult): void {
    if (this.admitted(want, w)) this.diffFrontend(want, w, touchedVips, skipped);
    else this.removeFrontend(want.fk, w, touchedVips);
    if (w.backendWrites.length + w.slotWrites.length + w.masterWrites.length >= FLUSH_ENTRIES) this.flushUpserts(w, result);
  }

  // ------------------------------------------------------------------ limits

  /**
   * Whether `want` may be diffed: its Service fits the room left (decided
   * once per pass, at its first frontend diffed, for every frontend it wins)
   * and so does the frontend itself (a frontend diffed after other Services
   * took room: one the Service shares with another claimant). A Service that
   * does not fit is refused (reported, and retried when room is freed).
   */
  private admitted(want: DesiredFrontend, w: Writes): boolean {
    const service = want.service;
    let ok = this.verdicts.get(service);
    if (ok === undefined) {
      const mine = this.desired.get(service) ?? [want];
      const report = mine.length === 1 && this.fitsBound(want, w) ? null : this.overLimit(service, this.winning(service, mine), w);
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
    const ne = d.backends.length;
    const ni = d.internal?.length ?? 0;
    return (
      this.free('rev_nat_ids') >= 1 &&
      this.free('svc_map', w) >= ne + 1 + (d.internal ? ni + 1 : 0) &&
      this.free('backend_map') >= ne + ni &&
      (d.affinityTimeout === 0 || this.free('aff_match_map', w) >= ne + ni) &&
      (d.sourceRanges.length === 0 || this.free('src_range_map', w) >= d.sourceRanges.length)
    );
  }

  /** The frontends of `mine` (a Service's) that it wins against other claimants. */
  private winning(service: string, mine: readonly DesiredFrontend[]): readonly DesiredFrontend[] {
    let out: DesiredFrontend[] | null = null;
    for (let i = 0; i < mine.length; i++) {
      const c = this.claimants.get(mine[i].fk);
      const wins = c === service || (Array.isArray(c) && c.reduce((a, b) => (b < a ? b : a)) === service);
      if (!wins && out === null) out = mine.slice(0, i);
      else if (wins && out !== null) out.push(mine[i]);
    }
    return out ?? mine;
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
   * revNatIds, service-map entries (masters and slots), backends,
   * affinity-match pairs and source ranges. `exact` false: an upper bound
   * from the lengths alone (as if nothing were programmed).
   */
  private need(ds: readonly DesiredFrontend[], exact: boolean): Need {
    const n: Need = { rev_nat_ids: 0, svc_map: 0, backend_map: 0, aff_match_map: 0, src_range_map: 0 };
    let fresh: Set<BackendTuple> | null = null;
    for (const d of ds) {
      const ne = d.backends.length;
      const ni = d.internal?.length ?? 0;
      if (!exact) {
        n.rev_nat_ids++;
        n.svc_map += ne + 1 + (d.internal ? ni + 1 : 0);
        n.backend_map += ne + ni;
        if (d.affinityTimeout > 0) n.aff_match_map += ne + ni;
        n.src_range_map += d.sourceRanges.length;
        continue;
      }
      const rn = this.ownedRevNat(d.fk);
      if (rn === 0) n.rev_nat_ids++;
      n.svc_map += missingEntries(this.kSets.get(d.extSid), ne) + (d.internal ? missingEntries(this.kSets.get(d.intSid), ni) : 0);
      const pairs = d.affinityTimeout > 0 ? ((rn > 0 ? this.kAff.get(rn) : undefined) ?? new Set<number>()) : null;
      const seen = pairs && d.internal ? new Set<BackendTuple>() : null;
      const newTuples = (fresh ??= new Set());
      for (const tuples of d.internalTuples ? [d.tuples, d.internalTuples] : [d.tuples]) {
        for (const t of tuples) {
          const id = this.kBackends.idOf(t);
          if (id < 0) newTuples.add(t);
          if (pairs === null || seen?.has(t)) continue;
          seen?.add(t);
          if (id < 0 || !pairs.has(id)) n.aff_match_map++;
        }
      }
      const ranges = rn > 0 ? this.kRanges.get(rn) : undefined;
      for (const cidr of d.sourceRanges) if (!ranges?.has(cidr)) n.src_range_map++;
    }
    if (fresh) n.backend_map = fresh.size;
    return n;
  }

  /** Room left of a limit: the entries queued for deletion (`w`) still count, as they are deleted after every write. */
  private free(limit: RoomLimit, w?: Writes): number {
    switch (limit) {
      case 'rev_nat_ids':
        return this.maxRevNatId - this.revNatIds.size;
      case 'svc_map':
        return this.caps.svc - this.masters - this.slotEntries - (w ? w.masterDeletes.length + w.slotDeletes.length : 0);
      case 'backend_map':
        return this.caps.backend - this.kBackends.size;
      case 'aff_match_map':
        return this.caps.affinityMatch - this.affPairs - (w ? w.affDeletes.length : 0);
      case 'src_range_map':
        return this.caps.srcRange - this.rangeKeys - (w ? w.rangeDeletes.length : 0);
    }
  }

  private capacity(limit: RoomLimit): number {
    switch (limit) {
      case 'rev_nat_ids':
        return this.maxRevNatId;
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
  private learnFullMap(err: unknown): void {
    const e = err as { code?: unknown; map?: unknown };
    if (e.code !== 'E2BIG' && e.code !== 'ENOSPC') return;
    const key = CAPACITY_KEYS[String(e.map)];
    if (key === undefined) return;
    const holds = this.held(key);
    if (!(holds < this.caps[key])) return;
    const own = { ...UNKNOWN_CAPACITIES, ...(hasCapacities(this.maps) ? this.maps.capacities() : {}) }[key];
    this.learned.set(key, { holds, declared: { [key]: own, ...this.options.capacities }[key] ?? own, own });
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
        return this.masters + this.slotEntries;
      case 'backend':
        return this.kBackends.size;
      case 'affinityMatch':
        return this.affPairs;
      case 'srcRange':
        return this.rangeKeys;
    }
  }

  /**
   * Every Service over a limit, sorted by key: built again only when a
   * Service starts or stops being over one (a resync of 30,000 Services,
   * 6,000 of them refused, runs 300 syncs; sorting the list in each cost
   * ~0.2 s). Shared by the results that report it: never changed in place.
   */
  private limits(): readonly LimitReport[] {
    if (this.limitList) return this.limitList;
    const limits = [...this.truncated.values(), ...this.refused.values()];
    this.limitList = limits.length > 1 ? limits.sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0)) : limits;
    return this.limitList;
  }

  /** Records (and, when it is new, logs) that a Service was refused. */
  private refuse(r: LimitReport): void {
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
  private noteTruncation(service: string, mine: readonly DesiredFrontend[]): void {
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

  /** New and changed entries, each kind before what names it. */
  private applyUpserts(w: Writes, result: SyncResult): void {
    const m = this.maps;
    const columns = hasColumnWrites(m) ? m : null;
    if (w.backendWrites.length) {
      this.touchBackends(w.backendWrites.ids, w.backendWrites.length);
      if (columns) columns.updateBackendColumns(w.backendWrites.ids, this.kBackends, w.backendWrites.length);
      else m.updateBackends(w.backendWrites.entries(this.kBackends));
      result.backendsWritten += w.backendWrites.length;
    }
    if (w.affWrites.length) {
      m.updateAffinityMatches(w.affWrites);
      result.auxWritten += w.affWrites.length;
    }
    if (w.rangeWrites.length) {
      m.updateSrcRanges(w.rangeWrites);
      result.auxWritten += w.rangeWrites.length;
    }
    this.writeServices(w.slotWrites, columns, result);
    if (w.metaWrites.length) {
      this.touchSvcMeta(w.metaWrites);
      m.updateSvcMeta(w.metaWrites);
      result.auxWritten += w.metaWrites.length;
    }
    this.writeServices(w.masterWrites, columns, result);
    if (w.vipWrites.length) {
      this.touchVips(w.vipWrites);
      m.updateVips(w.vipWrites);
      result.auxWritten += w.vipWrites.length;
    }
  }

  /** One batch of service-map entries (slots or masters), by column when the maps take columns. */
  private writeServices(sw: SvcWrites, columns: ColumnWriteMaps | null, result: SyncResult): void {
    if (!sw.length) return;
    this.touchSvcColumns(sw);
    if (columns) columns.updateServiceColumns(sw.bases, sw.scopeSlots, sw.vals, sw.length);
    else this.maps.updateServices(sw.entries());
    result.servicesWritten += sw.length;
  }

  /** Entries nothing names any more, masters first. */
  private applyDeletes(w: Writes, result: SyncResult): void {
    const m = this.maps;
    if (w.masterDeletes.length || w.slotDeletes.length) {
      this.touchSvcKeys(w.masterDeletes);
      this.touchSvcKeys(w.slotDeletes);
      m.deleteServices(w.masterDeletes.length ? w.masterDeletes.concat(w.slotDeletes) : w.slotDeletes);
      result.servicesDeleted += w.masterDeletes.length + w.slotDeletes.length;
    }
    if (w.affDeletes.length) {
      m.deleteAffinityMatches(w.affDeletes);
      result.auxDeleted += w.affDeletes.length;
    }
    if (w.rangeDeletes.length) {
      m.deleteSrcRanges(w.rangeDeletes);
      result.auxDeleted += w.rangeDeletes.length;
    }
    if (w.vipDeletes.length) {
      this.touchVips(w.vipDeletes);
      m.deleteVips(w.vipDeletes);
      result.auxDeleted += w.vipDeletes.length;
    }
    if (w.metaDeletes.length) {
      this.touchSvcMeta(w.metaDeletes);
      m.deleteSvcMeta(w.metaDeletes);
      result.auxDeleted += w.metaDeletes.length;
    }
    if (w.backendDeletes.length) {
      this.touchBackends(w.backendDeletes);
      m.deleteBackends(w.backendDeletes);
      result.backendsDeleted += w.backendDeletes.length;
    }
  }

  // ------------------------------------------------------------------ desired state

  /**
   * Replaces one Service's desired frontends; adds every frontend it had to
   * `affected` (the caller accounts for the ones it has, which it returns).
   */
  private setDesired(service: string, frontends: PlanFrontend[], affected: Set<string>, skipped: SkippedObject[]): readonly DesiredFrontend[] {
    const old = this.desired.get(service);
    if (old) {
      for (const d of old) {
        affected.add(d.fk);
        this.unclaim(d.fk, service);
        this.unindexAddress(d, service, affected);
      }
      this.desired.delete(service);
    }
    const mine: DesiredFrontend[] = [];
    let ids: Set<string> | null = null;
    for (const f of frontends) {
      const d = toDesiredFrontend(service, f, skipped);
      if (!d) continue;
      if (mine.length > 0) {
        ids ??= new Set(mine.map((x) => x.fk));
        if (ids.has(d.fk)) {
          skipped.push({ object: `Service ${service}`, reason: `frontend ${frontendLabel(d)} is listed twice; the first is used` });
          continue;
        }
        ids.add(d.fk);
      }
      mine.push(d);
      this.claim(d.fk, service);
      this.indexAddress(d, service, affected);
    }
    this.noteTruncation(service, mine);
    if (mine.length === 0) {
      if (this.refused.delete(service)) {
        this.limitList = undefined;
        this.refusedNow.delete(service);
      }
      return mine;
    }
    const kept = mine.length === 1 ? [mine[0]] : mine.slice(); // exact length: kept for long
    this.desired.set(service, kept);
    return kept;
  }

  private claim(fk: string, service: string): void {
    const c = this.claimants.get(fk);
    if (c === undefined) this.claimants.set(fk, service);
    else if (typeof c === 'string') this.claimants.set(fk, [c, service]);
    else c.push(service);
  }

  private unclaim(fk: string, service: string): void {
    const c = this.claimants.get(fk);
    if (c === service) this.claimants.delete(fk);
    else if (Array.isArray(c)) {
      const rest = c.filter((s) => s !== service);
      this.claimants.set(fk, rest.length === 1 ? rest[0] : rest);
    }
  }

  /** Records a claimed ClusterIP address or LoadBalancer/ExternalIP frontend (after claim()). */
  private indexAddress(d: DesiredFrontend, service: string, affected: Set<string>): void {
    const addr = d.base.addr;
    if (d.feType === FE_TYPE.CLUSTER_IP) {
      let owners = this.clusterAddrs.get(addr);
      if (!owners) {
        this.clusterAddrs.set(addr, (owners = new Map()));
        this.assertedAt(addr, affected); // they may no longer use the address
      }
      owners.set(service, (owners.get(service) ?? 0) + 1);
    } else if (isAssertedClaim(d.feType)) {
      let fks = this.assertedByAddr.get(addr);
      if (!fks) this.assertedByAddr.set(addr, (fks = new Set()));
      fks.add(d.fk);
    }
  }

  /** Undoes indexAddress (after unclaim()). */
  private unindexAddress(d: DesiredFrontend, service: string, affected: Set<string>): void {
    const addr = d.base.addr;
    if (d.feType === FE_TYPE.CLUSTER_IP) {
      const owners = this.clusterAddrs.get(addr);
      if (!owners) return;
      const n = (owners.get(service) ?? 0) - 1;
      if (n > 0) owners.set(service, n);
      else owners.delete(service);
      if (owners.size === 0) {
        this.clusterAddrs.delete(addr);
        this.assertedAt(addr, affected); // the address is free for them again
      }
    } else if (isAssertedClaim(d.feType) && !this.claimants.has(d.fk)) {
      const fks = this.assertedByAddr.get(addr);
      fks?.delete(d.fk);
      if (fks?.size === 0) this.assertedByAddr.delete(addr);
    }
  }

  /** Marks the LoadBalancer/ExternalIP frontends on `addr` for re-decision. */
  private assertedAt(addr: string, affected: Set<string>): void {
    const fks = this.assertedByAddr.get(addr);
    if (fks) for (const fk of fks) affected.add(fk);
  }

  private desiredOf(service: string, fk: string): DesiredFrontend {
    const list = this.desired.get(service)!;
    return list.length === 1 ? list[0] : list.find((d) => d.fk === fk)!;
  }

  private createdOf(service: string): number {
    let t = this.createdCache.get(service);
    if (t === undefined) {
      const c = this.ages?.created?.(service);
      t = typeof c === 'number' && Number.isFinite(c) ? c : Infinity;
      this.createdCache.set(service, t);
    }
    return t;
  }

  /**
   * The desired frontend for a frontend id: the claim that wins by
   * ownership.ts's precedence (ClusterIP > NodePort > LoadBalancer >
   * ExternalIP, then the oldest, then the lowest key). LoadBalancer and
   * ExternalIP claims on any Service's ClusterIP address are refused. Every
   * losing claim goes to `skipped`, kpr_frontend_conflicts and (once) the log.
   */
  private winner(fk: string, skipped: SkippedObject[]): DesiredFrontend | undefined {
    const c = this.claimants.get(fk);
    const before = this.conflicts.get(fk);
    if (c === undefined) {
      if (before) this.setConflicts(fk, [], before);
      return undefined;
    }
    if (typeof c === 'string') {
      const d = this.desiredOf(c, fk);
      if (before === undefined && (!isAssertedClaim(d.feType) || this.clusterAddrs.size === 0 || !this.clusterAddrs.has(d.base.addr))) return d; // the common case
    }
    const services = typeof c === 'string' ? [c] : [...c].sort();
    let best: { d: DesiredFrontend; claim: Claim } | undefined;
    const lost: FrontendConflict[] = [];
    const contenders: Array<{ d: DesiredFrontend; claim: Claim }> = [];
    for (const s of services) {
      const d = this.desiredOf(s, fk);
      const owner = isAssertedClaim(d.feType) ? this.clusterIPOwner(d.base.addr, s) : undefined;
      if (owner !== undefined) {
        lost.push({ service: s, type: claimClass(d.feType), rule: 'cluster-ip-address', frontend: frontendLabel(d), owner, ownerType: 'ClusterIP' });
        continue;
      }
      const claim: Claim = { service: s, feType: d.feType, created: services.length > 1 ? this.createdOf(s) : Infinity };
      const x = { d, claim };
      contenders.push(x);
      if (!best || outranks(claim, best.claim)) best = x;
    }
    for (const x of contenders) {
      if (x === best) continue;
      lost.push({ service: x.claim.service, type: claimClass(x.d.feType), rule: 'outranked', frontend: frontendLabel(x.d), owner: best!.claim.service, ownerType: claimClass(best!.d.feType) });
    }
    this.setConflicts(fk, lost, before);
    for (const l of lost) skipped.push(conflictSkip(l));
    return best?.d;
  }

  /** The Service (lowest key) whose ClusterIP is `addr`, other than `service`; undefined when none. */
  private clusterIPOwner(addr: string, service: string): string | undefined {
    const owners = this.clusterAddrs.get(addr);
    if (!owners) return undefined;
    let first: string | undefined;
    for (const s of owners.keys()) if (s !== service && (first === undefined || s < first)) first = s;
    return first;
  }

  private setConflicts(fk: string, now: FrontendConflict[], before = this.conflicts.get(fk)): void {
    if (now.length > 0) this.conflicts.set(fk, now);
    else this.conflicts.delete(fk);
    if (now.length > 0 || before) this.conflictLog.update(fk, now, before);
  }

  /** kpr_frontend_conflicts' values: lost claims now in force, by class and rule. */
  conflictCounts(): ConflictCount[] {
    const counts = new Map<string, ConflictCount>();
    for (const list of this.conflicts.values()) {
      for (const c of list) {
        const k = `${c.type}|${c.rule}`;
        const n = counts.get(k);
        if (n) n.frontends++;
        else counts.set(k, { type: c.type, rule: c.rule, frontends: 1 });
      }
    }
    return [...counts.values()];
  }

  // ------------------------------------------------------------------ diff

  /** The revNatId this frontend owns in the kernel, if any. */
  private ownedRevNat(fk: string, ext = this.kSets.get(entrySetId(fk, SCOPE.EXTERNAL)), int = this.kSets.get(entrySetId(fk, SCOPE.INTERNAL))): number {
    const rn = ext?.master?.revNatId ?? 0;
    if (rn > 0 && this.revNatOwner.get(rn) === fk) return rn;
    const rn2 = int?.master?.revNatId ?? 0;
    if (rn2 > 0 && this.revNatOwner.get(rn2) === fk) return rn2;
    return 0;
  }

  private diffFrontend(want: DesiredFrontend, w: Writes, touchedVips: Set<string>, skipped: SkippedObject[]): void {
    const fk = want.fk;
    // Each entry set looked up once for the whole diff.
    const extSet = this.kSets.get(want.extSid);
    const intSet = this.kSets.get(want.intSid);
    let revNatId = this.ownedRevNat(fk, extSet, intSet);
    if (revNatId === 0 && this.revNatHints.size > 0) {
      const hint = this.revNatHints.get(fk);
      if (hint !== undefined && this.revNatIds.reserve(hint)) {
        revNatId = hint;
        this.revNatOwner.set(hint, fk);
      }
    }
    if (revNatId === 0) {
      const id = this.revNatIds.allocate();
      if (id === undefined) {
        // admitted() counted the ids: not reached unless the count was wrong. Leaves any existing entry as it is.
        this.refuse({ service: want.service, limit: 'rev_nat_ids', action: 'refused', capacity: this.maxRevNatId, needed: 1, free: 0 });
        return;
      }
      revNatId = id;
      this.revNatOwner.set(id, fk);
    }

    // Names first (no reader depends on them, the CLI does).
    const meta: SvcMeta = { name: cut(want.service, META_NAME_MAX), portName: cut(want.portName, META_PORT_MAX), type: want.feType, proto: want.base.proto };
    if (!sameMeta(this.kMeta.get(revNatId), meta)) {
      w.metaWrites.push([revNatId, meta]);
      this.kMeta.set(revNatId, meta);
    }

    // Backend ids of both sets, so the affinity pairs can be written before any slot names them.
    const ext = this.backendsFor(want.backends, want.tuples, want.base.proto, w);
    const int = want.internal ? this.backendsFor(want.internal, want.internalTuples!, want.base.proto, w) : null;
    if (want.affinityTimeout > 0) this.diffAffinity(revNatId, int ? ext.concat(int) : ext, w);
    else this.diffAffinity(revNatId, NO_IDS, w);
    this.diffRanges(revNatId, want.sourceRanges, w);

    const master = (n: number): SvcVal => ({ backendId: want.affinityTimeout, count: n, revNatId, flags: want.flags });
    this.diffSet(extSet, want.extSid, fk, SCOPE.EXTERNAL, want.base, ext, master(ext.length), w);
    if (int) this.diffSet(intSet, want.intSid, fk, SCOPE.INTERNAL, want.base, int, master(int.length), w);
    else if (intSet) this.removeSet(fk, SCOPE.INTERNAL, w, want.intSid);

    // kpr_vip: a ClusterIP address refuses unknown ports while one of its frontends is programmed.
    const counted = this.vipOf.get(fk);
    if (want.clusterIP && counted === undefined) this.vipRef(fk, want.base.addr, touchedVips);
    else if (!want.clusterIP && counted !== undefined) this.vipUnref(fk, touchedVips);
  }

  /** Backend ids of `backends` (a desired frontend's checked list) in order, allocating (and queueing writes of) what the kernel lacks. */
  private backendsFor(backends: readonly PlanBackend[], tuples: readonly BackendTuple[], proto: number, w: Writes): number[] {
    const ids = new Array<number>(backends.length);
    for (let i = 0; i < backends.length; i++) ids[i] = this.backendFor(backends[i], tuples[i], proto, w.backendWrites);
    return ids;
  }

  /** Makes one entry set (`have`: the mirror's, if any) hold backends `ids` in slots 1..n and `master` in slot 0. */
  private diffSet(have: EntrySet | undefined, sid: string, fk: string, scope: number, base: FrontendBase, ids: readonly number[], master: SvcVal, w: Writes): void {
    let f = have;
    const n = ids.length;
    // Sized up front: an array grown slot by slot reserves 17 entries (≈ 150 bytes) at the first.
    if (!f) this.kSets.set(sid, (f = { fk, scope, base, master: null, slots: new Array<number>(n + 1), slotCount: 0 }));

    for (let i = 0; i < n; i++) {
      const id = ids[i];
      const slot = i + 1;
      const old = f.slots[slot];
      if (old === id) continue;
      w.slotWrites.push(f.base, scope, slot, id);
      f.slots[slot] = id;
      this.kBackends.addRef(id);
      if (old !== undefined) this.unref(old);
      else (f.slotCount++, this.slotEntries++);
    }

    if (!f.master || !sameMaster(f.master, master)) {
      w.masterWrites.push(f.base, scope, 0, master);
      if (!f.master) this.masters++;
      f.master = master;
    }

    // Slots beyond the new count go after the master is lowered.
    if (f.slotCount > n) {
      for (let s = n + 1; s < f.slots.length; s++) {
        const id = f.slots[s];
        if (id === undefined) continue;
        w.slotDeletes.push(svcKey(f.base, scope, s));
        this.unref(id);
        f.slotCount--;
        this.slotEntries--;
      }
    }
    if (f.slots.length > n + 1) f.slots.length = n + 1;
  }

  /** Removes one entry set: master first, then its slots. */
  private removeSet(fk: string, scope: number, w: Writes, sid = entrySetId(fk, scope)): void {
    const f = this.kSets.get(sid);
    if (!f) return;
    if (f.master) {
      w.masterDeletes.push(svcKey(f.base, scope, 0));
      this.masters--;
    }
    for (let s = 1; s < f.slots.length; s++) {
      const id = f.slots[s];
      if (id === undefined) continue;
      w.slotDeletes.push(svcKey(f.base, scope, s));
      this.unref(id);
    }
    this.slotEntries -= f.slotCount;
    this.kSets.delete(sid);
  }

  private removeFrontend(fk: string, w: Writes, touchedVips: Set<string>): void {
    const rn = this.ownedRevNat(fk);
    for (const scope of SCOPES) this.removeSet(fk, scope, w);
    if (rn > 0) {
      this.diffAffinity(rn, [], w);
      this.diffRanges(rn, [], w);
      if (this.kMeta.delete(rn)) w.metaDeletes.push(rn);
      this.revNatOwner.delete(rn);
      w.releaseRevNat.push(rn);
    }
    if (this.vipOf.has(fk)) this.vipUnref(fk, touchedVips);
  }

  /** Makes kpr_aff_match hold exactly `ids` for `revNatId`: additions before the slots, removals after. */
  private diffAffinity(revNatId: number, ids: readonly number[], w: Writes): void {
    const have = this.kAff.get(revNatId);
    if (ids.length === 0 && !have) return;
    const want = new Set(ids);
    for (const id of want) if (!have?.has(id)) w.affWrites.push({ backendId: id, revNatId });
    if (have) for (const id of have) if (!want.has(id)) w.affDeletes.push({ backendId: id, revNatId });
    this.affPairs += want.size - (have?.size ?? 0);
    if (want.size) this.kAff.set(revNatId, want);
    else this.kAff.delete(revNatId);
  }

  /** Makes kpr_src_range hold exactly `cidrs` for `revNatId`: additions before the masters, removals after. */
  private diffRanges(revNatId: number, cidrs: readonly string[], w: Writes): void {
    const have = this.kRanges.get(revNatId);
    if (cidrs.length === 0 && !have) return;
    const want = new Set(cidrs);
    for (const cidr of want) if (!have?.has(cidr)) w.rangeWrites.push({ revNatId, cidr });
    if (have) for (const cidr of have) if (!want.has(cidr)) w.rangeDeletes.push({ revNatId, cidr });
    this.rangeKeys += want.size - (have?.size ?? 0);
    if (want.size) this.kRanges.set(revNatId, want);
    else this.kRanges.delete(revNatId);
  }

  private vipRef(fk: string, addr: string, touched: Set<string>): void {
    this.vipOf.set(fk, addr);
    this.vipRefs.set(addr, (this.vipRefs.get(addr) ?? 0) + 1);
    touched.add(addr);
  }

  private vipUnref(fk: string, touched: Set<string>): void {
    const addr = this.vipOf.get(fk)!;
    this.vipOf.delete(fk);
    const r = (this.vipRefs.get(addr) ?? 0) - 1;
    if (r > 0) this.vipRefs.set(addr, r);
    else this.vipRefs.delete(addr);
    touched.add(addr);
  }

  /**
   * Affinity pairs and names of revNatIds no frontend owns, service addresses
   * whose entry disagrees with the frontends, backends no slot names: the
   * suspects the last read of the maps found, or (full sync) everything.
   */
  private sweepOrphans(w: Writes, touchedVips: Set<string>, full: boolean): void {
    const revNats = full ? new Set([...this.kAff.keys(), ...this.kRanges.keys(), ...this.kMeta.keys()]) : this.suspectRevNats;
    for (const rn of revNats) {
      if (this.revNatOwner.has(rn)) continue;
      this.diffAffinity(rn, [], w);
      this.diffRanges(rn, [], w);
      if (this.kMeta.delete(rn)) w.metaDeletes.push(rn);
    }
    for (const addr of this.suspectVips) touchedVips.add(addr);
    if (full) {
      for (const addr of this.kVips.keys()) touchedVips.add(addr);
      for (const addr of this.vipRefs.keys()) touchedVips.add(addr);
      this.kBackends.forEachId((id) => {
        if (this.kBackends.refs(id) === 0) this.unreferenced.add(id);
      });
    }
    this.suspectRevNats.clear();
    this.suspectVips.clear();
  }

  /** The backend id of one checked backend (and its tuple), allocating it (and queueing its write) if the kernel lacks it or holds other flags. */
  private backendFor(b: PlanBackend, tuple: BackendTuple, proto: number, writes: BackendWrites): number {
    const flags = b.local ? BE_FLAG.LOCAL : 0;
    const rows = this.kBackends;
    const known = rows.idOf(tuple);
    if (known >= 0) {
      if (rows.flags(known) !== flags) {
        // The endpoint moved to or from this node (an IP reused): same address, new LOCAL flag.
        rows.setFlags(known, flags);
        writes.push(known);
      }
      return known;
    }
    const id = this.backendIds.allocate();
    if (id === undefined) throw new Error('backend id space exhausted'); // 2^32 - 1 backends: not reachable
    // A numeric tuple is an IPv4 backend: its address is the tuple's top 32 bits.
    rows.insert(id, tupleIPv4(tuple), b.address, b.port, proto, flags, tuple);
    writes.push(id);
    return id;
  }

  /** A slot stopped naming backend `id`. */
  private unref(id: number): void {
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

  /** One batch dump of every map the reconciler owns. Throws if one cannot be read. */
  private readKernel(): KernelContents {
    const m = this.maps;
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
   * Step 0 of a read-back sync: dumps the maps, counts what differs from the
   * mirror (result.drift) and, if anything does, rebuilds the mirror from
   * the dump (what adopt() does at start), keeping the desired state. The
   * full diff that follows then writes the difference in the usual safe
   * order. A dump that fails leaves the mirror as it was (logged; the sync
   * goes on, the next period reads again).
   */
  private readBack(result: SyncResult, decoded = false): void {
    const started = performance.now();
    let kernel: KernelContents;
    try {
      // The common case, no drift, decodes nothing of the two large maps.
      if (!decoded && hasRawDumps(this.maps) && this.largeMapsMatch(this.maps) && this.smallMapsMatch()) {
        result.readBackMs = performance.now() - started;
        return;
      }
      result.readBackDecoded = true;
      kernel = this.readKernel();
    } catch (err) {
      this.logger.warn('cannot read the maps back for drift repair', { error: err instanceof Error ? err.message : String(err) });
      return;
    }
    result.drift = this.compareWithKernel(kernel);
    if (result.drift.length > 0) {
      const before = new Map(this.revNatOwner);
      this.loadFromKernel(kernel);
      // A frontend whose masters all went keeps its revNatId if nothing else took it.
      for (const [rn, fk] of before) {
        if (!this.revNatIds.has(rn) && this.ownedRevNat(fk) === 0) this.revNatHints.set(fk, rn);
      }
    }
    result.readBackMs = performance.now() - started;
  }

  /** Whether kpr_svc and kpr_backend hold exactly the mirror's entries, by fingerprint of the raw records. */
  private largeMapsMatch(m: RawDumpMaps): boolean {
    return this.svcMapMatches(m) && this.backendMapMatches(m);
  }

  /** Whether kpr_svc holds exactly the mirror's entries, by fingerprint of the raw records. */
  private svcMapMatches(m: RawDumpMaps): boolean {
    const svc = m.dumpServicesRaw();
    const kernelSvc = new Fingerprint();
    kernelSvc.addBatch(svc.count, svc.keys, SVC_KEY.size, svc.values, SVC_VAL.size, svc.valueStride);
    return kernelSvc.equals(this.svcFingerprint());
  }

  /** Whether kpr_backend holds exactly the mirror's rows, by fingerprint of the raw records. */
  private backendMapMatches(m: RawDumpMaps): boolean {
    const be = m.dumpBackendsRaw();
    const kernelBe = new Fingerprint();
    kernelBe.addBatch(be.count, be.keys, BACKEND_ID_SIZE, be.values, BACKEND.size, be.valueStride);
    return kernelBe.equals(this.backendFingerprint());
  }

  /**
   * The mirror's kpr_svc entries, encoded as the kernel holds them. The 18
   * bytes of address and port are hashed once per entry set; each entry adds
   * its last 6 key bytes (slot, proto, scope, pad) and its 12 value bytes.
   */
  private svcFingerprint(): Fingerprint {
    const fp = new Fingerprint();
    const head = Buffer.alloc(18);
    const tail = new Uint8Array(18);
    for (const f of this.kSets.values()) {
      encodeAddr(f.base.addr, head, 0);
      head[16] = f.base.port >>> 8; // __be16
      head[17] = f.base.port & 0xff;
      const state = Fingerprint.prefix(head, 0, 18);
      tail.fill(0);
      tail[2] = f.base.proto;
      tail[3] = f.scope;
      const m = f.master;
      if (m) {
        // slot 0 (bytes 0-1 of the tail stay 0); value: backend_id, count, rev_nat_id, flags, little endian.
        tail[6] = m.backendId & 0xff;
        tail[7] = (m.backendId >>> 8) & 0xff;
        tail[8] = (m.backendId >>> 16) & 0xff;
        tail[9] = m.backendId >>> 24;
        tail[10] = m.count & 0xff;
        tail[11] = m.count >>> 8;
        tail[12] = m.revNatId & 0xff;
        tail[13] = m.revNatId >>> 8;
        tail[14] = m.flags & 0xff;
        tail[15] = m.flags >>> 8;
        fp.addFrom(state, tail, 0, 18);
        tail.fill(0, 6);
      }
      const slots = f.slots;
      for (let s = 1; s < slots.length; s++) {
        const id = slots[s];
        if (id === undefined) continue;
        tail[0] = s & 0xff;
        tail[1] = s >>> 8;
        tail[6] = id & 0xff;
        tail[7] = (id >>> 8) & 0xff;
        tail[8] = (id >>> 16) & 0xff;
        tail[9] = id >>> 24;
        fp.addFrom(state, tail, 0, 18);
      }
    }
    return fp;
  }

  /** The mirror's kpr_backend entries, encoded as the kernel holds them. */
  private backendFingerprint(): Fingerprint {
    const fp = new Fingerprint();
    const key = Buffer.alloc(BACKEND_ID_SIZE);
    const val = Buffer.alloc(BACKEND.size);
    const rows = this.kBackends;
    rows.forEachId((id) => {
      key.writeUInt32LE(id, 0);
      const v4 = rows.ipv4(id);
      if (v4 >= 0) encodeIPv4Num(v4, val, 0);
      else encodeAddr(rows.addr(id), val, 0);
      val.writeUInt16BE(rows.port(id), 16);
      val[18] = rows.proto(id);
      val[19] = rows.flags(id);
      fp.add(key, 0, BACKEND_ID_SIZE, val, 0, BACKEND.size);
    });
    return fp;
  }

  /** Whether the small maps (a few entries per frontend at most) hold exactly the mirror's, compared decoded. */
  private smallMapsMatch(): boolean {
    const m = this.maps;
    const empty: KernelContents = { services: [], backends: [], vips: m.dumpVips(), affs: m.dumpAffinityMatches(), metas: m.dumpSvcMeta(), ranges: m.dumpSrcRanges() };
    return this.compareWithKernel(empty, false).length === 0;
  }

  /** What the kernel holds differently from the mirror, by map and kind (nothing listed when nothing differs). */
  private compareWithKernel(k: KernelContents, large = true, only?: string): DriftCount[] {
    const out: DriftCount[] = [];
    /** Whether map `name` is compared. */
    const has = (name: string) => only === undefined || only === name;
    const add = (map: string, missing: number, changed: number, extra: number) => {
      if (missing > 0) out.push({ map, kind: 'missing', entries: missing });
      if (changed > 0) out.push({ map, kind: 'changed', entries: changed });
      if (extra > 0) out.push({ map, kind: 'extra', entries: extra });
    };

    let present = 0;
    let changed = 0;
    let extra = 0;
    if (large && has(MAP_NAMES.svc)) {
      // kpr_svc: masters and slots, per entry set.
      let mirrored = 0;
      for (const f of this.kSets.values()) mirrored += (f.master ? 1 : 0) + f.slotCount;
      let lastSet: EntrySet | undefined;
      let lastKey: SvcKey | undefined;
      for (const [key, val] of k.services) {
        // A dump lists the entries of one frontend mostly together: reuse the last lookup.
        let f = lastSet;
        if (!lastKey || lastKey.addr !== key.addr || lastKey.port !== key.port || lastKey.proto !== key.proto || lastKey.scope !== key.scope) {
          f = this.kSets.get(entrySetId(frontendId({ addr: key.addr, port: key.port, proto: key.proto }), key.scope));
          lastSet = f;
          lastKey = key;
        }
        if (!f) extra++;
        else if (key.slot === 0) {
          if (!f.master) extra++;
          else (present++, sameMaster(f.master, val) || changed++);
        } else {
          const id = f.slots[key.slot];
          if (id === undefined) extra++;
          else (present++, id === val.backendId || changed++);
        }
      }
      add(MAP_NAMES.svc, mirrored - present, changed, extra);
    }
    if (large && has(MAP_NAMES.backend)) {
      // kpr_backend: rows by id.
      const rows = this.kBackends;
      present = changed = extra = 0;
      for (const [id, b] of k.backends) {
        if (!rows.has(id)) extra++;
        else {
          present++;
          if (rows.addr(id) !== b.addr || rows.port(id) !== b.port || rows.proto(id) !== b.proto || rows.flags(id) !== b.flags) changed++;
        }
      }
      add(MAP_NAMES.backend, rows.size - present, changed, extra);
    }

    // kpr_vip, kpr_svc_meta: key → value.
    if (has(MAP_NAMES.vip)) {
      present = changed = extra = 0;
      for (const [addr, flags] of k.vips) {
        const have = this.kVips.get(addr);
        if (have === undefined) extra++;
        else (present++, have === flags || changed++);
      }
      add(MAP_NAMES.vip, this.kVips.size - present, changed, extra);
    }
    if (has(MAP_NAMES.svcMeta)) {
      present = changed = extra = 0;
      for (const [rn, meta] of k.metas) {
        const have = this.kMeta.get(rn);
        if (have === undefined) extra++;
        else (present++, sameMeta(have, meta) || changed++);
      }
      add(MAP_NAMES.svcMeta, this.kMeta.size - present, changed, extra);
    }

    // kpr_aff_match, kpr_src_range: sets of keys per revNatId.
    const keySets = <T>(map: string, mirror: Map<number, Set<T>>, kernel: Iterable<[number, T]>) => {
      let total = 0;
      for (const s of mirror.values()) total += s.size;
      let found = 0;
      let stray = 0;
      for (const [rn, x] of kernel) {
        if (mirror.get(rn)?.has(x)) found++;
        else stray++;
      }
      add(map, total - found, 0, stray);
    };
    if (has(MAP_NAMES.affinityMatch)) keySets(MAP_NAMES.affinityMatch, this.kAff, k.affs.map((a): [number, number] => [a.revNatId, a.backendId]));
    if (has(MAP_NAMES.srcRange)) keySets(MAP_NAMES.srcRange, this.kRanges, k.ranges.map((r): [number, string] => [r.revNatId, r.cidr]));
    return out;
  }

  private loadFromKernel(kernel: KernelContents = this.readKernel()): AdoptResult {
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
        for (let s = f.master.count + 1; s < f.slots.length; s++) if (f.slots[s] !== undefined) (d.slotsBeyondCount++, bad.add(f.fk));
        for (let s = 1; s <= f.master.count; s++) if (f.slots[s] === undefined) (d.missingSlots++, bad.add(f.fk));
        // Both scopes of one frontend share its revNatId; any other sharing is an inconsistency.
        const rn = f.master.revNatId;
        const owner = this.revNatOwner.get(rn);
        if (rn > 0 && owner === undefined && this.revNatIds.reserve(rn)) this.revNatOwner.set(rn, f.fk);
        else if (owner !== f.fk) (d.badRevNatIds++, bad.add(f.fk));
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
    for (const fk of bad) this.dirty.add(fk);

    for (const k of affs) {
      let s = this.kAff.get(k.revNatId);
      if (!s) this.kAff.set(k.revNatId, (s = new Set()));
      s.add(k.backendId);
      if (!this.revNatOwner.has(k.revNatId)) (d.orphanAuxEntries++, this.suspectRevNats.add(k.revNatId));
    }
    for (const k of ranges) {
      let s = this.kRanges.get(k.revNatId);
      if (!s) this.kRanges.set(k.revNatId, (s = new Set()));
      s.add(k.cidr);
      if (!this.revNatOwner.has(k.revNatId)) (d.orphanAuxEntries++, this.suspectRevNats.add(k.revNatId));
    }
    this.affPairs = 0;
    for (const s of this.kAff.values()) this.affPairs += s.size;
    this.rangeKeys = 0;
    for (const s of this.kRanges.values()) this.rangeKeys += s.size;
    for (const [addr, flags] of vips) {
      this.kVips.set(addr, flags);
      if (!this.vipRefs.has(addr)) (d.orphanAuxEntries++, this.suspectVips.add(addr));
    }
    // A ClusterIP frontend whose address entry is missing (a write that failed part-way).
    for (const addr of this.vipRefs.keys()) if (this.kVips.get(addr) !== VIP_FLAG.REFUSE_UNKNOWN_PORT) this.suspectVips.add(addr);
    for (const [rn, m] of metas) {
      this.kMeta.set(rn, m);
      if (!this.revNatOwner.has(rn)) (d.orphanAuxEntries++, this.suspectRevNats.add(rn));
    }

    this.kBackends.forEachId((id) => {
      if (this.kBackends.refs(id) === 0) {
        d.orphanBackends++;
        this.unreferenced.add(id);
      }
    });
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
    const conflicts = this.conflictCounts();
    let total = 0;
    for (const c of conflicts) total += c.frontends;
    this.conflictLog.flush(total);
    result.conflicts = conflicts;
    return result;
  }
}
