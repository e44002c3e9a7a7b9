/**
 * The image test's pod translation (pod-to-podman.ts) on what the real helm
 * renders from charts/kpr, and its kubelet pieces that need no container
 * runtime: hostPath type checks (pod-runner.ts) and the probes (probes.ts).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { one, render, type K8sObject } from '../chart/render.js';
import { expandVars, parseQuantity, planPod, podmanRunArgs, UnsupportedPodField, type ContainerPlan, type PodContext } from './pod-to-podman.js';
import { prepareVolume } from './pod-runner.js';
import { ContainerProbes, probeOnce } from './probes.js';
import { platformsValues, renderVariant } from './renderings.js';

const ctx = (over: Partial<PodContext> = {}): PodContext => ({
  podName: 'kpr-abcde',
  namespace: 'kube-system',
  uid: 'uid-1',
  nodeName: 'node-1',
  hostIP: '198.18.100.1',
  configMaps: {
    'kpr-config': { 'config.yaml': 'bpffs: /sys/fs/bpf/kpr\n' },
    'kube-proxy': { 'kubeconfig.conf': 'apiVersion: v1\n', 'config.conf': 'x' },
    'kpr-cleanup': { 'daemonset.yaml': 'kind: DaemonSet\n' },
  },
  volumeRoot: '/tmp/vols/kpr-abcde',
  serviceAccountDir: '/tmp/sa',
  ...over,
});

const template = (objs: K8sObject[], kind = 'DaemonSet', name = 'kpr') => one(objs, kind, name).spec.template as Record<string, unknown>;

/** The value of each occurrence of `flag` in a flag list. */
const values = (flags: string[], flag: string) => flags.flatMap((f, i) => (f === flag ? [flags[i + 1]] : []));

function byName(plans: ContainerPlan[], name: string): ContainerPlan {
  const c = plans.find((p) => p.name === name);
  assert.ok(c, `no container ${name}`);
  return c;
}

