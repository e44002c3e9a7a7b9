/** What every reconciler test needs: a quiet logger, plans by Service, and a sync that checks the live-reader invariants. */
import assert from 'node:assert/strict';
import type { PlanFrontend, Protocol } from '../../../agent/plan/types.js';
import { MemoryDatapathMaps } from '../../../agent/maps/memory-datapath-maps.js';
import { Reconciler, type ReconcileLogger, type SyncResult } from '../../../agent/reconcile/reconciler.js';
import { copyState, replayViolations, strictViolations } from './datapath-state.js';

export const quiet: ReconcileLogger = { info() {}, warn() {}, error() {} };

/** A ClusterIP frontend of `backends` ("address:port"); `o`: its protocol, or any fields to override. */
export function fe(service: string, address: string, port: number, backends: string[], o: Protocol | Partial<PlanFrontend> = {}): PlanFrontend {
  return {
    service,
    portName: '',
    type: 'ClusterIP',
    address,
    port,
    protocol: 'TCP',
    backends: backends.map((b) => ({ address: b.split(':')[0], port: Number(b.split(':')[1]) })),
    trafficPolicy: 'Cluster',
    affinityTimeoutSeconds: 0,
    sourceRanges: [],
    ...(typeof o === 'string' ? { protocol: o } : o),
  };
}

/** Frontends grouped by their Service, as the sync loop hands them over. */
export function plans(...fs: PlanFrontend[]): Map<string, PlanFrontend[]> {
  const m = new Map<string, PlanFrontend[]>();
  for (const f of fs) m.set(f.service, [...(m.get(f.service) ?? []), f]);
  return m;
}

export function setup() {
  const maps = new MemoryDatapathMaps();
  return { maps, r: new Reconciler(maps, quiet) };
}

/** Runs a sync and checks the live invariant after every op it applied and the strict one at the end. */
export function syncChecked(maps: MemoryDatapathMaps, r: Reconciler, p: Map<string, PlanFrontend[]>, full: boolean, readBack = false): SyncResult {
  const before = copyState(maps);
  const from = maps.ops.length;
  const res = r.sync(p, { full, readBack });
  assert.deepEqual(replayViolations(before, maps.ops.slice(from)), [], 'live invariant during the sync');
  if (res.ok) assert.deepEqual(strictViolations(copyState(maps)), [], 'strict invariant after the sync');
  return res;
}

/**
 * syncChecked for syncs of tens of thousands of entries: the live invariant is
 * checked after every batch call (what a reader between two calls sees), not
 * after every entry.
 */
export function syncCheckedPerCall(maps: MemoryDatapathMaps, r: Reconciler, p: Map<string, PlanFrontend[]>, full: boolean): SyncResult {
  const before = copyState(maps);
  const fromOp = maps.ops.length;
  const fromCall = maps.calls.length;
  const res = r.sync(p, { full });
  const ops = maps.ops.slice(fromOp);
  const ends = new Set<number>();
  let n = 0;
  for (const c of maps.calls.slice(fromCall)) ends.add((n += c.entries) - 1);
  assert.equal(n, ops.length, 'one op per entry of each call');
  assert.deepEqual(replayViolations(before, ops, ends), [], 'live invariant between the batch calls of the sync');
  if (res.ok) assert.deepEqual(strictViolations(copyState(maps)), [], 'strict invariant after the sync');
  return res;
}
