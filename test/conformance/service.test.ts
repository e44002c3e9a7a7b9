/**
 * Conformance: kubernetes/kubernetes test/e2e/network/service.go
 * ("[sig-network] Services"), the tests that concern the proxy, one node:test
 * test per upstream It(), named by it (upstream-tests.ts lists every one and
 * its status). Each test asserts what the upstream test asserts, observed
 * as it observes it: a client process in a pod's namespace (the e2e exec
 * pod), one in a node's namespace (the hostNetwork exec pod), `ss` on the
 * node, HTTP to the node's ports. Polls, repetitions and sleeps are shorter
 * than upstream's (the suite's time budget); what must hold does not change.
 * Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled } from '../../sandbox/time-scale.js';
import { NODE1_UPLINK, type NodeName } from '../../sandbox/two-node.js';
import { nsPath } from '../../sandbox/netns.js';
import type { ClientReport } from '../../sandbox/client.js';
import { requireRoot } from '../support/preflight.js';
import { expectedRefusal } from '../support/kernel.js';
import {
  assertServedBy,
  clusterIP,
  ConformanceBox,
  eventually,
  nodePortOf,
  NS,
  READY,
  registerUpstream,
  TERMINATING_SERVING,
  type EndpointSpec,
  type PodSpec,
  type UpstreamImpl,
} from './harness.js';

const PODS: PodSpec[] = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' },
  { name: 'web-1b', ip: '198.18.10.11', node: 'node-1' },
  { name: 'web-1c', ip: '198.18.10.12', node: 'node-1' },
  { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' },
  { name: 'web-2b', ip: '198.18.20.11', node: 'node-2' },
  { name: 'client-1', ip: '198.18.10.50', node: 'node-1' },
  { name: 'client-2', ip: '198.18.20.50', node: 'node-2' },
];
const HTTP = { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' };
/** A failed connection is reported fast: a drop waits this long (curl --connect-timeout in upstream). */
const FAIL_MS = '1000';

let c: ConformanceBox;
const N1 = () => c.nodeIp('node-1');
const N2 = () => c.nodeIp('node-2');
const ep = (...pods: string[]): EndpointSpec[] => pods.map((pod) => ({ pod }));
const hostPort = (ip: string, port: number) => `${ip}:${port}`;

/** jig.CheckServiceReachability from `from`: the ClusterIP port, and every node's addresses on the NodePort if it has one; only `pods` answer. */
async function reachable(
  from: string,
  svc: ReturnType<ConformanceBox['createService']>,
  pods: string[],
  proto: 'http' | 'udp' = 'http',
  portIndex = 0,
): Promise<void> {
  const port = svc.spec.ports[portIndex];
  const targets = [hostPort(clusterIP(svc), port.port)];
  if (port.nodePort) targets.push(...[N1(), N2(), NODE1_UPLINK].map((ip) => hostPort(ip, port.nodePort)));
  await eventually(`${from} → ${targets.join(', ')} (${proto}) served by ${pods.join('|')}`, async () => {
    const reps = await c.batch(
      { pod: from },
      targets.map((target) => ({ mode: proto, target, count: 3 })),
    );
    reps.forEach((rep, i) => assertServedBy(rep, pods, `${from} → ${targets[i]}`));
    return true;
  });
}

/** verifyServeHostnameServiceUp: from a pod and from the node, every pod of the Service answers, and only they. */
async function up(ip: string, port: number, pods: string[]): Promise<void> {
  const target = hostPort(ip, port);
  for (const [what, run] of [
    ['pod client-1', () => c.fromPod('client-1', 'http', target, ['--count', String(10 * pods.length), '--timeout-ms', FAIL_MS])],
    ['node-1 (hostNetwork)', () => c.fromNode('node-1', 'http', target, ['--count', String(10 * pods.length), '--timeout-ms', FAIL_MS])],
  ] as const) {
    const seen = new Set<string>();
    await eventually(`${target} up from ${what}: ${pods.join(', ')}`, async () => {
      const rep = await run();
      for (const p of Object.keys(rep.byPod)) {
        assert.ok(pods.includes(p), `${target}: ${p} answered, not one of ${pods.join(', ')}`);
        seen.add(p);
      }
      return pods.every((p) => seen.has(p));
    });
  }
}

/** verifyServeHostnameServiceDown: from the node, nothing answers. */
async function down(ip: string, port: number): Promise<void> {
  await eventually(`${ip}:${port} down`, async () => (await c.fromNode('node-1', 'once', hostPort(ip, port), ['--timeout-ms', FAIL_MS])).ok === 0);
}

/** execHostnameTest: one request from `from` to `target` answered by `pod`. */
async function hostnameIs(from: string, target: string, pod: string): Promise<void> {
  const rep = await c.fromPod(from, 'once', target, ['--timeout-ms', '3000']);
  assert.deepEqual(rep.byPod, { [pod]: 1 }, `${from} → ${target}: ${JSON.stringify(rep.errors)}`);
}

