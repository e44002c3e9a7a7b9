/**
 * Conformance: kubernetes/kubernetes test/e2e/network/conntrack.go
 * ("[sig-network] Conntrack"), one node:test test per upstream It() that
 * concerns the proxy (upstream-tests.ts). As upstream: a client pod on the
 * first node sends UDP to the Service from one fixed source port (12345),
 * each try from a new socket (`nc -u -p 12345`), while the backend pods on
 * the second node are replaced; the client must get answers from the new
 * backend within the poll window. The invalid-conntrack-state test has a
 * long-lived TCP connection through a Service receive segments past its
 * window from the backend (sandbox/out-of-window.py, upstream's boom-server)
 * with netfilter conntrack in use on the nodes (the CNI's part); the client
 * must not reset it. Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe } from 'node:test';
import { repoRoot } from '../../sandbox/repo.js';
import { scaled } from '../../sandbox/time-scale.js';
import { requireRoot } from '../support/preflight.js';
import { clusterIP, ConformanceBox, eventually, nodePortOf, registerUpstream, UNREADY, type PodSpec, type UpstreamImpl } from './harness.js';

const PODS: PodSpec[] = [
  { name: 'pod-client', ip: '198.18.10.50', node: 'node-1' },
  { name: 'pod-server-1', ip: '198.18.20.10', node: 'node-2' },
  { name: 'pod-server-2', ip: '198.18.20.11', node: 'node-2' },
];
const SRC_PORT = 12345;
const UDP = [{ name: 'udp', port: 80, targetPort: 5353, protocol: 'UDP' }];
const UDP_EP = [{ name: 'udp', port: 5353, protocol: 'UDP' as const }];

let c: ConformanceBox;
const children: ChildProcess[] = [];

/** The lines a child printed so far, and a wait for the next one matching. */
function lines(child: ChildProcess): { all: string[]; next: (re: RegExp, what: string) => Promise<string> } {
  const all: string[] = [];
  const waiters: Array<{ re: RegExp; resolve: (l: string) => void }> = [];
  createInterface({ input: child.stdout! }).on('line', (l) => {
    all.push(l);
    for (const w of waiters.splice(0))
      if (w.re.test(l)) w.resolve(l);
      else waiters.push(w);
  });
  let stderr = '';
  child.stderr?.on('data', (d) => (stderr += d));
  return {
    all,
    next: (re, what) =>
      new Promise((resolve, reject) => {
        const seen = all.find((l) => re.test(l));
        if (seen) return resolve(seen);
        waiters.push({ re, resolve });
        child.once('exit', (code) => reject(new Error(`${what}: exited ${code} before ${re}: ${all.join(' | ')} ${stderr}`)));
      }),
  };
}

/** python3 itself (not a version manager's shim), for the raw-socket ends of the invalid-conntrack-state check. */
function python3(): string {
  const r = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `python3 is needed: ${r.stderr}`);
  return r.stdout.trim();
}

/** logContainsFn: the client's tries (new socket, same source port, `nc -w`) until `backend` answers one. */
async function clientReaches(target: string, backend: string): Promise<void> {
  await eventually(
    `pod-client → ${target} from :${SRC_PORT} answered by ${backend}`,
    async () => {
      const [rep] = await c.batch({ pod: 'pod-client' }, [{ mode: 'udp', target, srcPort: SRC_PORT, message: 'hostname', timeoutMs: 1000 }]);
      return rep.byPod[backend] === 1;
    },
    60_000,
    300,
  );
}

/** The server-pod-cycle tests: backend 1 answers; backend 2 is added and backend 1 deleted; backend 2 answers. */
async function serverPodCycles(
  svcName: string,
  target: (svc: ReturnType<ConformanceBox['createService']>) => string,
  type: 'ClusterIP' | 'NodePort',
): Promise<void> {
  const svc = c.createService(svcName, { type, ports: UDP, selector: { name: svcName } });
  // The client starts before any backend exists.
  await c.batch({ pod: 'pod-client' }, [{ mode: 'udp', target: target(svc), srcPort: SRC_PORT, message: 'hostname', timeoutMs: 500 }]);
  c.setEndpoints(svcName, [{ pod: 'pod-server-1' }], UDP_EP);
  await clientReaches(target(svc), 'pod-server-1');
  c.setEndpoints(svcName, [{ pod: 'pod-server-1' }, { pod: 'pod-server-2' }], UDP_EP);
  c.setEndpoints(svcName, [{ pod: 'pod-server-2' }], UDP_EP);
  await clientReaches(target(svc), 'pod-server-2');
}

