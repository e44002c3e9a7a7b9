/**
 * The CLI's conventions, command by command, on the built bin/kpr (no root,
 * nothing touched on the node): `--help` and `-h` print the command's usage
 * in one format on stdout and exit 0; every flag the usage lists is one the
 * command parses; `kpr help COMMAND` prints its manual (NAME, SYNOPSIS,
 * DESCRIPTION, OPTIONS, EXIT STATUS, EXAMPLES) with the same flags; a usage
 * error (no command, an unknown command or flag, a missing or bad argument)
 * exits 2 with its reason on stderr. And kpr-agent's --help and usage errors.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { agentBin, cliBin } from '../support/paths.js';

const run = promisify(execFile);

async function exec(bin: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(bin, args);
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const kpr = (...args: string[]) => exec(cliBin, args);

/** Every command, as `kpr --help` lists it. */
const COMMANDS = [
  'cleanup',
  'cleanup-kube-proxy',
  'cleanup-nodes',
  'conntrack-sysctls',
  'map dump',
  'map list',
  'monitor',
  'plan',
  'preflight',
  'service get',
  'service list',
  'stats',
  'status',
  'trace',
  'version',
];

/** The commands of the top-level usage: "status", "service list", ... (their arguments left out), `help` last. */
function listedCommands(usage: string): string[] {
  const body = usage.slice(usage.indexOf('Commands:\n') + 'Commands:\n'.length, usage.indexOf('\n\n', usage.indexOf('Commands:\n')));
  const out: string[] = [];
  for (const line of body.split('\n')) {
    const m = /^ {2}([a-z][a-z-]*)(?: ([a-z]+)(?=\s|$))?/.exec(line);
    if (m) out.push(m[2] ? `${m[1]} ${m[2]}` : m[1]);
  }
  return out;
}

/** The flags rows of a usage: label ("-o, --output FORMAT") → the long name, the value placeholder. */
function usageFlags(usage: string): Array<{ long: string; value?: string }> {
  const rows = usage
    .slice(usage.indexOf('\nFlags:\n') + '\nFlags:\n'.length)
    .split('\n')
    .filter((l) => /^ {2}-/.test(l));
  return rows.map((l) => {
    const m = /^ {2}(?:-[a-z], )?(--[a-z0-9-*]+(?:, --[a-z0-9-*]+)*)(?: ([A-Z][^ ]*))?\s/.exec(l);
    assert.ok(m, `a flags row: ${l}`);
    return { long: m[1], value: m[2] };
  });
}

test('kpr --help and kpr help list every command with a summary, exit 0', async () => {
  const top = await kpr('--help');
  assert.equal(top.code, 0, top.stderr);
  assert.match(top.stdout, /^Usage: kpr COMMAND \[flags\]\n/);
  assert.deepEqual(listedCommands(top.stdout).sort(), [...COMMANDS, 'help'].sort());
  assert.match(top.stdout, /^Exit status: 0 success; 1 .*; 2 a usage error/m);
  for (const same of [['-h'], ['help']]) assert.deepEqual(await kpr(...same), top, same.join(' '));
});

test('bare kpr is a usage error: the usage on stderr, exit 2', async () => {
  const r = await kpr();
  assert.equal(r.code, 2);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^kpr: no command\nUsage: kpr COMMAND \[flags\]\n/);
});

test('every command answers --help and -h with its usage in one format, exit 0; every flag it lists parses', async () => {
  for (const command of COMMANDS) {
    const r = await kpr(...command.split(' '), '--help');
    assert.equal(r.code, 0, `${command} --help: ${r.stderr}`);
    assert.equal(r.stderr, '', command);
    const lines = r.stdout.split('\n');
    assert.match(lines[0], new RegExp(`^Usage: kpr ${command}( [A-Z/]+)? \\[flags\\]$`), command);
    assert.match(lines[1], /^[A-Z].*\.$/, `${command}: a one-line description`);
    assert.equal(lines[2], '', command);
    assert.equal(lines[3], 'Flags:', command);
    const flags = usageFlags(r.stdout);
    assert.ok(
      flags.some((f) => f.long === '--help'),
      `${command} lists -h, --help`,
    );
    assert.ok(!r.stdout.includes('Commands:'), `${command} printed the top-level usage instead of its own`);
    assert.deepEqual(await kpr(...command.split(' '), '-h'), r, `${command} -h`);
    // The listed flags are the command's: given all of them (with values), --help still answers 0.
    const all = flags.filter((f) => f.long !== '--help' && !f.long.includes('*')).flatMap((f) => [f.long, ...(f.value ? ['x'] : [])]);
    const withFlags = await kpr(...command.split(' '), ...all, '--help');
    assert.equal(withFlags.code, 0, `${command} ${all.join(' ')}: ${withFlags.stderr}`);
  }
});

