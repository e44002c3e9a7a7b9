/**
 * Kubernetes Service semantics end to end (issue 4): session affinity,
 * internalTrafficPolicy=Local, terminating endpoints, IPv6 and IPv4-mapped
 * ClusterIPs, undefined ports, and connected UDP clients re-steered when
 * their backend leaves (with the mechanism auto picks on this kernel, and
 * again with netlink sock_diag forced). Real agent, real BPF, real sockets.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { BoxCluster, NODE_NAME, waitFor } from '../../sandbox/cluster.js';
import { BpfMap } from '../../native/index.js';
import { MAP_NAMES, REVNAT_KEY, STAT, SVC_KEY, decodeRevNatKey, decodeSvcKey, decodeSvcVal, SVC_VAL } from '../../agent/maps/layout.js';
import { readStat } from '../../agent/datapath/datapath-stats.js';
import type { UdpTerminationMode } from '../../agent/datapath/udp-terminator.js';
import { expectedAutoUdpTermination, expectedRefusal } from '../support/kernel.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { requireRoot } from '../support/preflight.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'p-a', ip: '198.18.0.20', ip6: '2001:db8:18::20' },
  { name: 'p-b', ip: '198.18.0.21', ip6: '2001:db8:18::21' },
  { name: 'p-c', ip: '198.18.0.22', ip6: '2001:db8:18::22' },
];

interface Ep {
  ip: string;
  node?: string;
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

function service(name: string, spec: Record<string, unknown>) {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'sem' }, spec: { type: 'ClusterIP', ...spec } };
}

function slice(
  name: string,
  svc: string,
  endpoints: Ep[],
  opts: { family?: 'IPv4' | 'IPv6'; ports?: Array<{ name: string; port: number; protocol?: string }> } = {},
) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'sem', labels: { 'kubernetes.io/service-name': svc } },
    addressType: opts.family ?? 'IPv4',
    ports: (
      opts.ports ?? [
        { name: 'http', port: 8080 },
        { name: 'udp', port: 5353, protocol: 'UDP' },
      ]
    ).map((p) => ({ protocol: 'TCP', ...p })),
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      nodeName: e.node ?? NODE_NAME,
      conditions: { ready: e.ready ?? true, serving: e.serving ?? e.ready ?? true, terminating: e.terminating ?? false },
    })),
  };
}

const HTTP_UDP_PORTS = [
  { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' },
  { name: 'udp', port: 53, targetPort: 5353, protocol: 'UDP' },
];

describe('Service semantics end to end', { timeout: scaled(240_000) }, () => {
  let box: BoxCluster;

  const masterCount = (addr: string, port: number) => serviceBackends(box, addr, port);

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    box.api.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: NODE_NAME, labels: { 'topology.kubernetes.io/zone': 'zone-a' } },
      status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
    });
    await box.startAgent();
  });

  after(async () => {
    await box?.close();
  });

  test('sessionAffinity ClientIP: the same client keeps its backend over 50 connections, a new choice after the timeout, and a backend that leaves breaks the affinity', async () => {
    box.api.create(
      service('sticky', {
        clusterIP: '198.19.1.10',
        ports: HTTP_UDP_PORTS,
        sessionAffinity: 'ClientIP',
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 1 } },
      }),
    );
    box.api.create(
      slice(
        'sticky-1',
        'sticky',
        PODS.map((p) => ({ ip: p.ip })),
      ),
    );
    await waitFor('sticky programmed', () => masterCount('198.19.1.10', 80) === 3);
    const first = await box.client('http', '198.19.1.10:80', ['--count', '50']);
    assert.equal(first.failed, 0);
    assert.equal(Object.keys(first.byPod).length, 1, `one backend for one client: ${JSON.stringify(first.byPod)}`);
    const stuck = Object.keys(first.byPod)[0];

    const seen = new Set<string>();
    for (let round = 0; round < 8 && seen.size < 2; round++) {
      await new Promise((r) => setTimeout(r, 1300));
      const rep = await box.client('http', '198.19.1.10:80', ['--count', '1']);
      for (const pod of Object.keys(rep.byPod)) seen.add(pod);
    }
    assert.ok(seen.size >= 2 || !seen.has(stuck), `after the timeout the client is balanced again: ${[...seen]}`);

    const now = await box.client('http', '198.19.1.10:80', ['--count', '1']);
    const current = Object.keys(now.byPod)[0];
    const rest = PODS.filter((p) => p.name !== current);
    box.api.apply(
      slice(
        'sticky-1',
        'sticky',
        rest.map((p) => ({ ip: p.ip })),
      ),
    );
    await waitFor('sticky shrinks', () => masterCount('198.19.1.10', 80) === 2);
    const after = await box.client('http', '198.19.1.10:80', ['--count', '20']);
    assert.equal(after.failed, 0);
    assert.equal(after.byPod[current], undefined, `the left backend ${current} gets nothing`);
    assert.equal(Object.keys(after.byPod).length, 1, 'and the client sticks to its new backend');
  });

  test("internalTrafficPolicy Local: only this node's endpoints serve; none local means refused at once", async () => {
    box.api.create(service('itp', { clusterIP: '198.19.1.20', ports: HTTP_UDP_PORTS, internalTrafficPolicy: 'Local' }));
    box.api.create(slice('itp-1', 'itp', [{ ip: PODS[0].ip }, { ip: PODS[1].ip, node: 'node-2' }, { ip: PODS[2].ip, node: 'node-2' }]));
    await waitFor('itp programmed', () => masterCount('198.19.1.20', 80) === 1);
    assert.deepEqual((await box.client('http', '198.19.1.20:80', ['--count', '30'])).byPod, { 'p-a': 30 });
    box.api.apply(slice('itp-1', 'itp', [{ ip: PODS[1].ip, node: 'node-2' }]));
    await waitFor('itp without local endpoints', () => masterCount('198.19.1.20', 80) === 0);
    const refused = await box.client('once', '198.19.1.20:80', ['--timeout-ms', '3000']);
    assert.deepEqual(refused.errors, { [REFUSED]: 1 });
    assert.ok(refused.elapsedMs < scaled(1000));
  });

  test('terminating endpoints serve when no endpoint is ready; not-serving ones never do', async () => {
    box.api.create(service('term', { clusterIP: '198.19.1.30', ports: HTTP_UDP_PORTS }));
    box.api.create(
      slice('term-1', 'term', [
        { ip: PODS[0].ip, ready: false, serving: true, terminating: true },
        { ip: PODS[1].ip, ready: false, serving: false, terminating: true },
        { ip: PODS[2].ip, ready: false, serving: false, terminating: false },
      ]),
    );
    await waitFor('term programmed', () => masterCount('198.19.1.30', 80) === 1);
    assert.deepEqual((await box.client('http', '198.19.1.30:80', ['--count', '20'])).byPod, { 'p-a': 20 });
    box.api.apply(slice('term-1', 'term', [{ ip: PODS[0].ip, ready: false, serving: true, terminating: true }, { ip: PODS[2].ip }]));
    // Still one backend, but now the ready one: wait until connections show it.
    let rep = await box.client('http', '198.19.1.30:80', ['--count', '20']);
    for (let i = 0; i < 20 && !rep.byPod['p-c']; i++) rep = await box.client('http', '198.19.1.30:80', ['--count', '20']);
    assert.deepEqual(rep.byPod, { 'p-c': 20 });
  });

  test('IPv6 ClusterIP over TCP and UDP, replies from the ClusterIP', async () => {
    box.api.create(
      service('v6', {
        clusterIP: '2001:db8:19::10',
        clusterIPs: ['2001:db8:19::10'],
        ipFamilies: ['IPv6'],
        ipFamilyPolicy: 'SingleStack',
        ports: HTTP_UDP_PORTS,
      }),
    );
    box.api.create(
      slice(
        'v6-1',
        'v6',
        PODS.map((p) => ({ ip: p.ip6 })),
        { family: 'IPv6' },
      ),
    );
    await waitFor('v6 programmed', () => masterCount('2001:db8:19::10', 80) === 3);
    const tcp = await box.client('http', '[2001:db8:19::10]:80', ['--count', '60']);
    assert.equal(tcp.failed, 0, JSON.stringify(tcp.errors));
    assert.equal(Object.keys(tcp.byPod).length, 3);
    assert.deepEqual(Object.keys(tcp.peers), ['2001:db8:19::10:80']);
    const udp = await box.client('udp', '[2001:db8:19::10]:53', ['--count', '30']);
    assert.equal(udp.failed, 0, JSON.stringify(udp.errors));
    assert.deepEqual(Object.keys(udp.peers), ['2001:db8:19::10:53']);
  });

  test('an IPv4-mapped IPv6 socket reaches an IPv4 ClusterIP', async () => {
    box.api.create(service('mapped', { clusterIP: '198.19.1.40', ports: HTTP_UDP_PORTS }));
    box.api.create(slice('mapped-1', 'mapped', [{ ip: PODS[1].ip }]));
    await waitFor('mapped programmed', () => masterCount('198.19.1.40', 80) === 1);
    const tcp = await box.client('http', '[::ffff:198.19.1.40]:80', ['--count', '10']);
    assert.deepEqual(tcp.byPod, { 'p-b': 10 });
    const udp = await box.client('udp', '[::ffff:198.19.1.40]:53', ['--count', '5']);
    assert.deepEqual(udp.byPod, { 'p-b': 5 });
  });

  test('a ClusterIP called on a port the service does not define is refused at once', async () => {
    await waitFor('mapped programmed', () => masterCount('198.19.1.40', 80) === 1);
    const rep = await box.client('once', '198.19.1.40:81', ['--timeout-ms', '3000']);
    assert.deepEqual(rep.errors, { [REFUSED]: 1 });
    assert.ok(rep.elapsedMs < scaled(1000));
  });

  test("CVE-2020-8554: a Service listing another Service's ClusterIP in externalIPs gets none of its connections, on any port, across a restart", async () => {
    box.api.create(service('owned', { clusterIP: '198.19.1.60', ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] }));
    box.api.create(slice('owned-1', 'owned', [{ ip: PODS[0].ip }], { ports: [{ name: 'http', port: 8080 }] }));
    await waitFor('owned programmed', () => masterCount('198.19.1.60', 80) === 1);
    const from = box.agent!.logs.length;
    // "aaa-evil" sorts before "sem": the lowest-key rule gave it every connection.
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'aaa-evil' },
      spec: {
        type: 'ClusterIP',
        clusterIP: '198.19.1.61',
        externalIPs: ['198.19.1.60'],
        ports: [
          { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' },
          { name: 'alt', port: 8443, targetPort: 8080, protocol: 'TCP' },
        ],
      },
    });
    box.api.create({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'web-1', namespace: 'aaa-evil', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      ports: [
        { name: 'http', port: 8080, protocol: 'TCP' },
        { name: 'alt', port: 8080, protocol: 'TCP' },
      ],
      endpoints: [{ addresses: [PODS[2].ip], nodeName: NODE_NAME, conditions: { ready: true, serving: true, terminating: false } }],
    });
    await waitFor("aaa-evil/web's own ClusterIP programmed", () => masterCount('198.19.1.61', 80) === 1);
    const conflict = await box.agent!.waitForLog((l) => l.msg === 'frontend conflict' && l.service === 'aaa-evil/web', 10_000, from);
    assert.equal(conflict.owner, 'sem/owned');
    const hijacked = async () => {
      const rep = await box.client('http', '198.19.1.60:80', ['--count', '30']);
      assert.deepEqual(rep.byPod, { 'p-a': 30 }, "every connection reaches the ClusterIP's own endpoint");
      assert.equal(masterCount('198.19.1.60', 8443), undefined, 'the externalIP on another port of the ClusterIP address is not programmed');
      assert.deepEqual(
        (await box.client('once', '198.19.1.60:8443', ['--timeout-ms', '3000'])).errors,
        { [REFUSED]: 1 },
        'the ClusterIP refuses the port it does not define',
      );
    };
    await hijacked();
    const metrics = `http://${(await box.agent!.waitForLog('metrics server listening')).address}/metrics`;
    const samples = parseProm(await (await fetch(metrics)).text());
    assert.equal(valueOf(samples, 'kpr_frontend_conflicts', { type: 'ExternalIP', rule: 'cluster-ip-address' }), 2);
    // A restart: the first (full) sync reads aaa-evil/web before sem/owned.
    await box.stopAgent();
    await box.startAgent();
    await waitFor('owned programmed after the restart', () => masterCount('198.19.1.60', 80) === 1);
    await hijacked();
    box.api.remove('Service', 'aaa-evil', 'web');
    box.api.remove('EndpointSlice', 'aaa-evil', 'web-1');
    box.api.remove('Service', 'sem', 'owned');
    box.api.remove('EndpointSlice', 'sem', 'owned-1');
    await waitFor('both gone', () => masterCount('198.19.1.60', 80) === undefined && masterCount('198.19.1.61', 80) === undefined);
  });

  test('a long-lived connected UDP client recovers when its backend leaves', async () => {
    await udpClientRecovers(box, expectedAutoUdpTermination());
  });
});

/** Backends of the frontend addr:port (its slot-0 count in kpr_svc), undefined when it is not programmed. */
function serviceBackends(box: BoxCluster, addr: string, port: number): number | undefined {
  const svc = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.svc));
  try {
    const { count, keys, values } = svc.lookupBatch();
    for (let i = 0; i < count; i++) {
      const k = decodeSvcKey(keys, i * SVC_KEY.size);
      if (k.addr === addr && k.port === port && k.slot === 0) return decodeSvcVal(values, i * SVC_VAL.size).count;
    }
    return undefined;
  } finally {
    svc.close();
  }
}

