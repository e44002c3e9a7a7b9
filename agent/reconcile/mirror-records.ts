/**
 * The mirror's entries as the kernel's records: the bytes a write of them
 * puts in the map, from the same fast packers BpfDatapathMaps writes with
 * (maps/fast-pack.ts, at the registry's offsets; test/reconcile/mirror-records.test.ts
 * checks them against the registry codecs). The read-back hashes these and
 * compares them with the kernel's raw batches (fingerprint.ts).
 */
import { AddrCache, packBackendRow, packId, packSlotVal, packSvcKeyColumns, packSvcVal } from '../maps/fast-pack.js';
import { encodeAffinityMatchKey, encodeSrcRangeKey, encodeSvcMeta, encodeVipKey, encodeVipVal, type SvcMeta } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import type { BackendTable } from './backend-table.js';
import type { EntrySet } from './kernel-mirror.js';

const SVC_KEY = MAPS.svc.key;
const SVC_VAL = MAPS.svc.value;

/**
 * The leading bytes of a kpr_svc key that every record of one entry set
 * shares (address and port): hashed once per set.
 */
export const SVC_HEAD = SVC_KEY.at.slot;
if (SVC_KEY.at.addr + SVC_KEY.sizes.addr > SVC_HEAD || SVC_KEY.at.port + SVC_KEY.sizes.port > SVC_HEAD || SVC_KEY.at.proto < SVC_HEAD || SVC_KEY.at.scope < SVC_HEAD) {
  throw new Error('kpr_svc_key: address and port must lead the key');
}

/** A kpr_svc record: key, then value. */
export const SVC_RECORD = SVC_KEY.size + SVC_VAL.size;
/** A kpr_backend record: the u32 id, then the value. */
export const BACKEND_RECORD = MAPS.backend.key.size + MAPS.backend.value.size;
/** The largest record of kpr_vip, kpr_svc_meta, kpr_aff_match and kpr_src_range. */
const AUX_RECORD = Math.max(
  MAPS.vip.key.size + MAPS.vip.value.size,
  MAPS.svcMeta.key.size + MAPS.svcMeta.value.size,
  MAPS.affinityMatch.key.size + MAPS.affinityMatch.value.size,
  MAPS.srcRange.key.size + MAPS.srcRange.value.size,
);

export class MirrorRecords {
  private readonly svc = Buffer.alloc(SVC_RECORD);
  private readonly backend = Buffer.alloc(BACKEND_RECORD);
  private readonly aux = Buffer.alloc(AUX_RECORD);
  private readonly addrs = new AddrCache();

  /**
   * Each kpr_svc record of entry set `f` (its master, then its slots), as
   * SVC_RECORD bytes of the buffer given to `each` (reused: read it there);
   * `first` for the set's first record. Returns the number of records.
   */
  svcSet(f: EntrySet, each: (rec: Buffer, first: boolean) => void): number {
    const rec = this.svc;
    const ss = f.scope * 0x10000;
    rec.fill(0);
    let n = 0;
    if (f.master) {
      packSvcKeyColumns(this.addrs, f.base, ss, rec, 0);
      packSvcVal(f.master, rec, SVC_KEY.size);
      each(rec, n++ === 0);
      rec.fill(0, SVC_KEY.size);
    }
    const slots = f.slots;
    for (let s = 1; s < slots.length; s++) {
      const id = slots[s];
      if (id === undefined) continue;
      packSvcKeyColumns(this.addrs, f.base, ss + s, rec, 0);
      packSlotVal(id, rec, SVC_KEY.size);
      each(rec, n++ === 0);
    }
    return n;
  }

  /** Backend `id`'s kpr_backend record (BACKEND_RECORD bytes of a reused buffer). */
  backendRow(rows: BackendTable, id: number): Buffer {
    const rec = this.backend;
    packId(id, rec, 0);
    packBackendRow(rows, id, rec, MAPS.backend.key.size);
    return rec;
  }

  /** A kpr_vip record (address → flags), in a reused buffer. */
  vip(addr: string, flags: number): Buffer {
    const rec = this.aux;
    encodeVipKey(addr, rec, 0);
    encodeVipVal(flags >>> 0, rec, MAPS.vip.key.size);
    return rec;
  }

  /** A kpr_aff_match record (the pair of a frontend's revNatId and a backend id; the value 1, as the writer puts it), in a reused buffer. */
  affinityMatch(revNatId: number, backendId: number): Buffer {
    const rec = this.aux;
    encodeAffinityMatchKey({ revNatId, backendId }, rec, 0);
    rec[MAPS.affinityMatch.key.size] = 1;
    return rec;
  }

  /** A kpr_src_range record (a frontend's revNatId and an allowed CIDR; the value 1, as the writer puts it), in a reused buffer. */
  srcRange(revNatId: number, cidr: string): Buffer {
    const rec = this.aux;
    encodeSrcRangeKey({ revNatId, cidr }, rec, 0);
    rec[MAPS.srcRange.key.size] = 1;
    return rec;
  }

  /** A kpr_svc_meta record (revNatId → names), in a reused buffer. */
  svcMeta(revNatId: number, meta: SvcMeta): Buffer {
    const rec = this.aux;
    packId(revNatId, rec, 0);
    encodeSvcMeta(meta, rec, MAPS.svcMeta.key.size);
    return rec;
  }
}
