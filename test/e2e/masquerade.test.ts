/**
 * Masquerade of pod traffic (rules 35 and 36 of docs/semantics.md) end to
 * end on two nodes, with real connections: each backend reports the peer
 * address it sees. kube-proxy masquerades a pod's traffic to a NodePort,
 * load-balancer IP or externalIP of an externalTrafficPolicy=Cluster Service
 * (KUBE-EXT marks it) and a pod landing on itself (KUBE-SEP's `-s <endpoint>`
 * rule); it leaves a pod's ClusterIP traffic to another pod, and eTP=Local
 * external addresses (short-circuited to the cluster chain), with the pod
 * address. With --masquerade-pod-traffic (the default) kpr's socket hooks
 * leave exactly those connections to the tc path, which SNATs them to the
 * node; with it false the socket path connects the pod straight to the
 * endpoint. node-1's agent runs with the default, node-2's with the flag
 * false (no agent restart: two modes side by side). Callers run below their
 * node's cgroup, so the socket hooks see them. Topology: sandbox/two-node.ts.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BpfMap } from '../../native/index.js';
import { CFG_FLAG, CT_DIR, CT_FLAG, MAP_NAMES, STAT, decodeConfig } from '../../agent/maps/layout.js';
import { readStat } from '../../agent/datapath/datapath-stats.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { pinnedConntrack } from '../support/pinned-maps.js';
import { TwoNodeCluster, UNDERLAY, type NodeName } from '../../sandbox/two-node.js';
import { repoRoot } from '../../sandbox/repo.js';
import { waitForLine } from '../../sandbox/topology.js';
import type { ClientReport } from '../../sandbox/client.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice } from '../support/e2e-objects.js';

const PODS = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName },
  { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' as NodeName },
  { name: 'caller', ip: '198.18.10.20', node: 'node-1' as NodeName },
  { name: 'caller-2', ip: '198.18.20.20', node: 'node-2' as NodeName },
];
const POD = Object.fromEntries(PODS.map((p) => [p.name, p]));
const N1 = UNDERLAY['node-1'];
const N2 = UNDERLAY['node-2'];
const NS = 'masq';
const COUNT = 10;

const EXT = { clusterIP: '198.19.0.30', nodePort: 30090, udpNodePort: 30091, lb: '198.19.200.30', externalIP: '198.19.201.30' };
const EXT_LOCAL = { clusterIP: '198.19.0.31', nodePort: 30092, lb: '198.19.200.31' };
const CIP = '198.19.0.32';
const SELF = { clusterIP: '198.19.0.33', nodePort: 30093 };
/** web-1a's second server, on a port no other pod serves (8081): a Service whose endpoint the caller cannot be. */
const ALT = '198.19.0.34';
/** web-2a's own Service, for hairpin on node-2. */
const SELF2 = '198.19.0.35';

function service(name: string, clusterIP: string, spec: Record<string, unknown>, status?: Record<string, unknown>) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: NS },
    spec: { type: 'ClusterIP', clusterIP, clusterIPs: [clusterIP], ...spec },
    ...(status ? { status } : {}),
  };
}

const http = (nodePort?: number, targetPort = 8080) => ({ name: 'http', port: 80, targetPort, protocol: 'TCP', ...(nodePort ? { nodePort } : {}) });
const slice = (svc: string, pods: string[], port = 8080, udp = false) =>
  endpointSlice(
    NS,
    `${svc}-1`,
    svc,
    pods.map((n) => ({ ip: POD[n].ip, node: POD[n].node })),
    [{ name: 'http', port }, ...(udp ? [{ name: 'dns', port: 5353, protocol: 'UDP' }] : [])],
  );

