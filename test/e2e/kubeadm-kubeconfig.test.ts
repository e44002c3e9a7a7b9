/**
 * kubeadm's kube-proxy kubeconfig.conf, byte for byte (what the chart's
 * kubeconfigFromConfigMap mounts), as the real agent's --kubeconfig: its
 * server is the control-plane endpoint https://198.18.0.2:6443, its CA and
 * token are the pod's service account files under
 * /var/run/secrets/kubernetes.io/serviceaccount. Here the embedded API server
 * listens there over TLS with a CA of the test's own and accepts one bearer
 * token; the agent runs in the node's network namespace, in a mount namespace
 * of its own where that directory holds the CA and the token, as in a pod.
 * A client on the node then reaches a ClusterIP the agent programmed from
 * that API server; a wrong token gets the API server's 401, and the agent
 * says so. And kube-proxy's whole ConfigMap as the chart's kubeProxyConfigMap
 * mounts it: kubeadm's config.conf, with a field its v1alpha1 does not have,
 * at /var/lib/kube-proxy beside kubeconfig.conf, and kube-proxy's command
 * line: the agent warns once naming the field, takes the kubeconfig from
 * config.conf and serves the ClusterIP.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { addPod, createNode, runClient, waitForLine, type NodeTopology } from '../../sandbox/topology.js';
import { trackAgentLogs, type AgentProcess, type LogLine } from '../../sandbox/agent-logs.js';
import { agentBin, repoRoot } from '../../sandbox/repo.js';
import { requireRoot } from '../support/preflight.js';
import { UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE } from '../../agent/config/kube-proxy-config.js';

const ENDPOINT_IP = '198.18.0.2';
const NODE = 'node-1';
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
const configMap = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));
const KUBECONFIG_CONF: string = configMap.data['kubeconfig.conf'];
/** kubeadm's config.conf as a newer kube-proxy might have it: one field more than this v1alpha1. */
const CONFIG_CONF = `${configMap.data['config.conf']}\nnewKubeProxyField: {enabled: true}\n`;

/**
 * A log line about a request the API server refused with 401: the informer's
 * failure line carries the answer's status as a number (agent/k8s/reflector.ts),
 * its error the status line. Not a search for "401" in the whole line: every
 * line has its epoch-millisecond "time" (and durations, sizes), and any of
 * those can hold the digits 401.
 */
function refused(l: LogLine): boolean {
  return l.status === 401 || /\bHTTP 401\b/.test(String(l.error ?? ''));
}

/** A CA and a server certificate for the endpoint IP, with openssl. */
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
    '/CN=kpr-test-ca',
  );
  ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=kube-apiserver');
  writeFileSync(path.join(dir, 'server.ext'), `subjectAltName=IP:${ENDPOINT_IP}\n`);
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

const MANIFESTS = [
  { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } },
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'web', namespace: 'e2e' },
    spec: { type: 'ClusterIP', clusterIP: '198.19.0.10', clusterIPs: ['198.19.0.10'], ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
  },
  {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'e2e', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: ['198.18.0.10'], conditions: { ready: true }, nodeName: NODE }],
  },
];