const tests: Record<string, UpstreamImpl> = {
  // conntrack.go: "proxy implementation should not be vulnerable to the invalid conntrack state bug [Privileged]"
  // (regression test for #74839): a long-lived connection from a client pod to a Service; the backend sends the client
  // segments of that connection out of the TCP window (INVALID to conntrack); the client must not reset the connection.
  'proxy implementation should not be vulnerable to the invalid conntrack state bug [Privileged]': async () => {
    // The nodes' CNI: netfilter conntrack tracks their forwarded traffic, and calls the out-of-window segments INVALID.
    c.trackConnections('node-1');
    c.trackConnections('node-2');
    // Port 80 (the pod's HTTP server) shows when the proxy serves the Service: the boom server takes one connection only.
    const svc = c.createService('boom-server', {
      ports: [
        { name: 'tcp', port: 9000, targetPort: 9000, protocol: 'TCP' },
        { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' },
      ],
      selector: { app: 'boom-server' },
    });
    c.setEndpoints(
      'boom-server',
      [{ pod: 'pod-server-2' }],
      [
        { name: 'tcp', port: 9000 },
        { name: 'http', port: 8080 },
      ],
    );
    const py = python3();
    const script = path.join(repoRoot, 'sandbox', 'out-of-window.py');
    const server = c.box.spawnIn(c.podNs('pod-server-2'), py, [script, 'server', '9000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(server);
    const serverOut = lines(server);
    await serverOut.next(/^ready$/, 'boom-server');
    await eventually('the Service is served', async () => (await c.fromPod('pod-client', 'once', `${clusterIP(svc)}:80`)).byPod['pod-server-2'] === 1);
    const client = c.box.spawnIn(c.podNs('pod-client'), py, [script, 'client', clusterIP(svc), '9000'], {
      cgroupOf: 'node-1',
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    children.push(client);
    const clientOut = lines(client);
    await clientOut.next(/^connected$/, 'client');
    await serverOut.next(/^connection established 198\.18\.10\.50:/, 'boom-server');
    await serverOut.next(/^bad packets sent$/, 'boom-server');
    // upstream: "boom-server pod did not send any bad packet to the client" fails the test; here the client's node saw them, INVALID.
    await eventually("node-1's conntrack sees the out-of-window segments as INVALID", async () => c.invalidPackets('node-1') >= 3);
    client.stdin!.write('go\n');
    const reply = await clientOut.next(/^(reply|ERROR)/, 'client');
    const rst = await serverOut.next(/RST/, 'boom-server');
    assert.equal(rst, 'no RST', `boom-server pod received a RST from the client: ${serverOut.all.join(' | ')}`);
    assert.equal(reply, 'reply ok again', `the client's connection did not survive: ${clientOut.all.join(' | ')}`);
    assert.equal(await serverOut.next(/^(answered|ERROR)/, 'boom-server'), 'answered');
  },

  // conntrack.go: "should be able to preserve UDP traffic when server pod cycles for a NodePort service" — the client sends to the backends' node's NodePort.
  'should be able to preserve UDP traffic when server pod cycles for a NodePort service': () =>
    serverPodCycles('svc-udp-np', (svc) => `${c.nodeIp('node-2')}:${nodePortOf(svc)}`, 'NodePort'),
  // conntrack.go: "... for a ClusterIP service"
  'should be able to preserve UDP traffic when server pod cycles for a ClusterIP service': () =>
    serverPodCycles('svc-udp-cip', (svc) => `${clusterIP(svc)}:80`, 'ClusterIP'),
  // conntrack.go: "should be able to preserve UDP traffic when initial unready endpoints get ready" (regression test for #105657)
  'should be able to preserve UDP traffic when initial unready endpoints get ready': async () => {
    const svc = c.createService('svc-udp-unready', { ports: UDP, selector: { name: 'svc-udp-unready' } });
    const target = `${clusterIP(svc)}:80`;
    await c.batch({ pod: 'pod-client' }, [{ mode: 'udp', target, srcPort: SRC_PORT, message: 'hostname', timeoutMs: 500 }]);
    // The init container holds the pod unready: the slice lists it, not ready.
    c.setEndpoints('svc-udp-unready', [{ pod: 'pod-server-1', conditions: UNREADY }], UDP_EP);
    await c.batch({ pod: 'pod-client' }, [{ mode: 'udp', target, srcPort: SRC_PORT, message: 'hostname', timeoutMs: 500, count: 3 }]);
    c.setEndpoints('svc-udp-unready', [{ pod: 'pod-server-1' }], UDP_EP);
    await clientReaches(target, 'pod-server-1');
  },
};

describe('conformance: test/e2e/network/conntrack.go', { timeout: scaled(150_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
  });
  after(async () => {
    for (const ch of children) ch.kill('SIGKILL');
    await c?.close();
  });
  registerUpstream('conntrack.go', tests);
});
