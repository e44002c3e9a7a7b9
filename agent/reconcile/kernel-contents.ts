/**
 * What a batch dump of the maps the reconciler owns holds (KernelMirror.read):
 * what the mirror is rebuilt from (each table module loads its part) and
 * what the decoded compare holds it against. A leaf: the table modules
 * (tables/) and kernel-mirror.ts both import it.
 */
import type { AffinityMatchKey, Backend, MaglevChunk, MaglevKey, MaglevRef, MaglevRefKey, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from '../maps/layout.js';

/** Every map the reconciler owns, as read from the kernel. */
export interface KernelContents {
  services: Array<[SvcKey, SvcVal]>;
  backends: Array<[number, Backend]>;
  vips: Array<[string, number]>;
  affs: AffinityMatchKey[];
  metas: Array<[number, SvcMeta]>;
  ranges: SrcRangeKey[];
  maglev: Array<[MaglevKey, MaglevChunk]>;
  maglevRefs: Array<[MaglevRefKey, MaglevRef]>;
}
