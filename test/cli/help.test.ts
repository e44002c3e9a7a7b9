/**
 * `--help` everywhere: every command the top-level usage lists answers
 * `--help` (and `-h`) with its own usage on stdout and exit 0, without root
 * and without touching the node.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { cliBin } from '../support/paths.js';

const run = promisify(execFile);

async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(cliBin, args);
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** The commands of the top-level usage: "status", "service list", "map dump", ... */
function listedCommands(usage: string): string[] {
  const body = usage.slice(usage.indexOf('Commands:\n'), usage.indexOf('\nFlags:'));
  const out: string[] = [];
  for (const line of body.split('\n')) {
    const m = /^ {2}([a-z][a-z-]*)(?: ([a-z]+)(?=\s|$))?/.exec(line);
    if (m) out.push(m[2] ? `${m[1]} ${m[2]}` : m[1]);
  }
  return out;
}

test('kpr --help lists every command, and each answers --help and -h with its own usage, exit 0', async () => {
  const top = await kpr('--help');
  assert.equal(top.code, 0, top.stderr);
  const commands = listedCommands(top.stdout);
  assert.deepEqual([...commands].sort(), [
    'cleanup', 'cleanup-kube-proxy', 'cleanup-nodes', 'conntrack-sysctls', 'map dump', 'map list', 'monitor', 'plan', 'preflight', 'service get', 'service list', 'stats', 'status', 'trace', 'version',
  ]);
  for (const command of commands) {
    for (const flag of ['--help', '-h']) {
      const r = await kpr(...command.split(' '), flag);
      assert.equal(r.code, 0, `${command} ${flag}: ${r.stderr}`);
      assert.equal(r.stderr, '', `${command} ${flag}`);
      assert.match(r.stdout, /^Usage: kpr/, `${command} ${flag}`);
      // Its own usage: the command's name starts a usage line (not just the top-level list).
      const own = new RegExp(`^(Usage: kpr)?\\s*${command.replace(/ /g, ' ')}(\\s|$)`, 'm');
      assert.match(r.stdout, own, `${command} ${flag}`);
      assert.ok(!r.stdout.includes('Commands:'), `${command} ${flag} printed the top-level usage instead of its own`);
    }
  }
});

test('an unknown command is an error (exit 2) naming it', async () => {
  const r = await kpr('nope');
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown command "nope"/);
});
