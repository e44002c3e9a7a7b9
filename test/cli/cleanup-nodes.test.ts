/**
 * `kpr cleanup-nodes`, run with the arguments and the clean-up DaemonSet the
 * chart renders (cleanupOnUninstall.enabled), against the embedded API
 * server. The test plays the DaemonSet controller and the kubelets: pods of
 * a DaemonSet go to the nodes its placement selects (test/support/
 * node-placement.ts), a deleted DaemonSet's pods take a while to stop, and a
 * clean-up pod becomes ready once its `kpr cleanup` "succeeded" (or keeps
 * failing, on the node told to). Observed: the agent DaemonSet is deleted
 * first, no node's clean-up pod exists before that node's agent pod is gone,
 * the clean-up runs on exactly the agent's nodes, and its DaemonSet is deleted
 * at the end, also when a node fails (then exit 1, the node and why named).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startApiServer, type ApiServer, type KubeObject } from '../../sandbox/apiserver.js';
import { cliBin } from '../support/paths.js';
import { podFitsNode, type NodeModel } from '../support/node-placement.js';
import { one, render, type K8sObject } from '../chart/render.js';

const run = promisify(execFile);
const NS = 'kube-system';
const NODES: NodeModel[] = [
  { name: 'node-a', labels: { 'kubernetes.io/os': 'linux' } },
  { name: 'node-b', labels: { 'kubernetes.io/os': 'linux' } },
  { name: 'node-win', labels: { 'kubernetes.io/os': 'windows' } },
];

/** The DaemonSet controller and kubelets, as far as kpr cleanup-nodes can see them. */
class FakeCluster {
  readonly events: string[] = [];
  /** Nodes whose clean-up init container keeps failing. */
  failing = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private ticks = 0;
  private stoppingSince = new Map<string, number>();
  private cleanupSeen = false;

  constructor(private readonly api: ApiServer) {}

  start(): void {
    this.timer = setInterval(() => this.tick(), 20);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  podsOf(owner: string): KubeObject[] {
    return this.api
      .list('Pod', NS)
      .filter((p) => p.metadata?.ownerReferences?.some((o: { kind: string; name: string }) => o.kind === 'DaemonSet' && o.name === owner));
  }

  /** Creates the DaemonSet's pods on its nodes, ready at once (the agent, already running). */
  runDaemonSet(ds: KubeObject, ready: boolean): void {
    for (const node of NODES.filter((n) => podFitsNode(ds.spec.template.spec, n))) {
      this.api.create({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: `${ds.metadata!.name}-${node.name}`,
          namespace: NS,
          labels: ds.spec.template.metadata.labels,
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: ds.metadata!.name, uid: ds.metadata!.uid, controller: true }],
        },
        spec: { nodeName: node.name },
        status: ready
          ? { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }
          : { phase: 'Pending', initContainerStatuses: [{ name: 'cleanup', state: { running: {} } }] },
      });
    }
  }

  /**
   * One pass of the controllers. The test also runs one after the command
   * exits: the command's last step (deleting the clean-up DaemonSet) can land
   * between two timer passes, and the fake must see it before the test reads
   * the events.
   */
  tick(): void {
    this.ticks++;
    // The agent DaemonSet deleted: its pods stop a few ticks later (terminationGracePeriodSeconds).
    if (!this.api.get('DaemonSet', NS, 'kpr')) {
      for (const pod of this.podsOf('kpr')) {
        const name = pod.metadata!.name!;
        if (!this.stoppingSince.has(name)) {
          this.stoppingSince.set(name, this.ticks);
          if (this.stoppingSince.size === 1) this.events.push('agent DaemonSet deleted');
        } else if (this.ticks - this.stoppingSince.get(name)! >= 5) {
          this.api.remove('Pod', NS, name);
          this.events.push(`agent pod gone: ${pod.spec.nodeName}`);
        }
      }
    }
    const cleanup = this.api.get('DaemonSet', NS, 'kpr-cleanup');
    if (cleanup && !this.cleanupSeen) {
      this.cleanupSeen = true;
      this.events.push('clean-up DaemonSet created');
      const agentsLeft = this.podsOf('kpr').map((p) => p.spec.nodeName);
      if (agentsLeft.length) this.events.push(`VIOLATION: clean-up created while agents run on ${agentsLeft.join(', ')}`);
      this.runDaemonSet(cleanup, false);
      for (const p of this.podsOf('kpr-cleanup')) this.events.push(`clean-up pod: ${p.spec.nodeName}`);
    }
    if (cleanup) {
      for (const pod of this.podsOf('kpr-cleanup')) {
        if (pod.status.conditions) continue;
        const node = pod.spec.nodeName as string;
        pod.status = this.failing.has(node)
          ? {
              phase: 'Pending',
              initContainerStatuses: [
                {
                  name: 'cleanup',
                  state: { waiting: { reason: 'CrashLoopBackOff' } },
                  lastState: { terminated: { exitCode: 1, message: 'kpr: cleanup: /sys/fs/bpf/kpr: EACCES' } },
                },
              ],
            }
          : { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] };
        this.api.update({ ...pod, metadata: { ...pod.metadata, resourceVersion: undefined } });
        if (!this.failing.has(node)) this.events.push(`cleaned: ${node}`);
      }
      const pods = this.podsOf('kpr-cleanup');
      const status = {
        observedGeneration: cleanup.metadata!.generation,
        desiredNumberScheduled: pods.length,
        numberReady: pods.filter((p) => p.status.conditions).length,
      };
      if (JSON.stringify(cleanup.status) !== JSON.stringify(status))
        this.api.update({ ...cleanup, status, metadata: { ...cleanup.metadata, resourceVersion: undefined } });
    } else if (this.cleanupSeen) {
      this.cleanupSeen = false;
      this.events.push('clean-up DaemonSet deleted');
      for (const p of this.podsOf('kpr-cleanup')) this.api.remove('Pod', NS, p.metadata!.name!);
    }
  }
}

