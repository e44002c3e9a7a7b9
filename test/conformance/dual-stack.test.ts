/**
 * Conformance: kubernetes/kubernetes test/e2e/network/dual_stack.go
 * ("[sig-network] [Feature:IPv6DualStack]"), its "Granular Checks: Services
 * Secondary IP Family", one node:test test per upstream It() that concerns
 * the proxy (upstream-tests.ts). The upstream NetworkingTestConfig with
 * EnableDualStack is, here, networking.test.ts's in a dual-stack box
 * (sandbox/two-node.ts `ipv6: true`): the endpoint pods web-1a and web-2a
 * ("netserver-0/1"), the NodePort Service "node-port-service" and the ClientIP
 * "session-affinity-service", both RequireDualStack (http 80 → 8080, udp
 * 90 → 5353), their EndpointSlices one per family, the test container
 * client-1 and the host test container (node-1's namespace). Every dial goes
 * to the secondary family, as upstream's: the Service's IPv6 ClusterIP
 * (spec.clusterIPs[1]) and the first node's IPv6 InternalIP at the NodePort.
 * Dial* = the requests repeat until every endpoint answered. The hostNetwork
 * row has its own Service over hostNetwork servers on both nodes.
 * Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { requireRoot } from '../support/preflight.js';
import {
  ConformanceBox,
  dialAll,
  eventually,
  FAIL_TIMEOUT_MS,
  hostPortOf as at,
  nodePortOf,
  registerUpstream,
  type PodSpec,
  type UpstreamImpl,
  type Who,
} from './harness.js';
import type { KubeObject } from '../../sandbox/apiserver.js';
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
/** The hostNetwork servers' ports (sandbox/pod-server.js on the node: http, udp = http + 1, echo = http + 2). */
const HOST_HTTP = 10280;

let c: ConformanceBox;
/** The config's secondary-family addresses: SecondaryClusterIP, the session affinity Service's clusterIPs[1], node ports. */
const cfg = { secondaryClusterIP: '', httpNodePort: 0, udpNodePort: 0, affinityIP: '' };
const TEST_CONTAINER: Who = { pod: 'client-1' };
const HOST_TEST_CONTAINER: Who = { node: 'node-1' };
const ENDPOINT_CONTAINER: Who = { pod: 'web-1a' };
/** SecondaryNodeIP: the first node's InternalIP of the secondary family. */
const secondaryNodeIP = () => c.nodeIp6('node-1');

/** The config's Services: NodePort, RequireDualStack (createNodePortServiceSpec with DualStackEnabled). */
function createConfigService(name: string, extra: Record<string, unknown> = {}, ports = PORTS): KubeObject {
  const svc = c.createService(name, { type: 'NodePort', ports, selector: { app: name }, ipFamilyPolicy: 'RequireDualStack', ...extra });
  assert.deepEqual(svc.spec.ipFamilies, ['IPv4', 'IPv6'], `${name}: both families`);
  assert.equal(svc.spec.clusterIPs.length, 2, `${name}: two ClusterIPs`);
  return svc;
}

/** The two dials of a Granular Check on the secondary family: the IPv6 ClusterIP port and the IPv6 node IP's NodePort reach every endpoint. */
async function dialServiceAndNodePort(who: Who, proto: 'http' | 'udp'): Promise<void> {
  await dialAll(c, who, proto, at(cfg.secondaryClusterIP, proto === 'http' ? 80 : 90), EPS);
  await dialAll(c, who, proto, at(secondaryNodeIP(), proto === 'http' ? cfg.httpNodePort : cfg.udpNodePort), EPS);
}

