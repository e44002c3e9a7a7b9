/**
 * Reading and checking what the maps hold, for reconciler tests:
 * programmed() renders the maps as frontend → backends; the invariant
 * checks state what a BPF reader relies on.
 */
import { SVC_FLAG, type AffinityMatchKey, type Backend, type SvcKey, type SvcMeta, type SvcVal } from '../../../agent/maps/layout.js';
import { affKeyId, svcKeyId, type MapOp, type MemoryDatapathMaps } from '../../../agent/maps/memory-datapath-maps.js';

const PROTO_NAME: Record<number, string> = { 6: 'TCP', 17: 'UDP', 132: 'SCTP' };

export interface MapState {
  services: Map<string, [SvcKey, SvcVal]>;
  backends: Map<number, Backend>;
  vips: Map<string, number>;
  affinityMatches: Map<string, AffinityMatchKey>;
  svcMeta: Map<number, SvcMeta>;
}

export function copyState(m: MemoryDatapathMaps | MapState): MapState {
  return {
    services: new Map(m.services),
    backends: new Map(m.backends),
    vips: new Map(m.vips),
    affinityMatches: new Map(m.affinityMatches),
    svcMeta: new Map(m.svcMeta),
  };
}

/** "addr:port/PROTO" → ["ip:port", …] in slot order, as a reader would resolve them. */
export function programmed(m: MapState): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of m.services.values()) {
    if (k.slot !== 0) continue;
    const list: string[] = [];
    for (let s = 1; s <= v.count; s++) {
      const slot = m.services.get(svcKeyId({ ...k, slot: s }));
      const b = slot ? m.backends.get(slot[1].backendId) : undefined;
      list.push(b ? `${b.addr}:${b.port}` : '<missing>');
    }
    out[`${k.addr}:${k.port}/${PROTO_NAME[k.proto] ?? k.proto}`] = list;
  }
  return out;
}

/**
 * What a live reader needs: every master's slots 1..count (in either scope)
 * exist and name existing backends, and every backend a master with AFFINITY
 * names is paired with its frontendId in kpr_aff_match.
 */
export function liveViolations(m: MapState): string[] {
  const errs: string[] = [];
  for (const [k, v] of m.services.values()) {
    if (k.slot !== 0) continue;
    const name = `${k.addr}:${k.port}/${k.proto}#${k.scope}`;
    for (let s = 1; s <= v.count; s++) {
      const slot = m.services.get(svcKeyId({ ...k, slot: s }));
      if (!slot) errs.push(`${name}: slot ${s} of ${v.count} missing`);
      else if (!m.backends.has(slot[1].backendId)) errs.push(`${name}: slot ${s} names missing backend ${slot[1].backendId}`);
      else if (v.flags & SVC_FLAG.AFFINITY && !m.affinityMatches.has(affKeyId({ backendId: slot[1].backendId, frontendId: v.frontendId }))) {
        errs.push(`${name}: affinity master names backend ${slot[1].backendId} without an aff_match entry`);
      }
    }
  }
  return errs;
}

/**
 * After a successful sync, the auxiliary maps exactly: one vip per address
 * with a ClusterIP master, aff_match pairs exactly those of AFFINITY masters,
 * one meta entry per frontendId in use.
 */
export function auxViolations(m: MapState): string[] {
  const errs: string[] = [];
  const vips = new Set<string>();
  const pairs = new Set<string>();
  const frontendIds = new Set<number>();
  for (const [k, v] of m.services.values()) {
    if (k.slot !== 0) continue;
    frontendIds.add(v.frontendId);
    if (v.flags & SVC_FLAG.CLUSTER_IP) vips.add(k.addr);
    if (v.flags & SVC_FLAG.AFFINITY) {
      for (let s = 1; s <= v.count; s++)
        pairs.add(affKeyId({ backendId: m.services.get(svcKeyId({ ...k, slot: s }))![1].backendId, frontendId: v.frontendId }));
    }
  }
  const sameSet = (what: string, a: Set<unknown>, b: Set<unknown>) => {
    for (const x of a) if (!b.has(x)) errs.push(`${what}: ${String(x)} missing`);
    for (const x of b) if (!a.has(x)) errs.push(`${what}: ${String(x)} extra`);
  };
  sameSet('vip', vips, new Set(m.vips.keys()));
  sameSet('aff_match', pairs, new Set(m.affinityMatches.keys()));
  sameSet('svc_meta', frontendIds, new Set(m.svcMeta.keys()));
  return errs;
}