describe('masquerade of pod traffic (rules 35 and 36 of docs/semantics.md) on two nodes', { timeout: scaled(120_000) }, () => {
  let box: TwoNodeCluster;

  /** `count` requests from pod `from` (in its node's cgroup) to `target`. */
  async function fromPod(from: string, target: string, mode: 'http' | 'udp' = 'http'): Promise<ClientReport> {
    const rep = await box.client(box.pods.get(from)!.ns, mode, target, { cgroupOf: POD[from].node, extra: ['--count', String(COUNT)] });
    assert.equal(rep.failed, 0, `${from} → ${target}: ${JSON.stringify(rep.errors)}`);
    assert.equal(rep.ok, COUNT, `${from} → ${target}`);
    return rep;
  }

  function stat(node: NodeName, index: number): bigint {
    const m = BpfMap.openPinned(mapPinPath(box.nodes[node].bpffsDir, MAP_NAMES.stats));
    try {
      return readStat(m, index);
    } finally {
      m.close();
    }
  }

  function configFlags(node: NodeName): number {
    const m = BpfMap.openPinned(mapPinPath(box.nodes[node].bpffsDir, MAP_NAMES.config));
    try {
      return decodeConfig(m.lookup(Buffer.alloc(4))!).flags;
    } finally {
      m.close();
    }
  }

  /** ORIGINAL conntrack entries on `node` (default node-1) of flows from `src` to `dst`. */
  const flows = (src: string, dst: string, node: NodeName = 'node-1') =>
    pinnedConntrack(box.nodes[node].bpffsDir).filter((e) => e.key.dir === CT_DIR.ORIGINAL && e.key.saddr === src && e.key.daddr === dst);

  before(async () => {
    requireRoot();
    box = await TwoNodeCluster.create({ pods: PODS });
    const alt = box.spawnIn(
      box.pods.get('web-1a')!.ns,
      process.execPath,
      [path.join(repoRoot, 'dist', 'sandbox', 'pod-server.js'), '--name', 'web-1a', '--http-port', '8081', '--udp-port', '5354', '--echo-port', '7071'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitForLine(alt, 'ready', 'web-1a second server');
    const api = box.api;
    api.create(
      service(
        'ext',
        EXT.clusterIP,
        {
          type: 'LoadBalancer',
          externalIPs: [EXT.externalIP],
          ports: [http(EXT.nodePort), { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP', nodePort: EXT.udpNodePort }],
        },
        { loadBalancer: { ingress: [{ ip: EXT.lb }] } },
      ),
    );
    api.create(slice('ext', ['web-1a', 'web-2a'], 8080, true));
    api.create(
      service(
        'ext-local',
        EXT_LOCAL.clusterIP,
        { type: 'LoadBalancer', externalTrafficPolicy: 'Local', healthCheckNodePort: 32092, ports: [http(EXT_LOCAL.nodePort)] },
        { loadBalancer: { ingress: [{ ip: EXT_LOCAL.lb }] } },
      ),
    );
    api.create(slice('ext-local', ['web-1a', 'web-2a']));
    api.create(service('cip', CIP, { ports: [http()] }));
    api.create(slice('cip', ['web-1a', 'web-2a']));
    api.create(service('self', SELF.clusterIP, { type: 'NodePort', ports: [http(SELF.nodePort)] }));
    api.create(slice('self', ['web-1a']));
    api.create(service('alt', ALT, { ports: [http(undefined, 8081)] }));
    api.create(slice('alt', ['web-1a'], 8081));
    api.create(service('self-2', SELF2, { ports: [http()] }));
    api.create(slice('self-2', ['web-2a']));
    const args = ['--ct-tcp-closing-timeout', '10m'];
    await Promise.all([box.startAgent('node-1', args), box.startAgent('node-2', [...args, '--masquerade-pod-traffic', 'false'])]);
  });

  after(async () => {
    await box?.close();
  });

  describe('--masquerade-pod-traffic true (the default): node-1', () => {
    test('the agent sets KPR_CFG_F_MASQ_POD in kpr_config', () => {
      assert.equal(configFlags('node-1') & CFG_FLAG.MASQ_POD, CFG_FLAG.MASQ_POD);
    });

    test('a pod calling a NodePort, the load-balancer IP or an externalIP of an eTP=Cluster Service: the endpoints (local and remote) see the node address, the pod sees the address it called', async () => {
      const caller = POD['caller'].ip;
      const diverted0 = stat('node-1', STAT.SOCK_MASQ_DIVERT);
      const snat0 = stat('node-1', STAT.TC_MASQ_SNAT);
      for (const [what, addr, port] of [
        ['NodePort', N1, EXT.nodePort],
        ['load-balancer IP', EXT.lb, 80],
        ['externalIP', EXT.externalIP, 80],
      ] as const) {
        const rep = await fromPod('caller', `${addr}:${port}`);
        assert.deepEqual(rep.seenAs, { [N1]: COUNT }, `${what}: masqueraded to node-1's InternalIP, as kube-proxy's KUBE-EXT chain does`);
        assert.deepEqual(Object.keys(rep.peers), [`${addr}:${port}`], `${what}: getpeername() shows the address called (tc reverse NAT)`);
        const tracked = flows(caller, addr).filter((f) => f.key.dport === port);
        assert.ok(tracked.length >= COUNT, `${what}: every connection went through tc (${tracked.length} conntrack entries)`);
        assert.ok(
          tracked.every((f) => f.val.flags & CT_FLAG.SNAT),
          `${what}: SNAT recorded`,
        );
      }
      assert.ok(stat('node-1', STAT.SOCK_MASQ_DIVERT) - diverted0 >= BigInt(3 * COUNT), 'kpr_stats SOCK_MASQ_DIVERT counts the diverted connections');
      assert.ok(stat('node-1', STAT.TC_MASQ_SNAT) - snat0 >= BigInt(3 * COUNT), 'kpr_stats TC_MASQ_SNAT counts the SNATed flows');
    });

    test('both backends still serve the masqueraded NodePort (the tc path balances); UDP keeps the socket path and the pod address', async () => {
      const rep = await box.client(box.pods.get('caller')!.ns, 'http', `${N1}:${EXT.nodePort}`, { cgroupOf: 'node-1', extra: ['--count', '40'] });
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.deepEqual(Object.keys(rep.byPod).sort(), ['web-1a', 'web-2a'], JSON.stringify(rep.byPod));
      const udp = await fromPod('caller', `${N1}:${EXT.udpNodePort}`, 'udp');
      assert.deepEqual(
        udp.seenAs,
        { [POD['caller'].ip]: COUNT },
        'UDP is not diverted: tc does not reassemble fragments, the socket path sends a large datagram whole',
      );
      assert.deepEqual(Object.keys(udp.peers), [`${N1}:${EXT.udpNodePort}`]);
    });

    test('eTP=Local: a pod calling the load-balancer IP or NodePort keeps its address (kube-proxy short-circuits it to the cluster chain without masquerade)', async () => {
      const caller = POD['caller'].ip;
      for (const target of [`${EXT_LOCAL.lb}:80`, `${N1}:${EXT_LOCAL.nodePort}`]) {
        const rep = await fromPod('caller', target);
        assert.deepEqual(rep.seenAs, { [caller]: COUNT }, target);
      }
    });

    test('a pod calling a ClusterIP keeps its address (kube-proxy masquerades ClusterIP traffic from pods only with masqueradeAll)', async () => {
      const caller = POD['caller'].ip;
      const rep = await fromPod('caller', `${CIP}:80`);
      assert.deepEqual(rep.seenAs, { [caller]: COUNT });
      assert.deepEqual(Object.keys(rep.peers), [`${CIP}:80`]);
    });

    test('hairpin: a pod reaching itself through its ClusterIP or its NodePort is seen from the node address', async () => {
      for (const target of [`${SELF.clusterIP}:80`, `${N1}:${SELF.nodePort}`]) {
        const rep = await fromPod('web-1a', target);
        assert.deepEqual(rep.byPod, { 'web-1a': COUNT }, target);
        assert.deepEqual(rep.seenAs, { [N1]: COUNT }, `${target}: masqueraded as kube-proxy's KUBE-SEP chain does`);
        assert.deepEqual(Object.keys(rep.peers), [target]);
      }
    });

    test('only a pod that serves the backend port is diverted: the caller stays on the socket path for a Service whose only (local) endpoint serves a port it does not; that endpoint calling it hairpins through tc', async () => {
      const caller = POD['caller'].ip;
      const rep = await fromPod('caller', `${ALT}:80`);
      assert.deepEqual(rep.seenAs, { [caller]: COUNT });
      assert.deepEqual(flows(caller, ALT), [], 'no conntrack entry: the socket hook translated the connections');
      const self = await fromPod('web-1a', `${ALT}:80`);
      assert.deepEqual(self.seenAs, { [N1]: COUNT }, 'hairpin on port 8081: the node address');
      assert.ok(flows(POD['web-1a'].ip, ALT).length >= COUNT, 'the hairpin connections went through tc');
    });
  });

  describe('--masquerade-pod-traffic false: node-2, the socket path connects pods straight to the endpoint', () => {
    test('KPR_CFG_F_MASQ_POD is clear', () => {
      assert.equal(configFlags('node-2') & CFG_FLAG.MASQ_POD, 0);
    });

    test('the NodePort, load-balancer IP and externalIP of an eTP=Cluster Service: the endpoint sees the pod address, and nothing enters conntrack', async () => {
      const caller = POD['caller-2'].ip;
      for (const [addr, port] of [
        [N2, EXT.nodePort],
        [EXT.lb, 80],
        [EXT.externalIP, 80],
      ] as const) {
        const rep = await fromPod('caller-2', `${addr}:${port}`);
        assert.deepEqual(rep.seenAs, { [caller]: COUNT }, `${addr}:${port}`);
        assert.deepEqual(Object.keys(rep.peers), [`${addr}:${port}`], 'getpeername() rewritten by the socket hook');
        assert.deepEqual(flows(caller, addr, 'node-2'), [], `${addr}:${port}: no conntrack entry on node-2`);
      }
      assert.equal(stat('node-2', STAT.SOCK_MASQ_DIVERT), 0n, 'nothing diverted');
      assert.equal(stat('node-2', STAT.TC_MASQ_SNAT), 0n, 'nothing masqueraded');
    });

    test('hairpin through the ClusterIP: the pod reaches itself from its own address', async () => {
      const rep = await fromPod('web-2a', `${SELF2}:80`);
      assert.deepEqual(rep.byPod, { 'web-2a': COUNT });
      assert.deepEqual(rep.seenAs, { [POD['web-2a'].ip]: COUNT });
    });
  });
});
