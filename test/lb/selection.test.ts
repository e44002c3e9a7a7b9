/** Selection tables as plain data: which backend each slot names. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_SLOTS, randomTable } from '../../agent/lb/selection.js';

const slotsOf = (t: { size: number; backendAt(slot: number): number }) => Array.from({ length: t.size }, (_, i) => t.backendAt(i + 1));

describe('randomTable', () => {
  it('gives each backend one slot, in order: slot s names backend s - 1', () => {
    assert.deepEqual(slotsOf(randomTable(4)), [0, 1, 2, 3]);
    assert.deepEqual(slotsOf(randomTable(0)), []);
  });

  it('holds at most MAX_SLOTS (the u16 slot count) backends', () => {
    assert.equal(MAX_SLOTS, 65535);
    const t = randomTable(MAX_SLOTS);
    assert.deepEqual([t.size, t.backendAt(MAX_SLOTS)], [MAX_SLOTS, MAX_SLOTS - 1]);
    assert.throws(() => randomTable(MAX_SLOTS + 1), /0 to 65535 backends/);
    assert.throws(() => randomTable(-1), RangeError);
  });
});
