/**
 * Reconciler: the Maglev tables of frontends whose Service selects by
 * Maglev (rule 40 of docs/semantics.md; agent/reconcile/tables/maglev.ts),
 * over MemoryDatapathMaps: the master carries the algorithm, each entry set
 * gets a reference and a table whose entries are the slots the pure module
 * picks, no-op syncs write nothing, a backend change rewrites only the
 * table, a restart adopts the tables, drift is repaired, and a full map is
 * reported, not failed. Entry sets with the same backends in the same slot
 * order share one table: written once, never rewritten while another entry
 * set still holds it, deleted with its last holder, adopted as it is.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { MAP_NAMES, SCOPE, SVC_ALG, svcAlgOf } from '../../agent/maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES } from '../../agent/maps/registry.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { maglevTable } from '../../agent/lb/maglev.js';
import type { MaglevRef } from '../../agent/maps/layout.js';
import { fe, plans, quiet, syncChecked } from './support/reconcile-harness.js';
import { rng } from '../support/rng.js';

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

  it('eTP=Local with an INTERNAL set: each entry set its table (other backends: another table)', () => {
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
    assert.notEqual(refOf(maps, '198.18.1.1', SCOPE.EXTERNAL).tableId, refOf(maps, '198.18.1.1', SCOPE.INTERNAL).tableId);
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

/** The table reference of the entry set at `address`:30080/TCP, scope `scope`. */
function refOf(maps: MemoryDatapathMaps, address: string, scope: number = SCOPE.EXTERNAL): MaglevRef {
  const m = master(maps, address, scope)!;
  const ref = maps.maglevRefs.get(`${m.frontendId}/${scope}`)?.[1];
  assert.ok(ref, `a table reference for ${address}/${scope}`);
  return ref;
}

/** The table ids of the kpr_maglev chunks present. */
const tableIds = (maps: MemoryDatapathMaps) => new Set([...maps.maglev.values()].map(([k]) => k.tableId));

/** The Maglev ops (chunk and reference writes and deletes) of the ops from `from` on, as "kind tableId" / "kind frontendId/scope". */
function maglevOps(maps: MemoryDatapathMaps, from: number): string[] {
  const out: string[] = [];
  for (const o of maps.ops.slice(from)) {
    if (o.kind === 'maglev-update' || o.kind === 'maglev-delete') out.push(`${o.kind} ${o.key.tableId}`);
    else if (o.kind === 'maglev-ref-update') out.push(`${o.kind} ${o.key.frontendId}/${o.key.scope} -> ${o.ref.tableId}`);
    else if (o.kind === 'maglev-ref-delete') out.push(`${o.kind} ${o.key.frontendId}/${o.key.scope}`);
  }
  return out;
}

/** Three other backends (M = 1021: tables of one chunk, so each write below is one table). */
const OTHERS = ['198.18.20.20:8080', '198.18.20.21:8080', '198.18.20.22:8080'];

