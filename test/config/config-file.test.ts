/**
 * `--config FILE`: keys are flag names, the command line wins, unknown keys
 * and wrong types are errors naming the key; and the flags the chart passes
 * (k8s-service-host/port) parse; and hostile files (alias bombs, FIFOs,
 * devices, oversize, deep nesting) fail fast with an error naming the file.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { AGENT_FLAGS, parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { configFileArgs } from '../../agent/config/config-file.js';

function withFile(text: string, fn: (file: string) => void): void {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-config-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, text);
    fn(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const BASE = ['--cgroup-path', '/sys/fs/cgroup'];

test('file values apply; the command line overrides them', () => {
  withFile(
    'node-name: from-file\nsync-period: 10s\nmin-sync-period: 250ms\nbpffs: /sys/fs/bpf/kpr-x\nk8s-service-host: 198.18.0.2\nk8s-service-port: 6443\nlog-level: debug\n',
    (file) => {
      const cfg = parseAgentArgs(['--config', file, ...BASE], {}) as AgentConfig;
      assert.equal(cfg.nodeName, 'from-file');
      assert.equal(cfg.syncPeriodMs, 10_000);
      assert.equal(cfg.minSyncPeriodMs, 250);
      assert.equal(cfg.bpffsDir, '/sys/fs/bpf/kpr-x');
      assert.equal(cfg.k8sServiceHost, '198.18.0.2');
      assert.equal(cfg.k8sServicePort, 6443);
      assert.equal(cfg.logLevel, 'debug');
      const over = parseAgentArgs([...BASE, '--node-name', 'from-flag', '--config', file, '--sync-period', '1m'], {}) as AgentConfig;
      assert.equal(over.nodeName, 'from-flag');
      assert.equal(over.syncPeriodMs, 60_000);
      assert.equal(over.minSyncPeriodMs, 250, 'unset on the command line: the file value');
    },
  );
});

test('defaults stay when neither file nor flag sets a value; an empty file is fine', () => {
  withFile('', (file) => {
    const cfg = parseAgentArgs(['--config', file, ...BASE], {}) as AgentConfig;
    assert.equal(cfg.syncPeriodMs, 30_000);
    assert.equal(cfg.k8sServiceHost, undefined);
    assert.equal(cfg.k8sServicePort, undefined);
  });
});

test('an unknown key is an error naming it (typos fail)', () => {
  withFile('node-name: a\nsync-perod: 10s\n', (file) => {
    assert.throws(() => parseAgentArgs(['--config', file, ...BASE], {}), /unknown key "sync-perod"/);
  });
  assert.throws(() => configFileArgs('config: other.yaml\n', AGENT_FLAGS), /unknown key "config"/);
});

test('wrong types and bad YAML are errors naming the key or the file', () => {
  assert.throws(() => configFileArgs('node-name: [a, b]\n', AGENT_FLAGS, 'f.yaml'), /f\.yaml: key "node-name" must be a string/);
  assert.throws(() => configFileArgs('- a\n', AGENT_FLAGS, 'f.yaml'), /f\.yaml: expected a mapping/);
  assert.throws(() => configFileArgs('a: [\n', AGENT_FLAGS, 'f.yaml'), /f\.yaml: not valid YAML/);
  assert.throws(() => parseAgentArgs(['--config', '/nonexistent/kpr.yaml', ...BASE], {}), /--config \/nonexistent\/kpr\.yaml: ENOENT/);
});

test('every flag of the table is a config-file key (flags added later included)', () => {
  for (const [name, flag] of Object.entries(AGENT_FLAGS)) {
    if (name === 'config' || name === 'help') continue;
    const value = flag.type === 'boolean' ? true : '1';
    const args = configFileArgs(`${name}: ${JSON.stringify(value)}\n`, AGENT_FLAGS);
    assert.deepEqual(args, flag.type === 'boolean' ? [`--${name}`] : [`--${name}=1`], name);
  }
});

test('--k8s-service-port is validated', () => {
  assert.throws(() => parseAgentArgs([...BASE, '--k8s-service-port', 'https'], {}), /invalid --k8s-service-port "https"/);
  assert.throws(() => parseAgentArgs([...BASE, '--k8s-service-port', '70000'], {}), /invalid --k8s-service-port/);
  const cfg = parseAgentArgs([...BASE, '--k8s-service-host', '2001:db8::2', '--k8s-service-port', '443'], {}) as AgentConfig;
  assert.equal(cfg.k8sServiceHost, '2001:db8::2');
  assert.equal(cfg.k8sServicePort, 443);
});

test('--udp-termination is auto by default, takes bpf or netlink, and rejects anything else', () => {
  assert.equal((parseAgentArgs(BASE, {}) as AgentConfig).udpTermination, 'auto');
  assert.equal((parseAgentArgs([...BASE, '--udp-termination', 'netlink'], {}) as AgentConfig).udpTermination, 'netlink');
  withFile('udp-termination: bpf\n', (file) => assert.equal((parseAgentArgs(['--config', file, ...BASE], {}) as AgentConfig).udpTermination, 'bpf'));
  assert.throws(() => parseAgentArgs([...BASE, '--udp-termination', 'iterator'], {}), /invalid --udp-termination "iterator" \(one of auto, bpf, netlink\)/);
});

// --- Hostile or odd files: each fails fast with a message naming the file and the limit. ---

/** A "billion laughs": 9 levels of 9 aliases each, ~400 bytes that would expand to 9^9 strings. */
export const ALIAS_BOMB = [
  'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
  ...'bcdefghi'.split('').map((c, i) => `${c}: &${c} [${Array(9).fill(`*${'abcdefghi'[i]}`).join(',')}]`),
  '',
].join('\n');

