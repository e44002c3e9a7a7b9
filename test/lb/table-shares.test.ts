/**
 * TableShares (agent/lb/table-shares.ts): holders per table id, one table
 * per key, tables of unknown key (adopted) recognised later, forgotten with
 * their last holder.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TableShares } from '../../agent/lb/table-shares.js';

describe('TableShares', () => {
  it('counts holders per table; the last release forgets the table and frees its key', () => {
    const s = new TableShares<number>();
    s.hold(1, 1021, 'a');
    s.hold(1, 1021, 'a');
    s.hold(2, 2039, 'b');
    assert.deepEqual([s.idOf('a'), s.holders(1), s.value(2), s.size], [1, 2, 2039, 2]);
    assert.equal(s.release(1), 1);
    assert.equal(s.release(1), 0);
    assert.deepEqual([s.idOf('a'), s.keyOf(1), s.holders(1), s.size], [undefined, undefined, 0, 1]);
    assert.throws(() => s.release(1), /not held/);
    s.hold(3, 1021, 'a');
    assert.equal(s.idOf('a'), 3, 'the key is free for another table');
  });

  it('a key names one table: a second table under it is refused', () => {
    const s = new TableShares<number>();
    s.hold(1, 1021, 'a');
    assert.throws(() => s.hold(2, 1021, 'a'), /already names table 1/);
    s.hold(2, 1021);
    assert.throws(() => s.rekey(2, 'a', 1021), /already names table 1/);
  });

  it('a table held with its key unknown is recognised by rekey; a rekey moves the key', () => {
    const s = new TableShares<number>();
    s.hold(7, 1021);
    s.hold(7, 1021);
    assert.deepEqual([s.keyOf(7), s.holders(7)], [null, 2]);
    s.rekey(7, 'a', 1021);
    assert.deepEqual([s.keyOf(7), s.idOf('a')], ['a', 7]);
    s.rekey(7, 'b', 2039);
    assert.deepEqual([s.idOf('a'), s.idOf('b'), s.value(7), s.holders(7)], [undefined, 7, 2039, 2]);
  });
});
