/**
 * `kpr plan -f` against hostile files, through the real bin/kpr (no root,
 * no BPF): a billion-laughs YAML, nesting 100,000 levels deep (YAML and
 * JSON), /dev/zero, a FIFO nobody writes to (named directly and found in a
 * directory), and a 1 GiB (sparse) manifest. Each must end, with a non-zero
 * exit and a short error naming the file, not a hang, a stack trace or a
 * process killed for its memory. The parser's own limits are unit-tested
 * next to it; this is the black-box check. Bounded by the test timeout and
 * by killing a child that outlives it (no timing is asserted).
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cliBin, repoRoot } from '../support/paths.js';

/** A child still running after this is killed (and the test fails on the signal). */
const KILL_AFTER_MS = 30_000;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function kpr(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    // A 512 MiB heap cap: a parser that expands what it reads dies of it here instead of taking the machine.
    execFile(
      cliBin,
      args,
      { cwd: repoRoot, timeout: KILL_AFTER_MS, killSignal: 'SIGKILL', maxBuffer: 16 << 20, env: { ...process.env, NODE_OPTIONS: '--max-old-space-size=512' } },
      (err, stdout, stderr) => {
        const e = err as (NodeJS.ErrnoException & { code?: number | string; signal?: NodeJS.Signals | null }) | null;
        resolve({ code: e ? (typeof e.code === 'number' ? e.code : null) : 0, signal: e?.signal ?? null, stdout, stderr });
      },
    );
  });
}

/** The run failed cleanly: not killed, a non-zero exit, a short message on stderr naming `file` and matching `what`, no stack trace, nothing planned. */
function assertClearError(r: Run, file: string, what: RegExp): void {
  assert.equal(
    r.signal,
    null,
    `kpr plan was killed (${r.signal}): it did not finish within ${KILL_AFTER_MS} ms or ran out of memory; stderr: ${r.stderr.slice(0, 500)}`,
  );
  assert.notEqual(r.code, 0, `kpr plan succeeded on a hostile file; stdout: ${r.stdout.slice(0, 300)}`);
  assert.ok(r.stderr.includes(file), `the error names ${file}: ${r.stderr.slice(0, 500)}`);
  // What it says, without the file's name (which must not be what matches).
  assert.match(r.stderr.split(file).join('FILE'), what);
  assert.ok(r.stderr.length < 2048, `a short message, not ${r.stderr.length} bytes: ${r.stderr.slice(0, 300)}`);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  assert.equal(r.stdout, '');
}

/** Nine levels of nine aliases each: 9^9 (387 million) "lol"s once expanded. */
function billionLaughs(): string {
  const lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
  for (let i = 1; i <= 8; i++) lines.push(`a${i}: &a${i} [${Array.from({ length: 9 }, () => `*a${i - 1}`).join(',')}]`);
  return [
    'apiVersion: v1',
    'kind: Service',
    'metadata: {name: laughs, namespace: default}',
    'spec:',
    '  clusterIP: 10.96.0.10',
    '  ports: [{port: 80}]',
    '  bomb:',
    ...lines.map((l) => `    ${l}`),
    '  externalIPs: *a8',
    '',
  ].join('\n');
}

describe('kpr plan -f with hostile files: a clear error, and an end', { timeout: 6 * KILL_AFTER_MS }, () => {
  let dir: string;
  const file = (name: string) => path.join(dir, name);

  before(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-hostile-input-'));
    writeFileSync(file('laughs.yaml'), billionLaughs());
    const depth = 100_000;
    writeFileSync(file('nested.yaml'), `apiVersion: v1\nkind: Service\nmetadata: {name: deep}\nspec: ${'['.repeat(depth)}${']'.repeat(depth)}\n`);
    writeFileSync(file('nested.json'), `{"apiVersion":"v1","kind":"Service","metadata":{"name":"deep"},"spec":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`);
    execFileSync('mkfifo', [file('fifo.yaml')]);
    mkdirSync(file('with-fifo'));
    writeFileSync(
      file('with-fifo/a-service.yaml'),
      'apiVersion: v1\nkind: Service\nmetadata: {name: ok}\nspec: {clusterIP: 10.96.0.11, ports: [{port: 80}]}\n',
    );
    execFileSync('mkfifo', [file('with-fifo/b-fifo.yaml')]);
    writeFileSync(file('huge.yaml'), '');
    truncateSync(file('huge.yaml'), 1 << 30); // sparse: no disk used
  });

  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a billion laughs (aliases of aliases): refused', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('laughs.yaml'), '-o', 'json'), file('laughs.yaml'), /alias/i);
  });

  it('YAML nested 100,000 levels deep: refused', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('nested.yaml')), file('nested.yaml'), /deep|depth|nest/i);
  });

  it('JSON nested 100,000 levels deep: refused', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('nested.json')), file('nested.json'), /deep|depth|nest/i);
  });

  it('/dev/zero: refused (not a regular file), without reading it', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', '/dev/zero'), '/dev/zero', /regular file|not a file/i);
  });

  it('a FIFO nobody writes to: refused (not a regular file), without waiting on it', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('fifo.yaml')), file('fifo.yaml'), /regular file|not a file/i);
  });

  it('a FIFO inside a manifest directory: refused, naming it', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('with-fifo')), file('with-fifo/b-fifo.yaml'), /regular file|not a file/i);
  });

  it('a 1 GiB manifest: refused for its size', async () => {
    assertClearError(await kpr('plan', '--node', 'node-1', '-f', file('huge.yaml')), file('huge.yaml'), /size|large|limit|too long|bytes|MiB/i);
  });
});
