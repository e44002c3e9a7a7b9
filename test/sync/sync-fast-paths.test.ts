/**
 * The full-sync fast paths against their plain counterparts: TupleIndex
 * behaves like a Map, IdAllocator's bitmap like a Set (ids near and past its
 * dense limit included), BpfDatapathMaps' column writes produce the bytes of
 * updateServices/updateBackends, and the single-slice endpoint merge equals
 * the keyed merge.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BpfMap } from '../../native/index.js';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import {
  SVC_META,
  VIP_KEY,
  encodeBackend,
  encodeSvcMeta,
  encodeVipKey,
  type Backend,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from '../../agent/maps/layout.js';
import { TupleIndex } from '../../agent/reconcile/tuple-index.js';
import { backendValueKey } from '../../agent/reconcile/desired-frontend.js';
import { parseIP } from '../../agent/net/ip.js';
import { IdAllocator } from '../../agent/reconcile/id-allocator.js';
import { BackendTable } from '../../agent/reconcile/backend-table.js';
import { endpointsByServicePort } from '../../agent/plan/endpoint-slices.js';
import { backendTable } from '../maps/support/backend-rows.js';

function rng(seed: number) {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}

describe('TupleIndex', () => {
  it('matches a Map under random add/get/delete/clear (numbers and strings)', () => {
    const r = rng(7);
    const t = new TupleIndex();
    const m = new Map<number | string, number>();
    const key = (): number | string => {
      const x = r();
      if (x < 0.1) return `fd00::${Math.floor(r() * 50)}:80/6`;
      if (x < 0.12) return -Math.floor(r() * 10); // not a tuple: fallback map
      return ((3323101184 + Math.floor(r() * 3000)) * 65536 + 8080 + Math.floor(r() * 3)) * 2 + Math.floor(r() * 2);
    };
    for (let i = 0; i < 60000; i++) {
      const k = key();
      const op = r();
      if (op < 0.5) {
        assert.equal(t.add(k, i), !m.has(k));
        if (!m.has(k)) m.set(k, i);
      } else if (op < 0.8) assert.equal(t.delete(k), m.delete(k));
      else if (op < 0.99995) assert.equal(t.get(k), m.get(k) ?? -1);
      else {
        t.clear();
        m.clear();
      }
      if (i % 997 === 0) assert.equal(t.size, m.size);
    }
    for (const [k, v] of m) assert.equal(t.get(k), v);
    assert.equal(t.size, m.size);
    assert.equal(t.get(12345), -1);
  });

  it('adds a tuple in the slot its lookup found, never in the slot of another key looked up last', () => {
    const t = new TupleIndex();
    const m = new Map<number, number>();
    const r = rng(11);
    // Few distinct keys, many deletes: probe chains full of DELETED slots, where a stale remembered slot would land a key twice.
    const key = () => (3323101184 + Math.floor(r() * 400)) * 65536 + 80;
    for (let i = 0; i < 40000; i++) {
      const k = key();
      const other = key();
      const op = r();
      if (op < 0.4) {
        t.get(k); // the lookup a sync makes before it adds
        assert.equal(t.add(k, i), !m.has(k));
        if (!m.has(k)) m.set(k, i);
      } else if (op < 0.6) {
        t.get(other); // a lookup of another key just before the add
        assert.equal(t.add(k, i), !m.has(k));
        if (!m.has(k)) m.set(k, i);
      } else if (op < 0.9) assert.equal(t.delete(k), m.delete(k));
      else assert.equal(t.get(k), m.get(k) ?? -1);
    }
    for (const [k, v] of m) assert.equal(t.get(k), v);
    assert.equal(t.size, m.size);
  });

  it('holds a million tuples in 2^21 slots once reserved for a quarter more, without rebuilding', () => {
    const t = new TupleIndex();
    t.reserve(1_250_000);
    assert.equal(t.slots, 2 ** 21);
    for (let i = 0; i < 1_000_000; i++) {
      const k = (3323101184 + i) * 65536 + 80;
      assert.equal(t.get(k), -1);
      t.add(k, i);
    }
    assert.equal(t.slots, 2 ** 21, 'the table was rebuilt');
    assert.equal(t.size, 1_000_000);
    for (let i = 0; i < 1_000_000; i += 997) assert.equal(t.get((3323101184 + i) * 65536 + 80), i);
  });

  it('grows past its load limit keeping every tuple', () => {
    const t = new TupleIndex();
    for (let i = 0; i < 5000; i++) t.add((3323101184 + i) * 65536 + 443, i);
    assert.ok(t.slots >= 5000 / 0.7, `${t.slots} slots for 5,000 tuples`);
    for (let i = 0; i < 5000; i++) assert.equal(t.get((3323101184 + i) * 65536 + 443), i);
  });
});

describe('BackendTable', () => {
  it('matches a model of rows and canonical tuples under random inserts, removals, refs, flags and clears, ids near and far', () => {
    const r = rng(5);
    const t = new BackendTable();
    type Row = Backend & { tuple: number | string | null; refs: number };
    const rows = new Map<number, Row>();
    const canonical = new Map<number | string, number>();
    const id = () => {
      const x = r();
      if (x < 0.8) return 1 + Math.floor(r() * 3000);
      if (x < 0.9) return 3000 + Math.floor(r() * 20000);
      return Math.floor(r() * 0xffffffff);
    };
    const backend = (): Backend => {
      const x = r();
      const port = 1 + Math.floor(r() * 3);
      if (x < 0.7) return { addr: `10.0.${Math.floor(r() * 4)}.${Math.floor(r() * 250)}`, port, proto: r() < 0.5 ? 6 : 17, flags: r() < 0.5 ? 0 : 1 };
      if (x < 0.9) return { addr: `fd00::${Math.floor(r() * 500).toString(16)}`, port, proto: 6, flags: 0 };
      return { addr: '10.9.9.9', port, proto: 132, flags: 0 }; // not written by this agent: no tuple
    };
    for (let i = 0; i < 60000; i++) {
      // A large sync's reservation, mid-way: rows and tuples held before it stay as they were.
      if (i === 20000) t.reserve(9000);
      if (i === 40000) t.reserve(2500.5);
      const k = id();
      const op = r();
      if (op < 0.4) {
        // Inserting over an existing id replaces its row.
        const old = rows.get(k);
        if (old) {
          rows.delete(k);
          if (old.tuple !== null && canonical.get(old.tuple) === k) canonical.delete(old.tuple);
        }
        const b = backend();
        const tuple = backendValueKey(b);
        const ip = parseIP(b.addr)!;
        const wasFree = tuple !== null && !canonical.has(tuple);
        assert.equal(t.insert(k, ip.family === 'IPv4' ? (ip.key as number) : -1, b.addr, b.port, b.proto, b.flags, tuple), wasFree);
        rows.set(k, { ...b, tuple, refs: 0 });
        if (wasFree) canonical.set(tuple!, k);
      } else if (op < 0.6) {
        const row = rows.get(k);
        t.remove(k);
        if (row) {
          rows.delete(k);
          if (row.tuple !== null && canonical.get(row.tuple) === k) canonical.delete(row.tuple);
        }
      } else if (op < 0.8) {
        const row = rows.get(k);
        if (!row) continue;
        if (r() < 0.6) {
          t.addRef(k);
          row.refs++;
        } else assert.equal(t.dropRef(k), --row.refs);
        if (r() < 0.2) {
          t.setFlags(k, 1 - row.flags);
          row.flags = 1 - row.flags;
        }
      } else if (op < 0.99995) {
        const row = rows.get(k);
        assert.equal(t.has(k), row !== undefined);
        if (row) {
          assert.deepEqual(t.backend(k), { addr: row.addr, port: row.port, proto: row.proto, flags: row.flags });
          assert.equal(t.tuple(k), row.tuple);
          assert.equal(t.refs(k), row.refs);
          assert.equal(t.isCanonical(k), row.tuple !== null && canonical.get(row.tuple) === k);
          if (row.tuple !== null) assert.equal(t.idOf(row.tuple), canonical.get(row.tuple) ?? -1);
        }
      } else {
        t.clear();
        rows.clear();
        canonical.clear();
      }
      if (i % 499 === 0) {
        assert.equal(t.size, rows.size);
        const ids: number[] = [];
        t.forEachId((x) => ids.push(x));
        assert.deepEqual(
          ids.sort((a, b) => a - b),
          [...rows.keys()].sort((a, b) => a - b),
        );
      }
    }
  });
});

describe('IdAllocator (bitmap)', () => {
  it('matches a Set-based model, including ids above the dense range', () => {
    const r = rng(11);
    const a = new IdAllocator(0xffffffff);
    const used = new Set<number>();
    for (let i = 0; i < 20000; i++) {
      const op = r();
      if (op < 0.5) {
        const id = a.allocate()!;
        assert.equal(used.has(id), false);
        let lowest = 1;
        while (used.has(lowest)) lowest++;
        assert.equal(id, lowest);
        used.add(id);
      } else if (op < 0.8 && used.size) {
        const ids = [...used];
        const id = ids[Math.floor(r() * ids.length)];
        a.release(id);
        used.delete(id);
      } else {
        const id = r() < 0.5 ? Math.floor(r() * 3000) : (1 << 24) - 2 + Math.floor(r() * 5) + (r() < 0.3 ? 1e9 : 0);
        assert.equal(a.reserve(id), id >= 1 && !used.has(id));
        if (id >= 1) used.add(id);
      }
      assert.equal(a.size, used.size);
    }
    for (const id of used) assert.equal(a.has(id), true);
    assert.equal(a.has(1.5), false);
    assert.equal(a.has(-1), false);
  });
});

class FakeMap {
  updates: Array<{ keys: Buffer; values: Buffer; count: number }> = [];
  lookupBatch() {
    return { count: 0, keys: Buffer.alloc(0), values: Buffer.alloc(0) };
  }
  updateBatch(keys: Buffer, values: Buffer, count: number) {
    this.updates.push({ keys: Buffer.from(keys), values: Buffer.from(values), count });
  }
  deleteBatch(_keys: Buffer, count: number) {
    return count;
  }
}

function maps() {
  const m = {
    svc: new FakeMap(),
    backend: new FakeMap(),
    vip: new FakeMap(),
    affinityMatch: new FakeMap(),
    svcMeta: new FakeMap(),
    srcRange: new FakeMap(),
    maglev: new FakeMap(),
    maglevRef: new FakeMap(),
  };
  return { m, d: new BpfDatapathMaps(m as unknown as Record<keyof typeof m, BpfMap>) };
}

describe('BpfDatapathMaps column writes', () => {
  it('write the same bytes as updateServices and updateBackends', () => {
    const bases = [
      { addr: '10.0.0.1', port: 80, proto: 6 },
      { addr: '10.0.0.1', port: 443, proto: 17 },
      { addr: 'fd00::1', port: 65535, proto: 6 },
      { addr: '10.0.0.1', port: 80, proto: 6 },
    ];
    const scopeSlots = [0, 1, 0x10000 + 65535, 0x10000 + 2];
    const vals: SvcVal[] = [
      { backendId: 30, count: 3, frontendId: 7, flags: 5 },
      { backendId: 0xffffffff, count: 0, frontendId: 0, flags: 0 },
      { backendId: 1, count: 65535, frontendId: 65535, flags: 0xffff },
      { backendId: 2, count: 0, frontendId: 0, flags: 0 },
    ];
    const entries: Array<[SvcKey, SvcVal]> = bases.map((b, i) => [{ ...b, scope: scopeSlots[i] >>> 16, slot: scopeSlots[i] & 0xffff }, vals[i]]);
    const a = maps();
    const b = maps();
    a.d.updateServices(entries);
    // A number stands for a slot's value naming that backend.
    b.d.updateServiceColumns(bases, scopeSlots, [vals[0], 0xffffffff, vals[2], 2]);
    assert.deepEqual(b.m.svc.updates, a.m.svc.updates);

    const ids = [1, 2, 0xffffffff];
    const recs: Backend[] = [
      { addr: '10.1.2.3', port: 8080, proto: 6, flags: 0 },
      { addr: 'fd00::2', port: 1, proto: 17, flags: 1 },
      { addr: '10.1.2.30', port: 65535, proto: 6, flags: 1 },
    ];
    a.d.updateBackends(ids.map((id, i) => [id, recs[i]]));
    // Rows of the reconciler's BackendTable (IPv4 kept as a u32, other addresses and far ids as text): the same bytes.
    b.d.updateBackendColumns(ids, backendTable(ids, recs));
    assert.deepEqual(b.m.backend.updates, a.m.backend.updates);
    assert.throws(() => b.d.updateServiceColumns(bases.slice(1), scopeSlots, vals));
    const high = { addr: '255.254.253.252', port: 65535, proto: 17, flags: 1 };
    const d = maps();
    d.d.updateBackendColumns([9], backendTable([9], [high]));
    assert.deepEqual(d.m.backend.updates[0].values, encodeBackend(high));
    // A count writes that many entries of longer columns (the reconciler's reused queues).
    const e = maps();
    e.d.updateBackendColumns([...ids, 77], backendTable([...ids, 77], [...recs, recs[0]]), 3);
    assert.deepEqual(e.m.backend.updates, a.m.backend.updates);
    e.d.updateServiceColumns([...bases, bases[0]], [...scopeSlots, 5], [vals[0], 0xffffffff, vals[2], 2, 9], 4);
    assert.deepEqual(e.m.svc.updates, a.m.svc.updates);
    assert.throws(() => e.d.updateBackendColumns(ids, backendTable(ids, recs), 4), /fewer ids than count/);
    assert.throws(() => b.d.updateServiceColumns([{ addr: '10.0.0.1', port: 70000, proto: 6 }], [1], [vals[0]]));
    assert.throws(() => b.d.updateServiceColumns(bases.slice(0, 1), [1], [{ backendId: 0, count: 70000, frontendId: 0, flags: 0 }]));
    assert.throws(() => b.d.updateBackendColumns([-1], backendTable(ids, recs)));
    assert.throws(() => b.d.updateServiceColumns(bases.slice(0, 1), [1], [2 ** 32]));
  });

  it('encode names and service addresses as the layout codecs do', () => {
    const metas: SvcMeta[] = [
      { name: 'ns/svc', portName: 'http', type: 1, proto: 6 },
      { name: 'x'.repeat(95), portName: 'p'.repeat(31), type: 4, proto: 17 },
      { name: 'x'.repeat(96), portName: '', type: 2, proto: 132 },
      { name: 'ns/é-名前', portName: 'ü'.repeat(20), type: 3, proto: 6 },
    ];
    const { m, d } = maps();
    d.updateSvcMeta(metas.map((x, i) => [i + 1, x]));
    const want = Buffer.alloc(metas.length * SVC_META.size);
    metas.forEach((x, i) => encodeSvcMeta(x, want, i * SVC_META.size));
    assert.deepEqual(m.svcMeta.updates[0].values, want);

    const addrs = ['10.0.0.1', 'fd00::1', '10.0.0.1', '192.168.1.255'];
    d.updateVips(addrs.map((a) => [a, 1]));
    const keys = Buffer.alloc(addrs.length * VIP_KEY.size);
    addrs.forEach((a, i) => encodeVipKey(a, keys, i * VIP_KEY.size));
    assert.deepEqual(m.vip.updates[0].keys, keys);
  });
});

describe('endpointsByServicePort merge', () => {
  const slice = (name: string, addrs: Array<[string, boolean?]>, ports: Array<[string, number]>) => ({
    metadata: { name, namespace: 'ns', labels: { 'kubernetes.io/service-name': 's' } },
    addressType: 'IPv4',
    ports: ports.map(([n, p]) => ({ name: n, port: p, protocol: 'TCP' })),
    endpoints: addrs.map(([a, term]) => ({ addresses: [a], conditions: { ready: !term, serving: true, terminating: !!term } })),
  });
  const flat = (r: ReturnType<typeof endpointsByServicePort>) => [...r.byPort].map(([id, l]) => [id, l.map((e) => `${e.address}:${e.port}:${e.terminating}`)]);

  it('keeps sorted order, and merges out-of-order, duplicate and same-named ports like the keyed merge', () => {
    const sorted = endpointsByServicePort('ns/s', [slice('a', [['10.0.0.1'], ['10.0.0.2'], ['10.0.0.10']], [['http', 80]])] as never, '');
    assert.deepEqual(flat(sorted), [['http/TCP', ['10.0.0.1:80:false', '10.0.0.2:80:false', '10.0.0.10:80:false']]]);
    const messy = endpointsByServicePort(
      'ns/s',
      [
        slice(
          'a',
          [['10.0.0.3'], ['10.0.0.1'], ['10.0.0.3', true], ['10.0.0.2', true], ['10.0.0.2']],
          [
            ['http', 90],
            ['http', 80],
          ],
        ),
      ] as never,
      '',
    );
    assert.deepEqual(flat(messy), [
      ['http/TCP', ['10.0.0.1:80:false', '10.0.0.1:90:false', '10.0.0.2:80:false', '10.0.0.2:90:false', '10.0.0.3:80:false', '10.0.0.3:90:false']],
    ]);
    const two = endpointsByServicePort(
      'ns/s',
      [slice('b', [['10.0.0.1']], [['http', 80]]), slice('a', [['10.0.0.2'], ['10.0.0.1', true]], [['http', 80]])] as never,
      '',
    );
    assert.deepEqual(flat(two), [['http/TCP', ['10.0.0.1:80:false', '10.0.0.2:80:false']]]);
  });
});
