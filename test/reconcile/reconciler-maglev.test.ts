/**
 * Reconciler: the Maglev tables of frontends whose Service selects by
 * Maglev (rule 40 of docs/semantics.md; agent/reconcile/tables/maglev.ts),
 * over MemoryDatapathMaps: the master carries the algorithm, each entry set
 * gets a reference and a table whose entries are the slots the pure module
 * picks, no-op syncs write nothing, a backend change rewrites only the
 * table, a restart adopts the tables, drift is repaired, and a full map is
 * reported, not failed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { MAP_NAMES, SCOPE, SVC_ALG, svcAlgOf } from '../../agent/maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES } from '../../agent/maps/registry.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { maglevTable } from '../../agent/lb/maglev.js';
import { fe, plans, quiet, syncChecked } from './support/reconcile-harness.js';

const BACKENDS = ['198.18.20.10:8080', '198.18.20.11:8080', '198.18.20.12:8080'];

function maglevFe(service: string, address: string, backends: string[], o: Partial<PlanFrontend> = {}): PlanFrontend {
  return { ...fe(service, address, 30080, backends, { type: 'NodePort', ...o }), lbAlgorithm: 'maglev' };
}

/** The master of the frontend at `address`:30080/TCP, scope `scope`. */
function master(maps: MemoryDatapathMaps, address: string, scope: number = SCOPE.EXTERNAL) {
  return [...maps.services.values()].find(([k]) => k.addr === address && k.port === 30080 && k.slot === 0 && k.scope === scope)?.[1];
}

/** The backend ("ip:port") each table entry names, through the frontend's slots, for the entry set of `frontendId`/`scope`. */
function tableBackends(maps: MemoryDatapathMaps, address: string, scope: number = SCOPE.EXTERNAL): string[] {
  const m = master(maps, address, scope)!;
  const ref = maps.maglevRefs.get(`${m.frontendId}/${scope}`)?.[1];
  assert.ok(ref, `a table reference for ${m.frontendId}/${scope}`);
  const out: string[] = [];
  for (let i = 0; i < ref.m; i++) {
    const chunk = maps.maglev.get(`${ref.tableId}/${Math.floor(i / MAGLEV_CHUNK_ENTRIES)}`)?.[1];
    assert.ok(chunk, `chunk ${Math.floor(i / MAGLEV_CHUNK_ENTRIES)} of table ${ref.tableId}`);
    const slot = chunk[i % MAGLEV_CHUNK_ENTRIES];
    assert.ok(slot >= 1 && slot <= m.count, `entry ${i}: slot ${slot} of ${m.count}`);
    const s = [...maps.services.values()].find(([k]) => k.addr === address && k.port === 30080 && k.scope === scope && k.slot === slot)![1];
    const b = maps.backends.get(s.backendId)!;
    out.push(`${b.addr}:${b.port}`);
  }
  return out;
}

/** What the pure module's table names, entry by entry. */
function pure(backends: string[]): string[] {
  const t = maglevTable(backends.map((b) => ({ address: b.split(':')[0], port: Number(b.split(':')[1]) })));
  return Array.from(t.entries, (i) => `${t.backends[i].address}:${t.backends[i].port}`);
}

