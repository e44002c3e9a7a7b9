import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

test('while the control plane is timed the harness runs at nice 10, what it spawns as under test at nice 0, and the old priority comes back', () => {
  const priority = fileURLToPath(new URL('../../bench/priority.js', import.meta.url));
  // In a child process, so the test runner's own priority is never touched.
  const script = `
    import os from 'node:os';
    import { spawn } from 'node:child_process';
    const { deprioritizeHarness, asUnderTest } = await import(${JSON.stringify(priority)});
    const start = os.getPriority();
    const restore = deprioritizeHarness();
    const harness = os.getPriority();
    const child = asUnderTest(spawn('sleep', ['5'], { stdio: 'ignore' }));
    const plain = spawn('sleep', ['5'], { stdio: 'ignore' });
    const underTest = os.getPriority(child.pid);
    const inherited = os.getPriority(plain.pid);
    child.kill(); plain.kill();
    restore();
    console.log(JSON.stringify({ start, harness, underTest, inherited, restored: os.getPriority() }));
  `;
  const r = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }));
  assert.deepEqual(r, { start: r.start, harness: 10, underTest: 0, inherited: 10, restored: r.start });
});