/** DeleteNetProxyPod: the first endpoint pod goes (its endpoint leaves both families' slices); restored afterwards for the next test. */
async function updateEndpoints(proto: 'http' | 'udp'): Promise<void> {
  const target = at(cfg.secondaryClusterIP, proto === 'http' ? 80 : 90);
  await dialAll(c, TEST_CONTAINER, proto, target, EPS);
  c.setEndpoints('node-port-service', [{ pod: 'web-2a' }], SLICE_PORTS);
  try {
    // MaxTries requests, all of them answered by the endpoint left.
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

/** GetEndpointsFromTestContainer with SessionAffinityChecks on SessionAffinityService.Spec.ClusterIPs[1]: exactly one endpoint answers. */
async function affinity(proto: 'http' | 'udp'): Promise<void> {
  const target = at(cfg.affinityIP, proto === 'http' ? 80 : 90);
  await eventually(`${target} reachable`, async () => (await c.batch(TEST_CONTAINER, [{ mode: proto, target }]))[0].ok === 1);
  const [rep] = await c.batch(TEST_CONTAINER, [{ mode: proto, target, count: 10 }]);
  assert.equal(rep.ok, 10, JSON.stringify(rep.errors));
  assert.equal(Object.keys(rep.byPod).length, 1, `expect 1 endpoint, got ${JSON.stringify(rep.byPod)}`);
}

/** DialEchoFromTestContainer: a 2000-byte message comes back whole. */
async function largeHttp(clusterIP: string): Promise<void> {
  const message = '42'.repeat(1000);
  const [rep] = await c.batch(TEST_CONTAINER, [{ mode: 'get', target: at(clusterIP, 80), path: `/echo?msg=${message}` }]);
  assert.equal(rep.responses?.[0]?.status, 200, JSON.stringify(rep.errors));
  assert.equal(rep.responses?.[0]?.body, message);
}
async function largeUdp(clusterIP: string): Promise<void> {
  const message = 'n' + 'o'.repeat(1999);
  const [rep] = await c.batch(TEST_CONTAINER, [{ mode: 'udp', target: at(clusterIP, 90), message: `echo ${message}` }]);
  assert.equal(rep.ok, 1, JSON.stringify(rep.errors));
  assert.deepEqual(rep.byPod, { [message]: 1 }, 'the echo is the message');
}

/** The SCTP Service of the config with EnableSCTP (ClusterSCTPPort 2105 → 2105 on the endpoints). */
const SCTP_PORT = 2105;

/**
 * "should function for pod-Service: sctp" on the secondary family, where kpr
 * differs (rule 39 of docs/semantics.md): upstream's associations to the
 * IPv6 ClusterIP:2105 and the first node's IPv6 address at the NodePort
 * reach every endpoint; kpr carries none. Three SCTP INITs from the test
 * container to each; kpr_tc_pod of node-1 drops and counts all six, no
 * endpoint sees one, and an INIT sent straight to each endpoint's IPv6
 * address (the control) arrives.
 */
async function sctpSecondaryFamily(): Promise<void> {
  const svc = createConfigService('sctp-service', {}, [{ name: 'sctp', port: SCTP_PORT, targetPort: SCTP_PORT, protocol: 'SCTP' }]);
  c.setEndpoints(
    'sctp-service',
    EPS.map((pod) => ({ pod })),
    [{ name: 'sctp', port: SCTP_PORT, protocol: 'SCTP' }],
  );
  const ip6 = svc.spec.clusterIPs[1] as string;
  const controls = Object.fromEntries(EPS.map((pod) => [pod, c.podIp6(pod)]));
  try {
    await assertSctpNotCarried(
      c,
      TEST_CONTAINER,
      [
        [ip6, SCTP_PORT],
        [secondaryNodeIP(), nodePortOf(svc, 0)],
      ],
      { from: TEST_CONTAINER, target: [ip6, SCTP_PORT] },
      controls,
      SCTP_PORT,
    );
  } finally {
    c.deleteService('sctp-service');
  }
}

const tests: Record<string, UpstreamImpl> = {
  'should function for pod-Service: http': () => dialServiceAndNodePort(TEST_CONTAINER, 'http'),
  'should function for pod-Service: udp': () => dialServiceAndNodePort(TEST_CONTAINER, 'udp'),
  'should function for pod-Service: sctp': () => sctpSecondaryFamily(),
  'should function for node-Service: http': () => dialServiceAndNodePort(HOST_TEST_CONTAINER, 'http'),
  'should function for node-Service: udp': () => dialServiceAndNodePort(HOST_TEST_CONTAINER, 'udp'),
  'should function for endpoint-Service: http': () => dialServiceAndNodePort(ENDPOINT_CONTAINER, 'http'),
  'should function for endpoint-Service: udp': () => dialServiceAndNodePort(ENDPOINT_CONTAINER, 'udp'),
  'should update endpoints: http': () => updateEndpoints('http'),
  'should update endpoints: udp': () => updateEndpoints('udp'),
  'should function for client IP based session affinity: http [LinuxOnly]': () => affinity('http'),
  'should function for client IP based session affinity: udp [LinuxOnly]': () => affinity('udp'),
  'should be able to handle large requests: http': () => largeHttp(cfg.secondaryClusterIP),
  'should be able to handle large requests: udp': () => largeUdp(cfg.secondaryClusterIP),

  // EndpointsUseHostNetwork: the endpoints are hostNetwork pods, one per node (their addresses the nodes', their hostnames the nodes' names).
  'should function for service endpoints using hostNetwork': async () => {
    const servers = await Promise.all([c.startHostServer('node-1', HOST_HTTP), c.startHostServer('node-2', HOST_HTTP)]);
    try {
      const svc = createConfigService('host-network-service', {}, [
        { name: 'http', port: 80, targetPort: HOST_HTTP, protocol: 'TCP' },
        { name: 'udp', port: 90, targetPort: HOST_HTTP + 1, protocol: 'UDP' },
      ]);
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
      const ip6 = svc.spec.clusterIPs[1] as string;
      const http = at(ip6, 80);
      const udp = at(ip6, 90);
      const httpNode = at(secondaryNodeIP(), nodePortOf(svc, 0));
      const udpNode = at(secondaryNodeIP(), nodePortOf(svc, 1));
      // pod-Service(hostNetwork): http
      await dialAll(c, TEST_CONTAINER, 'http', http, hostnames);
      await dialAll(c, TEST_CONTAINER, 'http', httpNode, hostnames);
      // node-Service(hostNetwork): http, udp
      await dialAll(c, HOST_TEST_CONTAINER, 'http', http, hostnames);
      await dialAll(c, HOST_TEST_CONTAINER, 'http', httpNode, hostnames);
      await dialAll(c, HOST_TEST_CONTAINER, 'udp', udp, hostnames);
      await dialAll(c, HOST_TEST_CONTAINER, 'udp', udpNode, hostnames);
      // handle large requests: http, udp (hostNetwork)
      await largeHttp(ip6);
      await largeUdp(ip6);
    } finally {
      c.deleteService('host-network-service');
      for (const s of servers) s.kill('SIGKILL');
    }
  },
};

describe('conformance: test/e2e/network/dual_stack.go', { timeout: scaled(150_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS, [], { ipv6: true });
    const svc = createConfigService('node-port-service');
    c.setEndpoints(
      'node-port-service',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    const aff = createConfigService('session-affinity-service', { sessionAffinity: 'ClientIP' });
    c.setEndpoints(
      'session-affinity-service',
      EPS.map((pod) => ({ pod })),
      SLICE_PORTS,
    );
    Object.assign(cfg, {
      secondaryClusterIP: svc.spec.clusterIPs[1],
      httpNodePort: nodePortOf(svc, 0),
      udpNodePort: nodePortOf(svc, 1),
      affinityIP: aff.spec.clusterIPs[1],
    });
    // The config waits for its Service to be up before any test dials.
    await eventually(
      'node-port-service programmed',
      async () => (await c.batch(TEST_CONTAINER, [{ mode: 'once', target: at(cfg.secondaryClusterIP, 80) }]))[0].ok === 1,
    );
  });
  after(async () => {
    await c?.close();
  });
  registerUpstream('dual_stack.go', tests);
});