describe('reconciler: Maglev tables shared between entry sets with the same backends', () => {
  it('two frontends with the same backends: one table written once, both references name it', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const from = maps.ops.length;
    syncChecked(
      maps,
      r,
      plans(maglevFe('ns/web', '198.18.1.1', BACKENDS), maglevFe('ns/web', '198.18.1.2', BACKENDS), maglevFe('ns/api', '198.18.1.3', OTHERS)),
      true,
    );
    const web = refOf(maps, '198.18.1.1');
    assert.deepEqual(refOf(maps, '198.18.1.2'), web, 'both frontends of ns/web name one table');
    assert.notEqual(refOf(maps, '198.18.1.3').tableId, web.tableId, 'other backends, another table');
    const writes = maglevOps(maps, from).filter((o) => o.startsWith('maglev-update'));
    assert.deepEqual(
      writes.sort(),
      [`maglev-update ${web.tableId}`, `maglev-update ${refOf(maps, '198.18.1.3').tableId}`].sort(),
      'each distinct table written once',
    );
    assert.equal(maps.maglev.size, 2);
    assert.deepEqual(tableBackends(maps, '198.18.1.2'), pure(BACKENDS));
  });

  it('one frontend changes: a new table is written before its reference switches, the shared one is untouched; deleted once unused', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    syncChecked(maps, r, plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', BACKENDS)), true);
    const shared = refOf(maps, '198.18.1.1').tableId;
    const sharedChunks = [...maps.maglev.values()].filter(([k]) => k.tableId === shared).map(([, c]) => c.slice());
    const fidB = master(maps, '198.18.1.2')!.frontendId;

    let from = maps.ops.length;
    const rest = BACKENDS.slice(1);
    syncChecked(maps, r, plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', rest)), false);
    const moved = refOf(maps, '198.18.1.2').tableId;
    assert.notEqual(moved, shared);
    assert.equal(refOf(maps, '198.18.1.1').tableId, shared, 'the other frontend keeps the shared table');
    assert.deepEqual(
      maglevOps(maps, from),
      [`maglev-update ${moved}`, `maglev-ref-update ${fidB}/0 -> ${moved}`],
      'new chunks, then the reference; nothing of the shared table',
    );
    assert.deepEqual(
      [...maps.maglev.values()].filter(([k]) => k.tableId === shared).map(([, c]) => c),
      sharedChunks,
    );
    assert.deepEqual(tableBackends(maps, '198.18.1.1'), pure(BACKENDS));
    assert.deepEqual(tableBackends(maps, '198.18.1.2'), pure(rest));

    // The last holder of the first table moves to the second: the first table's chunks go, after the reference switched.
    from = maps.ops.length;
    const fidA = master(maps, '198.18.1.1')!.frontendId;
    syncChecked(maps, r, plans(maglevFe('ns/a', '198.18.1.1', rest), maglevFe('ns/b', '198.18.1.2', rest)), false);
    assert.equal(refOf(maps, '198.18.1.1').tableId, moved, 'joins the table of its new backends: nothing computed or written');
    assert.deepEqual(maglevOps(maps, from), [`maglev-ref-update ${fidA}/0 -> ${moved}`, `maglev-delete ${shared}`]);
    assert.deepEqual(tableIds(maps), new Set([moved]));

    // Its id is free once that sync is applied: the next new table takes it.
    syncChecked(maps, r, plans(maglevFe('ns/a', '198.18.1.1', rest), maglevFe('ns/b', '198.18.1.2', rest), maglevFe('ns/c', '198.18.1.3', OTHERS)), false);
    assert.equal(refOf(maps, '198.18.1.3').tableId, shared);

    // Frontends gone: the table goes with its last reference.
    syncChecked(maps, r, plans(maglevFe('ns/b', '198.18.1.2', rest), maglevFe('ns/c', '198.18.1.3', OTHERS)), true);
    assert.deepEqual(tableIds(maps), new Set([moved, shared]));
    syncChecked(maps, r, plans(maglevFe('ns/c', '198.18.1.3', OTHERS)), true);
    assert.deepEqual([tableIds(maps), maps.maglevRefs.size], [new Set([shared]), 1]);
  });

  it('a ClusterIP and the INTERNAL set of an eTP=Local NodePort with the same backends share a table', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const np = maglevFe('ns/web', '198.18.1.1', [], {
      trafficPolicy: 'Local',
      backends: [{ address: '198.18.20.10', port: 8080, local: true }],
      internalBackends: BACKENDS.map((b) => ({ address: b.split(':')[0], port: 8080 })),
    });
    syncChecked(maps, r, plans(np, maglevFe('ns/web', '198.18.1.2', BACKENDS)), true);
    assert.equal(refOf(maps, '198.18.1.1', SCOPE.INTERNAL).tableId, refOf(maps, '198.18.1.2').tableId);
    assert.notEqual(refOf(maps, '198.18.1.1', SCOPE.EXTERNAL).tableId, refOf(maps, '198.18.1.2').tableId);
    assert.equal(tableIds(maps).size, 2);
  });

  it('a restarted agent adopts shared tables as they are: its first sync writes nothing, a later change still moves only its own frontend', () => {
    const maps = new MemoryDatapathMaps();
    const p = plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', BACKENDS), maglevFe('ns/c', '198.18.1.3', BACKENDS));
    syncChecked(maps, new Reconciler(maps, quiet), p, true);
    const shared = refOf(maps, '198.18.1.1').tableId;
    const r2 = new Reconciler(maps, quiet);
    assert.equal(r2.adopt().inconsistencies, 0);
    const calls = maps.mutationCalls;
    assert.equal(syncChecked(maps, r2, p, true).ok, true);
    assert.equal(maps.mutationCalls, calls, JSON.stringify(maps.calls.slice(-3)));
    assert.equal(syncChecked(maps, r2, p, true, true).drift.length, 0, 'the read-back finds what the adopted mirror holds');

    const from = maps.ops.length;
    syncChecked(
      maps,
      r2,
      plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', BACKENDS), maglevFe('ns/c', '198.18.1.3', OTHERS)),
      false,
    );
    const moved = refOf(maps, '198.18.1.3').tableId;
    assert.notEqual(moved, shared, 'a table two other frontends hold is not rewritten');
    assert.deepEqual(maglevOps(maps, from), [`maglev-update ${moved}`, `maglev-ref-update ${master(maps, '198.18.1.3')!.frontendId}/0 -> ${moved}`]);
    assert.deepEqual([refOf(maps, '198.18.1.1').tableId, refOf(maps, '198.18.1.2').tableId], [shared, shared]);
  });

  it("an agent restarted over one table per entry set (a previous run's layout) merges identical tables: references switch, duplicates deleted, no chunk written", () => {
    const maps = new MemoryDatapathMaps();
    const p = plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', BACKENDS));
    syncChecked(maps, new Reconciler(maps, quiet), p, true);
    // What the previous layout left: ns/b's entry set with a table of its own, id frontendId·2 + scope, the same entries.
    const fidB = master(maps, '198.18.1.2')!.frontendId;
    const own = fidB * 2;
    const ref = refOf(maps, '198.18.1.2');
    for (const [k, c] of [...maps.maglev.values()].filter(([k]) => k.tableId === ref.tableId))
      maps.updateMaglev([[{ tableId: own, chunk: k.chunk }, c.slice()]]);
    maps.updateMaglevRefs([
      [
        { frontendId: fidB, scope: 0 },
        { tableId: own, m: ref.m },
      ],
    ]);
    assert.equal(tableIds(maps).size, 2);

    const r2 = new Reconciler(maps, quiet);
    r2.adopt();
    const from = maps.ops.length;
    assert.equal(syncChecked(maps, r2, p, true).ok, true);
    const kept = refOf(maps, '198.18.1.1').tableId;
    assert.equal(refOf(maps, '198.18.1.2').tableId, kept);
    assert.deepEqual(tableIds(maps), new Set([kept]));
    assert.equal(
      maglevOps(maps, from).filter((o) => o.startsWith('maglev-update')).length,
      0,
      `adopted tables are not rewritten: ${maglevOps(maps, from).join(', ')}`,
    );
  });

  it('a restarted agent deletes the chunks of a table no reference names', () => {
    const maps = new MemoryDatapathMaps();
    const p = plans(maglevFe('ns/a', '198.18.1.1', BACKENDS));
    syncChecked(maps, new Reconciler(maps, quiet), p, true);
    const [[, [k, c]]] = [...maps.maglev];
    maps.updateMaglev([[{ tableId: k.tableId + 100, chunk: 0 }, c.slice()]]);
    const r2 = new Reconciler(maps, quiet);
    assert.equal(r2.adopt().details.orphanAuxEntries, 1);
    const from = maps.ops.length;
    syncChecked(maps, r2, p, false);
    assert.deepEqual(maglevOps(maps, from), [`maglev-delete ${k.tableId + 100}`]);
  });

  it('drift in a shared table: both entry sets move to a rewritten table, the drifted one is deleted', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const p = plans(maglevFe('ns/a', '198.18.1.1', BACKENDS), maglevFe('ns/b', '198.18.1.2', BACKENDS));
    syncChecked(maps, r, p, true);
    const want = tableBackends(maps, '198.18.1.1');
    const [[chunkId, [k, chunk]]] = [...maps.maglev];
    const bad = chunk.slice();
    bad.fill(1, 0, 100);
    maps.maglev.set(chunkId, [k, bad]);
    const res = r.sync(p, { full: true, readBack: true });
    assert.equal(res.ok, true);
    assert.ok(
      res.drift.some((d) => d.map === MAP_NAMES.maglev),
      JSON.stringify(res.drift),
    );
    assert.equal(refOf(maps, '198.18.1.1').tableId, refOf(maps, '198.18.1.2').tableId);
    assert.deepEqual([tableBackends(maps, '198.18.1.1'), tableBackends(maps, '198.18.1.2')], [want, want]);
    assert.equal(tableIds(maps).size, 1);
    assert.equal(syncChecked(maps, r, p, true, true).drift.length, 0);
  });

  it('a realistic mix (each Service port: a ClusterIP, a NodePort on two node addresses, some a load-balancer IP): one table per Service port', () => {
    // 40 Service ports, 1–30 backends each (M = 1021 up to 3 backends, larger M above: agent/lb/prime.ts).
    const fs: PlanFrontend[] = [];
    let ports = 0;
    for (let s = 0; s < 40; s++) {
      const n = 1 + ((s * 7) % 30);
      const be = Array.from({ length: n }, (_, i) => `198.18.${30 + s}.${1 + i}:8080`);
      const service = `ns/svc-${s}`;
      const addrs = [`198.18.2.${s + 1}`, '198.18.0.1', '198.18.0.2', ...(s % 3 === 0 ? [`198.18.3.${s + 1}`] : [])];
      for (const a of addrs) fs.push({ ...maglevFe(service, a, be), port: 30080 + s });
      ports++;
    }
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const from = maps.ops.length;
    syncChecked(maps, r, plans(...fs), true);
    const written = maglevOps(maps, from).filter((o) => o.startsWith('maglev-update')).length;
    const refs = [...maps.maglevRefs.values()].map(([, v]) => v);
    const unshared = refs.reduce((a, v) => a + Math.ceil(v.m / MAGLEV_CHUNK_ENTRIES), 0);
    assert.equal(refs.length, fs.length);
    assert.equal(tableIds(maps).size, ports, 'one table per Service port');
    assert.equal(written, maps.maglev.size, 'each chunk written once');
    assert.ok(written * 3 <= unshared, `${written} chunks written, ${unshared} with one table per entry set`);
    process.stdout.write(
      `# ${fs.length} Maglev entry sets of ${ports} Service ports: ${written} kpr_maglev chunks written (one table per entry set: ${unshared})\n`,
    );
  });

  it("random changes over many syncs: every table is its frontends' table, one per distinct table, written before it is named and deleted after it is not; restarts write nothing", () => {
    const SETS = [BACKENDS, BACKENDS.slice(1), OTHERS, [...OTHERS, ...BACKENDS], OTHERS.slice(0, 1)];
    const r0 = rng(34);
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(r0() * xs.length)];
    const maps = new MemoryDatapathMaps();
    let r = new Reconciler(maps, quiet);
    // Frontend i: absent, random, or Maglev over one of SETS.
    const state: Array<{ kind: 'none' | 'random' | 'maglev'; set: number }> = Array.from({ length: 10 }, () => ({ kind: 'none', set: 0 }));
    for (let round = 0; round < 40; round++) {
      for (let k = 0; k < 3; k++)
        state[Math.floor(r0() * state.length)] = { kind: pick(['none', 'random', 'maglev', 'maglev'] as const), set: Math.floor(r0() * SETS.length) };
      const fs: PlanFrontend[] = [];
      state.forEach((f, i) => {
        const address = `198.18.4.${i + 1}`;
        if (f.kind === 'maglev') fs.push(maglevFe(`ns/s${i % 4}`, address, SETS[f.set]));
        else if (f.kind === 'random') fs.push(fe(`ns/s${i % 4}`, address, 30080, SETS[f.set], { type: 'NodePort' }));
      });
      // The refs and chunks before the sync, then replayed op by op: a reference names only a table whose chunks are all there; a chunk is deleted only once no reference names its table.
      const chunks = new Set([...maps.maglev.values()].map(([k]) => `${k.tableId}/${k.chunk}`));
      const refs = new Map([...maps.maglevRefs.values()].map(([k, v]) => [`${k.frontendId}/${k.scope}`, v]));
      const from = maps.ops.length;
      assert.equal(syncChecked(maps, r, plans(...fs), true).ok, true);
      for (const o of maps.ops.slice(from)) {
        if (o.kind === 'maglev-update') chunks.add(`${o.key.tableId}/${o.key.chunk}`);
        else if (o.kind === 'maglev-ref-update') {
          for (let c = 0; c < Math.ceil(o.ref.m / MAGLEV_CHUNK_ENTRIES); c++)
            assert.ok(chunks.has(`${o.ref.tableId}/${c}`), `round ${round}: a reference to table ${o.ref.tableId} before its chunk ${c}`);
          refs.set(`${o.key.frontendId}/${o.key.scope}`, o.ref);
        } else if (o.kind === 'maglev-ref-delete') refs.delete(`${o.key.frontendId}/${o.key.scope}`);
        else if (o.kind === 'maglev-delete') {
          assert.ok(![...refs.values()].some((v) => v.tableId === o.key.tableId), `round ${round}: a chunk of table ${o.key.tableId} deleted while named`);
          chunks.delete(`${o.key.tableId}/${o.key.chunk}`);
        }
      }
      const maglev = state.map((f, i) => ({ ...f, i })).filter((f) => f.kind === 'maglev');
      for (const f of maglev) assert.deepEqual(tableBackends(maps, `198.18.4.${f.i + 1}`), pure(SETS[f.set]), `round ${round}, frontend ${f.i}`);
      const named = new Set([...maps.maglevRefs.values()].map(([, v]) => v.tableId));
      assert.deepEqual(tableIds(maps), named, `round ${round}: chunks of tables no reference names`);
      assert.equal(named.size, new Set(maglev.map((f) => f.set)).size, `round ${round}: one table per distinct backend set`);
      if (round % 8 === 7) {
        r = new Reconciler(maps, quiet);
        r.adopt();
        const calls = maps.mutationCalls;
        assert.equal(r.sync(plans(...fs), { full: true }).ok, true);
        assert.equal(maps.mutationCalls, calls, `round ${round}: a restart's first sync writes nothing`);
      }
    }
  });
});
