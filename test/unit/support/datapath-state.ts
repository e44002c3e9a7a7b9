/**
 * Reading and checking what the maps hold, for reconciler tests:
 * programmed() renders the maps as frontend → backends; the invariant
 * checks state what a BPF reader relies on.
 */
import type { Backend, SvcKey, SvcVal } from '../../../agent/maps/layout.js';
import { svcKeyId, type MapOp, type MemoryDatapathMaps } from '../../../agent/reconcile/memory-datapath-maps.js';

const PROTO_NAME: Record<number, string> = { 6: 'TCP', 17: 'UDP', 132: 'SCTP' };

export interface MapState {
  services: Map<string, [SvcKey, SvcVal]>;
  backends: Map<number, Backend>;
}

export function copyState(m: MemoryDatapathMaps): MapState {
  return { services: new Map(m.services), backends: new Map(m.backends) };
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

/** What a live reader needs: every master's slots 1..count exist and name existing backends. */
export function liveViolations(m: MapState): string[] {
  const errs: string[] = [];
  for (const [k, v] of m.services.values()) {
    if (k.slot !== 0) continue;
    for (let s = 1; s <= v.count; s++) {
      const slot = m.services.get(svcKeyId({ ...k, slot: s }));
      if (!slot) errs.push(`${k.addr}:${k.port}/${k.proto}: slot ${s} of ${v.count} missing`);
      else if (!m.backends.has(slot[1].backendId)) errs.push(`${k.addr}:${k.port}/${k.proto}: slot ${s} names missing backend ${slot[1].backendId}`);
    }
  }
  return errs;
}

/** After a successful sync, also: no slot without a master or beyond count, no unreferenced backend, unique revNatIds and backend tuples. */
export function strictViolations(m: MapState): string[] {
  const errs = liveViolations(m);
  const referenced = new Set<number>();
  const revNat = new Map<number, string>();
  for (const [k, v] of m.services.values()) {
    const name = `${k.addr}:${k.port}/${k.proto}`;
    if (k.slot === 0) {
      if (v.revNatId === 0) errs.push(`${name}: revNatId 0`);
      const other = revNat.get(v.revNatId);
      if (other) errs.push(`${name}: revNatId ${v.revNatId} also used by ${other}`);
      revNat.set(v.revNatId, name);
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
 * op. Returns the first violations found, tagged with the op index.
 * Violations already present in `initial` (an inconsistent adopted state)
 * are tolerated while they last; none may be added.
 */
export function replayViolations(initial: MapState, ops: readonly MapOp[]): string[] {
  const s: MapState = { services: new Map(initial.services), backends: new Map(initial.backends) };
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
    }
    const errs = liveViolations(s).filter((e) => !baseline.has(e));
    if (errs.length) return errs.map((e) => `after op ${i} (${op.kind}): ${e}`);
  }
  return [];
}
