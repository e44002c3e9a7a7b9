/** MemoryDatapathMaps behaves like the kernel's batch calls, so reconciler tests mean something. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { mapCodecs } from '../../agent/maps/layout.js';
import { MAPS } from '../../agent/maps/registry.js';

const key = (slot: number) => ({ addr: '10.96.0.1', port: 80, slot, proto: 6, scope: 0 });
const val = (backendId: number) => ({ backendId, count: 0, frontendId: 0, flags: 0 });
const backend = (n: number) => ({ addr: `10.0.0.${n}`, port: 80, proto: 6, flags: 0 });

describe('MemoryDatapathMaps', () => {
  it('applies batches in order and records every entry', () => {
    const m = new MemoryDatapathMaps();
    m.updateBackends([
      [1, backend(1)],
      [2, backend(2)],
    ]);
    m.updateServices([
      [key(1), val(1)],
      [key(1), val(2)],
    ]);
    m.deleteBackends([1]);
    assert.deepEqual(m.dumpServices(), [[key(1), val(2)]]);
    assert.deepEqual(m.dumpBackends(), [[2, backend(2)]]);
    assert.deepEqual(
      m.ops.map((o) => `${o.call}:${o.kind}`),
      ['1:backend-update', '1:backend-update', '2:svc-update', '2:svc-update', '3:backend-delete'],
    );
    assert.deepEqual(
      m.calls.map((c) => `${c.method}(${c.entries})`),
      ['updateBackends(2)', 'updateServices(2)', 'deleteBackends(1)'],
    );
  });

  it('an injected failure applies the first entries of the call, then throws', () => {
    const m = new MemoryDatapathMaps();
    m.failNextCall(1);
    assert.throws(
      () =>
        m.updateBackends([
          [1, backend(1)],
          [2, backend(2)],
        ]),
      /injected failure/,
    );
    assert.deepEqual([...m.backends.keys()], [1]);
    assert.match(m.calls[0].error!, /injected/);
    m.updateBackends([[2, backend(2)]]); // only that call fails
    assert.equal(m.backends.size, 2);
  });

  it('is full at its capacity (updates of existing keys still work) and refuses deleting what is absent', () => {
    const m = new MemoryDatapathMaps({ maxBackends: 1 });
    m.updateBackends([[1, backend(1)]]);
    m.updateBackends([[1, backend(3)]]);
    assert.throws(() => m.updateBackends([[2, backend(2)]]), /E2BIG/);
    assert.throws(() => m.deleteServices([key(0)]), /ENOENT/);
    assert.throws(() => m.deleteBackends([7]), /ENOENT/);
  });

  it('dumps are copies: changing them does not change the maps', () => {
    const m = new MemoryDatapathMaps();
    m.prefill([[key(0), val(0)]], [[1, backend(1)]]);
    m.dumpServices()[0][1].count = 99;
    m.dumpBackends()[0][1].port = 1;
    assert.equal(m.dumpServices()[0][1].count, 0);
    assert.equal(m.dumpBackends()[0][1].port, 80);
    assert.equal(m.ops.length, 0);
  });

  it('column writes are the updateServices/updateBackends calls they stand for, and fail the same way', () => {
    const m = new MemoryDatapathMaps({ maxServices: 3 });
    const base = { addr: '10.96.0.1', port: 80, proto: 6 };
    m.updateServiceColumns([base, base], [0 * 0x10000 + 1, 1 * 0x10000 + 2], [7, { backendId: 0, count: 2, frontendId: 5, flags: 1 }]);
    assert.deepEqual(m.dumpServices(), [
      [key(1), val(7)],
      [
        { ...key(2), scope: 1 },
        { backendId: 0, count: 2, frontendId: 5, flags: 1 },
      ],
    ]);
    const row = (id: number) =>
      id === 4 ? { ipv4: 0x0a000004, addr: '10.0.0.4', port: 8080, proto: 17, flags: 1 } : { ipv4: -1, addr: '2001:db8::9', port: 443, proto: 6, flags: 0 };
    const rows = {
      ipv4: (id: number) => row(id).ipv4,
      addr: (id: number) => row(id).addr,
      port: (id: number) => row(id).port,
      proto: (id: number) => row(id).proto,
      flags: (id: number) => row(id).flags,
    };
    m.updateBackendColumns([4, 9, 10], rows, 2); // the first `count` ids only
    assert.deepEqual(m.dumpBackends(), [
      [4, { addr: '10.0.0.4', port: 8080, proto: 17, flags: 1 }],
      [9, { addr: '2001:db8::9', port: 443, proto: 6, flags: 0 }],
    ]);
    assert.deepEqual(
      m.calls.map((c) => `${c.method}(${c.entries})`),
      ['updateServices(2)', 'updateBackends(2)'],
    );
    // Past its capacity the column batch stops part-way, as updateServices does.
    assert.throws(() => m.updateServiceColumns([base, base], [3, 4], [1, 2]), /E2BIG/);
    assert.equal(m.services.size, 3);
    assert.throws(() => m.updateServiceColumns([base], [3, 4], [1, 2]), /columns of different lengths/);
  });

  it("raw dumps are the registry codecs' records of what the maps hold", () => {
    const m = new MemoryDatapathMaps();
    m.prefill([[key(1), val(3)]], [[3, backend(3)]]);
    m.flush(); // nothing queued: a no-op
    const svc = m.dumpServicesRaw();
    const c = mapCodecs(MAPS.svc);
    assert.equal(svc.count, 1);
    assert.deepEqual([c.key.decode(svc.keys, 0), c.value.decode(svc.values, 0)], [key(1), val(3)]);
    const be = m.dumpBackendsRaw();
    const b = mapCodecs(MAPS.backend);
    assert.deepEqual([be.count, b.key.decode(be.keys, 0), b.value.decode(be.values, 0)], [1, 3, backend(3)]);
  });
});
