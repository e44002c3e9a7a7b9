/** --external-ip-cidrs: parsed and checked at start, from the command line or the --config file. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';

const BASE = ['--cgroup-path', '/sys/fs/cgroup'];

test('default: empty (every externalIP); a comma-separated IPv4/IPv6 list is kept', () => {
  assert.deepEqual((parseAgentArgs(BASE, {}) as AgentConfig).externalIPCidrs, []);
  const cfg = parseAgentArgs([...BASE, '--external-ip-cidrs', '203.0.113.0/24, 2001:db8:1::/48,,'], {}) as AgentConfig;
  assert.deepEqual(cfg.externalIPCidrs, ['203.0.113.0/24', '2001:db8:1::/48']);
});

test('an invalid entry fails the start, naming it', () => {
  for (const bad of ['203.0.113.0', '203.0.113.0/33', 'example.com/24', '2001:db8::/129']) {
    assert.throws(
      () => parseAgentArgs([...BASE, `--external-ip-cidrs=198.18.0.0/15,${bad}`], {}),
      new RegExp(`invalid --external-ip-cidrs entry "${bad.replace(/[./]/g, '\\$&')}"`),
    );
  }
});

test('the --config file key external-ip-cidrs, overridden by the flag', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-config-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, 'external-ip-cidrs: 198.51.100.0/24,2001:db8::/64\n');
    assert.deepEqual((parseAgentArgs(['--config', file, ...BASE], {}) as AgentConfig).externalIPCidrs, ['198.51.100.0/24', '2001:db8::/64']);
    assert.deepEqual((parseAgentArgs(['--config', file, ...BASE, '--external-ip-cidrs', '192.0.2.0/24'], {}) as AgentConfig).externalIPCidrs, ['192.0.2.0/24']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
