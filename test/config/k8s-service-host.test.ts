/**
 * --k8s-service-host (chart value k8sServiceHost) is a bare host: a value
 * with a port or a scheme is refused at start with the reason, instead of the
 * URL setter silently dropping the port or the whole value (the agent would
 * then dial the kubernetes ClusterIP, and the "k8sServiceHost unset" warning
 * would be suppressed by the bad value).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { loadKubeConfig } from '../../agent/k8s/kubeconfig.js';
import { apiServerViaServiceIp } from '../../agent/preflight/api-server-route.js';

const BASE = ['--cgroup-path', '/sys/fs/cgroup'];
const IN_CLUSTER = { KUBERNETES_SERVICE_HOST: '10.96.0.1' };

const BAD: Array<[string, RegExp]> = [
  ['1.2.3.4:6443', /it has a port/],
  ['api.example.com:6443', /it has a port/],
  ['[2001:db8::2]:6443', /it has a port/],
  ['https://x', /it has a scheme/],
  ['https://198.18.0.2:6443', /it has a scheme/],
  ['[2001:db8::2]', /it is a bracketed IPv6 address/],
  ['api.example.com/path', /it is not an IP address or DNS name/],
  ['300.1.1.1', /it is not an IP address or DNS name/],
  ['fe80::1%eth0', /it is not an IP address or DNS name/],
  ['a b', /it is not an IP address or DNS name/],
];

test('a host with a port or a scheme is refused, saying why and what to give; the flag and the --config key alike', () => {
  for (const [host, why] of BAD) {
    assert.throws(
      () => parseAgentArgs([...BASE, '--k8s-service-host', host], IN_CLUSTER),
      (err: Error) => {
        assert.ok(err.message.startsWith(`invalid --k8s-service-host "${host}": `), err.message);
        assert.match(err.message, why);
        assert.match(err.message, /a bare IP address or DNS name, e\.g\. 198\.18\.0\.2, 2001:db8::2 or api\.example\.com; the port goes in --k8s-service-port/);
        return true;
      },
      host,
    );
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-host-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, 'k8s-service-host: "198.18.0.2:6443"\n');
    assert.throws(() => parseAgentArgs(['--config', file, ...BASE], IN_CLUSTER), /invalid --k8s-service-host "198\.18\.0\.2:6443": it has a port/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bare IPv4, IPv6 and DNS names are kept; unset or empty is the in-cluster ClusterIP route, which the agent warns about', () => {
  for (const host of ['198.18.0.2', '2001:db8::2', '::1', 'api.example.com', 'kubernetes.default.svc.', 'cp-1']) {
    const cfg = parseAgentArgs([...BASE, '--k8s-service-host', host], IN_CLUSTER) as AgentConfig;
    assert.equal(cfg.k8sServiceHost, host);
    assert.equal(apiServerViaServiceIp(cfg, IN_CLUSTER), false);
  }
  for (const args of [[], ['--k8s-service-host=']]) {
    const cfg = parseAgentArgs([...BASE, ...args], IN_CLUSTER) as AgentConfig;
    assert.equal(cfg.k8sServiceHost, undefined);
    assert.equal(apiServerViaServiceIp(cfg, IN_CLUSTER), true, 'the warning is logged');
  }
});

test('loadKubeConfig refuses a bad serviceHost too, instead of the URL setter dropping its port', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-host-'));
  try {
    const file = path.join(dir, 'kubeconfig');
    writeFileSync(
      file,
      'apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: "https://10.96.0.1:443"}\n  name: c\ncontexts:\n- context: {cluster: c, user: u}\n  name: x\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n',
    );
    assert.equal(loadKubeConfig({ kubeconfig: file, serviceHost: '198.18.0.2', servicePort: 6443 }).getCurrentCluster()?.server, 'https://198.18.0.2:6443');
    assert.throws(() => loadKubeConfig({ kubeconfig: file, serviceHost: '198.18.0.2:6443' }), /invalid serviceHost "198\.18\.0\.2:6443": it has a port/);
    assert.throws(() => loadKubeConfig({ kubeconfig: file, serviceHost: 'https://198.18.0.2' }), /it has a scheme/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