describe("kubeadm's kube-proxy kubeconfig.conf as the agent's kubeconfig", { timeout: scaled(120_000) }, () => {
  let sandbox: Sandbox;
  let topo: NodeTopology;
  let dir: string;

  before(async () => {
    requireRoot();
    sandbox = new Sandbox();
    topo = createNode(sandbox);
    inNs(topo.nodeNs, 'ip', 'addr', 'add', `${ENDPOINT_IP}/32`, 'dev', 'lo');
    await addPod(sandbox, topo, 'web-a', '198.18.0.10');
    dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-kubeadm-`)));
    makeCertificates(dir);
    writeFileSync(path.join(dir, 'token'), 'kpr-e2e-service-account-token');
    writeFileSync(path.join(dir, 'wrong-token'), 'not-the-token');
    writeFileSync(path.join(dir, 'manifests.yaml'), MANIFESTS.map((m) => YAML.stringify(m)).join('---\n'));
    writeFileSync(path.join(dir, 'kubeconfig.conf'), KUBECONFIG_CONF);
    writeFileSync(path.join(dir, 'config.conf'), CONFIG_CONF);
    const api = sandbox.spawnIn(
      topo.nodeNs,
      process.execPath,
      [
        path.join(repoRoot, 'dist', 'sandbox', 'apiserver.js'),
        '--host',
        ENDPOINT_IP,
        '--port',
        '6443',
        '--tls-cert-file',
        path.join(dir, 'server.crt'),
        '--tls-private-key-file',
        path.join(dir, 'server.key'),
        '--token-file',
        path.join(dir, 'token'),
        '--manifests',
        path.join(dir, 'manifests.yaml'),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitForLine(api, `https://${ENDPOINT_IP}:6443`, 'the embedded API server');
  });

  after(async () => {
    await sandbox?.teardown();
  });

  /**
   * The real agent in the node's network namespace and the run's cgroup, with
   * `tokenFile` (of dir) as the service account token in a private /run.
   * With `kubeProxyConfigMap`, kube-proxy's ConfigMap (config.conf and
   * kubeconfig.conf) is at /var/lib/kube-proxy (a private tmpfs /var/lib)
   * and the agent gets kubeadm's kube-proxy command line instead of
   * --kubeconfig and --node-name.
   */
  function startAgent(tokenFile: string, kubeProxyConfigMap = false): AgentProcess {
    const configMapDir = kubeProxyConfigMap
      ? ` && mount -t tmpfs -o mode=0755 tmpfs /var/lib && mkdir -p /var/lib/kube-proxy && cp "$0/config.conf" "$0/kubeconfig.conf" /var/lib/kube-proxy/`
      : '';
    const inPod = `mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p ${SA_DIR} && cp "$0/ca.crt" ${SA_DIR}/ca.crt && cp "$0/${tokenFile}" ${SA_DIR}/token${configMapDir} && exec "$@"`;
    const agentArgs = [
      ...(kubeProxyConfigMap
        ? ['--config=/var/lib/kube-proxy/config.conf', `--hostname-override=${NODE}`]
        : ['--kubeconfig', path.join(dir, 'kubeconfig.conf'), '--node-name', NODE]),
      '--cgroup-path',
      sandbox.cgroupPath,
      '--bpffs',
      sandbox.bpffsDir,
      '--external-interfaces',
      '',
      '--pod-interfaces',
      'v*',
      '--healthz-bind-address',
      '127.0.0.1:0',
      '--metrics-bind-address',
      '127.0.0.1:0',
    ];
    const child = sandbox.track(
      spawn(
        'sh',
        [
          '-c',
          'echo $$ > "$0/cgroup.procs" && exec "$@"',
          sandbox.cgroupPath,
          'nsenter',
          `--net=${nsPath(topo.nodeNs)}`,
          'unshare',
          '--mount',
          '--propagation',
          'private',
          'sh',
          '-c',
          inPod,
          dir,
          agentBin,
          ...agentArgs,
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      ),
    );
    return trackAgentLogs('kubeadm-kubeconfig', child);
  }

  async function stop(agent: AgentProcess): Promise<void> {
    if (agent.child.exitCode !== null || agent.child.signalCode !== null) return;
    const exited = new Promise((r) => agent.child.once('exit', r));
    agent.child.kill('SIGTERM');
    await exited;
  }

  test('a wrong service account token: the API server answers 401 and the agent logs it, syncing nothing', async () => {
    const agent = startAgent('wrong-token');
    try {
      const line = await agent.waitForLog(refused);
      assert.equal(line.status, 401, JSON.stringify(line));
      assert.equal(
        agent.logs.some((l) => l.msg === 'initial sync complete'),
        false,
      );
    } finally {
      await stop(agent);
    }
  });

  test("with the pod's token and CA, the agent syncs from https://198.18.0.2:6443 and a client reaches the ClusterIP", async () => {
    const agent = startAgent('token');
    try {
      await agent.waitForLog('initial sync complete', 30_000);
      const refusals = agent.logs.filter(refused);
      assert.deepEqual(refusals, [], 'no request was refused');
      const rep = await runClient(sandbox, topo, 'http', '198.19.0.10:80', ['--count', '20']);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.deepEqual(rep.byPod, { 'web-a': 20 });
    } finally {
      await stop(agent);
    }
  });

  test("kube-proxy's ConfigMap and command line as they are, config.conf with a field v1alpha1 lacks: one warning naming it, the agent syncs and serves", async () => {
    const agent = startAgent('token', true);
    try {
      await agent.waitForLog('initial sync complete', 30_000);
      const warnings = agent.logs.filter((l) => l.msg === UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE);
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.deepEqual([warnings[0].level, warnings[0].file, warnings[0].fields], [40, '/var/lib/kube-proxy/config.conf', 'newKubeProxyField']);
      const rep = await runClient(sandbox, topo, 'http', '198.19.0.10:80', ['--count', '10']);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.deepEqual(rep.byPod, { 'web-a': 10 });
    } finally {
      await stop(agent);
    }
  });
});
