/**
 * The decoded compare of the read-back: what the kernel's maps hold (a
 * dump) against the mirror, counted per map as entries missing, changed
 * and extra, each map by its table (tables/). Run when a fingerprint differed.
 */
import type { KernelContents, KernelMirror } from '../kernel-mirror.js';
import type { DriftCount } from '../sync-types.js';
import { TABLES } from '../tables/index.js';

/** What the kernel holds differently from the mirror, by map and kind (nothing listed when nothing differs). */
export function compareWithKernel(mirror: KernelMirror, k: KernelContents): DriftCount[] {
  const out: DriftCount[] = [];
  const add = (map: string, missing: number, changed: number, extra: number) => {
    if (missing > 0) out.push({ map, kind: 'missing', entries: missing });
    if (changed > 0) out.push({ map, kind: 'changed', entries: changed });
    if (extra > 0) out.push({ map, kind: 'extra', entries: extra });
  };
  for (const t of TABLES) t.compare(mirror, k, add);
  return out;
}
