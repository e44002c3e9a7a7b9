/**
 * Writes the service ranges (agent/plan/service-ranges.ts) into kpr_svc_cidr,
 * the LPM trie the socket and tc programs check for unallocated service
 * addresses (bpf/include/kpr_svc_cidr.h). The map holds a handful of
 * entries, so every write reads the whole map back and makes it equal to the
 * wanted set: additions first (an address is never briefly outside a range
 * it stays in), then removals. The same comparison, run at every periodic
 * full sync, is the drift repair: an entry deleted, changed or added behind
 * the agent is put right and counted.
 */
import type { BpfMap } from '../../native/index.js';
import { MAP_NAMES, mapCodecs } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import type { DriftCount } from '../maps/drift.js';

const codecs = mapCodecs(MAPS.svcCidr);
const PRESENT = codecs.value.encode(1);

/** The map operations used (BpfMap's), so the caller may hand any pinned map over. */
export type SvcCidrMap = Pick<BpfMap, 'keys' | 'lookup' | 'update' | 'delete'>;

/** R: a service range (agent/plan/service-ranges.ts's ServiceRange); the map reads its CIDR only. */
export class ServiceRangesMap<R extends { readonly cidr: string } = { readonly cidr: string }> {
  private wanted = new Set<string>();
  private ranges: R[] = [];

  constructor(private readonly map: SvcCidrMap) {}

  /** The ranges last written (what /configz and `kpr status` show). */
  current(): readonly R[] {
    return this.ranges;
  }

  /** Makes the map hold exactly `ranges`; returns what it changed (empty when nothing). */
  set(ranges: readonly R[]): DriftCount[] {
    this.ranges = [...ranges];
    this.wanted = new Set(ranges.map((r) => r.cidr));
    return this.converge();
  }

  /** Drift repair: the map back to the ranges last set. */
  repair(): DriftCount[] {
    return this.converge();
  }

  /** The CIDRs the map holds now. */
  read(): Map<string, Buffer> {
    const have = new Map<string, Buffer>();
    for (const k of [...this.map.keys()]) have.set(codecs.key.decode(k, 0).cidr, k);
    return have;
  }

  private converge(): DriftCount[] {
    const have = this.read();
    let missing = 0;
    let changed = 0;
    let extra = 0;
    for (const cidr of this.wanted) {
      const key = have.get(cidr);
      const v = key ? this.map.lookup(key) : null;
      if (v && v.equals(PRESENT)) continue;
      this.map.update(codecs.key.encode({ cidr }), PRESENT);
      if (key) changed++;
      else missing++;
    }
    for (const [cidr, key] of have) {
      if (this.wanted.has(cidr)) continue;
      this.map.delete(key);
      extra++;
    }
    const name = MAP_NAMES.svcCidr;
    const out: DriftCount[] = [];
    if (missing) out.push({ map: name, kind: 'missing', entries: missing });
    if (changed) out.push({ map: name, kind: 'changed', entries: changed });
    if (extra) out.push({ map: name, kind: 'extra', entries: extra });
    return out;
  }
}
