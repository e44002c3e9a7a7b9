import { test } from 'node:test';
import assert from 'node:assert/strict';
import { releaseMemory } from '../../agent/memory.js';

test('memory is released after the initial sync and after every full sync: a full GC when node exposes it, malloc_trim always', () => {
  // bin/kpr-agent passes --expose-gc; the test runner does not: then only malloc_trim runs.
  const exposed = typeof (globalThis as { gc?: unknown }).gc === 'function';
  for (const r of [releaseMemory(), releaseMemory()]) {
    assert.ok(r.ms >= 0);
    assert.equal(r.fullGc, exposed);
  }
});
