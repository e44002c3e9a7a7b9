/**
 * kpr_svc, the frontends' slots (a master per entry set, then slots
 * 1..count): written by column at steps 3 (slots) and 5 (masters), deleted
 * at step 7 (masters of removed sets first, then slots, in one call); read
 * back by fingerprint of the raw records, an entry set's address and port
 * hashed once. Its part of the mirror is a ServicesMirror: the entry sets
 * (a frontend in one scope) with their master and slot → backend id.
 */
import type { DatapathMaps } from '../../maps/datapath-maps.js';
import { AddrCache, packSlotVal, packSvcKeyColumns, packSvcVal } from '../../maps/fast-pack.js';
import { MAP_NAMES, encodeSvcKey, type SvcKey, type SvcVal } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import { randomTable } from '../../lb/selection.js';
import type { BackendTable } from '../backend-table.js';
import { entrySetId, type FrontendBase } from '../desired-frontend.js';
import { frontendKey } from '../../plan/types.js';
import { EMPTY_STATE, Fingerprint, type RecordSink, type TouchedKeys } from '../read-back/fingerprint.js';
import { svcKey, type ApplyTarget, type SvcWrites, type Writes } from '../write-batch.js';
import { phase, type ReadBackWindow, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.svc;
const KEY = MAPS.svc.key;
const KEY_SIZE = KEY.size;
const VAL_SIZE = MAPS.svc.value.size;

/** The leading bytes of a key that every record of one entry set shares (address and port): hashed once per set. */
export const SVC_HEAD = KEY.at.slot;
if (KEY.at.addr + KEY.sizes.addr > SVC_HEAD || KEY.at.port + KEY.sizes.port > SVC_HEAD || KEY.at.proto < SVC_HEAD || KEY.at.scope < SVC_HEAD) {
  throw new Error('kpr_svc_key: address and port must lead the key');
}

/** A record: key, then value. */
export const SVC_RECORD = KEY_SIZE + VAL_SIZE;
const rec = Buffer.alloc(SVC_RECORD);
const addrs = new AddrCache();

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

export function sameMaster(a: SvcVal, b: SvcVal): boolean {
  return a.count === b.count && a.frontendId === b.frontendId && a.flags === b.flags && a.backendId === b.backendId;
}

/** What the kernel's map holds, as last written or read: entrySetId(fk, scope) → entry set, and its entries counted. */
export class ServicesMirror {
  readonly sets = new Map<string, EntrySet>();
  /** Master entries. */
  masters = 0;
  /** Slot entries (the sets' slotCount summed). */
  slotEntries = 0;

  clear(): void {
    this.sets.clear();
    this.masters = 0;
    this.slotEntries = 0;
  }

  /**
   * Adds what a dump of the map holds, entry set by entry set; `slot` is
   * called with the backend id of each slot entry (its reference).
   */
  load(services: ReadonlyArray<[SvcKey, SvcVal]>, slot: (backendId: number) => void): void {
    for (const [k, v] of services) {
      const base: FrontendBase = { addr: k.addr, port: k.port, proto: k.proto };
      const fk = frontendKey(base);
      const sid = entrySetId(fk, k.scope);
      let f = this.sets.get(sid);
      if (!f) this.sets.set(sid, (f = { fk, scope: k.scope, base, master: null, slots: [], slotCount: 0 }));
      if (k.slot === 0) {
        if (!f.master) this.masters++;
        f.master = v;
      } else {
        f.slots[k.slot] = v.backendId;
        f.slotCount++;
        this.slotEntries++;
        slot(v.backendId);
      }
    }
  }
}

/** The part of the mirror this table reads, and (for the diff) the backends' references. */
interface Mirror {
  readonly entrySets: ServicesMirror;
}
interface DiffMirror extends Mirror {
  readonly backends: BackendTable;
  /** A slot stopped naming backend `id`. */
  unref(id: number): void;
}

/** Entry set `sid` (entrySetId) in the mirror, if any. */
export function entrySetOf(m: Mirror, sid: string): EntrySet | undefined {
  return m.entrySets.sets.get(sid);
}

/** Every entry set in the mirror (a live iterator: the sweep scan walks it between syncs). */
export function entrySetsOf(m: Mirror): IterableIterator<EntrySet> {
  return m.entrySets.sets.values();
}

/** Entries the mirror counts in the map (masters and slots). */
export function serviceEntriesHeld(m: Mirror): number {
  return m.entrySets.masters + m.entrySets.slotEntries;
}

/** Entries an entry set (`f`: the mirror's, if any) lacks to hold a master and slots 1..n (admission's exact count). */
export function missingServiceEntries(f: EntrySet | undefined, n: number): number {
  if (!f) return n + 1;
  let missing = f.master ? 0 : 1;
  for (let s = 1; s <= n; s++) if (f.slots[s] === undefined) missing++;
  return missing;
}

/**
 * The diff of one entry set (`have`: the mirror's, if any): makes it hold
 * backends `ids` in slots 1..n and `master` in slot 0, queueing the slots
 * (written before the master), the master, and the slots beyond the new
 * count (deleted after the master is lowered).
 */
export function diffEntrySet(
  m: DiffMirror,
  have: EntrySet | undefined,
  sid: string,
  fk: string,
  scope: number,
  base: FrontendBase,
  ids: readonly number[],
  master: SvcVal,
  w: Writes,
): void {
  const sets = m.entrySets;
  let f = have;
  // Which backend each slot names (agent/lb/): one slot per backend, in order.
  const table = randomTable(ids.length);
  const n = table.size;
  // Sized up front: an array grown slot by slot reserves 17 entries (≈ 150 bytes) at the first.
  if (!f) sets.sets.set(sid, (f = { fk, scope, base, master: null, slots: new Array<number>(n + 1), slotCount: 0 }));

  for (let slot = 1; slot <= n; slot++) {
    const id = ids[table.backendAt(slot)];
    const old = f.slots[slot];
    if (old === id) continue;
    w.slotWrites.push(f.base, scope, slot, id);
    f.slots[slot] = id;
    m.backends.addRef(id);
    if (old !== undefined) m.unref(old);
    else {
      f.slotCount++;
      sets.slotEntries++;
    }
  }

  if (!f.master || !sameMaster(f.master, master)) {
    w.masterWrites.push(f.base, scope, 0, master);
    if (!f.master) sets.masters++;
    f.master = master;
  }

  // Slots beyond the new count go after the master is lowered.
  if (f.slotCount > n) {
    for (let s = n + 1; s < f.slots.length; s++) {
      const id = f.slots[s];
      if (id === undefined) continue;
      w.slotDeletes.push(svcKey(f.base, scope, s));
      m.unref(id);
      f.slotCount--;
      sets.slotEntries--;
    }
  }
  if (f.slots.length > n + 1) f.slots.length = n + 1;
}

/** Removes one entry set from the mirror: its master queued for deletion first, then its slots. */
export function removeEntrySet(m: DiffMirror, scope: number, sid: string, w: Writes): void {
  const sets = m.entrySets;
  const f = sets.sets.get(sid);
  if (!f) return;
  if (f.master) {
    w.masterDeletes.push(svcKey(f.base, scope, 0));
    sets.masters--;
  }
  for (let s = 1; s < f.slots.length; s++) {
    const id = f.slots[s];
    if (id === undefined) continue;
    w.slotDeletes.push(svcKey(f.base, scope, s));
    m.unref(id);
  }
  sets.slotEntries -= f.slotCount;
  sets.sets.delete(sid);
}

/**
 * Each record of entry set `f` (its master, then its slots), as SVC_RECORD
 * bytes of the buffer given to `each` (reused: read it there); `first` for
 * the set's first record. Returns the number of records.
 */
export function svcRecords(f: EntrySet, each: (rec: Buffer, first: boolean) => void): number {
  const ss = f.scope * 0x10000;
  rec.fill(0);
  let n = 0;
  if (f.master) {
    packSvcKeyColumns(addrs, f.base, ss, rec, 0);
    packSvcVal(f.master, rec, KEY_SIZE);
    each(rec, n++ === 0);
    rec.fill(0, KEY_SIZE);
  }
  const slots = f.slots;
  for (let s = 1; s < slots.length; s++) {
    const id = slots[s];
    if (id === undefined) continue;
    packSvcKeyColumns(addrs, f.base, ss + s, rec, 0);
    packSlotVal(id, rec, KEY_SIZE);
    each(rec, n++ === 0);
  }
  return n;
}

function touchColumns(t: TouchedKeys, sw: SvcWrites, k: Buffer): void {
  for (let i = 0; i < sw.length; i++) {
    const ss = sw.scopeSlots[i];
    encodeSvcKey(svcKey(sw.bases[i], Math.floor(ss / 0x10000), ss % 0x10000), k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

function touchKeys(t: TouchedKeys, keys: readonly SvcKey[], k: Buffer): void {
  for (const key of keys) {
    encodeSvcKey(key, k, 0);
    t.add(k, 0, KEY_SIZE);
  }
}

/** One batch of entries (slots or masters), by column. */
function write(t: ApplyTarget, sw: SvcWrites): void {
  t.maps.updateServiceColumns(sw.bases, sw.scopeSlots, sw.vals, sw.length);
}

/** Adds one entry set's records to `out`: address and port hashed once, then per record the rest of its key and its value. */
function hashEntrySet(f: EntrySet, out: RecordSink): number {
  let state = EMPTY_STATE;
  return svcRecords(f, (rec, first) => {
    if (first) state = Fingerprint.prefix(rec, 0, SVC_HEAD);
    out.addFrom(state, rec, SVC_HEAD, KEY_SIZE - SVC_HEAD, VAL_SIZE);
  });
}

/** Hashes the mirror's entries into w.mirror, about `budget` of them (at least one entry set); whether all are. */
function hashMirror(mirror: Mirror, w: ReadBackWindow, budget: number): boolean {
  const sets = (w.iter ??= mirror.entrySets.sets.values()) as Iterator<EntrySet>;
  let work = 0;
  do {
    const next = sets.next();
    if (next.done) return true;
    work += hashEntrySet(next.value, w.mirror);
  } while (work < budget);
  return false;
}

export const servicesTable: ReconcilerTable<Mirror> = {
  map: MAP,
  capacity: 'svc',
  phases: [
    phase(3, MAP, 'write', 'servicesWritten', (w) => w.slotWrites, write, touchColumns),
    phase(5, MAP, 'write', 'servicesWritten', (w) => w.masterWrites, write, touchColumns),
    {
      step: 7,
      map: MAP,
      op: 'delete',
      counter: 'servicesDeleted',
      size: (w) => w.masterDeletes.length + w.slotDeletes.length,
      touch: (k, w, s) => (touchKeys(k, w.masterDeletes, s), touchKeys(k, w.slotDeletes, s)),
      apply: (t, w) => t.maps.deleteServices(w.masterDeletes.length ? w.masterDeletes.concat(w.slotDeletes) : w.slotDeletes),
    },
  ],
  sliced: { keySize: KEY_SIZE, valSize: VAL_SIZE, cursor: (m, b) => m.servicesRawCursor(b), hashMirror },
  matches(maps: DatapathMaps, m: Mirror): boolean {
    const svc = maps.dumpServicesRaw();
    const kernel = new Fingerprint();
    kernel.addBatch(svc.count, svc.keys, KEY_SIZE, svc.values, VAL_SIZE, svc.valueStride);
    const mirror = new Fingerprint();
    for (const f of m.entrySets.sets.values()) hashEntrySet(f, mirror);
    return kernel.equals(mirror);
  },
  compare(mirror, k, add) {
    // Masters and slots, per entry set.
    let present = 0;
    let changed = 0;
    let extra = 0;
    let mirrored = 0;
    const sets = mirror.entrySets.sets;
    for (const f of sets.values()) mirrored += (f.master ? 1 : 0) + f.slotCount;
    let lastSet: EntrySet | undefined;
    let lastKey: SvcKey | undefined;
    for (const [key, val] of k.services) {
      // A dump lists the entries of one frontend mostly together: reuse the last lookup.
      let f = lastSet;
      if (!lastKey || lastKey.addr !== key.addr || lastKey.port !== key.port || lastKey.proto !== key.proto || lastKey.scope !== key.scope) {
        f = sets.get(entrySetId(frontendKey({ addr: key.addr, port: key.port, proto: key.proto }), key.scope));
        lastSet = f;
        lastKey = key;
      }
      if (!f) extra++;
      else if (key.slot === 0) {
        if (!f.master) extra++;
        else {
          present++;
          if (!sameMaster(f.master, val)) changed++;
        }
      } else {
        const id = f.slots[key.slot];
        if (id === undefined) extra++;
        else {
          present++;
          if (id !== val.backendId) changed++;
        }
      }
    }
    add(MAP, mirrored - present, changed, extra);
  },
};