test('an alias bomb is refused at the alias limit, not expanded', { timeout: 30_000 }, () => {
  withFile(ALIAS_BOMB, (file) => {
    assert.throws(() => parseAgentArgs(['--config', file, ...BASE], {}), new RegExp(`^Error: ${file}: not valid YAML: aliases expand beyond the limit of 100`));
  });
  assert.throws(
    () => configFileArgs('node-name: &n x\nbpffs: &c [x, &d [y, *c]]\n', AGENT_FLAGS, 'f.yaml'),
    /f\.yaml: not valid YAML: alias \*c at line 2, column \d+ refers to a node that contains it/,
  );
});

test('a FIFO, a device, a socket or a directory as --config is refused without reading it', { timeout: 30_000 }, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-config-'));
  const server = net.createServer();
  try {
    const fifo = path.join(dir, 'fifo.yaml');
    execFileSync('mkfifo', [fifo]); // no writer: a blocking open would wait for ever
    assert.throws(() => parseAgentArgs(['--config', fifo, ...BASE], {}), new RegExp(`--config ${fifo}: not a regular file \\(a FIFO\\)`));
    assert.throws(() => parseAgentArgs(['--config', '/dev/zero', ...BASE], {}), /--config \/dev\/zero: not a regular file \(a character device\)/);
    assert.throws(() => parseAgentArgs(['--config', dir, ...BASE], {}), new RegExp(`--config ${dir}: not a regular file \\(a directory\\)`));
    const sock = path.join(dir, 'kpr.sock');
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    assert.throws(() => parseAgentArgs(['--config', sock, ...BASE], {}), new RegExp(`--config ${sock}: not a regular file \\(a socket`));
  } finally {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a config file over 1 MiB is refused naming the limit; one just under it is read', () => {
  withFile(`node-name: big\n#${'x'.repeat(1024 * 1024)}\n`, (file) => {
    assert.throws(
      () => parseAgentArgs(['--config', file, ...BASE], {}),
      new RegExp(`--config ${file}: too large: ${1024 * 1024 + 17} bytes, the limit is 1 MiB`),
    );
  });
  withFile(`node-name: big\n#${'x'.repeat(1024 * 1024 - 20)}\n`, (file) => {
    assert.equal((parseAgentArgs(['--config', file, ...BASE], {}) as AgentConfig).nodeName, 'big');
  });
});

test('nesting beyond 100 levels is an error naming the file and line, not a stack overflow', { timeout: 30_000 }, () => {
  for (const text of [
    `node-name: ${'['.repeat(100_000)}${']'.repeat(100_000)}\n`,
    `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`,
    Array.from({ length: 150 }, (_, i) => `${' '.repeat(i)}a:`).join('\n'),
  ]) {
    assert.throws(
      () => configFileArgs(text, AGENT_FLAGS, 'deep.yaml'),
      /^Error: deep\.yaml: not valid YAML: nesting deeper than the limit of 100 levels at line \d+, column \d+$/,
    );
  }
});

test('repeated keys and several documents are errors; comments, anchors, quotes and merge keys still read', () => {
  assert.throws(
    () => configFileArgs('node-name: a\nlog-level: info\nnode-name: b\n', AGENT_FLAGS, 'f.yaml'),
    /f\.yaml: not valid YAML: Map keys must be unique: "node-name" repeats at line 3, column 1/,
  );
  assert.throws(() => configFileArgs('node-name: a\n---\nnode-name: b\n', AGENT_FLAGS, 'f.yaml'), /f\.yaml: expected one YAML document, found 2/);
  const text = [
    '%YAML 1.2',
    '---',
    '# kubeadm-style: comments, quoting, anchors',
    "node-name: 'node-1'   # trailing comment",
    'bpffs: "/sys/fs/bpf/kpr"',
    'sync-period: &p 10s',
    'min-sync-period: *p',
    'k8s-service-port: 6443',
    'log-level: >-',
    '  debug',
    '...',
    '',
  ].join('\n');
  assert.deepEqual(configFileArgs(text, AGENT_FLAGS), [
    '--node-name=node-1',
    '--bpffs=/sys/fs/bpf/kpr',
    '--sync-period=10s',
    '--min-sync-period=10s',
    '--k8s-service-port=6443',
    '--log-level=debug',
  ]);
  assert.deepEqual(configFileArgs('# only a comment\n', AGENT_FLAGS), []);
});

test("a boolean in the config file is a string flag's true/false (service-counters: false)", async () => {
  const { parseAgentArgs } = await import('../../agent/config/agent-config.js');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-cfg-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, 'service-counters: false\n');
    const cfg = parseAgentArgs(['--config', file, '--node-name', 'n1'], {});
    assert.notEqual(cfg, 'help');
    assert.equal((cfg as { serviceCounters: boolean }).serviceCounters, false);
    assert.equal((parseAgentArgs(['--node-name', 'n1'], {}) as { serviceCounters: boolean }).serviceCounters, true);
    assert.throws(() => parseAgentArgs(['--node-name', 'n1', '--service-counters', 'maybe'], {}), /invalid --service-counters "maybe" \(true or false\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
