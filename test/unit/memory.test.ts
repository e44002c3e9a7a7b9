import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryReleaser } from '../../agent/memory.js';

test('memory is released after the initial sync and after every full sync: a full GC when node exposes it, malloc_trim always', () => {
  const m = new MemoryReleaser();
  // bin/kpr-agent passes --expose-gc; the test runner does not: then only malloc_trim runs.
  const exposed = typeof (globalThis as { gc?: unknown }).gc === 'function';
  for (const r of [m.afterInitialSync(), m.afterFullSync()]) {
    assert.ok(r.ms >= 0);
    assert.equal(r.fullGc, exposed);
  }
});
