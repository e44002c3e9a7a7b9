/**
 * BpfDatapathMaps without a kernel: a recording stand-in for BpfMap checks
 * that the fast packing (cached and hand-parsed addresses) produces exactly
 * the bytes of the layout.ts codecs, and that dumps decode what was written.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BpfMap } from '../../native/index.js';
import { BATCH_CHUNK, BpfDatapathMaps, packers } from '../../agent/maps/bpf-datapath-maps.js';
import { MAPS } from '../../agent/maps/registry.js';
import { backendTable } from './support/backend-rows.js';
import {
  AFFINITY_MATCH_KEY,
  BACKEND,
  BACKEND_ID_SIZE,
  SVC_KEY,
  SVC_META,
  SVC_VAL,
  VIP_KEY,
  encodeAffinityMatchKey,
  encodeBackend,
  encodeBackendId,
  encodeSvcKey,
  encodeSvcMeta,
  encodeSvcVal,
  encodeVipKey,
  encodeVipVal,
  mapCodecs,
  type Backend,
  type SvcKey,
  type SvcVal,
} from '../../agent/maps/layout.js';

/** Records every batch and serves the last written one back as the map's contents. */
class FakeMap {
  updates: Array<{ keys: Buffer; values: Buffer; count: number }> = [];
  deletes: Array<{ keys: Buffer; count: number }> = [];
  lookupBatch() {
    const last = this.updates.at(-1);
    return last ? { count: last.count, keys: last.keys, values: last.values } : { count: 0, keys: Buffer.alloc(0), values: Buffer.alloc(0) };
  }
  updateBatch(keys: Buffer, values: Buffer, count: number) {
    this.updates.push({ keys: Buffer.from(keys), values: Buffer.from(values), count });
  }
  deleteBatch(keys: Buffer, count: number) {
    this.deletes.push({ keys: Buffer.from(keys), count });
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

const concat = <T>(items: T[], size: number, enc: (x: T, b: Buffer, o: number) => unknown) => {
  const b = Buffer.alloc(items.length * size);
  items.forEach((x, i) => enc(x, b, i * size));
  return b;
};

describe('BpfDatapathMaps', () => {
  const svc: Array<[SvcKey, SvcVal]> = [
    [
      { addr: '10.96.0.1', port: 80, slot: 0, proto: 6, scope: 0 },
      { backendId: 10800, count: 2, frontendId: 7, flags: 0x11 },
    ],
    [
      { addr: '10.96.0.1', port: 80, slot: 1, proto: 6, scope: 1 },
      { backendId: 3, count: 0, frontendId: 0, flags: 0 },
    ],
    [
      { addr: '255.255.255.255', port: 65535, slot: 65535, proto: 17, scope: 0 },
      { backendId: 0xffffffff, count: 0, frontendId: 0, flags: 0 },
    ],
    [
      { addr: 'fd00::10', port: 443, slot: 2, proto: 6, scope: 0 },
      { backendId: 4, count: 0, frontendId: 0, flags: 0 },
    ],
    [
      { addr: '0.0.0.0', port: 1, slot: 0, proto: 6, scope: 0 },
      { backendId: 0, count: 0, frontendId: 1, flags: 0 },
    ],
  ];
  const backends: Array<[number, Backend]> = [
    [1, { addr: '10.0.0.1', port: 8080, proto: 6, flags: 1 }],
    [2, { addr: '2001:db8::1', port: 53, proto: 17, flags: 0 }],
    [3, { addr: '192.168.255.1', port: 1, proto: 6, flags: 0 }],
  ];

  it('service entries: the same bytes as encodeSvcKey/encodeSvcVal (IPv4 and IPv6)', () => {
    const { m, d } = maps();
    d.updateServices(svc);
    assert.deepEqual(
      m.svc.updates[0].keys,
      concat(svc, SVC_KEY.size, ([k], b, o) => encodeSvcKey(k, b, o)),
    );
    assert.deepEqual(
      m.svc.updates[0].values,
      concat(svc, SVC_VAL.size, ([, v], b, o) => encodeSvcVal(v, b, o)),
    );
    d.deleteServices(svc.map(([k]) => k));
    assert.deepEqual(m.svc.deletes[0].keys, m.svc.updates[0].keys);
    assert.deepEqual(d.dumpServices(), svc);
  });

  it('backends: the same bytes as encodeBackend; dumps decode them back', () => {
    const { m, d } = maps();
    d.updateBackends(backends);
    assert.deepEqual(
      m.backend.updates[0].keys,
      concat(backends, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o)),
    );
    assert.deepEqual(
      m.backend.updates[0].values,
      concat(backends, BACKEND.size, ([, v], b, o) => encodeBackend(v, b, o)),
    );
    assert.deepEqual(d.dumpBackends(), backends);
  });

  it('column writes go in rounds of BATCH_CHUNK from reused buffers: the same bytes as the codecs, no stale byte', () => {
    const { m, d } = maps();
    const n = BATCH_CHUNK * 2 + 1000;
    const bases = Array.from({ length: n }, (_, i) => ({ addr: `10.96.${(i >> 8) & 255}.${i & 255}`, port: 80 + (i % 3), proto: 6 }));
    const scopeSlots = bases.map((_, i) => (i % 2) * 0x10000 + (i % 11));
    // Masters with every field set, then (below) slots that set only the backend id: a reused buffer must be zeroed.
    const masters: SvcVal[] = bases.map((_, i) => ({ backendId: 60 + i, count: 11, frontendId: (i % 60000) + 1, flags: 0x1f }));
    d.updateServiceColumns(bases, scopeSlots, masters);
    assert.deepEqual(
      m.svc.updates.map((u) => u.count),
      [BATCH_CHUNK, BATCH_CHUNK, 1000],
    );
    const keyOf = (i: number): SvcKey => ({ ...bases[i], scope: scopeSlots[i] >> 16, slot: scopeSlots[i] & 0xffff });
    const all = Array.from({ length: n }, (_, i) => i);
    assert.deepEqual(
      Buffer.concat(m.svc.updates.map((u) => u.keys)),
      concat(all, SVC_KEY.size, (i, b, o) => encodeSvcKey(keyOf(i), b, o)),
    );
    assert.deepEqual(
      Buffer.concat(m.svc.updates.map((u) => u.values)),
      concat(masters, SVC_VAL.size, (v, b, o) => encodeSvcVal(v, b, o)),
    );
    m.svc.updates = [];
    const ids = all.map((i) => i + 1);
    d.updateServiceColumns(bases, scopeSlots, ids);
    assert.deepEqual(
      Buffer.concat(m.svc.updates.map((u) => u.values)),
      concat(ids, SVC_VAL.size, (id, b, o) => encodeSvcVal({ backendId: id, count: 0, frontendId: 0, flags: 0 }, b, o)),
    );
    const recs: Backend[] = all.map((i) => ({ addr: `10.1.${(i >> 8) & 255}.${i & 255}`, port: 8080, proto: 17, flags: i % 2 }));
    d.updateBackendColumns(ids, backendTable(ids, recs));
    assert.deepEqual(
      m.backend.updates.map((u) => u.count),
      [BATCH_CHUNK, BATCH_CHUNK, 1000],
    );
    assert.deepEqual(
      Buffer.concat(m.backend.updates.map((u) => u.values)),
      concat(recs, BACKEND.size, (v, b, o) => encodeBackend(v, b, o)),
    );
    assert.deepEqual(
      Buffer.concat(m.backend.updates.map((u) => u.keys)),
      concat(ids, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)),
    );
  });

  it('an invalid address throws as the codec does (nothing half-written)', () => {
    const { m, d } = maps();
    for (const addr of ['010.0.0.1', '1.2.3', '1.2.3.256', 'x']) {
      assert.throws(() => d.updateBackends([[1, { addr, port: 1, proto: 6, flags: 0 }]]), RangeError, addr);
      assert.throws(() => encodeBackend({ addr, port: 1, proto: 6, flags: 0 }), RangeError, addr);
    }
    assert.equal(m.backend.updates.length, 0);
  });

  it('vip, affinity-match and meta entries use their codecs; dumps round-trip', () => {
    const { m, d } = maps();
    d.updateVips([
      ['10.96.0.1', 1],
      ['fd00::10', 1],
    ]);
    assert.deepEqual(m.vip.updates[0].keys, Buffer.concat([encodeVipKey('10.96.0.1'), encodeVipKey('fd00::10')]));
    assert.deepEqual(m.vip.updates[0].values, Buffer.concat([encodeVipVal(1), encodeVipVal(1)]));
    assert.deepEqual(d.dumpVips(), [
      ['10.96.0.1', 1],
      ['fd00::10', 1],
    ]);
    d.deleteVips(['10.96.0.1']);
    assert.deepEqual(m.vip.deletes[0].keys, encodeVipKey('10.96.0.1'));

    const pairs = [
      { backendId: 3, frontendId: 7 },
      { backendId: 4, frontendId: 7 },
    ];
    d.updateAffinityMatches(pairs);
    assert.deepEqual(
      m.affinityMatch.updates[0].keys,
      concat(pairs, AFFINITY_MATCH_KEY.size, (k, b, o) => encodeAffinityMatchKey(k, b, o)),
    );
    assert.deepEqual(m.affinityMatch.updates[0].values, Buffer.from([1, 1]));
    assert.deepEqual(d.dumpAffinityMatches(), pairs);

    const meta = { name: 'shop/web', portName: 'http', type: 1, proto: 6 };
    d.updateSvcMeta([[7, meta]]);
    assert.deepEqual(m.svcMeta.updates[0].keys, encodeBackendId(7));
    assert.deepEqual(m.svcMeta.updates[0].values, encodeSvcMeta(meta));
    assert.equal(m.svcMeta.updates[0].values.length, SVC_META.size);
    assert.deepEqual(d.dumpSvcMeta(), [[7, meta]]);
    d.deleteSvcMeta([7]);
    assert.deepEqual(m.svcMeta.deletes[0].keys, encodeBackendId(7));
    assert.equal(VIP_KEY.size, 16);
  });
});