/**
 * A connected UDP client keeps answering from a live pod when its backend
 * leaves: the agent (running with `mode`) destroys its socket, the client
 * reconnects, and the destruction is counted in kpr_stats.
 */
async function udpClientRecovers(box: BoxCluster, mode: UdpTerminationMode): Promise<void> {
  const chosen = await box.agent!.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('UDP socket termination'));
  assert.equal(chosen.mode, mode, `the agent destroys UDP sockets with ${mode}: ${JSON.stringify(chosen)}`);
  const destroyedBefore = socketsDestroyed(box);
  // One backend first, so the client's socket is certainly connected to p-a.
  box.api.create(service('dns', { clusterIP: '198.19.1.50', ports: HTTP_UDP_PORTS }));
  box.api.create(slice('dns-1', 'dns', [{ ip: PODS[0].ip }]));
  await waitFor('dns programmed', () => serviceBackends(box, '198.19.1.50', 53) === 1);
  const connectedBefore = revNatEntriesTo(box, PODS[0].ip, 5353);
  const run = box.startClient('udploop', '198.19.1.50:53', ['--duration-ms', String(scaled(4000)), '--interval-ms', '50']);
  // The connect hook wrote the client's reverse-NAT entry: its socket is connected to p-a. A few answers from it, then p-a leaves.
  await waitFor('the client connected to p-a', () => revNatEntriesTo(box, PODS[0].ip, 5353) > connectedBefore);
  await new Promise((r) => setTimeout(r, scaled(500)));
  // p-a leaves the service (the pod itself keeps running and would keep answering a stale socket).
  box.api.apply(slice('dns-1', 'dns', [{ ip: PODS[1].ip }]));
  const rep = (await run.report) as unknown as { timeline: string[]; reconnects: number; failed: number };
  assert.equal(rep.timeline[0], 'p-a', 'the client started on p-a');
  const tail = rep.timeline.slice(-20);
  assert.ok(tail.length >= 10, `the client kept getting answers: ${JSON.stringify(rep)}`);
  assert.ok(
    tail.every((p) => p === 'p-b'),
    `after p-a left, answers come from p-b only: ${tail}`,
  );
  assert.ok(rep.reconnects >= 1, 'its socket was destroyed and it reconnected');
  assert.ok(socketsDestroyed(box) > destroyedBefore, `kpr_stats SOCK_DESTROYED counts the destroyed socket (${mode})`);
  const metrics = `http://${(await box.agent!.waitForLog('metrics server listening')).address}/metrics`;
  const samples = parseProm(await (await fetch(metrics)).text());
  assert.equal(valueOf(samples, 'kpr_udp_termination_mode', { mode }), 1);
  assert.ok((valueOf(samples, 'kpr_udp_sockets_destroyed_total', { mechanism: mode }) ?? 0) >= 1, `the agent counted the destroyed socket under ${mode}`);
}

