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
import { listInterfaces, queryCgroupPrograms, withNetns } from '../../native/index.js';
import { inNs, nsPath } from '../../sandbox/netns.js';
import { kprIngressPrograms, tcModeCases, type TcModeCase } from '../support/tc-modes.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

/** connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6 (enum bpf_attach_type). */
const SOCK_ATTACH_TYPES = [10, 11, 14, 15, 19, 20, 29, 30];

function kpr(...args: string[]) {
  const r = spawnSync(cliBin, args, { encoding: 'utf8' });
  return { out: r.stdout, err: r.stderr, status: r.status };
}

for (const tcCase of tcModeCases()) cleanupSuite(tcCase);

function cleanupSuite(tcCase: TcModeCase): void {
  describe(`kpr cleanup after an agent run [${tcCase.label}]`, { timeout: 120_000 }, () => {
    let box: BoxCluster;
    const attached = () => SOCK_ATTACH_TYPES.flatMap((t) => queryCgroupPrograms(box.sandbox.cgroupPath, t));
    const netnsArgs = () => ['--netns', nsPath(box.topo.nodeNs)];
    /** kpr's tc programs on the node namespace's interfaces, in the suite's mode. */
    const tcAttached = () =>
      withNetns(nsPath(box.topo.nodeNs), () => listInterfaces().flatMap((i) => kprIngressPrograms(tcCase.mode, i.name).map(() => i.name)));

    before(async () => {
      requireRoot();
      box = await BoxCluster.create({ pods: [{ name: 'web-a', ip: '198.18.0.10' }] });
      box.api.create({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'web', namespace: 'cleanup' },
        spec: {
          type: 'ClusterIP',
          clusterIP: '198.19.0.10',
          clusterIPs: ['198.19.0.10'],
          ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }],
        },
      });
      box.api.create({
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: 'web-1', namespace: 'cleanup', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4',
        ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
        endpoints: [{ addresses: ['198.18.0.10'], conditions: { ready: true }, nodeName: NODE_NAME }],
      });
      await box.startAgent(tcCase.args);
      assert.equal((await box.client('http', '198.19.0.10:80', ['--count', '3'])).ok, 3, 'the ClusterIP works before the clean-up');
      await box.stopAgent('SIGTERM');
    });

    after(async () => {
      await box?.close();
    });

    test('--dry-run lists the links, maps and directories and removes nothing', () => {
      const before = attached();
      assert.ok(before.length >= 8, `programs attached after the agent stopped: ${before.length}`);
      const tcBefore = tcAttached();
      assert.ok(tcBefore.length > 0 && tcBefore.every((n) => n.startsWith('v')), `kpr's tc programs on the pod veths after the agent stopped: ${tcBefore}`);
      const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir, ...netnsArgs(), '--dry-run');
      assert.equal(r.status, 0, r.err);
      if (tcCase.mode === 'tc') {
        for (const ifname of tcBefore)
          assert.match(r.out, new RegExp(`would remove: tc filters: tc-filter ${ifname} ingress handle 0x6b7072 pref 27504 `, 'm'), r.out);
      } else {
        assert.match(r.out, /would remove: bpf links: bpf-link .*\/links\/tc\/pod-v.*-ingress$/m);
      }
      assert.deepEqual(tcAttached(), tcBefore, 'a dry run removes nothing');
      assert.match(r.out, /would remove: bpf links: bpf-link .*\/links\/kpr_connect4$/m);
      assert.match(r.out, /would remove: bpffs pins: bpf-map .*\/maps\/kpr_svc(@v\d+)?$/m);
      assert.match(r.out, new RegExp(`would remove: bpffs pins: directory ${box.sandbox.bpffsDir}$`, 'm'));
      assert.ok(existsSync(box.sandbox.bpffsDir));
      assert.deepEqual(attached(), before);
    });

    test('removes pins, links and cgroup attachments; the ClusterIP is no longer translated', async () => {
      const veths = tcAttached();
      const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir, ...netnsArgs());
      assert.equal(r.status, 0, r.out + r.err);
      assert.match(r.out, /removed: bpf links: bpf-link .*kpr_connect4/);
      assert.deepEqual(tcAttached(), [], 'no tc program of kpr on any interface of the node namespace');
      if (tcCase.mode === 'tc') {
        assert.match(r.out, /removed: tc filters: tc-filter v/);
        for (const ifname of veths) assert.match(inNs(box.topo.nodeNs, 'tc', 'qdisc', 'show', 'dev', ifname), /qdisc clsact/, 'the clsact qdisc stays');
      }
      assert.equal(existsSync(box.sandbox.bpffsDir), false, 'the bpffs directory is gone');
      assert.deepEqual(attached(), [], 'no program attached to the cgroup');
      const rep = await box.client('once', '198.19.0.10:80', ['--timeout-ms', '2000']);
      assert.equal(rep.ok, 0, `a connect to the ClusterIP reached a pod: ${JSON.stringify(rep)}`);
    });

    test('a second run is a no-op', () => {
      const r = kpr('cleanup', '--bpffs', box.sandbox.bpffsDir, ...netnsArgs());
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
}