/** Nothing listens on `port` in either node's namespace: `ss -ant46 'sport = :port' | grep LISTEN` finds nothing. */
function listeners(port: number): string[] {
  return (['node-1', 'node-2'] as NodeName[]).flatMap((n) => {
    const r = spawnSync('nsenter', [`--net=${nsPath(c.box.nodes[n].ns)}`, 'ss', '-Hant46', `sport = :${port}`], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout
      .split('\n')
      .filter((l) => l.includes('LISTEN'))
      .map((l) => `${n}: ${l}`);
  });
}

/** checkAffinity: requests from client-1 until the last 15 all went to one pod (shouldHold) or not. */
async function checkAffinity(target: string, shouldHold: boolean): Promise<void> {
  const trace: string[] = [];
  await eventually(
    `affinity ${shouldHold ? 'holds' : 'does not hold'} on ${target}`,
    async () => {
      const rep = await c.fromPod('client-1', 'http', target, ['--count', '16']);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      // The client reports counts; 16 sequential requests to one pod are 16 in one bucket.
      const pods = Object.entries(rep.byPod);
      if (pods.length === 1) trace.push(...Array(16).fill(pods[0][0]));
      else trace.push('mixed', ...pods.map(([p]) => p));
      const last = trace.slice(-15);
      const holds = last.length >= 15 && last.every((h) => h === last[0]);
      return holds === shouldHold;
    },
    30_000,
    100,
  );
}

/** execAffinityTestForSessionAffinityTimeout: sticky until the timeout, then another pod answers. */
async function affinityTimeout(target: string, timeoutS: number): Promise<void> {
  await checkAffinity(target, true);
  const hosts = new Set<string>();
  for (let i = 0; i < 10 && hosts.size < 2; i++) {
    const rep = await c.fromPod('client-1', 'once', target);
    for (const p of Object.keys(rep.byPod)) hosts.add(p);
    // The affinity timeout runs on the datapath's clock, not the CPU's: only the margin scales.
    if (hosts.size < 2) await sleep(timeoutS * 1000 + scaled(500));
  }
  assert.ok(hosts.size > 1, `session is sticky after reaching the timeout: ${[...hosts].join(', ')}`);
}

function affinityService(name: string, type: 'ClusterIP' | 'NodePort', timeoutS?: number) {
  const svc = c.createService(name, {
    type,
    ports: [HTTP],
    selector: { name },
    sessionAffinity: 'ClientIP',
    ...(timeoutS ? { sessionAffinityConfig: { clientIP: { timeoutSeconds: timeoutS } } } : {}),
  });
  c.setEndpoints(name, ep('web-1a', 'web-1b', 'web-2a'));
  return svc;
}

const affinityTarget = (svc: ReturnType<ConformanceBox['createService']>) =>
  svc.spec.type === 'NodePort' ? hostPort(N1(), nodePortOf(svc)) : hostPort(clusterIP(svc), 80);

/** The four fallback tests and the health-check one: a single endpoint, web-1a on node-1, terminating but serving. */
function terminatingService(name: string, spec: Record<string, unknown>) {
  const svc = c.createService(name, { ports: [HTTP], selector: { name }, ...spec });
  c.setEndpoints(name, ep('web-1a'));
  return svc;
}

const tests: Record<string, UpstreamImpl> = {
  // service.go: "should serve a basic endpoint from pods" — reachable through pod1, pod1+pod2, pod2.
  'should serve a basic endpoint from pods': async () => {
    const svc = c.createService('endpoint-test2', { ports: [HTTP], selector: { name: 'endpoint-test2' } });
    c.setEndpoints('endpoint-test2', ep('web-1a'));
    await reachable('client-1', svc, ['web-1a']);
    c.setEndpoints('endpoint-test2', ep('web-1a', 'web-2a'));
    await up(clusterIP(svc), 80, ['web-1a', 'web-2a']);
    c.setEndpoints('endpoint-test2', ep('web-2a'));
    await reachable('client-1', svc, ['web-2a']);
  },

  // service.go: "should serve multiport endpoints from pods" — two ports with named target ports, each served by its pod.
  'should serve multiport endpoints from pods': async () => {
    const svc = c.createService('multi-endpoint-test', {
      selector: { name: 'multi-endpoint-test' },
      ports: [
        { name: 'portname1', port: 80, targetPort: 'svc1' },
        { name: 'portname2', port: 81, targetPort: 'svc2' },
      ],
    });
    c.setEndpoints('multi-endpoint-test', ep('web-1a'), [{ name: 'portname1', port: 8080 }], 'multi-endpoint-test-a');
    c.setEndpoints('multi-endpoint-test', ep('web-2a'), [{ name: 'portname2', port: 8080 }], 'multi-endpoint-test-b');
    await reachable('client-1', svc, ['web-1a'], 'http', 0);
    await reachable('client-1', svc, ['web-2a'], 'http', 1);
  },

  // service.go: "should be updated after adding or deleting ports " — a port added then removed.
  'should be updated after adding or deleting ports ': async () => {
    let svc = c.createService('edit-port-test', { selector: { name: 'edit-port-test' }, ports: [{ name: 'portname1', port: 80, targetPort: 'svc1' }] });
    c.setEndpoints('edit-port-test', ep('web-1a'), [{ name: 'portname1', port: 8080 }], 'edit-port-test-a');
    await reachable('client-1', svc, ['web-1a']);
    svc = c.updateService('edit-port-test', (s) => {
      s.spec.ports = [
        { name: 'portname1', port: 80, targetPort: 'svc1' },
        { name: 'portname2', port: 81, targetPort: 'svc2' },
      ];
    });
    c.setEndpoints('edit-port-test', ep('web-2a'), [{ name: 'portname2', port: 8080 }], 'edit-port-test-b');
    await reachable('client-1', svc, ['web-1a'], 'http', 0);
    await reachable('client-1', svc, ['web-2a'], 'http', 1);
    svc = c.updateService('edit-port-test', (s) => {
      s.spec.ports = [{ name: 'portname1', port: 80, targetPort: 'svc1' }];
    });
    await reachable('client-1', svc, ['web-1a']);
    await eventually(
      'the deleted port 81 is not forwarded',
      async () => (await c.fromPod('client-1', 'once', hostPort(clusterIP(svc), 81), ['--timeout-ms', FAIL_MS])).ok === 0,
    );
  },

  // service.go: "should preserve source pod IP for traffic thru service cluster IP" — from pods on both nodes, the backend sees the pod's IP.
  'should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]': async () => {
    const svc = c.createService('sourceip-test', { ports: [{ name: 'http', port: 8080, targetPort: 8080 }], selector: { name: 'sourceip-test' } });
    c.setEndpoints('sourceip-test', ep('web-1a'));
    for (const client of ['client-1', 'client-2']) {
      const rep = await eventually(`${client} reaches sourceip-test`, async () => {
        const r = await c.fromPod(client, 'once', hostPort(clusterIP(svc), 8080));
        return r.ok === 1 ? r : undefined;
      });
      assert.deepEqual(rep.seenAs, { [c.pod(client).ip]: 1 }, `${client}: the backend saw ${JSON.stringify(rep.seenAs)}`);
    }
  },

  // service.go: "should allow pods to hairpin back to themselves through services" — the backend reaches itself.
  'should allow pods to hairpin back to themselves through services': async () => {
    const svc = c.createService('hairpin-test', { ports: [{ name: 'http', port: 8080, targetPort: 8080 }], selector: { name: 'hairpin-test' } });
    c.setEndpoints('hairpin-test', ep('web-1b'));
    await reachable('web-1b', svc, ['web-1b']);
  },

  // service.go: "should be able to up and down services" — two Services up, one stopped (down, the other still up), a third up with its own IP.
  'should be able to up and down services': async () => {
    const s1 = c.createService('up-down-1', { ports: [HTTP], selector: { name: 'up-down-1' } });
    c.setEndpoints('up-down-1', ep('web-1a', 'web-1b', 'web-2a'));
    const s2 = c.createService('up-down-2', { ports: [HTTP], selector: { name: 'up-down-2' } });
    c.setEndpoints('up-down-2', ep('web-1c', 'web-2a', 'web-2b'));
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    await up(clusterIP(s2), 80, ['web-1c', 'web-2a', 'web-2b']);
    c.deleteService('up-down-1');
    await down(clusterIP(s1), 80);
    await up(clusterIP(s2), 80, ['web-1c', 'web-2a', 'web-2b']);
    const s3 = c.createService('up-down-3', { ports: [HTTP], selector: { name: 'up-down-3' } });
    c.setEndpoints('up-down-3', ep('web-1a', 'web-1b', 'web-2b'));
    assert.notEqual(clusterIP(s3), clusterIP(s2), 'service IPs conflict');
    await up(clusterIP(s2), 80, ['web-1c', 'web-2a', 'web-2b']);
    await up(clusterIP(s3), 80, ['web-1a', 'web-1b', 'web-2b']);
  },

  // service.go: "should work after the service has been recreated"
  'should work after the service has been recreated': async () => {
    const s = c.createService('service-deletion', { ports: [HTTP], selector: { name: 'service-deletion' } });
    c.setEndpoints('service-deletion', ep('web-2a'));
    await up(clusterIP(s), 80, ['web-2a']);
    c.box.api.remove('Service', NS, 'service-deletion'); // the slice stays, as the controller's garbage collection takes a while
    assert.equal(c.box.api.get('Service', NS, 'service-deletion'), undefined);
    const again = c.createService('service-deletion', { ports: [HTTP], selector: { name: 'service-deletion' } });
    await up(clusterIP(again), 80, ['web-2a']);
  },

  // service.go: "should work after restarting kube-proxy" [Disruptive] — two Services up before and after the proxy on every node is killed and restarted.
  'should work after restarting kube-proxy': async () => {
    const s1 = c.createService('restart-proxy-1', { ports: [HTTP], selector: { name: 'restart-proxy-1' } });
    c.setEndpoints('restart-proxy-1', ep('web-1a', 'web-1b', 'web-2a'));
    const s2 = c.createService('restart-proxy-2', { ports: [HTTP], selector: { name: 'restart-proxy-2' } });
    c.setEndpoints('restart-proxy-2', ep('web-1c', 'web-2a', 'web-2b'));
    assert.notEqual(clusterIP(s1), clusterIP(s2), 'VIPs conflict');
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    await up(clusterIP(s2), 80, ['web-1c', 'web-2a', 'web-2b']);
    await Promise.all(
      (['node-1', 'node-2'] as NodeName[]).map(async (n) => {
        await c.box.stopAgent(n, 'SIGKILL');
        await c.box.startAgent(n, ['--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0']);
      }),
    );
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    await up(clusterIP(s2), 80, ['web-1c', 'web-2a', 'web-2b']);
  },

  // service.go: "should work after restarting apiserver" [Disruptive] — a Service up before and after the API server
  // restarts (every watch broken, the port refused meanwhile, etcd's state and resourceVersions kept); one created
  // after the restart gets its own VIP and is up too (the agents' watches came back).
  'should work after restarting apiserver': async () => {
    const s1 = c.createService('restart-apiserver-1', { ports: [HTTP], selector: { name: 'restart-apiserver-1' } });
    c.setEndpoints('restart-apiserver-1', ep('web-1a', 'web-1b', 'web-2a'));
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    const rv = Number(c.box.api.resourceVersion());
    assert.ok(c.box.api.watchCount() > 0, 'the agents watch the API server');
    await c.box.api.stop();
    assert.equal(c.box.api.watchCount(), 0, 'every watch is broken');
    // While it is down the proxy keeps what it has.
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    await c.box.api.start();
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    const s2 = c.createService('restart-apiserver-2', { ports: [HTTP], selector: { name: 'restart-apiserver-2' } });
    c.setEndpoints('restart-apiserver-2', ep('web-1c', 'web-2b'));
    assert.ok(Number(s2.metadata!.resourceVersion) > rv, 'resourceVersions continue after the restart');
    assert.notEqual(clusterIP(s1), clusterIP(s2), 'VIPs conflict');
    await up(clusterIP(s1), 80, ['web-1a', 'web-1b', 'web-2a']);
    await up(clusterIP(s2), 80, ['web-1c', 'web-2b']);
  },

  // service.go: "should be able to create a functioning NodePort service" [Conformance]
  'should be able to create a functioning NodePort service': async () => {
    const svc = c.createService('nodeport-test', { type: 'NodePort', ports: [HTTP], selector: { name: 'nodeport-test' } });
    c.setEndpoints('nodeport-test', ep('web-1b', 'web-2b'));
    await reachable('client-1', svc, ['web-1b', 'web-2b']);
  },

  // service.go: "should be possible to connect to a service via ExternalIP when the external IP is not assigned to a node"
  'should be possible to connect to a service via ExternalIP when the external IP is not assigned to a node': async () => {
    const svc = c.createService('externalip-test', { ports: [HTTP], externalIPs: ['198.19.201.250'], selector: { name: 'externalip-test' } });
    c.setEndpoints('externalip-test', ep('web-1a', 'web-2a'));
    await reachable('client-1', svc, ['web-1a', 'web-2a']);
    await eventually('the external IP answers', async () => {
      assertServedBy(await c.fromPod('client-1', 'http', '198.19.201.250:80', ['--count', '3']), ['web-1a', 'web-2a'], 'externalIP');
      return true;
    });
  },

  // service.go: "should be able to update service type to NodePort listening on same port number but different protocols"
  'should be able to update service type to NodePort listening on same port number but different protocols': async () => {
    c.createService('nodeport-update-service', { ports: [HTTP], selector: { name: 'nodeport-update-service' } });
    let svc = c.updateService('nodeport-update-service', (s) => {
      s.spec.type = 'NodePort';
      s.spec.ports = [{ name: 'tcp-port', port: 80, protocol: 'TCP', targetPort: 8080 }];
    });
    c.setEndpoints('nodeport-update-service', ep('web-1a', 'web-2a'), [{ name: 'tcp-port', port: 8080 }]);
    await reachable('client-1', svc, ['web-1a', 'web-2a']);
    svc = c.updateService('nodeport-update-service', (s) => {
      s.spec.ports = [
        { name: 'tcp-port', port: 80, protocol: 'TCP', targetPort: 8080 },
        { name: 'udp-port', port: 80, protocol: 'UDP', targetPort: 5353 },
      ];
    });
    c.setEndpoints('nodeport-update-service', ep('web-1a', 'web-2a'), [
      { name: 'tcp-port', port: 8080 },
      { name: 'udp-port', port: 5353, protocol: 'UDP' },
    ]);
    assert.equal(svc.spec.ports.length, 2);
    for (const p of svc.spec.ports) assert.ok(p.nodePort > 0, `NodePort service failed to allocate NodePort for Port ${p.name}`);
    await reachable('client-1', svc, ['web-1a', 'web-2a'], 'http', 0);
    await reachable('client-1', svc, ['web-1a', 'web-2a'], 'udp', 1);
  },

  // service.go: "should be able to change the type from ExternalName to ClusterIP" [Conformance]
  'should be able to change the type from ExternalName to ClusterIP': async () => {
    const en = c.createService('externalname-service', { type: 'ExternalName', externalName: 'foo.example.com' });
    assert.ok(!en.spec.clusterIP, 'an ExternalName Service has no ClusterIP');
    const svc = c.updateService('externalname-service', (s) => {
      s.spec.type = 'ClusterIP';
      delete s.spec.externalName;
      s.spec.ports = [HTTP];
    });
    c.setEndpoints('externalname-service', ep('web-1a', 'web-2a'));
    await reachable('client-1', svc, ['web-1a', 'web-2a']);
  },

  // service.go: "should be able to change the type from ExternalName to NodePort" [Conformance]
  'should be able to change the type from ExternalName to NodePort': async () => {
    c.createService('externalname-np', { type: 'ExternalName', externalName: 'foo.example.com' });
    const svc = c.updateService('externalname-np', (s) => {
      s.spec.type = 'NodePort';
      delete s.spec.externalName;
      s.spec.ports = [HTTP];
    });
    c.setEndpoints('externalname-np', ep('web-1a', 'web-2a'));
    await reachable('client-1', svc, ['web-1a', 'web-2a']);
  },

  // service.go: "should be able to change the type from ClusterIP to ExternalName" [Conformance] — the proxy's half: the ClusterIP goes.
  'should be able to change the type from ClusterIP to ExternalName': async () => {
    const svc = c.createService('clusterip-service', { ports: [HTTP], selector: { name: 'clusterip-service' } });
    c.setEndpoints('clusterip-service', ep('web-1a'));
    await reachable('client-1', svc, ['web-1a']);
    const en = c.updateService('clusterip-service', (s) => {
      s.spec.type = 'ExternalName';
      s.spec.externalName = 'externalsvc.e2e.svc.cluster.local';
      s.spec.clusterIP = '';
      delete s.spec.clusterIPs;
    });
    assert.ok(!en.spec.clusterIP, 'Spec.ClusterIP was not cleared');
    await eventually(
      'the old ClusterIP is no longer served',
      async () => (await c.fromPod('client-1', 'once', hostPort(clusterIP(svc), 80), ['--timeout-ms', FAIL_MS])).ok === 0,
    );
  },

  // service.go: "should be able to change the type from NodePort to ExternalName" [Conformance] — the ClusterIP and the NodePort go.
  'should be able to change the type from NodePort to ExternalName': async () => {
    const svc = c.createService('nodeport-service', { type: 'NodePort', ports: [HTTP], selector: { name: 'nodeport-service' } });
    c.setEndpoints('nodeport-service', ep('web-1a'));
    await reachable('client-1', svc, ['web-1a']);
    const np = nodePortOf(svc);
    const en = c.updateService('nodeport-service', (s) => {
      s.spec.type = 'ExternalName';
      s.spec.externalName = 'externalsvc.e2e.svc.cluster.local';
      s.spec.clusterIP = '';
      delete s.spec.clusterIPs;
      for (const p of s.spec.ports) delete p.nodePort;
    });
    assert.ok(!en.spec.clusterIP, 'Spec.ClusterIP was not cleared');
    for (const t of [hostPort(clusterIP(svc), 80), hostPort(N1(), np), hostPort(N2(), np)]) {
      await eventually(`${t} no longer served`, async () => (await c.fromPod('client-1', 'once', t, ['--timeout-ms', FAIL_MS])).ok === 0);
    }
    assert.deepEqual(listeners(np), []);
  },

  // service.go: "should release NodePorts on delete" — after the delete nothing LISTENs on the port on the node (ss), and a new Service gets the same port.
  'should release NodePorts on delete': async () => {
    const svc = c.createService('nodeport-reuse', { type: 'NodePort', ports: [HTTP], selector: { name: 'nodeport-reuse' } });
    c.setEndpoints('nodeport-reuse', ep('web-1a'));
    const np = nodePortOf(svc);
    assert.ok(np >= 30000 && np <= 32767, `in range: ${np}`);
    await reachable('client-1', svc, ['web-1a']);
    c.deleteService('nodeport-reuse');
    await eventually(
      `node port ${np} not in use`,
      async () => listeners(np).length === 0 && (await c.fromPod('client-1', 'once', hostPort(N1(), np), ['--timeout-ms', FAIL_MS])).ok === 0,
    );
    const again = c.createService('nodeport-reuse', { type: 'NodePort', ports: [{ ...HTTP, nodePort: np }], selector: { name: 'nodeport-reuse' } });
    assert.equal(nodePortOf(again), np);
  },

  // service.go: "should create endpoints for unready pods" — publishNotReadyAddresses: an unready pod is served; not after the flag is off and the pod terminates; served again with the flag back on.
  'should create endpoints for unready pods': async () => {
    const svc = c.createService('tolerate-unready', { ports: [HTTP], selector: { name: 'tolerate-unready' }, publishNotReadyAddresses: true });
    // The controller marks an unready pod ready when the Service publishes not-ready addresses.
    c.setEndpoints('tolerate-unready', [{ pod: 'web-2a', conditions: { ready: true, serving: false, terminating: false } }]);
    await reachable('client-1', svc, ['web-2a']);
    // Scaled to zero (the pod terminates, 100 s grace) and publishNotReadyAddresses off.
    c.updateService('tolerate-unready', (s) => {
      s.spec.publishNotReadyAddresses = false;
    });
    c.setEndpoints('tolerate-unready', [{ pod: 'web-2a', conditions: { ready: false, serving: false, terminating: true } }]);
    await eventually(
      'the unready pod is unreachable',
      async () => (await c.fromPod('client-1', 'once', hostPort(clusterIP(svc), 80), ['--timeout-ms', FAIL_MS])).ok === 0,
    );
    c.updateService('tolerate-unready', (s) => {
      s.spec.publishNotReadyAddresses = true;
    });
    c.setEndpoints('tolerate-unready', [{ pod: 'web-2a', conditions: { ready: true, serving: false, terminating: true } }]);
    await reachable('client-1', svc, ['web-2a']);
  },

  // service.go: "should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true"
  'should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true': async () => {
    const svc = c.createService('svc-tolerate-unready', {
      type: 'NodePort',
      ports: [{ ...HTTP, targetPort: 8080 }],
      publishNotReadyAddresses: true,
      selector: { name: 'svc-tolerate-unready' },
    });
    c.setEndpoints('svc-tolerate-unready', ep('web-1a'));
    await reachable('client-2', svc, ['web-1a']);
    // Deleted (300 s grace), unready: the controller keeps it ready because of publishNotReadyAddresses.
    c.setEndpoints('svc-tolerate-unready', [{ pod: 'web-1a', conditions: { ready: true, serving: false, terminating: true } }]);
    const np = nodePortOf(svc);
    await c.expectRounds(
      { pod: 'client-2' },
      5,
      [hostPort(clusterIP(svc), 80), hostPort(N1(), np), hostPort(N2(), np)].map((target) => ({ target, want: 'web-1a' })),
    );
  },

  // service.go: "should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is false"
  'should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is false': async () => {
    const svc = c.createService('svc-not-tolerate-unready', {
      type: 'NodePort',
      ports: [HTTP],
      publishNotReadyAddresses: false,
      selector: { name: 'svc-not-tolerate-unready' },
    });
    c.setEndpoints('svc-not-tolerate-unready', ep('web-1a'));
    await reachable('client-2', svc, ['web-1a']);
    c.setEndpoints('svc-not-tolerate-unready', [{ pod: 'web-1a', conditions: { ready: false, serving: false, terminating: true } }]);
    const np = nodePortOf(svc);
    for (const ip of [N1(), N2()])
      await eventually(`${ip}:${np} stops serving`, async () => (await c.fromPod('client-2', 'once', hostPort(ip, np), ['--timeout-ms', FAIL_MS])).ok === 0);
    await c.expectRounds(
      { pod: 'client-2' },
      5,
      [hostPort(clusterIP(svc), 80), hostPort(N1(), np), hostPort(N2(), np)].map((target) => ({ target, want: null })),
    );
  },

  // service.go: session affinity [Conformance] and [LinuxOnly] tests (execAffinityTestForNonLBService and friends).
  'should have session affinity work for service with type clusterIP [LinuxOnly]': async () => {
    const svc = affinityService('affinity-clusterip', 'ClusterIP');
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    await checkAffinity(affinityTarget(svc), true);
  },
  'should have session affinity timeout work for service with type clusterIP [LinuxOnly]': async () => {
    const svc = affinityService('affinity-clusterip-timeout', 'ClusterIP', 2);
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    await affinityTimeout(affinityTarget(svc), 2);
  },
  'should be able to switch session affinity for service with type clusterIP [LinuxOnly]': async () => {
    const svc = affinityService('affinity-clusterip-transition', 'ClusterIP');
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    c.updateService('affinity-clusterip-transition', (s) => {
      s.spec.sessionAffinity = 'None';
      delete s.spec.sessionAffinityConfig;
    });
    await checkAffinity(affinityTarget(svc), false);
    c.updateService('affinity-clusterip-transition', (s) => {
      s.spec.sessionAffinity = 'ClientIP';
    });
    await checkAffinity(affinityTarget(svc), true);
  },
  'should have session affinity work for NodePort service [LinuxOnly]': async () => {
    const svc = affinityService('affinity-nodeport', 'NodePort');
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    await checkAffinity(affinityTarget(svc), true);
  },
  'should have session affinity timeout work for NodePort service [LinuxOnly]': async () => {
    const svc = affinityService('affinity-nodeport-timeout', 'NodePort', 2);
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    await affinityTimeout(affinityTarget(svc), 2);
  },
  'should be able to switch session affinity for NodePort service [LinuxOnly]': async () => {
    const svc = affinityService('affinity-nodeport-transition', 'NodePort');
    await reachable('client-1', svc, ['web-1a', 'web-1b', 'web-2a']);
    c.updateService('affinity-nodeport-transition', (s) => {
      s.spec.sessionAffinity = 'None';
      delete s.spec.sessionAffinityConfig;
    });
    await checkAffinity(affinityTarget(svc), false);
    c.updateService('affinity-nodeport-transition', (s) => {
      s.spec.sessionAffinity = 'ClientIP';
    });
    await checkAffinity(affinityTarget(svc), true);
  },

  // service.go: "should implement service.kubernetes.io/service-proxy-name" — a labelled Service is never up; toggling the label takes one down and up again.
  'should implement service.kubernetes.io/service-proxy-name': async () => {
    const label = { 'service.kubernetes.io/service-proxy-name': 'foo-bar' };
    const disabled = c.createService('service-proxy-disabled', { ports: [HTTP], selector: { name: 'service-proxy-disabled' } }, { labels: label });
    c.setEndpoints('service-proxy-disabled', ep('web-1a', 'web-1b', 'web-2a'));
    const toggled = c.createService('service-proxy-toggled', { ports: [HTTP], selector: { name: 'service-proxy-toggled' } });
    c.setEndpoints('service-proxy-toggled', ep('web-1c', 'web-2a', 'web-2b'));
    await up(clusterIP(toggled), 80, ['web-1c', 'web-2a', 'web-2b']);
    await down(clusterIP(disabled), 80);
    c.updateService('service-proxy-toggled', (s) => {
      s.metadata = { ...s.metadata, labels: label };
    });
    await down(clusterIP(toggled), 80);
    c.updateService('service-proxy-toggled', (s) => {
      delete s.metadata?.labels;
    });
    await up(clusterIP(toggled), 80, ['web-1c', 'web-2a', 'web-2b']);
    await down(clusterIP(disabled), 80);
  },

  // service.go: "should implement service.kubernetes.io/headless" — the same with the headless label (copied to the slices by the controller).
  'should implement service.kubernetes.io/headless': async () => {
    const label = { 'service.kubernetes.io/headless': '' };
    const headless = c.createService('service-headless', { ports: [HTTP], selector: { name: 'service-headless' } }, { labels: label });
    c.setEndpoints('service-headless', ep('web-1a', 'web-1b', 'web-2a'));
    const toggled = c.createService('service-headless-toggled', { ports: [HTTP], selector: { name: 'service-headless-toggled' } });
    c.setEndpoints('service-headless-toggled', ep('web-1c', 'web-2a', 'web-2b'));
    await up(clusterIP(toggled), 80, ['web-1c', 'web-2a', 'web-2b']);
    await down(clusterIP(headless), 80);
    c.updateService('service-headless-toggled', (s) => {
      s.metadata = { ...s.metadata, labels: label };
    });
    await down(clusterIP(toggled), 80);
    c.updateService('service-headless-toggled', (s) => {
      delete s.metadata?.labels;
    });
    await up(clusterIP(toggled), 80, ['web-1c', 'web-2a', 'web-2b']);
    await down(clusterIP(headless), 80);
  },

  // service.go: "should be rejected when no endpoints exist" — `agnhost connect` must fail with an error containing REFUSED, at once.
  'should be rejected when no endpoints exist': async () => {
    const svc = c.createService('no-pods', { ports: [{ name: 'http', port: 80, targetPort: 80 }], selector: { name: 'no-pods' } });
    await expectRefused('client-1', hostPort(clusterIP(svc), 80));
  },

  // service.go: "should be rejected for evicted pods (no endpoints exist)" — publishNotReadyAddresses, one slice with no endpoint (the evicted pod is left out).
  'should be rejected for evicted pods (no endpoints exist)': async () => {
    const svc = c.createService('evicted-pods', {
      ports: [{ name: 'http', port: 80, targetPort: 80 }],
      publishNotReadyAddresses: true,
      selector: { name: 'evicted-pods' },
    });
    c.setEndpoints('evicted-pods', [], [{ name: 'http', port: 80 }]);
    await expectRefused('client-1', hostPort(clusterIP(svc), 80));
  },

  // service.go: internalTrafficPolicy=Local — the client on the endpoint's node is served, the one on the other node gets an error (5 times).
  'should respect internalTrafficPolicy=Local Pod to Pod': async () => {
    const svc = c.createService('svc-itp', { ports: [HTTP], internalTrafficPolicy: 'Local', selector: { name: 'svc-itp' } });
    c.setEndpoints('svc-itp', ep('web-1a'));
    const target = hostPort(clusterIP(svc), 80);
    await eventually('svc-itp programmed', async () => (await c.fromPod('client-1', 'once', target)).ok === 1);
    await Promise.all([c.expectRounds({ pod: 'client-1' }, 5, [{ target, want: 'web-1a' }]), c.expectRounds({ pod: 'client-2' }, 5, [{ target, want: null }])]);
  },
  'should respect internalTrafficPolicy=Local Pod (hostNetwork: true) to Pod': async () => {
    const svc = c.createService('svc-itp-host', {
      ports: [{ name: 'http', port: 8000, targetPort: 8080 }],
      internalTrafficPolicy: 'Local',
      selector: { name: 'svc-itp-host' },
    });
    c.setEndpoints('svc-itp-host', ep('web-1a'));
    const target = hostPort(clusterIP(svc), 8000);
    await eventually('svc-itp-host programmed', async () => (await c.fromNode('node-1', 'once', target)).ok === 1);
    await Promise.all([c.expectRounds({ node: 'node-1' }, 5, [{ target, want: 'web-1a' }]), c.expectRounds({ node: 'node-2' }, 5, [{ target, want: null }])]);
  },
  'should respect internalTrafficPolicy=Local Pod and Node, to Pod (hostNetwork: true)': async () => {
    const server = await c.startHostServer('node-1', 10180);
    try {
      const svc = c.createService('svc-itp-hostnet', {
        ports: [{ name: 'http', port: 80, targetPort: 10180 }],
        internalTrafficPolicy: 'Local',
        selector: { name: 'svc-itp-hostnet' },
      });
      // The endpoint is the hostNetwork pod: the node's address.
      c.box.api.apply({
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: 'svc-itp-hostnet-slice', namespace: NS, labels: { 'kubernetes.io/service-name': 'svc-itp-hostnet' } },
        addressType: 'IPv4',
        ports: [{ name: 'http', port: 10180, protocol: 'TCP' }],
        endpoints: [{ addresses: [N1()], conditions: READY, nodeName: 'node-1' }],
      });
      const target = hostPort(clusterIP(svc), 80);
      await eventually('svc-itp-hostnet programmed', async () => (await c.fromPod('client-1', 'once', target)).ok === 1);
      // The backend is on host network: the expected hostname is the node's name.
      await Promise.all([
        c.expectRounds({ pod: 'client-1' }, 5, [{ target, want: 'node-1' }]),
        c.expectRounds({ pod: 'client-2' }, 5, [{ target, want: null }]),
      ]);
      await Promise.all([c.expectRounds({ node: 'node-1' }, 5, [{ target, want: 'node-1' }]), c.expectRounds({ node: 'node-2' }, 5, [{ target, want: null }])]);
    } finally {
      server.kill('SIGKILL');
    }
  },

  // service.go: "should fail health check node port if there are only terminating endpoints" — 200 with a ready endpoint, 503 once it terminates, while the NodePort still serves it.
  'should fail health check node port if there are only terminating endpoints': async () => {
    const svc = terminatingService('svc-proxy-terminating-hc', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', healthCheckNodePort: 32290 });
    const hc = hostPort(N1(), 32290);
    const status = async () => (await c.fromPod('client-1', 'get', hc, ['--path', '/healthz'])).responses?.[0]?.status;
    await eventually('health check node port answers 200', async () => (await status()) === 200);
    c.setEndpoints('svc-proxy-terminating-hc', [{ pod: 'web-1a', conditions: TERMINATING_SERVING }]);
    await eventually('health check node port answers 503', async () => (await status()) === 503);
    await hostnameIs('client-1', hostPort(N1(), nodePortOf(svc)), 'web-1a');
  },

  // service.go: the four terminating-endpoint fallbacks (ProxyTerminatingEndpoints): web-1a on node-1 is the only endpoint and terminates.
  'should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster': async () => {
    const svc = terminatingService('svc-terminating-itp-cluster', {});
    const target = hostPort(clusterIP(svc), 80);
    await eventually('programmed', async () => (await c.fromPod('client-2', 'once', target)).ok === 1);
    c.setEndpoints('svc-terminating-itp-cluster', [{ pod: 'web-1a', conditions: TERMINATING_SERVING }]);
    await Promise.all([
      c.expectRounds({ pod: 'client-1' }, 5, [{ target, want: 'web-1a' }]),
      c.expectRounds({ pod: 'client-2' }, 5, [{ target, want: 'web-1a' }]),
    ]);
  },
  'should fallback to local terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Local': async () => {
    const svc = terminatingService('svc-terminating-itp-local', { internalTrafficPolicy: 'Local' });
    const target = hostPort(clusterIP(svc), 80);
    await eventually('programmed', async () => (await c.fromPod('client-1', 'once', target)).ok === 1);
    c.setEndpoints('svc-terminating-itp-local', [{ pod: 'web-1a', conditions: TERMINATING_SERVING }]);
    await Promise.all([c.expectRounds({ pod: 'client-1' }, 5, [{ target, want: 'web-1a' }]), c.expectRounds({ pod: 'client-2' }, 5, [{ target, want: null }])]);
  },
  'should fallback to terminating endpoints when there are no ready endpoints with externallTrafficPolicy=Cluster': async () => {
    const svc = terminatingService('svc-terminating-etp-cluster', { type: 'NodePort' });
    const target = hostPort(N1(), nodePortOf(svc));
    await eventually('programmed', async () => (await c.fromPod('client-2', 'once', target)).ok === 1);
    c.setEndpoints('svc-terminating-etp-cluster', [{ pod: 'web-1a', conditions: TERMINATING_SERVING }]);
    await Promise.all([
      c.expectRounds({ pod: 'client-1' }, 5, [{ target, want: 'web-1a' }]),
      c.expectRounds({ pod: 'client-2' }, 5, [{ target, want: 'web-1a' }]),
    ]);
  },
  'should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local': async () => {
    const svc = terminatingService('svc-terminating-etp-local', { type: 'NodePort', externalTrafficPolicy: 'Local' });
    const np = nodePortOf(svc);
    await eventually('programmed', async () => (await c.fromPod('client-2', 'once', hostPort(N1(), np))).ok === 1);
    c.setEndpoints('svc-terminating-etp-local', [{ pod: 'web-1a', conditions: TERMINATING_SERVING }]);
    await Promise.all([
      // client-1 → node-2's NodePort is external traffic to a node with no local endpoint.
      c.expectRounds({ pod: 'client-1' }, 5, [
        { target: hostPort(N2(), np), want: null },
        { target: hostPort(N1(), np), want: 'web-1a' },
      ]),
      c.expectRounds({ pod: 'client-2' }, 5, [{ target: hostPort(N1(), np), want: 'web-1a' }]),
    ]);
  },

  // service.go: "should serve endpoints on same port and different protocols" [Conformance]
  'should serve endpoints on same port and different protocols': async () => {
    const tcp = { name: 'tcp-port', port: 80, targetPort: 8080, protocol: 'TCP' };
    const udp = { name: 'udp-port', port: 80, targetPort: 5353, protocol: 'UDP' };
    const svc = c.createService('multiprotocol-test', { ports: [tcp, udp], selector: { app: 'multiport' } });
    const tcpEp = { name: 'tcp-port', port: 8080 };
    const udpEp = { name: 'udp-port', port: 5353, protocol: 'UDP' as const };
    c.setEndpoints('multiprotocol-test', ep('web-1a'), [tcpEp, udpEp]);
    const target = hostPort(clusterIP(svc), 80);
    const served = async (proto: 'http' | 'udp') => (await c.fromPod('client-1', proto, target, ['--timeout-ms', FAIL_MS])).ok === 1;
    await eventually('TCP served', () => served('http'));
    await eventually('UDP served', () => served('udp'));
    c.updateService('multiprotocol-test', (s) => {
      s.spec.ports = [tcp];
    });
    c.setEndpoints('multiprotocol-test', ep('web-1a'), [tcpEp]);
    await eventually('TCP still served', () => served('http'));
    await eventually('UDP no longer served', async () => !(await served('udp')));
    c.updateService('multiprotocol-test', (s) => {
      s.spec.ports = [udp];
    });
    c.setEndpoints('multiprotocol-test', ep('web-1a'), [udpEp]);
    await eventually('UDP served again', () => served('udp'));
    await eventually('TCP no longer served', async () => !(await served('http')));
  },

  // service.go: "should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer "
  'should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer ': async () => {
    const svc = c.createService('multiprotocol-lb-test', {
      type: 'LoadBalancer',
      selector: { name: 'multiprotocol-lb-test' },
      ports: [
        { name: 'portname1', port: 80, targetPort: 'svc1', protocol: 'TCP' },
        { name: 'portname2', port: 80, targetPort: 'svc2', protocol: 'UDP' },
      ],
    });
    c.setEndpoints('multiprotocol-lb-test', ep('web-2a'), [
      { name: 'portname1', port: 8080 },
      { name: 'portname2', port: 5353, protocol: 'UDP' },
    ]);
    await reachable('client-1', svc, ['web-2a'], 'http', 0);
    await reachable('client-1', svc, ['web-2a'], 'udp', 1);
  },
};

/** The client's connect fails at once with the refusal errno of this kernel (ECONNREFUSED from 5.18: "REFUSED", as upstream greps). */
async function expectRefused(from: string, target: string): Promise<void> {
  const want = expectedRefusal();
  // Until the agents program the Service nothing answers its IP: short tries (a try waits out its
  // timeout) until the refusal shows, then the try the assertions are about.
  await eventually(`${target} refused`, async () => (await c.fromPod(from, 'once', target, ['--timeout-ms', '1000'])).errors[want] === 1);
  const rep: ClientReport = await c.fromPod(from, 'once', target, ['--timeout-ms', '3000']);
  assert.deepEqual(rep.errors, { [want]: 1 });
  assert.ok(rep.elapsedMs < scaled(1000), `refused at once, not after a timeout: ${rep.elapsedMs} ms`);
  if (want === 'ECONNREFUSED') assert.match(want, /REFUSED/);
}

describe('conformance: test/e2e/network/service.go', { timeout: scaled(240_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
  });
  after(async () => {
    await c?.close();
  });
  registerUpstream('service.go', tests);
});
