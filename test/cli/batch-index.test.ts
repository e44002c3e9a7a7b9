/**
 * The CLI's hash indexes over raw map batches (agent/cli/batch-index.ts):
 * every record found, absent ones not, keys that collide in the table kept
 * apart, a key's ignored field ignored, unaligned buffers read alike.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KeyGroups, U32Index } from '../../agent/cli/batch-index.js';

test('U32Index: each key finds its record, absent keys -1, a duplicate key keeps its first record', () => {
  // Multiples of 2^16 and sequential ids: patterns a hash on the low bits alone spreads badly.
  const keys = [...Array.from({ length: 5000 }, (_, i) => i * 65536), ...Array.from({ length: 5000 }, (_, i) => i + 1), 0xffffffff];
  const withDup = [...keys, 65536];
  const index = new U32Index(withDup.length, (r) => withDup[r]!);
  keys.forEach((k, r) => assert.equal(index.get(k), r, `key ${k}`));
  for (const k of [7_000_001, 65537 * 3, 0xfffffffe]) assert.equal(index.get(k), -1);
  assert.equal(new U32Index(0, () => 0).get(0), -1);
});

test('U32Index over dense ids (a table indexed by the id): each id finds its record, absent and larger ids -1, a duplicate keeps its first record', () => {
  // Ids as the agent hands them out (lowest free first), some freed, one twice, in a scrambled order.
  const ids = Array.from({ length: 20_000 }, (_, i) => ((i * 7919) % 20_000) + 1).filter((id) => id % 97 !== 0);
  const withDup = [...ids, ids[5]!];
  const index = new U32Index(withDup.length, (r) => withDup[r]!);
  ids.forEach((id, r) => assert.equal(index.get(id), r, `id ${id}`));
  for (const id of [0, 97, 970, 20_001, 1 << 20, 0xffffffff]) assert.equal(index.get(id), -1, `id ${id}`);
});

/** Records of 6 bytes: 4 bytes of identity, then a 2-byte field to ignore, little-endian. */
function records(list: Array<[number, number]>, pad = 0): Buffer {
  const buf = Buffer.alloc(pad + list.length * 6);
  list.forEach(([id, field], r) => {
    buf.writeUInt32LE(id, pad + r * 6);
    buf.writeUInt16LE(field, pad + r * 6 + 4);
  });
  return buf.subarray(pad);
}

test('KeyGroups: records equal but for the ignored field share a group; others do not', () => {
  const list: Array<[number, number]> = [];
  for (let id = 0; id < 3000; id++) for (let f = 0; f < 4; f++) list.push([id * 4096, f]);
  list.push([999_999, 7]); // a group with no head
  for (const pad of [0, 1]) {
    // pad 1: the records start at an odd offset (copied into aligned words).
    const keys = records(list, pad);
    const groups = new KeyGroups(keys, 6, 4, 2, 3000);
    for (let r = 0; r < list.length; r++) if (list[r]![1] === 2) groups.add(r, list[r]![0] / 4096);
    for (let r = 0; r < list.length - 1; r++) assert.equal(groups.find(r), list[r]![0] / 4096, `record ${r} (pad ${pad})`);
    assert.equal(groups.find(list.length - 1), -1);
  }
});

test('KeyGroups: a group added twice keeps its first number', () => {
  const keys = records([
    [5, 0],
    [5, 1],
    [6, 0],
  ]);
  const groups = new KeyGroups(keys, 6, 4, 2, 2);
  groups.add(0, 10);
  groups.add(1, 11);
  assert.equal(groups.find(1), 10);
  assert.equal(groups.find(2), -1);
});
