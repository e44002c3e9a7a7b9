/**
 * The decoded compare of the read-back: what the kernel's maps hold (a
 * dump) against the mirror, counted per map as entries missing, changed
 * and extra. Run when a fingerprint differed, or on maps that cannot dump raw.
 */
import { MAP_NAMES, type SvcKey } from '../maps/layout.js';
import { entrySetId, frontendId } from './desired-frontend.js';
import { sameMaster, sameMeta, type EntrySet, type KernelContents, type KernelMirror } from './kernel-mirror.js';
import type { DriftCount } from './sync-types.js';

/** What the kernel holds differently from the mirror, by map and kind (nothing listed when nothing differs); `large` false skips kpr_svc and kpr_backend, `only` compares that map alone. */
export function compareWithKernel(mirror: KernelMirror, k: KernelContents, large = true, only?: string): DriftCount[] {
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
    for (const f of mirror.kSets.values()) mirrored += (f.master ? 1 : 0) + f.slotCount;
    let lastSet: EntrySet | undefined;
    let lastKey: SvcKey | undefined;
    for (const [key, val] of k.services) {
      // A dump lists the entries of one frontend mostly together: reuse the last lookup.
      let f = lastSet;
      if (!lastKey || lastKey.addr !== key.addr || lastKey.port !== key.port || lastKey.proto !== key.proto || lastKey.scope !== key.scope) {
        f = mirror.kSets.get(entrySetId(frontendId({ addr: key.addr, port: key.port, proto: key.proto }), key.scope));
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
    const rows = mirror.kBackends;
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
      const have = mirror.kVips.get(addr);
      if (have === undefined) extra++;
      else (present++, have === flags || changed++);
    }
    add(MAP_NAMES.vip, mirror.kVips.size - present, changed, extra);
  }
  if (has(MAP_NAMES.svcMeta)) {
    present = changed = extra = 0;
    for (const [rn, meta] of k.metas) {
      const have = mirror.kMeta.get(rn);
      if (have === undefined) extra++;
      else (present++, sameMeta(have, meta) || changed++);
    }
    add(MAP_NAMES.svcMeta, mirror.kMeta.size - present, changed, extra);
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
  if (has(MAP_NAMES.affinityMatch)) keySets(MAP_NAMES.affinityMatch, mirror.kAff, k.affs.map((a): [number, number] => [a.revNatId, a.backendId]));
  if (has(MAP_NAMES.srcRange)) keySets(MAP_NAMES.srcRange, mirror.kRanges, k.ranges.map((r): [number, string] => [r.revNatId, r.cidr]));
  return out;
}
