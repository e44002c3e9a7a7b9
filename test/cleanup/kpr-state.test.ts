/**
 * `kpr cleanup` after a real agent run: no pins, no links, nothing attached to
 * the cgroup, and a ClusterIP connect is no longer translated. Idempotent,
 * and --dry-run lists without removing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { BoxCluster, NODE_NAME } from '../../sandbox/cluster.js';
import { queryCgroupPrograms } from '../../native/index.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

/** connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6 (enum bpf_attach_type). */
const SOCK_ATTACH_TYPES = [10, 11, 14, 15, 19, 20, 29, 30];

function kpr(...args: string[]) {
  const r = spawnSync(cliBin, args, { encoding: 'utf8' });
  return { out: r.stdout, err: r.stderr, status: r.status };
}

describe('kpr cleanup after an agent run', { timeout: 120_000 }, () => {
  let box: BoxCluster;
  const attached = () => SOCK_ATTACH_TYPES.flatMap((t) => queryCgroupPrograms(box.sandbox.cgroupPath, t));

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: [{ name: 'web-a', ip: '198.18.0.10' }] });
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'cleanup' },
      spec: { type: 'ClusterIP', clusterIP: '198.19.0.10', clusterIPs: ['198.19.0.10'], ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
    });
    box.api.create({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'web-1', namespace: 'cleanup', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: [{ addresses: ['198.18.0.10'], conditions: { ready: true }, nodeName: NODE_NAME }],
    });
    await box.startAgent();
    assert.equal((await box.client('http', '198.19.0.10:80', ['--count', '3'])).ok, 3, 'the ClusterIP works before the clean-up');
    await box.stopAgent('SIGTERM');
  });

  after(async () => {
    await box?.close();
  });

  test('--dry-run lists the links, maps and directories and removes nothing', () => {
    const before = attached();
    assert.ok(before.length >= 8, `programs attached after the agent stopped: ${before.length}`);
    const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir, '--dry-run');
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /would remove: bpf links: bpf-link .*\/links\/kpr_connect4$/m);
    assert.match(r.out, /would remove: bpffs pins: bpf-map .*\/maps\/kpr_svc4?$/m);
    assert.match(r.out, new RegExp(`would remove: bpffs pins: directory ${box.sandbox.bpffsDir}$`, 'm'));
    assert.ok(existsSync(box.sandbox.bpffsDir));
    assert.deepEqual(attached(), before);
  });

  test('removes pins, links and cgroup attachments; the ClusterIP is no longer translated', async () => {
    const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir);
    assert.equal(r.status, 0, r.out + r.err);
    assert.match(r.out, /removed: bpf links: bpf-link .*kpr_connect4/);
    assert.equal(existsSync(box.sandbox.bpffsDir), false, 'the bpffs directory is gone');
    assert.deepEqual(attached(), [], 'no program attached to the cgroup');
    const rep = await box.client('once', '198.19.0.10:80', ['--timeout-ms', '2000']);
    assert.equal(rep.ok, 0, `a connect to the ClusterIP reached a pod: ${JSON.stringify(rep)}`);
  });

  test('a second run is a no-op', () => {
    const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir);
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /nothing to remove/);
  });

  test('refuses the bpffs root and paths outside a bpf filesystem', () => {
    const root = kpr('cleanup', '--bpffs', '/sys/fs/bpf', '--dry-run');
    assert.notEqual(root.status, 0);
    assert.match(root.err, /root of a bpf filesystem/);
    const tmp = kpr('cleanup', '--bpffs', '/tmp', '--dry-run');
    assert.notEqual(tmp.status, 0);
    assert.match(tmp.err, /not on a bpf filesystem/);
  });
});
