/**
 * `--config FILE`: keys are flag names, the command line wins, unknown keys
 * and wrong types are errors naming the key; and the flags the chart passes
 * (k8s-service-host/port) parse.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AGENT_FLAGS, parseAgentArgs, type AgentConfig } from '../../agent/config.js';
import { configFileArgs } from '../../agent/config-file.js';

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
  withFile('node-name: from-file\nsync-period: 10s\nmin-sync-period: 250ms\nbpffs: /sys/fs/bpf/kpr-x\nk8s-service-host: 198.18.0.2\nk8s-service-port: 6443\nlog-level: debug\n', (file) => {
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
  });
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
