/**
 * kpr_svc, the frontends' slots (a master per entry set, then slots
 * 1..count): written by column at steps 3 (slots) and 5 (masters), deleted
 * at step 7 (masters of removed sets first, then slots, in one call); read
 * back by fingerprint of the raw records, an entry set's address and port
 * hashed once.
 */
import type { DatapathMaps } from '../../maps/datapath-maps.js';
import { AddrCache, packSlotVal, packSvcKeyColumns, packSvcVal } from '../../maps/fast-pack.js';
import { MAP_NAMES, encodeSvcKey, type SvcKey } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import { entrySetId } from '../desired-frontend.js';
import { frontendKey } from '../../plan/types.js';
import { EMPTY_STATE, Fingerprint, type RecordSink, type TouchedKeys } from '../read-back/fingerprint.js';
import { sameMaster, type EntrySet, type KernelMirror } from '../kernel-mirror.js';
import { svcKey, type ApplyTarget, type SvcWrites } from '../write-batch.js';
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
function hashMirror(mirror: KernelMirror, w: ReadBackWindow, budget: number): boolean {
  const sets = (w.iter ??= mirror.entrySets.values()) as Iterator<EntrySet>;
  let work = 0;
  do {
    const next = sets.next();
    if (next.done) return true;
    work += hashEntrySet(next.value, w.mirror);
  } while (work < budget);
  return false;
}

export const servicesTable: ReconcilerTable = {
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
  matches(maps: DatapathMaps, m: KernelMirror): boolean {
    const svc = maps.dumpServicesRaw();
    const kernel = new Fingerprint();
    kernel.addBatch(svc.count, svc.keys, KEY_SIZE, svc.values, VAL_SIZE, svc.valueStride);
    const mirror = new Fingerprint();
    for (const f of m.entrySets.values()) hashEntrySet(f, mirror);
    return kernel.equals(mirror);
  },
  compare(mirror, k, add) {
    // Masters and slots, per entry set.
    let present = 0;
    let changed = 0;
    let extra = 0;
    let mirrored = 0;
    for (const f of mirror.entrySets.values()) mirrored += (f.master ? 1 : 0) + f.slotCount;
    let lastSet: EntrySet | undefined;
    let lastKey: SvcKey | undefined;
    for (const [key, val] of k.services) {
      // A dump lists the entries of one frontend mostly together: reuse the last lookup.
      let f = lastSet;
      if (!lastKey || lastKey.addr !== key.addr || lastKey.port !== key.port || lastKey.proto !== key.proto || lastKey.scope !== key.scope) {
        f = mirror.entrySets.get(entrySetId(frontendKey({ addr: key.addr, port: key.port, proto: key.proto }), key.scope));
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
