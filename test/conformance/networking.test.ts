/**
 * Conformance: kubernetes/kubernetes test/e2e/network/networking.go
 * ("[sig-network] Networking", its "Granular Checks: Services" and the
 * kube-proxy URL check), one node:test test per upstream It() that concerns
 * the proxy (upstream-tests.ts). The upstream NetworkingTestConfig is, here:
 * an endpoint pod on each node (web-1a, web-2a: "netserver-0/1"), the
 * NodePort Service "node-port-service" (http 80 → 8080, udp 90 → 5353), a
 * ClientIP "session-affinity-service" on the same pods, the test container
 * client-1 and the host test container (node-1's namespace). Dial* = the
 * requests repeat until every endpoint answered (DialFromContainer). The
 * hostNetwork endpoints test has its own NodePort Service over hostNetwork
 * servers on both nodes (EndpointsUseHostNetwork).
 * Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { requireRoot } from '../support/preflight.js';
import {
  clusterIP,
  ConformanceBox,
  dialAll,
  eventually,
  FAIL_TIMEOUT_MS,
  nodePortOf,
  registerUpstream,
  type PodSpec,
  type UpstreamImpl,
  type Who,
} from './harness.js';
import { assertSctpNotCarried } from './sctp.js';

const PODS: PodSpec[] = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' },
  { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' },
  { name: 'client-1', ip: '198.18.10.50', node: 'node-1' },
];
const EPS = ['web-1a', 'web-2a'];
const PORTS = [
  { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' },
  { name: 'udp', port: 90, targetPort: 5353, protocol: 'UDP' },
];
const SLICE_PORTS = [
  { name: 'http', port: 8080 },
  { name: 'udp', port: 5353, protocol: 'UDP' as const },
];

let c: ConformanceBox;
/** The config's addresses: ClusterIP, node IP (the first node's), node ports. */
const cfg = { clusterIP: '', httpNodePort: 0, udpNodePort: 0, affinityIP: '' };
const TEST_CONTAINER: Who = { pod: 'client-1' };
const HOST_TEST_CONTAINER: Who = { node: 'node-1' };
const ENDPOINT_CONTAINER: Who = { pod: 'web-1a' };
const nodeIP = () => c.nodeIp('node-1');
const at = (ip: string, port: number) => `${ip}:${port}`;

/** The config's two dials of a Granular Check: the ClusterIP port and the node IP's NodePort reach every endpoint. */
async function dialServiceAndNodePort(who: Who, proto: 'http' | 'udp', eps = EPS): Promise<void> {
  await dialAll(c, who, proto, at(cfg.clusterIP, proto === 'http' ? 80 : 90), eps);
  await dialAll(c, who, proto, at(nodeIP(), proto === 'http' ? cfg.httpNodePort : cfg.udpNodePort), eps);
}

