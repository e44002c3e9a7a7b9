/**
 * The node the image test's pod runs on: a QEMU guest of the kernel matrix
 * (test/kernels/vm.sh), whose root network namespace and root cgroup are
 * the node's, as on a real node (the chart's pod uses hostNetwork and the
 * host's cgroup root). Only ever inside such a guest: assertInGuest()
 * refuses anywhere else, because the agent attaches to the root cgroup and
 * to the root namespace's interfaces there.
 *
 *   client 198.18.100.2 ─eth0──eth1─ 198.18.100.1 (the node's InternalIP)
 *                                     node (the guest's root netns, ip_forward)
 *                                     lo: 198.18.0.2 (the control-plane endpoint, kubeadm's)
 *                                     cni0 198.18.10.1 ─veth…── pod web-a 198.18.10.10
 *                                                      ├veth…── pod web-b 198.18.10.11
 *                                                      └veth…── the hook Job's pod 198.18.10.20
 *
 * The interface names are the agent's defaults (external eth*, pod-facing
 * veth* and cni*): the chart's config leaves them unset. The API server (the
 * embedded one, in this process) listens on https://198.18.0.2:6443 with a
 * CA of the run's own and one bearer token, so kubeadm's kube-proxy
 * kubeconfig.conf (test/fixtures/kube-proxy) works unchanged with the
 * service account files the kubelet mounts.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { startApiServer, type ApiServer, type KubeObject } from '../../sandbox/apiserver.js';
import { inNs, ip, nsPath, Sandbox } from '../../sandbox/netns.js';
import { waitForLine } from '../../sandbox/topology.js';
import { repoRoot } from '../../sandbox/repo.js';
import type { HoldReport } from '../../sandbox/hold.js';

export const ENDPOINT = { ip: '198.18.0.2', port: 6443 };
export const NODE_IP = '198.18.100.1';
export const CLIENT_IP = '198.18.100.2';
export const BRIDGE_IP = '198.18.10.1';
export const JOB_POD_IP = '198.18.10.20';
export const CLUSTER_IP = '198.19.0.10';
export const NODEPORT_CLUSTER_IP = '198.19.0.11';
export const PODS = [
  { name: 'web-a', ip: '198.18.10.10' },
  { name: 'web-b', ip: '198.18.10.11' },
];
export const PORTS = [
  { name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' },
  { name: 'echo', port: 7070, targetPort: 7070, nodePort: 30070, protocol: 'TCP' },
  { name: 'dns', port: 53, targetPort: 5353, nodePort: 30053, protocol: 'UDP' },
];
const SA_TOKEN = 'kpr-image-test-service-account-token';
const distSandbox = path.join(repoRoot, 'dist', 'sandbox');

/** Throws unless this process runs as the command of a kernel-matrix guest. */
export function assertInGuest(): void {
  const cmdline = readFileSync('/proc/cmdline', 'utf8');
  if (process.env.KPR_IN_VM !== '1' || !/\bkpr\.out=/.test(cmdline)) {
    throw new Error(
      "the image test runs the chart's pod as the node's own (root cgroup, root network namespace): only inside a QEMU guest of test/kernels/vm.sh (make test-image)",
    );
  }
}

/** This guest's cgroup2 and mount setup, as systemd leaves a node: every mount shared (mount propagation needs it). */
export function prepareGuestMounts(): void {
  execFileSync('mount', ['--make-rshared', '/']);
}

function makeCertificates(dir: string): void {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  ssl(
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '2',
    '-subj',
    '/CN=kpr-image-test-ca',
  );
  ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=kube-apiserver');
  writeFileSync(path.join(dir, 'server.ext'), `subjectAltName=IP:${ENDPOINT.ip}\n`);
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '2',
    '-extfile',
    'server.ext',
  );
}

export function service(name: string, type: 'ClusterIP' | 'NodePort', clusterIP: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'default' },
    spec: { type, clusterIP, clusterIPs: [clusterIP], ports: PORTS.map(({ nodePort, ...p }) => (type === 'NodePort' ? { ...p, nodePort } : p)) },
  };
}

export function endpointSlice(name: string, svc: string, nodeName: string): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': svc } },
    addressType: 'IPv4',
    ports: PORTS.map((p) => ({ name: p.name, port: p.targetPort, protocol: p.protocol })),
    endpoints: PODS.map((p) => ({ addresses: [p.ip], conditions: { ready: true }, nodeName })),
  };
}