describe("the fast packers write the registry codecs' bytes", () => {
  const svc = mapCodecs(MAPS.svc);
  const be = mapCodecs(MAPS.backend);
  const meta = mapCodecs(MAPS.svcMeta);
  /** A buffer of `size` bytes, 0xaa everywhere (stale bytes a packer that writes every byte must overwrite) or zeroed. */
  const buf = (size: number, stale: boolean) => Buffer.alloc(size + 3, stale ? 0xaa : 0);
  /** Packer and codec at offset 3 of equal buffers: the same bytes. */
  const same = <T>(
    name: string,
    v: T,
    size: number,
    pack: (v: T, b: Buffer, o: number) => void,
    encode: (v: T, b: Buffer, o: number) => unknown,
    stale: boolean,
  ) => {
    const a = buf(size, stale);
    const b = buf(size, stale);
    pack(v, a, 3);
    encode(v, b, 3);
    assert.deepEqual(a, b, `${name} ${JSON.stringify(v)}`);
  };
  // Every field set to a value unlike its neighbours', at both ends of its range; IPv4 and IPv6.
  const keys: SvcKey[] = [
    { addr: '198.18.7.9', port: 0x1234, slot: 0x5678, proto: 17, scope: 1 },
    { addr: '2001:db8::7:9', port: 0xfffe, slot: 0xffff, proto: 132, scope: 0 },
    { addr: '0.0.0.0', port: 0, slot: 0, proto: 0, scope: 0 },
  ];
  const vals: SvcVal[] = [
    { backendId: 0x12345678, count: 0x9abc, frontendId: 0xdef1, flags: 0x7f },
    { backendId: 0xffffffff, count: 0xffff, frontendId: 0xffff, flags: 0xffff },
  ];
  const backends: Backend[] = [
    { addr: '198.19.255.254', port: 0x1f90, proto: 6, flags: 1 },
    { addr: '2001:db8:ffff::1', port: 0xffff, proto: 17, flags: 0xff },
  ];

  it('kpr_svc keys and values (every byte written, over stale bytes)', () => {
    for (const k of keys) same('svcKey', k, svc.key.size, packers.svcKey, svc.key.encode, true);
    for (const v of vals) same('svcVal', v, svc.value.size, packers.svcVal, svc.value.encode, true);
  });

  it('kpr_svc keys by column and slot values (into zeroed records, as the rounds give them)', () => {
    for (const k of keys) {
      same('svcKeyColumns', k, svc.key.size, (x, b, o) => packers.svcKeyColumns(x, (x.scope << 16) | x.slot, b, o), svc.key.encode, false);
    }
    for (const id of [1, 0x12345678, 0xffffffff])
      same('slotVal', id, svc.value.size, packers.slotVal, (x, b, o) => svc.value.encode({ backendId: x, count: 0, frontendId: 0, flags: 0 }, b, o), false);
  });

  it('kpr_backend ids and values, from objects and from columns', () => {
    for (const id of [1, 0x12345678, 0xffffffff]) same('id', id, be.key.size, packers.id, be.key.encode, true);
    for (const v of backends) {
      same('backend', v, be.value.size, packers.backend, be.value.encode, true);
      const row = {
        ipv4: () => (v.addr.includes(':') ? -1 : v.addr.split('.').reduce((n, x) => n * 256 + Number(x), 0)),
        addr: () => v.addr,
        port: () => v.port,
        proto: () => v.proto,
        flags: () => v.flags,
      };
      same('backendRow', v, be.value.size, (x, b, o) => packers.backendRow(row, 1, b, o), be.value.encode, true);
    }
  });

  it('kpr_svc_meta, ASCII by hand and the rest through the codec (into zeroed records)', () => {
    for (const m of [
      { name: 'shop/web', portName: 'http', type: 3, proto: 6 },
      { name: 'n'.repeat(63) + '/' + 's'.repeat(63), portName: 'p'.repeat(40), type: 1, proto: 17 },
      { name: 'café/web', portName: 'ünï', type: 2, proto: 132 },
    ]) {
      same('svcMeta', m, meta.value.size, packers.svcMeta, meta.value.encode, false);
    }
  });
});