/** kpr_revnat entries of sockets connected to backend addr:port. */
function revNatEntriesTo(box: BoxCluster, addr: string, port: number): number {
  const revnat = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.revnat));
  try {
    const { count, keys } = revnat.lookupBatch();
    let n = 0;
    for (let i = 0; i < count; i++) {
      const k = decodeRevNatKey(keys, i * REVNAT_KEY.size);
      if (k.addr === addr && k.port === port) n++;
    }
    return n;
  } finally {
    revnat.close();
  }
}

/** kpr_stats SOCK_DESTROYED, summed over the CPUs. */
function socketsDestroyed(box: BoxCluster): bigint {
  const stats = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.stats));
  try {
    return readStat(stats, STAT.SOCK_DESTROYED);
  } finally {
    stats.close();
  }
}

// The same client under the forced netlink mechanism, so it is exercised on every kernel
// (on 6.5+ auto picks the iterator above).
describe('connected UDP clients with --udp-termination netlink', { timeout: scaled(120_000) }, () => {
  let box: BoxCluster;

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS.slice(0, 2) });
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
    await box.startAgent(['--udp-termination', 'netlink']);
  });

  after(async () => {
    await box?.close();
  });

  test('a long-lived connected UDP client recovers when its backend leaves (netlink sock_diag)', async () => {
    await udpClientRecovers(box, 'netlink');
  });
});
