import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HEAP_GROWING_PERCENT, releaseMemory } from '../../agent/memory.js';

test('releaseMemory: a full GC when node exposes it, malloc_trim always', () => {
  // bin/kpr-agent passes --expose-gc; the test runner does not: then only malloc_trim runs.
  const exposed = typeof (globalThis as { gc?: unknown }).gc === 'function';
  for (const r of [releaseMemory(), releaseMemory()]) {
    assert.ok(r.ms >= 0);
    assert.equal(r.fullGc, exposed);
  }
});

test('after a sync, a filling young generation is collected (a minor GC), an emptier one is left alone, and nothing runs without --expose-gc', async () => {
  const { execFileSync } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const memory = fileURLToPath(new URL('../../agent/memory.js', import.meta.url));
  // In a child: the test runner's own heap and flags must not decide the outcome.
  const script = `
    import { getHeapSpaceStatistics } from 'node:v8';
    const { collectYoungIfFilling } = await import(${JSON.stringify(memory)});
    const young = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    const fill = (s) => s.space_used_size / (s.space_used_size + s.space_available_size);
    let sink = [];
    // Allocate short-lived objects until the young generation is over 70% full (bounded).
    for (let i = 0; i < 1e6 && fill(young()) < 0.7; i++) sink.push({ i }), sink.length > 64 && (sink = []);
    const before = fill(young());
    const collected = collectYoungIfFilling();
    const after = fill(young());
    const again = collectYoungIfFilling();
    console.log(JSON.stringify({ before, collected, after, again }));
  `;
  const run = (flags: string[]) => JSON.parse(execFileSync(process.execPath, [...flags, '--input-type=module', '-e', script], { encoding: 'utf8' }));
  const withGc = run(['--expose-gc', '--max-semi-space-size=2']);
  assert.ok(withGc.before >= 0.6, `young generation filled to ${withGc.before}`);
  assert.equal(withGc.collected, true);
  assert.ok(withGc.after < 0.6, `after the minor GC: ${withGc.after}`);
  assert.equal(withGc.again, false, 'a young generation below the threshold is not collected again');
  const withoutGc = run(['--max-semi-space-size=2']);
  assert.equal(withoutGc.collected, false);
});

test('afterInitialSync: the full GC and malloc_trim, with V8 growing the heap by HEAP_GROWING_PERCENT from then on', async () => {
  const { execFileSync } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const memory = fileURLToPath(new URL('../../agent/memory.js', import.meta.url));
  // In a child: it changes a V8 flag for the rest of the process's life.
  const script = `
    const { afterInitialSync } = await import(${JSON.stringify(memory)});
    console.log(JSON.stringify(afterInitialSync()));
  `;
  const r = JSON.parse(execFileSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], { encoding: 'utf8' }));
  assert.equal(r.fullGc, true);
  assert.ok(HEAP_GROWING_PERCENT > 0 && HEAP_GROWING_PERCENT < 100);
});