/** DeleteNetProxyPod: one endpoint pod goes (its endpoint leaves the slices); restored afterwards for the next test. */
async function updateEndpoints(proto: 'http' | 'udp'): Promise<void> {
  const target = at(cfg.clusterIP, proto === 'http' ? 80 : 90);
  await dialAll(c, TEST_CONTAINER, proto, target, EPS);
  c.setEndpoints('node-port-service', [{ pod: 'web-2a' }], SLICE_PORTS);
  try {
    // Recovery: MaxTries requests, all of them answered by the endpoints left.
    await eventually(`${target} answered by web-2a only`, async () => {
      const [rep] = await c.batch(TEST_CONTAINER, [{ mode: proto, target, count: 10, timeoutMs: FAIL_TIMEOUT_MS }]);
      return rep.ok === 10 && Object.keys(rep.byPod).join() === 'web-2a';
    });
  } finally {
    c.setEndpoints(
      'node-port-service',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
  }
}

/**
 * "update nodePort": the host container reaches every endpoint on the NodePort; once the Service is deleted, 10 tries reach none
 * (the 10 at once, each its own socket: a UDP try that must fail waits out its timeout).
 */
async function updateNodePort(proto: 'http' | 'udp'): Promise<void> {
  const svc = c.createService(`np-update-${proto}`, { type: 'NodePort', ports: PORTS, selector: { name: `np-update-${proto}` } });
  c.setEndpoints(
    `np-update-${proto}`,
    EPS.map((pod) => ({ pod })),
    SLICE_PORTS,
  );
  const target = at(nodeIP(), nodePortOf(svc, proto === 'http' ? 0 : 1));
  await dialAll(c, HOST_TEST_CONTAINER, proto, target, EPS);
  c.deleteService(`np-update-${proto}`);
  await eventually(`${target} gets zero endpoints`, async () => {
    const reps = await c.batch(
      HOST_TEST_CONTAINER,
      Array.from({ length: 10 }, () => ({ mode: proto, target, timeoutMs: 500, overlap: true })),
    );
    return reps.length === 10 && reps.every((rep) => rep.ok === 0 && rep.failed === 1);
  });
}

/** The config's SCTP port (NetworkingTestConfig with EnableSCTP), on a Service of its own: 2105 → 9132 on the endpoint pods. */
const SCTP_PORT = 2105;
const SCTP_TARGET = 9132;
let sctpSvc: { clusterIP: string; nodePort: number } | undefined;

function sctpConfig(): { clusterIP: string; nodePort: number } {
  if (!sctpSvc) {
    const svc = c.createService('sctp-service', {
      type: 'NodePort',
      ports: [{ name: 'sctp', port: SCTP_PORT, targetPort: SCTP_TARGET, protocol: 'SCTP' }],
      selector: { app: 'netserver' },
    });
    c.setEndpoints(
      'sctp-service',
      EPS.map((pod) => ({ pod })),
      [{ name: 'sctp', port: SCTP_TARGET, protocol: 'SCTP' }],
    );
    sctpSvc = { clusterIP: clusterIP(svc), nodePort: nodePortOf(svc, 0) };
  }
  return sctpSvc;
}

/**
 * The Granular Checks' SCTP dials, where kpr differs (rule 39 of
 * docs/semantics.md): upstream's associations to ClusterIP:2105 and to the
 * node IP's NodePort reach every endpoint; kpr carries none. Each target
 * gets three SCTP INITs from `who`; no endpoint pod may see one, while an
 * INIT sent straight to each endpoint (the control: the network carries
 * SCTP and the listeners hear it) does arrive. From a pod (the test
 * container, an endpoint pod) every INIT to a frontend is dropped by
 * kpr_tc_pod of the pod's node and counted in
 * kpr_datapath_drops_total{reason="sctp"}; from a hostNetwork pod kpr never
 * sees them (the kernel runs no socket hook for SCTP; tc is at ingress): the
 * ClusterIP has no route there (ENETUNREACH, as an SCTP connect() gets), and
 * what the node sends to its own NodePort stays in its own stack.
 */
async function sctpServiceAndNodePort(who: Who): Promise<void> {
  const svc = sctpConfig();
  const controls = Object.fromEntries(EPS.map((pod) => [pod, c.pod(pod).ip]));
  await assertSctpNotCarried(
    c,
    who,
    [
      [svc.clusterIP, SCTP_PORT],
      [nodeIP(), svc.nodePort],
    ],
    { from: TEST_CONTAINER, target: [svc.clusterIP, SCTP_PORT] },
    controls,
    SCTP_TARGET,
  );
}

/** GetEndpointsFromTestContainer with SessionAffinityChecks: exactly one endpoint answers. */
async function affinity(proto: 'http' | 'udp'): Promise<void> {
  const target = at(cfg.affinityIP, proto === 'http' ? 80 : 90);
  await eventually(`${target} reachable`, async () => (await c.batch(TEST_CONTAINER, [{ mode: proto, target }]))[0].ok === 1);
  const [rep] = await c.batch(TEST_CONTAINER, [{ mode: proto, target, count: 10 }]);
  assert.equal(rep.ok, 10, JSON.stringify(rep.errors));
  assert.equal(Object.keys(rep.byPod).length, 1, `expect 1 endpoint, got ${JSON.stringify(rep.byPod)}`);
}

const tests: Record<string, UpstreamImpl> = {
  // networking.go: "should check kube-proxy urls" — /healthz 200 with lastUpdated on the health port, /proxyMode 200 on the metrics port.
  'should check kube-proxy urls': async () => {
    const agent = c.box.agents.get('node-1');
    assert.ok(agent);
    const healthz = `http://${(await agent.waitForLog('health server listening')).address}`;
    const metrics = `http://${(await agent.waitForLog('metrics server listening')).address}`;
    const h = await fetch(`${healthz}/healthz`);
    assert.equal(`${h.status} ${h.statusText}`, '200 OK');
    assert.match(await h.text(), /lastUpdated/);
    const m = await fetch(`${metrics}/proxyMode`);
    assert.equal(m.status, 200);
    assert.equal(await m.text(), 'kpr');
  },

  'should function for pod-Service: http': () => dialServiceAndNodePort(TEST_CONTAINER, 'http'),
  'should function for pod-Service: udp': () => dialServiceAndNodePort(TEST_CONTAINER, 'udp'),
  'should function for node-Service: http': () => dialServiceAndNodePort(HOST_TEST_CONTAINER, 'http'),
  'should function for node-Service: udp': () => dialServiceAndNodePort(HOST_TEST_CONTAINER, 'udp'),
  'should function for endpoint-Service: http': () => dialServiceAndNodePort(ENDPOINT_CONTAINER, 'http'),
  'should function for endpoint-Service: udp': () => dialServiceAndNodePort(ENDPOINT_CONTAINER, 'udp'),
  'should function for pod-Service: sctp': () => sctpServiceAndNodePort(TEST_CONTAINER),
  'should function for node-Service: sctp': () => sctpServiceAndNodePort(HOST_TEST_CONTAINER),
  'should function for endpoint-Service: sctp': () => sctpServiceAndNodePort(ENDPOINT_CONTAINER),

  // networking.go: a second NodePort Service on the same pods keeps working when the first is deleted.
  'should function for multiple endpoint-Services with same selector': async () => {
    const first = c.createService('first-same-selector', { type: 'NodePort', ports: PORTS, selector: { app: 'netserver' } });
    c.setEndpoints(
      'first-same-selector',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    const svc2 = c.createService('second-same-selector', { type: 'NodePort', ports: PORTS, selector: { app: 'netserver' } });
    c.setEndpoints(
      'second-same-selector',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(clusterIP(first), 80), EPS);
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(nodeIP(), nodePortOf(first)), EPS);
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(clusterIP(svc2), 80), EPS);
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(nodeIP(), nodePortOf(svc2)), EPS);
    c.deleteService('first-same-selector');
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(clusterIP(svc2), 80), EPS);
    await dialAll(c, ENDPOINT_CONTAINER, 'http', at(nodeIP(), nodePortOf(svc2)), EPS);
  },

  'should update endpoints: http': () => updateEndpoints('http'),
  'should update endpoints: udp': () => updateEndpoints('udp'),
  'should update nodePort: http': () => updateNodePort('http'),
  'should support basic nodePort: udp functionality': () => dialAll(c, HOST_TEST_CONTAINER, 'udp', at(nodeIP(), cfg.udpNodePort), EPS),
  'should update nodePort: udp': () => updateNodePort('udp'),
  'should function for client IP based session affinity: http [LinuxOnly]': () => affinity('http'),
  'should function for client IP based session affinity: udp [LinuxOnly]': () => affinity('udp'),

  // networking.go: DialEchoFromTestContainer — a 2000-byte message comes back whole.
  'should be able to handle large requests: http': async () => {
    const message = '42'.repeat(1000);
    const [rep] = await c.batch(TEST_CONTAINER, [{ mode: 'get', target: at(cfg.clusterIP, 80), path: `/echo?msg=${message}` }]);
    assert.equal(rep.responses?.[0]?.status, 200, JSON.stringify(rep.errors));
    assert.equal(rep.responses?.[0]?.body, message);
  },
  'should be able to handle large requests: udp': async () => {
    const message = 'n' + 'o'.repeat(1999);
    const [rep] = await c.batch(TEST_CONTAINER, [{ mode: 'udp', target: at(cfg.clusterIP, 90), message: `echo ${message}` }]);
    assert.equal(rep.ok, 1, JSON.stringify(rep.errors));
    assert.deepEqual(rep.byPod, { [message]: 1 }, 'the echo is the message');
  },

  // networking.go: EndpointsUseHostNetwork — the endpoints are hostNetwork pods, one per node (their addresses the
  // nodes', their hostnames the nodes' names), on their own NodePort Service; pod, node and large-request dials.
  'should function for service endpoints using hostNetwork': async () => {
    const HOST_HTTP = 10280; // the servers' http port; udp and echo the next two
    const servers = await Promise.all([c.startHostServer('node-1', HOST_HTTP), c.startHostServer('node-2', HOST_HTTP)]);
    try {
      const svc = c.createService('host-network-service', {
        type: 'NodePort',
        selector: { app: 'host-network' },
        ports: [
          { name: 'http', port: 80, targetPort: HOST_HTTP, protocol: 'TCP' },
          { name: 'udp', port: 90, targetPort: HOST_HTTP + 1, protocol: 'UDP' },
        ],
      });
      c.setEndpoints(
        'host-network-service',
        [
          { pod: 'netserver-0', hostNetworkOn: 'node-1' },
          { pod: 'netserver-1', hostNetworkOn: 'node-2' },
        ],
        [
          { name: 'http', port: HOST_HTTP },
          { name: 'udp', port: HOST_HTTP + 1, protocol: 'UDP' },
        ],
      );
      const hostnames = ['node-1', 'node-2'];
      const [http, udp] = [at(clusterIP(svc), 80), at(clusterIP(svc), 90)];
      const [httpNode, udpNode] = [at(nodeIP(), nodePortOf(svc, 0)), at(nodeIP(), nodePortOf(svc, 1))];
      for (const who of [TEST_CONTAINER, HOST_TEST_CONTAINER]) {
        await dialAll(c, who, 'http', http, hostnames);
        await dialAll(c, who, 'http', httpNode, hostnames);
        await dialAll(c, who, 'udp', udp, hostnames);
        await dialAll(c, who, 'udp', udpNode, hostnames);
      }
      const message = '42'.repeat(1000);
      const [h] = await c.batch(TEST_CONTAINER, [{ mode: 'get', target: http, path: `/echo?msg=${message}` }]);
      assert.equal(h.responses?.[0]?.body, message, JSON.stringify(h.errors));
      const udpMessage = 'n' + 'o'.repeat(1999);
      const [u] = await c.batch(TEST_CONTAINER, [{ mode: 'udp', target: udp, message: `echo ${udpMessage}` }]);
      assert.deepEqual(u.byPod, { [udpMessage]: 1 }, JSON.stringify(u.errors));
    } finally {
      c.deleteService('host-network-service');
      for (const s of servers) s.kill('SIGKILL');
    }
  },
};

describe('conformance: test/e2e/network/networking.go', { timeout: scaled(150_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
    const svc = c.createService('node-port-service', { type: 'NodePort', ports: PORTS, selector: { app: 'netserver' } });
    c.setEndpoints(
      'node-port-service',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    const aff = c.createService('session-affinity-service', { type: 'NodePort', ports: PORTS, selector: { app: 'netserver' }, sessionAffinity: 'ClientIP' });
    c.setEndpoints(
      'session-affinity-service',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    Object.assign(cfg, { clusterIP: clusterIP(svc), httpNodePort: nodePortOf(svc, 0), udpNodePort: nodePortOf(svc, 1), affinityIP: clusterIP(aff) });
    // The config waits for its Service to be up before any test dials.
    await eventually(
      'node-port-service programmed',
      async () => (await c.batch(TEST_CONTAINER, [{ mode: 'once', target: at(cfg.clusterIP, 80) }]))[0].ok === 1,
    );
  });
  after(async () => {
    await c?.close();
  });
  registerUpstream('networking.go', tests);
});
