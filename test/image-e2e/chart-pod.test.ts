/**
 * `make test-image`: the chart's DaemonSet pod, as helm renders it
 * (values-kubeadm.yaml over the defaults), run from the image `make image`
 * built by a real container runtime (podman, crun) on a node: a QEMU guest
 * of the kernel matrix booted without a bpffs on /sys/fs/bpf. The test
 * plays the kubelet and the DaemonSet controller (node-kubelet.ts) and
 * translates the pod template field by field (pod-to-podman.ts: a field it
 * cannot honour fails the run). One test per step; each depends on the
 * ones before (one node, one agent):
 *   1. the init container mounts bpffs on the host, where it has none;
 *   2. the agent runs with exactly the chart's capabilities, a read-only
 *      root, the chart's user, host network and PID namespaces, and every
 *      probe answers as the chart expects;
 *   3. ClusterIP (from the node) and NodePort (from outside) are served;
 *   4. the container is killed and the kubelet restarts it: no connection
 *      fails, the pins outlive it and the new agent adopts them;
 *   5. a rollout onto a node whose pins are of an older layout (the
 *      previous release's, test/support/node-v1.ts): the live map migration
 *      runs inside the new container, no connection fails;
 *   6. `kpr status`, `kpr service list`, `kpr version` in the running
 *      container (the operator's kubectl exec);
 *   7. the uninstall hook's Job (`kpr cleanup-nodes`) in a pod of its own
 *      removes everything;
 *   8. the chart broken on purpose, twice: without the capabilities that
 *      allow bpf() (BPF, and SYS_ADMIN, which allows it too) the pod never
 *      becomes ready; without the init container on a host with
 *      no bpffs the pins are not on the host (the check of step 4 fails).
 * Run only inside the guest (test/image-e2e/run.ts boots it); elsewhere the
 * suite is skipped and says why.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { AGENT_FLAGS } from '../../agent/config/agent-config.js';
import { MAPS } from '../../agent/maps/registry.js';
import { mapPinDir } from '../../agent/datapath/pins.js';
import type { HoldReport } from '../../sandbox/hold.js';
import { repoRoot } from '../../sandbox/repo.js';
import { scaled } from '../../sandbox/time-scale.js';
import { runNodeOnLayoutV1 } from '../support/node-v1.js';
import { requireRoot } from '../support/preflight.js';
import { one, type K8sObject } from '../chart/render.js';
import { CLUSTER_IP, GuestNode, JOB_POD_IP, NODE_IP, PODS, prepareGuestMounts } from './guest-node.js';
import { NodeKubelet, planOnNode, type NodeInfo } from './node-kubelet.js';
import { assertReadOnlyRoot, assertSecurityContext, cgroupSocketPrograms, hostPins, isBpffsAt, mountsOf, processView, tcPrograms } from './node-checks.js';
import { PodRun, type RunningContainer } from '../image/pod-runner.js';
import { Podman } from '../image/podman.js';
import { readRendering, type Variant } from '../image/renderings.js';

const TEST_DIR = process.env.KPR_IMAGE_TEST_DIR;
const inGuest = process.env.KPR_IN_VM === '1' && existsSync('/proc/cmdline') && /\bkpr\.out=/.test(readFileSync('/proc/cmdline', 'utf8'));
const skip = inGuest ? false : "runs the chart's pod as the node's own (root cgroup, root network namespace): only inside a QEMU guest, `make test-image`";

const NS = 'kube-system';
const BPFFS = '/sys/fs/bpf';
const SCRATCH = '/tmp/kpr-image';
const CGROUP_ROOT = '/sys/fs/cgroup';

describe("the chart's pod from the image, run by podman on a node", { skip, timeout: 60 * 60_000 }, () => {
  let node: GuestNode;
  let podman: Podman;
  let kubelet: NodeKubelet;
  let info: NodeInfo;
  let kprBpffs: string;
  let image: { ref: string; version: string; commit: string };
  const rendered = (v: Variant): K8sObject[] => readRendering(path.join(TEST_DIR!, 'chart', `${v}.yaml`));
  let objs: K8sObject[];

  /** The agent container as it runs now. */
  const agent = () => kubelet.container('kpr', 'agent');
  /** How long the chart lets the agent start: the startup probe's budget, then readiness's. */
  const readyBudgetMs = (c: RunningContainer) => {
    const s = c.plan.probes.startup;
    const r = c.plan.probes.readiness;
    return (s ? s.periodSeconds * s.failureThreshold : 0) * 1000 + (r ? r.periodSeconds * r.failureThreshold : 0) * 1000 + 60_000;
  };

  /**
   * One step: each needs the node as the steps before left it, so after a
   * failed step the next ones fail at once (naming it) instead of waiting
   * out their timeouts. `independent` steps set up what they need.
   */
  let failedStep: string | undefined;
  function step(name: string, fn: () => Promise<void>, independent = false): void {
    test(name, async () => {
      if (failedStep && !independent) assert.fail(`not run: step "${failedStep}" failed, and this one needs the node as it leaves it`);
      try {
        await fn();
      } catch (err) {
        failedStep ??= name.split(' ')[0];
        throw err;
      }
    });
  }

  function createDaemonSet(objects: K8sObject[]): void {
    for (const cm of objects.filter((o) => o.kind === 'ConfigMap')) node.addConfigMap(NS, cm.metadata.name, cm.data ?? {});
    const ds = one(objects, 'DaemonSet', 'kpr');
    node.api.create({ ...ds, metadata: { ...ds.metadata, namespace: NS } });
  }

  async function deleteDaemonSet(name: string): Promise<void> {
    if (node.api.get('DaemonSet', NS, name)) node.api.remove('DaemonSet', NS, name);
    const end = Date.now() + 300_000;
    while (kubelet.pods.has(name) && Date.now() < end) await new Promise((r) => setTimeout(r, 250));
    assert.equal(kubelet.pods.has(name), false, `the pod of ${name} stopped: ${kubelet.events.join('; ')}`);
  }

  function assertUnharmed(reports: Record<string, HoldReport>, what: string): void {
    for (const [where, rep] of Object.entries(reports)) {
      const kinds = Object.entries(rep.kinds)
        .map(([k, r]) => `${k}=${r.ok}/${r.ok + r.failed}`)
        .join(' ');
      console.log(`${what} via=${where} exchanges=${rep.ok + rep.failed} failed=${rep.failed} ${kinds}`);
      assert.equal(rep.failed, 0, `${what}, ${where}: ${JSON.stringify({ errors: rep.errors, examples: rep.examples })}`);
      for (const kind of ['echo', 'udp', 'udpNew', 'http'] as const)
        assert.ok((rep.kinds[kind]?.ok ?? 0) > 0, `${what}, ${where}: no ${kind} exchange served: ${JSON.stringify(rep.kinds)}`);
    }
  }

  before(async () => {
    requireRoot();
    assert.ok(TEST_DIR, 'KPR_IMAGE_TEST_DIR names the folder test/image-e2e/run.ts prepared (rendered chart, image store)');
    image = JSON.parse(readFileSync(path.join(TEST_DIR, 'image.json'), 'utf8'));
    prepareGuestMounts();
    node = await GuestNode.create(SCRATCH);
    podman = new Podman(path.join(SCRATCH, 'podman'), path.join(TEST_DIR, 'store', 'root'));
    info = {
      name: node.nodeName,
      labels: node.labels,
      hostIP: NODE_IP,
      serviceAccountDir: node.serviceAccountDir,
      configMaps: (ns) => node.configMaps(ns),
    };
    kubelet = new NodeKubelet(node.api, podman, info, NS, path.join(SCRATCH, 'kubelet'));
    kubelet.start();
    objs = rendered('kubeadm');
    for (const cm of objs.filter((o) => o.kind === 'ConfigMap')) node.addConfigMap(NS, cm.metadata.name, cm.data ?? {});
    const config = YAML.parse(String(objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'))?.data['config.yaml'] ?? '{}')) as Record<
      string,
      unknown
    >;
    kprBpffs = String(config.bpffs);
    assert.ok(kprBpffs.startsWith(`${BPFFS}/`), `the chart's config.bpffs (${kprBpffs}) lies in ${BPFFS}`);
  });

  after(async () => {
    await kubelet?.close().catch((err) => console.error(`kubelet close: ${(err as Error).message}`));
    await node?.close();
  });

  step('1. the init container (mount-bpffs) mounts bpffs on the host, which has none', async () => {
    assert.equal(isBpffsAt(BPFFS), false, `the guest must boot without a bpffs on ${BPFFS} (test/image-e2e/run.ts passes kpr.bpffs=0)`);
    const ds = one(objs, 'DaemonSet', 'kpr');
    const plan = planOnNode(ds.spec.template, info, { name: 'kpr-plan', namespace: NS, uid: 'plan' }, path.join(SCRATCH, 'plan'));
    assert.equal(plan.initContainers[0]?.name, 'mount-bpffs', 'the chart renders its init container, first');
    console.log(`ignored pod fields (no effect on one node's runtime): ${plan.ignored.map((i) => `${i.field} (${i.why})`).join('; ')}`);
    createDaemonSet(objs);
    const pod = await kubelet.podOf('kpr');
    await pod.initialized;
    const init = pod.run.initResults.find((r) => r.name === 'mount-bpffs');
    assert.equal(init?.code, 0, JSON.stringify(init));
    assert.ok(isBpffsAt(BPFFS), `after mount-bpffs the host has a bpffs on ${BPFFS} (Bidirectional propagation)`);
    const hostMount = mountsOf(process.pid).get(BPFFS);
    assert.equal(hostMount?.fsType, 'bpf', `the host's ${BPFFS}: ${JSON.stringify(hostMount)}`);
  });

  step("2. the agent runs with only the chart's capabilities, a read-only root and the chart's user; every probe answers as the chart expects", async () => {
    const c = await agent();
    await c.waitReady(readyBudgetMs(c));
    console.log(c.timeline());
    const pid = await c.pid();
    const v = processView(pid);
    console.log(`agent pid ${pid}: CapEff ${v.capEff.join(',')} uid ${v.uid} NoNewPrivs ${v.noNewPrivs} hostNetwork ${v.hostNetwork} hostPID ${v.hostPID}`);
    assertSecurityContext(v, c.plan, 'agent');
    const chartCaps = one(objs, 'DaemonSet', 'kpr').spec.template.spec.containers[0].securityContext.capabilities.add as string[];
    assert.deepEqual(v.capEff, [...chartCaps].sort(), 'exactly the capabilities values.yaml lists');
    assert.equal(v.hostNetwork, true, "hostNetwork: the node's network namespace");
    assert.equal(v.hostPID, true, "hostPID: the node's PID namespace");
    assertReadOnlyRoot(pid, 'agent');
    const mounts = mountsOf(pid);
    const bpf = mounts.get(BPFFS);
    assert.equal(bpf?.fsType, 'bpf', `the agent sees the host's bpffs on ${BPFFS}: ${JSON.stringify(bpf)}`);
    assert.ok(
      bpf.optional.some((o) => o.startsWith('master:')),
      `HostToContainer: ${BPFFS} is a slave mount in the agent (${bpf.optional.join(' ') || 'private'})`,
    );
    assert.ok(mounts.get('/etc/kpr')?.options.includes('ro'), 'the ConfigMap volume is read-only');
    assert.ok(mounts.get('/sys/kernel/btf')?.options.includes('ro'), 'the BTF volume is read-only');
    assert.equal(mounts.get(CGROUP_ROOT)?.fsType, 'cgroup2', "the host's cgroup2 hierarchy");
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    assert.ok(environ.includes(`NODE_NAME=${node.nodeName}`), `NODE_NAME from spec.nodeName: ${environ.filter((e) => e.startsWith('NODE_NAME')).join()}`);
    assert.ok(cgroupSocketPrograms(CGROUP_ROOT).length > 0, "the agent attached its socket programs to the host's root cgroup");
    // Probes: wait for a liveness answer too (its period comes after the start).
    const end = Date.now() + 120_000;
    while (!c.probes.attempts.some((a) => a.kind === 'liveness') && Date.now() < end) await new Promise((r) => setTimeout(r, 500));
    const byKind = (k: string) => c.probes.attempts.filter((a) => a.kind === k);
    const probes = c.plan.probes;
    assert.equal(probes.startup?.action.kind === 'httpGet' && probes.startup.action.path, '/livez');
    assert.equal(probes.liveness?.action.kind === 'httpGet' && probes.liveness.action.path, '/livez');
    assert.equal(probes.readiness?.action.kind === 'httpGet' && probes.readiness.action.path, '/healthz');
    assert.equal(byKind('startup').at(-1)?.status, 200, `startup /livez: ${JSON.stringify(c.probes.summary())}`);
    assert.equal(byKind('readiness').at(-1)?.status, 200, `readiness /healthz: ${JSON.stringify(c.probes.summary())}`);
    assert.equal(byKind('liveness').at(-1)?.status, 200, `liveness /livez: ${JSON.stringify(c.probes.summary())}`);
    assert.equal(c.probes.verdict, undefined);
    console.log(`probes: ${JSON.stringify(c.probes.summary())}`);
  });

  step('3. ClusterIP (from the node) and NodePort (from outside) traffic is served', async () => {
    const r = await node.requestBoth();
    for (const [where, out] of Object.entries(r)) {
      const rep = JSON.parse(out);
      assert.equal(rep.failed, 0, `${where}: ${out}`);
      assert.equal(rep.ok, 4, `${where}: ${out}`);
      for (const pod of Object.keys(rep.byPod))
        assert.ok(
          PODS.some((p) => p.name === pod),
          `${where}: answered by ${pod}`,
        );
    }
  });

  step('4. the container is killed and restarted: no failed connection, the pins outlive it and are adopted', async () => {
    const old = await agent();
    const pinsBefore = hostPins(BPFFS, kprBpffs);
    const linksBefore = (old.logs.logs.find((l) => l.msg === 'datapath attached')?.programs ?? []) as Array<{ program: string; link: number }>;
    const load = node.traffic(900_000);
    await new Promise((r) => setTimeout(r, 3000));
    const code = await old.kill('KILL');
    assert.equal(code, 137, 'podman reports the SIGKILL');
    assert.deepEqual(hostPins(BPFFS, kprBpffs), pinsBefore, 'with no agent running, every map is still pinned on the host (same ids)');
    assert.ok(cgroupSocketPrograms(CGROUP_ROOT).length > 0, 'the socket programs stay attached');
    const next = await agent();
    assert.notEqual(next.runtimeName, old.runtimeName, 'the kubelet started a new container');
    await next.waitReady(readyBudgetMs(next));
    console.log(next.timeline());
    await new Promise((r) => setTimeout(r, 3000));
    const reports = await load.stop();
    assertUnharmed(reports, 'kill and restart');
    assert.deepEqual(hostPins(BPFFS, kprBpffs), pinsBefore, 'the new agent adopted the pinned maps (same ids)');
    assert.equal(
      next.logs.logs.some((l) => String(l.msg).startsWith('maps migrate to a new set')),
      false,
      'no migration',
    );
    const attached = next.logs.logs.find((l) => l.msg === 'datapath attached')?.programs as
      Array<{ program: string; link: number; replaced: boolean }> | undefined;
    assert.ok(attached?.length, 'the new agent logged its attachments');
    for (const a of attached) {
      assert.equal(a.replaced, true, `${a.program}: the pinned link was reused, its program replaced in place`);
      const before = linksBefore.find((b) => b.program === a.program);
      if (before) assert.equal(a.link, before.link, `${a.program}: the same link`);
    }
  });

  step('5. a rollout onto pins of an older layout: the live map migration runs inside the new container, no connection fails', async () => {
    let load: ReturnType<GuestNode['traffic']> | undefined;
    try {
      await kubelet.replacePod('kpr', () => {
        // The node as the previous release (layout v1) left it: its programs and maps.
        runNodeOnLayoutV1({
          bpffsDir: kprBpffs,
          cgroupPath: CGROUP_ROOT,
          netns: '/proc/1/ns/net',
          externalInterfaces: AGENT_FLAGS['external-interfaces'].default.split(','),
          podInterfaces: AGENT_FLAGS['pod-interfaces'].default.split(','),
          tcAttach: 'auto',
        });
        const changed = Object.values(MAPS).filter((m) => m.version > 1);
        assert.ok(changed.length > 0, 'this release changed some layouts');
        for (const m of changed) assert.ok(existsSync(path.join(mapPinDir(kprBpffs), m.name)), `${m.name} pinned at v1`);
        load = node.traffic(900_000);
      });
      const c = await agent();
      const started = await c.logs.waitForLog((l) => String(l.msg).startsWith('maps migrate to a new set'), 300_000);
      const done = await c.logs.waitForLog('map migration done: the old maps are released', 300_000);
      await c.waitReady(readyBudgetMs(c));
      console.log(c.timeline());
      await new Promise((r) => setTimeout(r, 3000));
      const reports = await load!.stop();
      load = undefined;
      assertUnharmed(reports, 'migration from layout v1');
      const reasons = (done.maps as Array<{ map: string; reason: string; detail: string }>).map((m) => `${m.map}:${m.reason}:${m.detail}`).sort();
      const changed = Object.values(MAPS).filter((m) => m.version > 1);
      assert.deepEqual(reasons, changed.map((m) => `${m.name}:layout:layout v1 -> v${m.version}`).sort(), JSON.stringify(started));
      hostPins(BPFFS, kprBpffs);
    } finally {
      if (load) await load.stop().catch(() => undefined);
    }
  });

  step('6. kpr status, kpr service list and kpr version inside the running container (kubectl exec)', async () => {
    const c = await agent();
    // The CLI waits 5 s for the agent's answers by default; the emulated guest is about six times slower.
    const timeout = `--timeout=${scaled(5)}s`;
    const status = await c.exec(['/opt/kpr/bin/kpr', 'status', timeout]);
    assert.equal(status.code, 0, `kpr status: ${status.stdout}${status.stderr}`);
    console.log(`kpr status:\n${status.stdout}`);
    assert.match(status.stdout, /\/healthz 200, healthy/);
    const list = await c.exec(['/opt/kpr/bin/kpr', 'service', 'list']);
    assert.equal(list.code, 0, `kpr service list: ${list.stderr}`);
    console.log(`kpr service list:\n${list.stdout}`);
    assert.match(list.stdout, /default\/web/);
    assert.match(list.stdout, /default\/np/);
    assert.ok(list.stdout.includes(CLUSTER_IP), `the ClusterIP ${CLUSTER_IP} listed`);
    const version = await c.exec(['/opt/kpr/bin/kpr', 'version', timeout]);
    assert.equal(version.code, 0, `kpr version: ${version.stderr}`);
    console.log(`kpr version:\n${version.stdout}`);
    assert.match(version.stdout, new RegExp(`kpr CLI\\s+${image.version.replace(/\./g, '\\.')}`));
    if (image.commit !== 'unknown') assert.match(version.stdout, new RegExp(`commit\\s+${image.commit}`));
    assert.doesNotMatch(version.stdout, /agent\s+not reachable/, 'the CLI reaches the agent in the same pod');
  });

  step("7. the uninstall hook (kpr cleanup-nodes, its Job's pod) removes everything", async () => {
    assert.ok(cgroupSocketPrograms(CGROUP_ROOT).length > 0 && Object.keys(tcPrograms()).length > 0, 'the datapath is there before');
    const job = one(objs, 'Job');
    const uid = 'cleanup-job-uid';
    const plan = planOnNode(job.spec.template, info, { name: 'kpr-cleanup-job', namespace: NS, uid }, path.join(SCRATCH, 'volumes', 'kpr-cleanup-job'), {
      netns: node.jobNetns,
      ip: JOB_POD_IP,
    });
    assert.equal(plan.hostNetwork, false, 'the hook Job runs in a pod network');
    const run = new PodRun(plan, 'kpr-cleanup-job', podman, path.join(SCRATCH, 'run', 'kpr-cleanup-job'));
    run.prepareVolumes();
    const c = run.startContainer('cleanup-nodes');
    const code = await c.exited;
    console.log(`kpr cleanup-nodes (exit ${code}):\n${c.stdout}`);
    console.log(`node events: ${kubelet.events.join('\n')}`);
    assert.equal(code, 0, `the Job's container: ${c.stdout} ${JSON.stringify(c.logs.logs.slice(-5))}`);
    assert.match(c.stdout, /every node that ran the agent is cleaned/);
    assert.equal(node.api.get('DaemonSet', NS, 'kpr'), undefined, 'the agent DaemonSet is gone');
    assert.equal(node.api.get('DaemonSet', NS, 'kpr-cleanup'), undefined, 'the clean-up DaemonSet is gone');
    const at = (re: RegExp) => kubelet.events.findIndex((e) => re.test(e));
    assert.ok(
      at(/^pod kpr-[0-9a-f]+ gone/) >= 0 && at(/^pod kpr-[0-9a-f]+ gone/) < at(/^pod kpr-cleanup-.* created/),
      `the agent pod stopped before the clean-up pod started: ${kubelet.events.join('; ')}`,
    );
    assert.equal(existsSync(kprBpffs), false, `${kprBpffs} is gone`);
    assert.deepEqual(cgroupSocketPrograms(CGROUP_ROOT), [], 'nothing on the root cgroup');
    assert.deepEqual(tcPrograms(), {}, 'no tc program on any interface');
    const after = JSON.parse(
      execFileSync(process.execPath, [path.join(repoRoot, 'dist', 'sandbox', 'client.js'), 'once', '--target', `${CLUSTER_IP}:80`, '--timeout-ms', '500'], {
        encoding: 'utf8',
      }),
    );
    assert.equal(after.ok, 0, `the ClusterIP is no longer translated: ${JSON.stringify(after)}`);
  });

  step(
    '8. the chart broken on purpose fails the run: without the capabilities that allow bpf() (BPF and SYS_ADMIN) the pod never becomes ready',
    async () => {
      await deleteDaemonSet('kpr');
      const broken = rendered('no-bpf-privilege');
      createDaemonSet(broken);
      try {
        const c = await agent();
        await assert.rejects(c.waitReady(readyBudgetMs(c)), (err: Error) => {
          console.log(`not ready, as it must: ${err.message.slice(0, 600)}`);
          return /exited|probe failed/.test(err.message);
        });
        assert.ok(
          c.logs.logs.some((l) => /EPERM|not permitted|CAP_BPF/i.test(JSON.stringify(l))),
          `the agent says why: ${JSON.stringify(c.logs.logs.slice(-4))}`,
        );
      } finally {
        await deleteDaemonSet('kpr');
      }
    },
    true,
  );

  step(
    '8b. the chart broken on purpose fails the run: without the init container, on a host with no bpffs, the pins do not outlive the container',
    async () => {
      await deleteDaemonSet('kpr');
      if (isBpffsAt(BPFFS)) execFileSync('umount', [BPFFS]);
      assert.equal(isBpffsAt(BPFFS), false);
      const broken = rendered('no-mount-bpffs');
      createDaemonSet(broken);
      try {
        const pod = await kubelet.podOf('kpr');
        await pod.initialized;
        assert.ok(!pod.plan.initContainers.some((c) => c.name === 'mount-bpffs'), 'no mount-bpffs init container rendered');
        const c = await agent();
        await c.waitReady(readyBudgetMs(c)).catch((err) => console.log(`agent not ready: ${(err as Error).message.slice(0, 300)}`));
        assert.throws(() => hostPins(BPFFS, kprBpffs), /the host has no bpffs/, "the check of step 4 fails: the pins are only in the container's own bpffs");
      } finally {
        await deleteDaemonSet('kpr');
      }
    },
    true,
  );
});