describe('kpr cleanup-nodes with what the chart renders', () => {
  let api: ApiServer;
  let dir: string;
  let kubeconfig: string;
  let objs: K8sObject[];

  before(async () => {
    api = await startApiServer();
    dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-cleanup-nodes-'));
    kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
    objs = render({ cleanupOnUninstall: { enabled: true }, k8sServiceHost: '198.18.0.2' });
    writeFileSync(path.join(dir, 'daemonset.yaml'), one(objs, 'ConfigMap', 'kpr-cleanup').data['daemonset.yaml']);
  });

  after(async () => {
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A cluster with the agent DaemonSet and its pods, and the hook Job's own pod (same name/instance labels). */
  function cluster(): FakeCluster {
    for (const p of api.list('Pod', NS)) api.remove('Pod', NS, p.metadata!.name!);
    for (const d of api.list('DaemonSet', NS)) api.remove('DaemonSet', NS, d.metadata!.name!);
    for (const n of NODES)
      if (!api.get('Node', undefined, n.name)) api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: n.name, labels: n.labels } });
    const ds = api.create({ ...one(objs, 'DaemonSet', 'kpr'), metadata: { ...one(objs, 'DaemonSet', 'kpr').metadata, namespace: NS } });
    const fake = new FakeCluster(api);
    fake.runDaemonSet(ds, true);
    const job = one(objs, 'Job');
    api.create({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: 'kpr-cleanup-job',
        namespace: NS,
        labels: job.spec.template.metadata.labels,
        ownerReferences: [{ kind: 'Job', name: 'kpr-cleanup', controller: true }],
      },
      spec: { nodeName: 'node-a' },
      status: { phase: 'Running' },
    });
    return fake;
  }

  /** The Job's command and args as rendered, with the test's API server, file and times. */
  async function cleanupNodes(timeout: string): Promise<{ code: number; stdout: string; stderr: string }> {
    const container = one(objs, 'Job').spec.template.spec.containers[0];
    assert.deepEqual(container.command, ['/opt/kpr/bin/kpr', 'cleanup-nodes']);
    const args = (container.args as string[])
      .filter((a) => !a.startsWith('--k8s-service-') && !a.startsWith('--timeout='))
      .map((a) => (a.startsWith('--cleanup-daemonset=') ? `--cleanup-daemonset=${path.join(dir, 'daemonset.yaml')}` : a));
    assert.ok(args.includes('--agent-daemonset=kpr') && args.includes('--namespace=kube-system'), args.join(' '));
    try {
      const { stdout, stderr } = await run(cliBin, ['cleanup-nodes', ...args, `--kubeconfig=${kubeconfig}`, `--timeout=${timeout}`, '--poll-interval=50ms']);
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  }

  test('the agents stop first, then kpr cleanup runs on exactly their nodes, then the clean-up DaemonSet goes', async () => {
    const fake = cluster();
    fake.start();
    try {
      const r = await cleanupNodes('30s');
      fake.tick();
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /every node that ran the agent is cleaned\n$/);
      assert.doesNotMatch(fake.events.join('\n'), /VIOLATION/);
      const at = (e: string) => fake.events.indexOf(e);
      assert.equal(at('agent DaemonSet deleted'), 0, fake.events.join('\n'));
      for (const node of ['node-a', 'node-b']) {
        assert.ok(at(`agent pod gone: ${node}`) < at('clean-up DaemonSet created'), fake.events.join('\n'));
        assert.ok(at('clean-up DaemonSet created') < at(`clean-up pod: ${node}`), fake.events.join('\n'));
        assert.ok(at(`cleaned: ${node}`) < at('clean-up DaemonSet deleted'), fake.events.join('\n'));
      }
      assert.equal(fake.events.filter((e) => e.startsWith('clean-up pod:')).length, 2, 'not on the Windows node the agent never ran on');
      assert.equal(api.get('DaemonSet', NS, 'kpr-cleanup'), undefined);
      assert.ok(api.get('Pod', NS, 'kpr-cleanup-job'), "the hook Job's own pod is not an agent pod");
    } finally {
      fake.stop();
    }
  });

  test('a node whose clean-up keeps failing: exit 1 naming it and why, and the clean-up DaemonSet is still removed', async () => {
    const fake = cluster();
    fake.failing.add('node-b');
    fake.start();
    try {
      const r = await cleanupNodes('3s');
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(
        r.stderr,
        /gave up after 3s waiting for every node to be cleaned: 1 of 2 nodes cleaned; not done: node-b \(CrashLoopBackOff; last run exited 1: kpr: cleanup: \/sys\/fs\/bpf\/kpr: EACCES\)/,
      );
      assert.match(r.stdout, /deleted DaemonSet kube-system\/kpr-cleanup/);
      assert.equal(api.get('DaemonSet', NS, 'kpr-cleanup'), undefined);
    } finally {
      fake.stop();
    }
  });

  test('run again after the agent DaemonSet is gone (a retried hook): it says so and cleans', async () => {
    const fake = cluster();
    api.remove('DaemonSet', NS, 'kpr');
    for (const p of fake.podsOf('kpr')) api.remove('Pod', NS, p.metadata!.name!);
    fake.start();
    try {
      const r = await cleanupNodes('30s');
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /DaemonSet kube-system\/kpr is already gone/);
      assert.equal(api.get('DaemonSet', NS, 'kpr-cleanup'), undefined);
    } finally {
      fake.stop();
    }
  });
});
