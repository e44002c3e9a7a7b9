import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryReleaser } from '../../agent/memory.js';

test('memory is released after the initial sync always, after a full sync only when the heap grew', () => {
  const m = new MemoryReleaser();
  const first = m.afterInitialSync();
  assert.ok(first.ms >= 0);
  // bin/kpr-agent passes --expose-gc; the test runner does not: then only malloc_trim runs.
  assert.equal(first.fullGc, typeof (globalThis as { gc?: unknown }).gc === 'function');
  assert.equal(m.afterFullSync(), undefined, 'nothing grew since');
  const retained = Array.from({ length: 300_000 }, (_, i) => ({ i, s: `entry-${i}` }));
  assert.ok(m.afterFullSync(), 'the heap grew by far more than 10%');
  assert.equal(retained.length, 300_000);
});
