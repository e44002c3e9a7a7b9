/**
 * charts/kpr's values.schema.json, by the real helm: k8sServiceHost is a bare
 * host (a port or a scheme is refused, naming the value, rather than the
 * agent failing on every node, and the NOTES' "k8sServiceHost is not set"
 * warning is not silenced by a bad value); and the config durations take Go
 * durations, as the agent does.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { repoRoot } from '../../sandbox/repo.js';
import { helm } from './helm.js';

const CHART = path.join(repoRoot, 'charts', 'kpr');
const template = (...set: string[]) => helm('template', 'kpr', CHART, '--namespace', 'kube-system', ...set.flatMap((s) => ['--set-string', s]));

describe('charts/kpr values validation with the real helm', () => {
  test('k8sServiceHost with a port or a scheme is refused, naming k8sServiceHost', () => {
    for (const bad of ['1.2.3.4:6443', 'https://x', 'https://198.18.0.2:6443', 'api.example.com:6443', '[2001:db8::2]:6443']) {
      const r = template(`k8sServiceHost=${bad}`);
      assert.notEqual(r.status, 0, `${bad} was accepted`);
      assert.match(r.stderr, /k8sServiceHost/, r.stderr);
      const install = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set-string', `k8sServiceHost=${bad}`);
      assert.notEqual(install.status, 0, `install with ${bad}: no NOTES claiming it is set`);
      assert.doesNotMatch(install.stdout, /kpr .* is installed/);
    }
  });

  test('a bare IPv4, IPv6 or DNS k8sServiceHost renders into the agent args', () => {
    for (const good of ['198.18.0.2', '2001:db8::2', 'api.example.com']) {
      const r = template(`k8sServiceHost=${good}`);
      assert.equal(r.status, 0, r.stderr);
      assert.ok(r.stdout.includes(`- --k8s-service-host=${good}`), good);
    }
  });

  test('config durations take Go durations (1m30s, 24h0m0s, 300ms) and bare seconds; a typo is refused', () => {
    const r = template('config.sync-period=1m30s', 'config.min-sync-period=300ms', 'config.ct-tcp-timeout=24h0m0s', 'config.ct-udp-timeout=30', 'config.ct-sweep-interval=1.5s');
    assert.equal(r.status, 0, r.stderr);
    for (const want of ['sync-period: 1m30s', 'min-sync-period: 300ms', 'ct-tcp-timeout: 24h0m0s', 'ct-sweep-interval: 1.5s']) assert.ok(r.stdout.includes(want), want);
    for (const bad of ['1d', '-1s', '5 s', 's']) {
      const b = template(`config.sync-period=${bad}`);
      assert.notEqual(b.status, 0, `${bad} was accepted`);
      assert.match(b.stderr, /sync-period/);
    }
  });
});
