import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { HEAP_GROWING_PERCENT, releaseMemory } from '../../agent/runtime/memory.js';

const memoryModule = JSON.stringify(fileURLToPath(new URL('../../agent/runtime/memory.js', import.meta.url)));

/** Runs `script` (an ES module; `memory` names agent/runtime/memory.js) in a child node with `flags`: the test runner's own heap and flags must not decide the outcome; its last line, parsed. */
function inChild(flags: string[], script: string): Record<string, unknown> {
  const out = execFileSync(process.execPath, [...flags, '--input-type=module', '-e', `const memory = ${memoryModule};\n${script}`], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').pop()!) as Record<string, unknown>;
}

test('releaseMemory: a full GC when node exposes it, malloc_trim always', () => {
  // bin/kpr-agent passes --expose-gc; the test runner does not: then only malloc_trim runs.
  const exposed = typeof (globalThis as { gc?: unknown }).gc === 'function';
  for (const r of [releaseMemory(), releaseMemory()]) {
    assert.ok(r.ms >= 0);
    assert.equal(r.fullGc, exposed);
  }
});

test('after a sync, a filling young generation is collected (a minor GC), an emptier one is left alone, and nothing runs without --expose-gc', () => {
  const script = `
    const { getHeapSpaceStatistics } = await import('node:v8');
    const { collectYoungIfFilling } = await import(memory);
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
  const run = (flags: string[]) => inChild(flags, script);
  const withGc = run(['--expose-gc', '--max-semi-space-size=2']);
  assert.ok(Number(withGc.before) >= 0.6, `young generation filled to ${withGc.before}`);
  assert.equal(withGc.collected, true);
  assert.ok(Number(withGc.after) < 0.6, `after the minor GC: ${withGc.after}`);
  assert.equal(withGc.again, false, 'a young generation below the threshold is not collected again');
  const withoutGc = run(['--max-semi-space-size=2']);
  assert.equal(withoutGc.collected, false);
});

test('afterInitialSync: the full GC and malloc_trim, with V8 growing the heap by HEAP_GROWING_PERCENT from then on', () => {
  // In a child: it changes a V8 flag for the rest of the process's life.
  const r = inChild(['--expose-gc'], 'const { afterInitialSync } = await import(memory);\nconsole.log(JSON.stringify(afterInitialSync()));');
  assert.equal(r.fullGc, true);
  assert.ok(HEAP_GROWING_PERCENT > 0 && HEAP_GROWING_PERCENT < 100);
});