/** After a successful sync, also: no slot without a master or beyond count, no unreferenced backend, unique frontendIds and backend tuples. */
export function strictViolations(m: MapState): string[] {
  const errs = liveViolations(m).concat(auxViolations(m));
  const referenced = new Set<number>();
  const nameOfId = new Map<number, string>();
  for (const [k, v] of m.services.values()) {
    // Both scopes of one frontend share its frontendId.
    const name = `${k.addr}:${k.port}/${k.proto}`;
    if (k.slot === 0) {
      if (v.frontendId === 0) errs.push(`${name}: frontendId 0`);
      const other = nameOfId.get(v.frontendId);
      if (other && other !== name) errs.push(`${name}: frontendId ${v.frontendId} also used by ${other}`);
      nameOfId.set(v.frontendId, name);
      continue;
    }
    referenced.add(v.backendId);
    const master = m.services.get(svcKeyId({ ...k, slot: 0 }));
    if (!master) errs.push(`${name}: slot ${k.slot} without master`);
    else if (k.slot > master[1].count) errs.push(`${name}: slot ${k.slot} beyond count ${master[1].count}`);
  }
  const tuples = new Map<string, number>();
  for (const [id, b] of m.backends) {
    if (!referenced.has(id)) errs.push(`backend ${id} unreferenced`);
    const t = `${b.addr}:${b.port}/${b.proto}`;
    if (tuples.has(t)) errs.push(`backend ${id} duplicates ${tuples.get(t)} (${t})`);
    tuples.set(t, id);
  }
  return errs;
}

/**
 * Replays `ops` over `initial` and checks liveViolations after every single
 * op (or only after the op indexes in `checkAfter`: a reader between batch
 * calls, for syncs too large to check entry by entry). Returns the first violations found, tagged with the op index.
 * Violations already present in `initial` (an inconsistent adopted state)
 * are tolerated while they last; none may be added.
 */
export function replayViolations(initial: MapState, ops: readonly MapOp[], checkAfter?: ReadonlySet<number>): string[] {
  const s: MapState = copyState(initial);
  const baseline = new Set(liveViolations(s));
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i];
    switch (op.kind) {
      case 'svc-update':
        s.services.set(svcKeyId(op.key), [op.key, op.val]);
        break;
      case 'svc-delete':
        s.services.delete(svcKeyId(op.key));
        break;
      case 'backend-update':
        s.backends.set(op.id, op.val);
        break;
      case 'backend-delete':
        s.backends.delete(op.id);
        break;
      case 'vip-update':
        s.vips.set(op.addr, op.flags);
        break;
      case 'vip-delete':
        s.vips.delete(op.addr);
        break;
      case 'aff-update':
        s.affinityMatches.set(affKeyId(op.key), op.key);
        break;
      case 'aff-delete':
        s.affinityMatches.delete(affKeyId(op.key));
        break;
      case 'meta-update':
        s.svcMeta.set(op.id, op.meta);
        break;
      case 'meta-delete':
        s.svcMeta.delete(op.id);
        break;
    }
    if (checkAfter && !checkAfter.has(i)) continue;
    const errs = liveViolations(s).filter((e) => !baseline.has(e));
    if (errs.length) return errs.map((e) => `after op ${i} (${op.kind}): ${e}`);
  }
  return [];
}
