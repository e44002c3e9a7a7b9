import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IdAllocator } from '../../agent/reconcile/id-allocator.js';

describe('IdAllocator', () => {
  it('hands out the lowest free id, starting at 1', () => {
    const a = new IdAllocator(100);
    assert.deepEqual([a.allocate(), a.allocate(), a.allocate()], [1, 2, 3]);
    a.release(2);
    a.release(1);
    assert.deepEqual([a.allocate(), a.allocate(), a.allocate()], [1, 2, 4]);
  });

  it('skips reserved ids and reuses them once released', () => {
    const a = new IdAllocator(100);
    assert.equal(a.reserve(2), true);
    assert.equal(a.reserve(2), false);
    assert.equal(a.reserve(50), true);
    assert.deepEqual([a.allocate(), a.allocate()], [1, 3]);
    a.release(50);
    a.release(2);
    assert.equal(a.allocate(), 2);
    assert.equal(a.size, 3);
  });

  it('returns undefined when exhausted, rejects out-of-range reservations', () => {
    const a = new IdAllocator(2);
    assert.deepEqual([a.allocate(), a.allocate(), a.allocate()], [1, 2, undefined]);
    assert.equal(a.reserve(0), false);
    assert.equal(a.reserve(3), false);
    a.release(1);
    assert.equal(a.allocate(), 1);
  });

  it('after releasing everything the next id is 1 again', () => {
    const a = new IdAllocator(1000);
    const ids = Array.from({ length: 100 }, () => a.allocate()!);
    for (const id of ids.reverse()) a.release(id);
    assert.equal(a.size, 0);
    assert.equal(a.allocate(), 1);
  });
});
