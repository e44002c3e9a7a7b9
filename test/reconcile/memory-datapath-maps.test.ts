/** MemoryDatapathMaps behaves like the kernel's batch calls, so reconciler tests mean something. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryDatapathMaps } from '../../agent/reconcile/memory-datapath-maps.js';

const key = (slot: number) => ({ addr: '10.96.0.1', port: 80, slot, proto: 6, scope: 0 });
const val = (backendId: number) => ({ backendId, count: 0, revNatId: 0, flags: 0 });
const backend = (n: number) => ({ addr: `10.0.0.${n}`, port: 80, proto: 6, flags: 0 });

describe('MemoryDatapathMaps', () => {
  it('applies batches in order and records every entry', () => {
    const m = new MemoryDatapathMaps();
    m.updateBackends([[1, backend(1)], [2, backend(2)]]);
    m.updateServices([[key(1), val(1)], [key(1), val(2)]]);
    m.deleteBackends([1]);
    assert.deepEqual(m.dumpServices(), [[key(1), val(2)]]);
    assert.deepEqual(m.dumpBackends(), [[2, backend(2)]]);
    assert.deepEqual(m.ops.map((o) => `${o.call}:${o.kind}`), ['1:backend-update', '1:backend-update', '2:svc-update', '2:svc-update', '3:backend-delete']);
    assert.deepEqual(m.calls.map((c) => `${c.method}(${c.entries})`), ['updateBackends(2)', 'updateServices(2)', 'deleteBackends(1)']);
  });

  it('an injected failure applies the first entries of the call, then throws', () => {
    const m = new MemoryDatapathMaps();
    m.failNextCall(1);
    assert.throws(() => m.updateBackends([[1, backend(1)], [2, backend(2)]]), /injected failure/);
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
});