describe("the chart's pod template as podman run arguments", () => {
  const kubeadm = renderVariant('kubeadm', { repository: 'localhost/kpr', tag: '0.1.0' });

  test("the agent: exactly the chart's capabilities, read-only root without extra tmpfs, user 0, host network and PIDs, its mounts and propagation", () => {
    const plan = planPod(template(kubeadm), ctx());
    const agent = byName(plan.containers, 'agent');
    const f = agent.flags;
    assert.deepEqual(values(f, '--cap-drop'), ['ALL']);
    assert.deepEqual(values(f, '--cap-add'), ['CAP_BPF,CAP_NET_ADMIN,CAP_SYS_ADMIN,CAP_PERFMON,CAP_SYS_RESOURCE,CAP_SYS_PTRACE']);
    assert.ok(f.includes('--read-only') && f.includes('--read-only-tmpfs=false'), f.join(' '));
    assert.ok(!f.includes('--privileged'));
    assert.deepEqual(values(f, '--user'), ['0']);
    assert.deepEqual(values(f, '--network'), ['host']);
    assert.deepEqual(values(f, '--pid'), ['host']);
    assert.deepEqual(values(f, '--security-opt').sort(), ['apparmor=unconfined', 'label=type:spc_t', 'no-new-privileges', 'seccomp=unconfined']);
    assert.deepEqual(values(f, '--mount'), [
      'type=bind,source=/tmp/vols/kpr-abcde/config,destination=/etc/kpr,ro=true,bind-propagation=rprivate',
      'type=bind,source=/sys/fs/bpf,destination=/sys/fs/bpf,bind-propagation=rslave',
      'type=bind,source=/sys/fs/cgroup,destination=/sys/fs/cgroup,bind-propagation=rprivate',
      'type=bind,source=/sys/kernel/btf,destination=/sys/kernel/btf,ro=true,bind-propagation=rprivate',
      'type=bind,source=/run/xtables.lock,destination=/run/xtables.lock,bind-propagation=rprivate',
      'type=bind,source=/tmp/vols/kpr-abcde/kube-proxy,destination=/var/lib/kube-proxy,ro=true,bind-propagation=rprivate',
      'type=bind,source=/tmp/sa,destination=/var/run/secrets/kubernetes.io/serviceaccount,ro=true,bind-propagation=rprivate',
    ]);
    assert.deepEqual(values(f, '--memory'), [String(512 * 1024 * 1024)]);
    assert.deepEqual(values(f, '--memory-swap'), [String(512 * 1024 * 1024)], 'no swap beyond the limit');
    assert.deepEqual(values(f, '--cpus'), ['1']);
    assert.deepEqual(values(f, '--cpu-shares'), ['102'], "100m: the kubelet's 100 × 1024 / 1000");
    assert.deepEqual(values(f, '--pids-limit'), ['-1']);
    assert.deepEqual(values(f, '--stop-timeout'), ['30']);
    assert.deepEqual(values(f, '--env'), ['NODE_NAME=node-1'], 'spec.nodeName through the downward API');
    assert.equal(agent.entrypoint, undefined, "no command: the image's entrypoint");
    assert.deepEqual(
      agent.args,
      ['--config=/var/lib/kube-proxy/config.conf', '--hostname-override=node-1', '--config=/etc/kpr/config.yaml'],
      '$(NODE_NAME) expanded from the env',
    );
    assert.equal(agent.image, 'localhost/kpr:0.1.0');
    assert.deepEqual(agent.expect, {
      privileged: false,
      capAdd: ['BPF', 'NET_ADMIN', 'SYS_ADMIN', 'PERFMON', 'SYS_RESOURCE', 'SYS_PTRACE'],
      capDropAll: true,
      readOnlyRoot: true,
      user: 0,
      group: undefined,
      noNewPrivs: true,
    });
    const argv = podmanRunArgs(agent, 'kpr_agent_0', ['--rm']);
    assert.deepEqual(argv.slice(0, 3), ['run', '--name', 'kpr_agent_0']);
    assert.ok(!argv.includes('--entrypoint'));
    assert.deepEqual(argv.slice(-4), [
      'localhost/kpr:0.1.0',
      '--config=/var/lib/kube-proxy/config.conf',
      '--hostname-override=node-1',
      '--config=/etc/kpr/config.yaml',
    ]);
    const sysctls = byName(plan.initContainers, 'conntrack-sysctls');
    assert.deepEqual(
      podmanRunArgs(sysctls, 'x').slice(-6),
      [
        '--entrypoint',
        '["/opt/kpr/bin/kpr","conntrack-sysctls"]',
        'localhost/kpr:0.1.0',
        '--config=/var/lib/kube-proxy/config.conf',
        '--hostname-override=node-1',
        '--config=/etc/kpr/config.yaml',
      ],
      'command: the entrypoint, then the image and the args',
    );
  });

  test('the init containers in order; mount-bpffs: privileged, bpffs Bidirectional (rshared), the type check of the filesystem', () => {
    const plan = planPod(template(kubeadm), ctx());
    assert.deepEqual(
      plan.initContainers.map((c) => c.name),
      ['mount-bpffs', 'conntrack-sysctls'],
    );
    const init = byName(plan.initContainers, 'mount-bpffs');
    assert.ok(init.flags.includes('--privileged'));
    assert.deepEqual(values(init.flags, '--mount')[0], 'type=bind,source=/sys/fs/bpf,destination=/sys/fs/bpf,bind-propagation=rshared');
    assert.deepEqual(init.entrypoint, ['sh', '-c', '[ "$(stat -f -c %t /sys/fs/bpf)" = cafe4a11 ] || mount -t bpf bpf /sys/fs/bpf']);
    assert.ok(!values(init.flags, '--security-opt').includes('seccomp=unconfined'), 'privileged is unconfined already');
  });

  test("volumes: hostPath types, the rendered ConfigMap and kubeadm's kube-proxy ConfigMap, to prepare on the node", () => {
    const plan = planPod(template(kubeadm), ctx());
    assert.deepEqual(plan.volumes, [
      {
        kind: 'files',
        volume: 'config',
        dir: '/tmp/vols/kpr-abcde/config',
        files: [{ path: 'config.yaml', content: 'bpffs: /sys/fs/bpf/kpr\n', mode: 0o644 }],
      },
      { kind: 'hostPath', volume: 'bpffs', path: '/sys/fs/bpf', type: 'DirectoryOrCreate' },
      { kind: 'hostPath', volume: 'cgroup', path: '/sys/fs/cgroup', type: 'Directory' },
      { kind: 'hostPath', volume: 'btf', path: '/sys/kernel/btf', type: 'Directory' },
      { kind: 'hostPath', volume: 'xtables-lock', path: '/run/xtables.lock', type: 'FileOrCreate' },
      {
        kind: 'files',
        volume: 'kube-proxy',
        dir: '/tmp/vols/kpr-abcde/kube-proxy',
        files: [
          { path: 'config.conf', content: 'x', mode: 0o644 },
          { path: 'kubeconfig.conf', content: 'apiVersion: v1\n', mode: 0o644 },
        ],
      },
    ]);
    assert.deepEqual(plan.ignored.map((i) => i.field).sort(), ['spec.nodeSelector', 'spec.priorityClassName', 'spec.tolerations']);
  });

  test('probes as the chart sets them', () => {
    const agent = byName(planPod(template(kubeadm), ctx()).containers, 'agent');
    const http = (path: string) => ({ kind: 'httpGet', host: '127.0.0.1', port: 10256, path, scheme: 'HTTP', headers: {} });
    assert.deepEqual(agent.probes.startup, {
      action: http('/livez'),
      initialDelaySeconds: 0,
      periodSeconds: 2,
      timeoutSeconds: 5,
      successThreshold: 1,
      failureThreshold: 60,
    });
    assert.deepEqual(agent.probes.liveness, {
      action: http('/livez'),
      initialDelaySeconds: 0,
      periodSeconds: 10,
      timeoutSeconds: 5,
      successThreshold: 1,
      failureThreshold: 6,
    });
    assert.deepEqual(agent.probes.readiness, {
      action: http('/healthz'),
      initialDelaySeconds: 0,
      periodSeconds: 5,
      timeoutSeconds: 5,
      successThreshold: 1,
      failureThreshold: 3,
    });
  });

  test("the chart's defaults (no values) and privileged: true translate too; privileged mounts bpffs Bidirectional", () => {
    const defaults = planPod(template(render()), ctx());
    assert.deepEqual(byName(defaults.containers, 'agent').args, ['--config=/etc/kpr/config.yaml'], 'in-cluster config: no API server flags');
    const priv = planPod(template(render({ securityContext: { privileged: true }, k8sServiceHost: '198.18.0.2' })), ctx());
    const agent = byName(priv.containers, 'agent');
    assert.ok(agent.flags.includes('--privileged'));
    assert.deepEqual(values(agent.flags, '--cap-add'), []);
    assert.ok(values(agent.flags, '--mount').includes('type=bind,source=/sys/fs/bpf,destination=/sys/fs/bpf,bind-propagation=rshared'));
    assert.deepEqual(agent.args, ['--config=/etc/kpr/config.yaml', '--k8s-service-host=198.18.0.2', '--k8s-service-port=6443']);
  });

  test("the uninstall hook's Job: a pod network, user 65534, nothing added; its clean-up DaemonSet without the service account token", () => {
    const objs = render({ ...platformsValues('values-kubeadm.yaml'), cleanupOnUninstall: { enabled: true } });
    assert.throws(() => planPod(template(objs, 'Job', 'kpr-cleanup'), ctx()), /a pod network namespace/);
    const job = planPod(template(objs, 'Job', 'kpr-cleanup'), ctx({ podNetwork: { netns: '/var/run/netns/job', ip: '198.18.10.20' } }));
    const c = byName(job.containers, 'cleanup-nodes');
    assert.deepEqual(values(c.flags, '--network'), ['ns:/var/run/netns/job']);
    assert.deepEqual(values(c.flags, '--user'), ['65534']);
    assert.deepEqual(values(c.flags, '--cap-drop'), ['ALL']);
    assert.deepEqual(values(c.flags, '--cap-add'), []);
    assert.equal(job.restartPolicy, 'Never');
    assert.deepEqual(c.entrypoint, ['/opt/kpr/bin/kpr', 'cleanup-nodes']);
    const ds = (YAML.parse(one(objs, 'ConfigMap', 'kpr-cleanup').data['daemonset.yaml']) as { spec: { template: Record<string, unknown> } }).spec.template;
    const cleanup = planPod(ds, ctx({ serviceAccountDir: undefined }));
    assert.deepEqual(
      cleanup.initContainers.map((x) => x.name),
      ['cleanup'],
    );
    assert.ok(!values(byName(cleanup.containers, 'done').flags, '--mount').some((m) => m.includes('serviceaccount')));
  });

  test('a field the harness cannot honour fails loudly, naming it', () => {
    const base = template(kubeadm);
    const spec = base.spec as Record<string, any>;
    const variants: Array<[string, (s: Record<string, any>) => void, RegExp]> = [
      ['unknown pod field', (s) => (s.runtimeClassName = 'gvisor'), /spec\.runtimeClassName: unknown/],
      ['lifecycle hook', (s) => (s.containers[0].lifecycle = { preStop: { exec: { command: ['x'] } } }), /spec\.containers\[0\]\.lifecycle/],
      ['secret volume', (s) => s.volumes.push({ name: 's', secret: { secretName: 'x' } }), /spec\.volumes\[\d+\]\.secret: volume source not supported/],
      ['pod sysctls', (s) => (s.securityContext = { sysctls: [{ name: 'net.ipv4.ip_forward', value: '1' }] }), /spec\.securityContext\.sysctls/],
      [
        'resourceFieldRef',
        (s) => s.containers[0].env.push({ name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory' } } }),
        /resourceFieldRef not supported/,
      ],
      ['cluster DNS', (s) => (s.dnsPolicy = 'ClusterFirstWithHostNet'), /spec\.dnsPolicy: ClusterFirstWithHostNet/],
      [
        'Bidirectional unprivileged',
        (s) => (s.containers[0].volumeMounts[1].mountPropagation = 'Bidirectional'),
        /Bidirectional on a container that is not privileged/,
      ],
      ['unknown capability key', (s) => (s.containers[0].securityContext.capabilities.keep = ['BPF']), /capabilities\.keep/],
      ['missing ConfigMap', (s) => (s.volumes[0].configMap.name = 'nope'), /ConfigMap nope is not in the context/],
      ['grpc probe', (s) => (s.containers[0].livenessProbe = { grpc: { port: 1 } }), /livenessProbe\.grpc: unknown/],
      ['unknown mount key', (s) => (s.containers[0].volumeMounts[0].subPathExpr = '$(X)'), /subPathExpr/],
      ['hugepages', (s) => (s.containers[0].resources.limits['hugepages-2Mi'] = '2Mi'), /hugepages-2Mi: resource not supported/],
    ];
    for (const [what, change, re] of variants) {
      const t = structuredClone(base);
      change(t.spec as Record<string, any>);
      assert.throws(
        () => planPod(t, ctx()),
        (err: Error) => err instanceof UnsupportedPodField && re.test(err.message),
        what,
      );
    }
    assert.ok(spec.containers.length === 1, 'the original is untouched');
  });

  test('extraVolumes: an emptyDir works; extraEnv with fieldRefs and $(VAR) expansion as the kubelet does', () => {
    const objs = render({
      k8sServiceHost: '198.18.0.2',
      extraVolumes: [{ name: 'scratch', emptyDir: {} }],
      extraVolumeMounts: [{ name: 'scratch', mountPath: '/scratch' }],
      extraEnv: [
        { name: 'HOST_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } },
        { name: 'APP', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app.kubernetes.io/name']" } } },
        { name: 'POD_NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
        { name: 'WHERE', value: '$(NODE_NAME)/$(HOST_IP) $$(NODE_NAME) $(NOPE)' },
      ],
      extraArgs: ['--hostname-override=$(NODE_NAME)'],
    });
    const plan = planPod(template(objs), ctx());
    const agent = byName(plan.containers, 'agent');
    assert.deepEqual(agent.env, {
      NODE_NAME: 'node-1',
      HOST_IP: '198.18.100.1',
      APP: 'kpr',
      POD_NS: 'kube-system',
      WHERE: 'node-1/198.18.100.1 $(NODE_NAME) $(NOPE)',
    });
    assert.equal(agent.args.at(-1), '--hostname-override=node-1', 'extraArgs: $(NODE_NAME) expanded');
    assert.ok(plan.volumes.some((v) => v.kind === 'emptyDir' && v.dir === '/tmp/vols/kpr-abcde/scratch'));
    assert.ok(values(agent.flags, '--mount').includes('type=bind,source=/tmp/vols/kpr-abcde/scratch,destination=/scratch,bind-propagation=rprivate'));
  });

  test('$(VAR) expansion and quantities', () => {
    assert.equal(expandVars('a$(X)b$$(X)c$(Y)$', { X: '1' }), 'a1b$(X)c$(Y)$');
    assert.equal(expandVars('$(unterminated', {}), '$(unterminated');
    assert.equal(parseQuantity('512Mi', 'q'), 512 * 1024 * 1024);
    assert.equal(parseQuantity('100m', 'q'), 0.1);
    assert.throws(() => parseQuantity('1e3', 'q'), UnsupportedPodField);
  });
});

describe('hostPath types as the kubelet checks them', () => {
  test('DirectoryOrCreate creates, Directory and File require, FileOrCreate creates a file but not its parent', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-hostpath-'));
    try {
      prepareVolume({ kind: 'hostPath', volume: 'a', path: path.join(dir, 'a/b'), type: 'DirectoryOrCreate' });
      assert.ok(statSync(path.join(dir, 'a/b')).isDirectory());
      assert.throws(() => prepareVolume({ kind: 'hostPath', volume: 'd', path: path.join(dir, 'missing'), type: 'Directory' }), /no such directory/);
      prepareVolume({ kind: 'hostPath', volume: 'f', path: path.join(dir, 'f'), type: 'FileOrCreate' });
      assert.ok(statSync(path.join(dir, 'f')).isFile());
      assert.throws(
        () => prepareVolume({ kind: 'hostPath', volume: 'f', path: path.join(dir, 'no/f'), type: 'FileOrCreate' }),
        /parent directory does not exist/,
      );
      assert.throws(() => prepareVolume({ kind: 'hostPath', volume: 'x', path: path.join(dir, 'a'), type: 'File' }), /no such file/);
      assert.throws(() => prepareVolume({ kind: 'hostPath', volume: 'x', path: path.join(dir, 'f'), type: 'DirectoryOrCreate' }), /not a directory/);
      prepareVolume({ kind: 'files', volume: 'cm', dir: path.join(dir, 'cm'), files: [{ path: 'sub/k', content: 'v', mode: 0o600 }] });
      assert.equal(readFileSync(path.join(dir, 'cm/sub/k'), 'utf8'), 'v');
      assert.equal(statSync(path.join(dir, 'cm/sub/k')).mode & 0o777, 0o600);
      writeFileSync(path.join(dir, 'plain'), '');
      prepareVolume({ kind: 'hostPath', volume: 'any', path: path.join(dir, 'nothing-here'), type: '' });
      assert.equal(existsSync(path.join(dir, 'nothing-here')), false, 'type "" checks nothing and creates nothing');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('probes as the kubelet runs them', () => {
  test('httpGet: [200, 400) is success, other codes and timeouts are failures; startup first, then readiness and liveness; failureThreshold gives a verdict', async () => {
    let code = 503;
    const server = http.createServer((req, res) => {
      if (req.url === '/hang') return;
      res.writeHead(req.url === '/livez' ? 200 : code).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const p = (path: string, failureThreshold = 3) => ({
      action: { kind: 'httpGet' as const, host: '127.0.0.1', port, path, scheme: 'HTTP' as const, headers: {} },
      initialDelaySeconds: 0,
      periodSeconds: 0.02,
      timeoutSeconds: 0.2,
      successThreshold: 1,
      failureThreshold,
    });
    try {
      assert.deepEqual(await probeOnce(p('/livez'), undefined), { ok: true, status: 200 });
      assert.deepEqual(await probeOnce(p('/healthz'), undefined), { ok: false, status: 503 });
      assert.match(String((await probeOnce(p('/hang'), undefined)).error), /no answer within 200 ms/);
      const probes = new ContainerProbes({ startup: p('/livez'), readiness: p('/healthz'), liveness: p('/livez') });
      probes.start();
      await probes.waitStarted(5000);
      await assert.rejects(probes.waitReady(300), /not ready within 300 ms/);
      code = 200;
      await probes.waitReady(5000);
      assert.deepEqual([...new Set(probes.attempts.map((a) => a.kind))].sort(), ['liveness', 'readiness', 'startup']);
      probes.stop();
      const dying = new ContainerProbes({ startup: p('/hang', 2) });
      dying.start();
      await assert.rejects(dying.waitReady(5000), /startup probe failed 2 times in a row .*the kubelet kills the container/);
      dying.stop();
    } finally {
      server.close();
    }
  });
});
