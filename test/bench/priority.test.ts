import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

test('while the control plane is timed every thread of the harness runs at nice 10, what it spawns as under test at nice 0, and the old priority comes back', () => {
  const priority = fileURLToPath(new URL('../../bench/priority.js', import.meta.url));
  // In a child process, so the test runner's own priority is never touched.
  const script = `
    import os from 'node:os';
    import { readdirSync } from 'node:fs';
    import { spawn } from 'node:child_process';
    const { deprioritizeHarness, asUnderTest } = await import(${JSON.stringify(priority)});
    const threads = () => readdirSync('/proc/self/task').map((tid) => os.getPriority(Number(tid)));
    const start = os.getPriority();
    const threadsBefore = threads();
    const restore = deprioritizeHarness();
    const harness = os.getPriority();
    const threadsHarness = threads();
    const child = asUnderTest(spawn('sleep', ['5'], { stdio: 'ignore' }));
    const plain = spawn('sleep', ['5'], { stdio: 'ignore' });
    const underTest = os.getPriority(child.pid);
    const inherited = os.getPriority(plain.pid);
    child.kill(); plain.kill();
    restore();
    console.log(JSON.stringify({ start, harness, underTest, inherited, restored: os.getPriority(), threadsBefore, threadsHarness, threadsRestored: threads() }));
  `;
  const r = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }));
  // Every thread, not only the main one (Linux keeps a nice value per thread): node's V8 workers are the harness's GC.
  assert.ok(r.threadsBefore.length > 1, `the harness process has ${r.threadsBefore.length} thread(s)`);
  assert.deepEqual(
    r.threadsHarness,
    r.threadsBefore.map(() => 10),
    'a thread of the harness kept its priority',
  );
  assert.deepEqual(r.threadsRestored, r.threadsBefore, 'a thread did not get its priority back');
  const { threadsBefore, threadsHarness, threadsRestored, ...rest } = r;
  assert.deepEqual(rest, { start: r.start, harness: 10, underTest: 0, inherited: 10, restored: r.start });
});