describe('reconciler: Maglev tables', () => {
  it("a Maglev frontend: MAGLEV on its master, a table equal to the pure module's, entry by entry; random frontends get none", () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const res = syncChecked(
      maps,
      r,
      plans(maglevFe('ns/web', '198.18.1.1', BACKENDS), fe('ns/other', '198.18.1.2', 30080, BACKENDS, { type: 'NodePort' })),
      true,
    );
    assert.equal(res.ok, true);
    assert.equal(svcAlgOf(master(maps, '198.18.1.1')!.flags), SVC_ALG.MAGLEV);
    assert.equal(svcAlgOf(master(maps, '198.18.1.2')!.flags), SVC_ALG.RANDOM);
    assert.deepEqual(tableBackends(maps, '198.18.1.1'), pure(BACKENDS));
    assert.equal(maps.maglevRefs.size, 1, 'one entry set selects by Maglev');
    assert.equal(maps.maglev.size, 1, 'M=1021: one chunk');
    // The chunk is written before the reference that names it, both before the master that carries MAGLEV.
    const kinds = maps.ops.map((o) => (o.kind === 'svc-update' && o.key.slot === 0 && svcAlgOf(o.val.flags) === SVC_ALG.MAGLEV ? 'maglev-master' : o.kind));
    assert.ok(
      kinds.indexOf('maglev-update') < kinds.indexOf('maglev-ref-update') && kinds.indexOf('maglev-ref-update') < kinds.indexOf('maglev-master'),
      kinds.join(','),
    );

    const calls = maps.mutationCalls;
    const again = r.sync(plans(maglevFe('ns/web', '198.18.1.1', BACKENDS), fe('ns/other', '198.18.1.2', 30080, BACKENDS, { type: 'NodePort' })), {
      full: true,
    });
    assert.equal(again.ok, true);
    assert.equal(maps.mutationCalls, calls, 'a no-op sync writes nothing');
  });

  it('a backend leaves: the table is rewritten in place (same reference), and names only the others', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    syncChecked(maps, r, plans(maglevFe('ns/web', '198.18.1.1', BACKENDS)), true);
    const ref = [...maps.maglevRefs.values()][0][1];
    const before = tableBackends(maps, '198.18.1.1');
    const rest = [BACKENDS[0], BACKENDS[2]];
    assert.equal(syncChecked(maps, r, plans(maglevFe('ns/web', '198.18.1.1', rest)), false).ok, true);
    assert.deepEqual([...maps.maglevRefs.values()][0][1], ref);
    const after = tableBackends(maps, '198.18.1.1');
    assert.deepEqual(after, pure(rest));
    const kept = before.filter((b, i) => b !== BACKENDS[1] && after[i] !== b).length;
    assert.ok(kept <= before.length * 0.05, `${kept} entries of the remaining backends moved`);
  });

  it('eTP=Local with an INTERNAL set: each entry set its own table', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const f = maglevFe('ns/web', '198.18.1.1', [], {
      trafficPolicy: 'Local',
      backends: [{ address: '198.18.20.10', port: 8080, local: true }],
      internalBackends: BACKENDS.map((b) => ({ address: b.split(':')[0], port: 8080 })),
    });
    assert.equal(syncChecked(maps, r, plans(f), true).ok, true);
    assert.deepEqual(new Set(tableBackends(maps, '198.18.1.1', SCOPE.EXTERNAL)), new Set([BACKENDS[0]]));
    assert.deepEqual(tableBackends(maps, '198.18.1.1', SCOPE.INTERNAL), pure(BACKENDS));
    assert.equal(maps.maglevRefs.size, 2);
  });

  it('back to random, or the frontend gone: references and chunks are deleted', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    syncChecked(maps, r, plans(maglevFe('ns/web', '198.18.1.1', BACKENDS), maglevFe('ns/api', '198.18.1.3', BACKENDS)), true);
    assert.equal(maps.maglevRefs.size, 2);
    syncChecked(maps, r, plans(fe('ns/web', '198.18.1.1', 30080, BACKENDS, { type: 'NodePort' }), maglevFe('ns/api', '198.18.1.3', BACKENDS)), false);
    assert.equal(svcAlgOf(master(maps, '198.18.1.1')!.flags), SVC_ALG.RANDOM);
    assert.equal(maps.maglevRefs.size, 1);
    assert.equal(maps.maglev.size, 1);
    syncChecked(maps, r, plans(fe('ns/web', '198.18.1.1', 30080, BACKENDS, { type: 'NodePort' })), true);
    assert.deepEqual([maps.maglevRefs.size, maps.maglev.size], [0, 0]);
  });

  it('a restarted agent adopts the tables: its first sync writes nothing', () => {
    const maps = new MemoryDatapathMaps();
    const p = plans(maglevFe('ns/web', '198.18.1.1', BACKENDS));
    syncChecked(maps, new Reconciler(maps, quiet), p, true);
    const r2 = new Reconciler(maps, quiet);
    r2.adopt();
    const calls = maps.mutationCalls;
    assert.equal(r2.sync(p, { full: true }).ok, true);
    assert.equal(maps.mutationCalls, calls, JSON.stringify(maps.calls.slice(-3)));
  });

  it("drift is found by the read-back and repaired: a chunk changed and a reference deleted behind the agent's back", () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const p = plans(maglevFe('ns/web', '198.18.1.1', BACKENDS));
    syncChecked(maps, r, p, true);
    const want = tableBackends(maps, '198.18.1.1');
    const [[chunkId, [k, chunk]]] = [...maps.maglev];
    const bad = chunk.slice();
    bad.fill(1, 0, 100);
    maps.maglev.set(chunkId, [k, bad]);
    maps.maglevRefs.clear();
    const res = r.sync(p, { full: true, readBack: true });
    assert.equal(res.ok, true);
    const drifted = res.drift.filter((d) => d.map === MAP_NAMES.maglev || d.map === MAP_NAMES.maglevRef);
    assert.ok(drifted.length >= 1, JSON.stringify(res.drift));
    assert.deepEqual(tableBackends(maps, '198.18.1.1'), want);
  });

  it('kpr_maglev full: the table is not written, the Service reported and logged, the sync succeeds', () => {
    const maps = new MemoryDatapathMaps({ maxMaglev: 1 });
    const warnings: Array<[string, Record<string, unknown> | undefined]> = [];
    const r = new Reconciler(maps, { ...quiet, warn: (msg, fields) => warnings.push([msg, fields]) });
    const res = syncChecked(maps, r, plans(maglevFe('ns/web', '198.18.1.1', BACKENDS), maglevFe('ns/api', '198.18.1.3', BACKENDS.slice(0, 2))), true);
    assert.equal(res.ok, true);
    assert.equal(maps.maglev.size, 1);
    const s = res.skipped.filter((x) => /kpr_maglev is full/.test(x.reason));
    assert.equal(s.length, 1, JSON.stringify(res.skipped));
    const w = warnings.filter(([msg]) => /kpr_maglev is full/.test(msg));
    assert.equal(w.length, 1);
    assert.deepEqual([w[0][1]?.frontends, w[0][1]?.capacity], [1, 1]);
  });
});