export class GuestNode {
  readonly nodeName = os.hostname();
  readonly labels = { 'kubernetes.io/os': 'linux', 'kubernetes.io/hostname': os.hostname() };
  /** The service account volume the kubelet mounts (token, ca.crt, namespace). */
  readonly serviceAccountDir: string;
  readonly jobNetns: string;

  private constructor(
    readonly sandbox: Sandbox,
    readonly api: ApiServer,
    readonly dir: string,
    readonly clientNs: string,
  ) {
    this.serviceAccountDir = path.join(dir, 'serviceaccount');
    this.jobNetns = nsPath(sandbox.nsName('job'));
  }

  static async create(dir: string): Promise<GuestNode> {
    assertInGuest();
    mkdirSync(dir, { recursive: true });
    const sandbox = new Sandbox();
    let api: ApiServer | undefined;
    try {
      execFileSync('sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
      ip('addr', 'add', `${ENDPOINT.ip}/32`, 'dev', 'lo');
      ip('link', 'add', 'cni0', 'type', 'bridge');
      ip('addr', 'add', `${BRIDGE_IP}/24`, 'dev', 'cni0');
      ip('link', 'set', 'cni0', 'up');
      const clientNs = sandbox.addNamespace('client');
      ip('link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', clientNs);
      ip('addr', 'add', `${NODE_IP}/24`, 'dev', 'eth1');
      ip('link', 'set', 'eth1', 'up');
      inNs(clientNs, 'ip', 'addr', 'add', `${CLIENT_IP}/24`, 'dev', 'eth0');
      inNs(clientNs, 'ip', 'link', 'set', 'eth0', 'up');
      inNs(clientNs, 'ip', 'route', 'add', '198.18.0.0/15', 'via', NODE_IP, 'dev', 'eth0');
      const pods = [...PODS.map((p, i) => ({ ...p, hostIf: `vethkpr${i}` })), { name: 'job', ip: JOB_POD_IP, hostIf: 'vethkprjob' }];
      for (const p of pods) {
        const ns = sandbox.addNamespace(p.name);
        ip('link', 'add', p.hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
        ip('link', 'set', p.hostIf, 'master', 'cni0');
        ip('link', 'set', p.hostIf, 'up');
        inNs(ns, 'ip', 'addr', 'add', `${p.ip}/24`, 'dev', 'eth0');
        inNs(ns, 'ip', 'link', 'set', 'eth0', 'up');
        inNs(ns, 'ip', 'route', 'add', '198.18.0.0/15', 'via', BRIDGE_IP, 'dev', 'eth0');
        if (p.name === 'job') continue;
        const server = sandbox.spawnIn(ns, process.execPath, [path.join(distSandbox, 'pod-server.js'), '--name', p.name], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        await waitForLine(server, 'ready', `pod ${p.name}`, 60_000);
      }
      makeCertificates(dir);
      api = await startApiServer({
        host: ENDPOINT.ip,
        port: ENDPOINT.port,
        tls: { cert: readFileSync(path.join(dir, 'server.crt')), key: readFileSync(path.join(dir, 'server.key')) },
        bearerToken: SA_TOKEN,
      });
      const node = new GuestNode(sandbox, api, dir, clientNs);
      mkdirSync(node.serviceAccountDir, { recursive: true });
      writeFileSync(path.join(node.serviceAccountDir, 'token'), SA_TOKEN);
      writeFileSync(path.join(node.serviceAccountDir, 'ca.crt'), readFileSync(path.join(dir, 'ca.crt')));
      writeFileSync(path.join(node.serviceAccountDir, 'namespace'), 'kube-system');
      api.create({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: node.nodeName, labels: node.labels },
        status: {
          addresses: [
            { type: 'InternalIP', address: NODE_IP },
            { type: 'Hostname', address: node.nodeName },
          ],
        },
      });
      // kubeadm's kube-proxy ConfigMap, as `kubeadm init` creates it (the chart's kubeconfigFromConfigMap reads it).
      const cm = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8')) as KubeObject;
      node.addConfigMap('kube-system', cm.metadata!.name!, cm.data as Record<string, string>);
      api.create(service('web', 'ClusterIP', CLUSTER_IP));
      api.create(endpointSlice('web-1', 'web', node.nodeName));
      api.create(service('np', 'NodePort', NODEPORT_CLUSTER_IP));
      api.create(endpointSlice('np-1', 'np', node.nodeName));
      return node;
    } catch (err) {
      await api?.close().catch(() => undefined);
      await sandbox.teardown();
      throw err;
    }
  }

  /**
   * The cluster's ConfigMaps (namespace → name → data), what the kubelet
   * mounts: the embedded API server serves only the kinds the agent and
   * `kpr cleanup-nodes` use, so the node keeps them here (kubeadm's
   * kube-proxy ConfigMap, and what the chart renders, added by the test).
   */
  private readonly cms: Record<string, Record<string, Record<string, string>>> = {};

  addConfigMap(namespace: string, name: string, data: Record<string, string>): void {
    (this.cms[namespace] ??= {})[name] = data;
  }

  configMaps(namespace: string): Record<string, Record<string, string>> {
    return { ...(this.cms[namespace] ?? {}) };
  }

  /** sandbox/client.js on the node itself (root namespace, root cgroup: the socket hooks serve it). */
  nodeClient(args: string[]): ChildProcess {
    return this.sandbox.track(spawn(process.execPath, [path.join(distSandbox, 'client.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
  }

  /** sandbox/client.js outside the node (the client namespace: only tc serves it). */
  externalClient(args: string[]): ChildProcess {
    return this.sandbox.spawnIn(this.clientNs, process.execPath, [path.join(distSandbox, 'client.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** A connect loop and long-lived flows through the ClusterIP (from the node) and the NodePort (from outside), until stop(). */
  traffic(durationMs: number): { stop(): Promise<{ clusterIP: HoldReport; nodePort: HoldReport }> } {
    const hold = (start: (a: string[]) => ChildProcess, target: string, ports: { http: number; echo: number; dns: number }) => {
      const child = start([
        'hold',
        '--echo',
        `${target}:${ports.echo}`,
        '--udp',
        `${target}:${ports.dns}`,
        '--udp-new',
        '--http',
        `${target}:${ports.http}`,
        '--flows',
        '1',
        '--interval-ms',
        '100',
        '--duration-ms',
        String(durationMs),
        '--timeout-ms',
        '2500',
      ]);
      let out = '';
      let err = '';
      child.stdout!.on('data', (d) => (out += d));
      child.stderr!.on('data', (d) => (err += d));
      const report = new Promise<HoldReport>((resolve, reject) => {
        child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as HoldReport) : reject(new Error(`hold ${target} exited ${code}: ${err}`))));
      });
      return { child, report };
    };
    const runs = {
      clusterIP: hold((a) => this.nodeClient(a), CLUSTER_IP, { http: 80, echo: 7070, dns: 53 }),
      nodePort: hold((a) => this.externalClient(a), NODE_IP, { http: 30080, echo: 30070, dns: 30053 }),
    };
    return {
      async stop() {
        for (const r of Object.values(runs)) r.child.kill('SIGTERM');
        return { clusterIP: await runs.clusterIP.report, nodePort: await runs.nodePort.report };
      },
    };
  }

  /** One HTTP request through the ClusterIP from the node, and through the NodePort from outside. */
  async requestBoth(): Promise<{ clusterIP: string; nodePort: string }> {
    const get = (child: ChildProcess) =>
      new Promise<string>((resolve) => {
        let out = '';
        child.stdout!.on('data', (d) => (out += d));
        child.once('exit', () => resolve(out));
      });
    const [clusterIP, nodePort] = await Promise.all([
      get(this.nodeClient(['http', '--target', `${CLUSTER_IP}:80`, '--count', '4', '--timeout-ms', '2500'])),
      get(this.externalClient(['http', '--target', `${NODE_IP}:30080`, '--count', '4', '--timeout-ms', '2500'])),
    ]);
    return { clusterIP, nodePort };
  }

  async close(): Promise<void> {
    await this.api.close().catch(() => undefined);
    await this.sandbox.teardown();
    for (const args of [
      ['link', 'del', 'cni0'],
      ['link', 'del', 'eth1'],
      ['addr', 'del', `${ENDPOINT.ip}/32`, 'dev', 'lo'],
    ]) {
      try {
        ip(...args);
      } catch {
        /* gone with its namespace */
      }
    }
  }
}
