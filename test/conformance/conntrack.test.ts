/**
 * Conformance: kubernetes/kubernetes test/e2e/network/conntrack.go
 * ("[sig-network] Conntrack"), one node:test test per upstream It() that
 * concerns the proxy (upstream-tests.ts). As upstream: a client pod on the
 * first node sends UDP to the Service from one fixed source port (12345),
 * each try from a new socket (`nc -u -p 12345`), while the backend pods on
 * the second node are replaced; the client must get answers from the new
 * backend within the poll window. Topology: sandbox/two-node.ts;
 * conventions: harness.ts.
 */
import { after, before, describe } from 'node:test';
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

/** logContainsFn: the client's tries (new socket, same source port, `nc -w`) until `backend` answers one. */
async function clientReaches(target: string, backend: string): Promise<void> {
  await eventually(`pod-client → ${target} from :${SRC_PORT} answered by ${backend}`, async () => {
    const [rep] = await c.batch({ pod: 'pod-client' }, [{ mode: 'udp', target, srcPort: SRC_PORT, message: 'hostname', timeoutMs: 1000 }]);
    return rep.byPod[backend] === 1;
  }, 60_000, 300);
}

/** The server-pod-cycle tests: backend 1 answers; backend 2 is added and backend 1 deleted; backend 2 answers. */
async function serverPodCycles(svcName: string, target: (svc: ReturnType<ConformanceBox['createService']>) => string, type: 'ClusterIP' | 'NodePort'): Promise<void> {
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
    await c?.close();
  });
  registerUpstream('conntrack.go', tests);
});