test('every command: an unknown flag is a usage error (exit 2) naming it and where to look', async () => {
  for (const command of COMMANDS) {
    const r = await kpr(...command.split(' '), '--no-such-flag');
    assert.equal(r.code, 2, `${command}: ${r.stderr}`);
    assert.equal(r.stdout, '', command);
    assert.equal(r.stderr, `kpr: ${command}: unknown flag --no-such-flag\nSee 'kpr ${command} --help'.\n`);
  }
});

test('every command has a manual, kpr help COMMAND: the sections of a man page, the flags of its usage, exit 0', async () => {
  for (const command of COMMANDS) {
    const r = await kpr('help', ...command.split(' '));
    assert.equal(r.code, 0, `help ${command}: ${r.stderr}`);
    const sections = r.stdout.split('\n').filter((l) => /^[A-Z][A-Z ]+$/.test(l));
    assert.deepEqual(sections, ['NAME', 'SYNOPSIS', 'DESCRIPTION', 'OPTIONS', 'EXIT STATUS', 'EXAMPLES'], command);
    const section = (name: string) => `\n${r.stdout}`.split(`\n${name}\n`)[1].split(/\n\n[A-Z]/)[0];
    assert.match(section('NAME'), new RegExp(`^ {4}kpr ${command} - \\S`), command);
    assert.match(section('SYNOPSIS'), new RegExp(`^ {4}kpr ${command}\\b`), command);
    assert.ok(section('DESCRIPTION').trim().length > 40, `${command}: a description`);
    const usage = (await kpr(...command.split(' '), '--help')).stdout;
    const options = section('OPTIONS')
      .split('\n')
      .filter((l) => /^ {4}-/.test(l))
      .map((l) => l.trim());
    const listed = usage
      .split('\n')
      .filter((l) => /^ {2}-/.test(l))
      .map((l) => /^ {2}(\S.*?)(?: {2,}|$)/.exec(l)![1]);
    assert.deepEqual(options, listed, `${command}: the manual's options are the usage's flags`);
    assert.match(section('EXIT STATUS'), /^ {4}0 {3}success\n {4}1 {3}the command ran and found a problem: \S[\s\S]*\n {4}2 {3}a usage error/, command);
    assert.match(section('EXAMPLES'), new RegExp(`^ {4}kpr ${command}\\b`), command);
  }
});

test('usage errors exit 2: an unknown command or help topic, a missing subcommand or argument, a bad value', async () => {
  for (const [args, stderr] of [
    [['nope'], /unknown command "nope"/],
    [['help', 'nosuch'], /unknown command "nosuch"/],
    [['help', 'status', 'extra'], /unexpected argument "extra"/],
    [['service'], /"service" needs a subcommand: service list, service get/],
    [['map', 'nope'], /"map" needs a subcommand/],
    [['service', 'get'], /NAMESPACE\/NAME expected/],
    [['map', 'dump'], /NAME expected/],
    [['trace'], /--to ADDR:PORT is required/],
    [['trace', '--to'], /--to needs a value/],
    [['status', '-o', 'yaml'], /invalid --output "yaml" \(table or json\)/],
    [['version', 'extra'], /unexpected argument "extra"/],
    [['plan', '-f', '.'], /--node NAME is required/],
    [['cleanup-kube-proxy', '--bpffs', '/x'], /unknown flag --bpffs/],
    [['status', '--timeout', 'soon'], /timeout/],
  ] as Array<[string[], RegExp]>) {
    const r = await kpr(...args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.equal(r.stdout, '', args.join(' '));
    assert.match(r.stderr, stderr, args.join(' '));
  }
});

test('kpr-agent: --help exits 0 with its usage on stdout; an unknown flag or a bad value exits 2', async () => {
  const help = await exec(agentBin, ['--help']);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^Usage: kpr-agent \[flags\]/);
  for (const args of [['--no-such-flag'], ['--sync-period', 'soon'], ['--tc-attach', 'nope']]) {
    const r = await exec(agentBin, args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /^kpr-agent: /, args.join(' '));
  }
});
