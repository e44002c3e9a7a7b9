/**
 * NodePort, LoadBalancer and externalIP end to end on two nodes: real agent
 * processes (one per node namespace), the embedded API server, tc programs
 * on the nodes' interfaces, and clients in namespaces outside the nodes that
 * no socket hook can serve, so only the tc datapath can answer them.
 * Topology: sandbox/two-node.ts.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { withNetns } from '../../native/index.js';
import { CT_DIR, CT_FLAG, IPPROTO, type CtKey, type CtVal } from '../../agent/maps/layout.js';
import { pinnedConntrack } from '../support/pinned-maps.js';
import { inNs, nsPath } from '../../sandbox/netns.js';
import { waitFor } from '../../sandbox/cluster.js';
import { CLIENTS, NODE1_UPLINK, NODE1_UPLINK6, podIp6, TwoNodeCluster, UNDERLAY, UNDERLAY6, type NodeName } from '../../sandbox/two-node.js';
import type { ClientReport } from '../../sandbox/client.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice, type SlicePort } from '../support/e2e-objects.js';
import { cliBin } from '../support/paths.js';
import { assertAgentMode, kprIngressPrograms, tcModeCases, type TcModeCase } from '../support/tc-modes.js';

const PODS = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName },
  { name: 'web-1b', ip: '198.18.10.11', node: 'node-1' as NodeName },
  { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' as NodeName },
];
const POD = Object.fromEntries(PODS.map((p) => [p.name, p]));
const CLIENT_A = CLIENTS['client-a'].ip;
const N1 = UNDERLAY['node-1'];
const N2 = UNDERLAY['node-2'];
/** A client timeout long enough for any served request in the box, short enough to call silence a drop. */
const DROP_TIMEOUT_MS = '800';

interface Port {
  name: string;
  port: number;
  targetPort: number;
  nodePort?: number;
  protocol?: 'TCP' | 'UDP';
}

function service(
  name: string,
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer',
  clusterIP: string,
  ports: Port[],
  spec: Record<string, unknown> = {},
  status?: Record<string, unknown>,
) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'e2e' },
    spec: { type, clusterIP, clusterIPs: [clusterIP], ports: ports.map((p) => ({ protocol: 'TCP', ...p })), ...spec },
    ...(status ? { status } : {}),
  };
}

function slice(name: string, svc: string, podNames: string[], ports: SlicePort[]) {
  return endpointSlice(
    'e2e',
    name,
    svc,
    podNames.map((n) => ({ ip: POD[n].ip, node: POD[n].node })),
    ports,
  );
}

function slice6(name: string, svc: string, podNames: string[], ports: SlicePort[]) {
  const s = slice(name, svc, podNames, ports);
  return {
    ...s,
    addressType: 'IPv6',
    endpoints: podNames.map((n) => ({ addresses: [podIp6(POD[n].ip, POD[n].node)], conditions: { ready: true }, nodeName: POD[n].node })),
  };
}

const HTTP: Port = { name: 'http', port: 80, targetPort: 8080 };
const HTTP_EP = [{ name: 'http', port: 8080 }];
const WITH_UDP_EP = [
  { name: 'http', port: 8080 },
  { name: 'dns', port: 5353, protocol: 'UDP' },
];

/** kube-proxy's healthCheckNodePort body, byte for byte (tab-indented, no trailing newline). */
function healthBody(namespace: string, name: string, localEndpoints: number): string {
  return `{\n\t"service": {\n\t\t"namespace": "${namespace}",\n\t\t"name": "${name}"\n\t},\n\t"localEndpoints": ${localEndpoints},\n\t"serviceProxyHealthy": true\n}`;
}

for (const tcCase of tcModeCases()) nodePortSuite(tcCase);

function nodePortSuite(tcCase: TcModeCase): void {
  describe(`NodePort, LoadBalancer and externalIPs on two nodes [${tcCase.label}]`, { timeout: scaled(150_000) }, () => {
    let box: TwoNodeCluster;
    const AGENT_ARGS = [...tcCase.args, '--ct-udp-timeout', '2s', '--ct-sweep-interval', '500ms'];

    const ext = (target: string, mode: 'http' | 'udp' | 'once' | 'get' | 'loop' = 'http', extra: string[] = []) =>
      box.external('client-a', mode, target, extra);

    const ctEntries = (node: NodeName) => pinnedConntrack(box.nodes[node].bpffsDir);

    function assertServed(rep: ClientReport, what: string, n: number): void {
      assert.equal(rep.failed, 0, `${what}: ${JSON.stringify(rep.errors)}`);
      assert.equal(rep.ok, n, what);
    }

    function assertDropped(rep: ClientReport, what: string): void {
      assert.equal(rep.ok, 0, `${what} was served: ${JSON.stringify(rep.byPod)}`);
      assert.deepEqual(rep.errors, { ETIMEDOUT: rep.failed }, `${what}: a drop is silence, not a refusal`);
    }

    before(async () => {
      requireRoot();
      box = await TwoNodeCluster.create({ pods: PODS, ipv6: true });
      const api = box.api;
      api.create(
        service('local-np', 'NodePort', '198.19.0.10', [
          { ...HTTP, nodePort: 30080 },
          { name: 'dns', port: 53, targetPort: 5353, nodePort: 30053, protocol: 'UDP' },
        ]),
      );
      api.create(slice('local-np-1', 'local-np', ['web-1a'], WITH_UDP_EP));
      api.create(
        service('remote-np', 'NodePort', '198.19.0.11', [
          { ...HTTP, nodePort: 30081 },
          { name: 'dns', port: 53, targetPort: 5353, nodePort: 30054, protocol: 'UDP' },
        ]),
      );
      api.create(slice('remote-np-1', 'remote-np', ['web-2a'], WITH_UDP_EP));
      api.create(
        service('etp-local', 'LoadBalancer', '198.19.0.12', [{ ...HTTP, nodePort: 30082 }], { externalTrafficPolicy: 'Local', healthCheckNodePort: 32082 }),
      );
      api.create(slice('etp-local-1', 'etp-local', ['web-1a'], HTTP_EP));
      api.create(
        service(
          'lb',
          'LoadBalancer',
          '198.19.0.13',
          [{ ...HTTP, nodePort: 30083 }],
          { externalIPs: ['198.19.201.1'] },
          { loadBalancer: { ingress: [{ ip: '198.19.200.1' }] } },
        ),
      );
      api.create(slice('lb-1', 'lb', ['web-1b', 'web-2a'], HTTP_EP));
      api.create(
        service(
          'ranged',
          'LoadBalancer',
          '198.19.0.14',
          [{ ...HTTP, nodePort: 30084 }],
          { loadBalancerSourceRanges: ['198.18.100.0/24'] },
          { loadBalancer: { ingress: [{ ip: '198.19.200.2' }] } },
        ),
      );
      api.create(slice('ranged-1', 'ranged', ['web-1b'], HTTP_EP));
      api.create(service('hairpin', 'NodePort', '198.19.0.15', [{ ...HTTP, nodePort: 30085 }]));
      api.create(slice('hairpin-1', 'hairpin', ['web-1a'], HTTP_EP));
      api.create(
        service(
          'v6',
          'NodePort',
          '2001:db8:ffff::10',
          [
            { ...HTTP, nodePort: 30086 },
            { name: 'dns', port: 53, targetPort: 5353, nodePort: 30056, protocol: 'UDP' },
          ],
          { ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack' },
        ),
      );
      api.create(slice6('v6-1', 'v6', ['web-1a', 'web-2a'], WITH_UDP_EP));
      await box.startAgents(AGENT_ARGS);
    });

    after(async () => {
      await box?.close();
    });

    test('a NodePort reaches a backend on the same node, on the InternalIP and on the ExternalIP; the backend sees the node (SNAT), the client sees the address it called', async () => {
      for (const addr of [NODE1_UPLINK, N1]) {
        const rep = await ext(`${addr}:30080`, 'http', ['--count', '20']);
        assertServed(rep, `NodePort ${addr}:30080`, 20);
        assert.deepEqual(rep.byPod, { 'web-1a': 20 });
        assert.deepEqual(rep.seenAs, { [N1]: 20 }, 'eTP=Cluster: SNAT to the node InternalIP');
        assert.deepEqual(Object.keys(rep.peers), [`${addr}:30080`]);
      }
    });

    test('a NodePort reaches a backend on the other node through the underlay and the reply comes back through the node that NATed it', async () => {
      const rep = await ext(`${NODE1_UPLINK}:30081`, 'http', ['--count', '20']);
      assertServed(rep, 'node-1 NodePort to a node-2 backend', 20);
      assert.deepEqual(rep.byPod, { 'web-2a': 20 });
      assert.deepEqual(rep.seenAs, { [N1]: 20 }, 'the backend sees node-1 (SNAT)');
      assert.deepEqual(Object.keys(rep.peers), [`${NODE1_UPLINK}:30081`]);
      // And the other way round: node-2's NodePort (reached through node-1 as router) to a backend on node-1.
      const back = await ext(`${N2}:30080`, 'http', ['--count', '20']);
      assertServed(back, 'node-2 NodePort to a node-1 backend', 20);
      assert.deepEqual(back.byPod, { 'web-1a': 20 });
      assert.deepEqual(back.seenAs, { [N2]: 20 }, 'the backend sees node-2 (SNAT)');
      assert.deepEqual(Object.keys(back.peers), [`${N2}:30080`]);
    });

    test('externalTrafficPolicy=Local keeps the client address, drops traffic on a node without local endpoints, and healthCheckNodePort answers 200/503 like kube-proxy, flipping as endpoints move', async () => {
      const served = await ext(`${N1}:30082`, 'http', ['--count', '10']);
      assertServed(served, 'eTP=Local on the node with the endpoint', 10);
      assert.deepEqual(served.byPod, { 'web-1a': 10 });
      assert.deepEqual(served.seenAs, { [CLIENT_A]: 10 }, 'no SNAT: the backend sees the client');
      assert.deepEqual(Object.keys(served.peers), [`${N1}:30082`]);

      const dropped = await ext(`${N2}:30082`, 'http', ['--count', '2', '--timeout-ms', DROP_TIMEOUT_MS]);
      assertDropped(dropped, 'eTP=Local on node-2 (no local endpoint)');

      const health = async (node: NodeName) => {
        const rep = await ext(`${UNDERLAY[node]}:32082`, 'get', ['--path', '/healthz']);
        assert.equal(rep.ok, 1, `health check of ${node}: ${JSON.stringify(rep.errors)}`);
        return rep.responses![0];
      };
      const expectHealth = async (node: NodeName, status: number, local: number) => {
        const r = await health(node);
        assert.equal(r.status, status, `${node} health status; body ${r.body}`);
        assert.equal(r.headers['content-type'], 'application/json');
        assert.equal(r.headers['x-content-type-options'], 'nosniff');
        assert.equal(r.headers['x-load-balancing-endpoint-weight'], String(local));
        assert.equal(r.body, healthBody('e2e', 'etp-local', local));
      };
      await expectHealth('node-1', 200, 1);
      await expectHealth('node-2', 503, 0);

      // The endpoint moves to node-2: health and service flip.
      box.api.apply(slice('etp-local-1', 'etp-local', ['web-2a'], HTTP_EP));
      const deadline = Date.now() + 10_000;
      for (;;) {
        const [h1, h2] = [await health('node-1'), await health('node-2')];
        if (h1.status === 503 && h2.status === 200) break;
        if (Date.now() > deadline) assert.fail(`health did not flip within 10 s: node-1 ${h1.status}, node-2 ${h2.status}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await expectHealth('node-1', 503, 0);
      await expectHealth('node-2', 200, 1);
      const moved = await ext(`${N2}:30082`, 'http', ['--count', '10']);
      assertServed(moved, 'eTP=Local on node-2 after the move', 10);
      assert.deepEqual(moved.byPod, { 'web-2a': 10 });
      assert.deepEqual(moved.seenAs, { [CLIENT_A]: 10 });
      assertDropped(await ext(`${N1}:30082`, 'http', ['--count', '1', '--timeout-ms', DROP_TIMEOUT_MS]), 'eTP=Local on node-1 after the move');

      // Two local endpoints count two.
      box.api.apply(slice('etp-local-1', 'etp-local', ['web-1a', 'web-1b', 'web-2a'], HTTP_EP));
      await waitForAsync('node-1 health to count 2 local endpoints', async () => (await health('node-1')).headers['x-load-balancing-endpoint-weight'] === '2');
      await expectHealth('node-1', 200, 2);
      await expectHealth('node-2', 200, 1);
    });

    test('a LoadBalancer ingress IP and an externalIP reach the service from outside; replies come from the address called', async () => {
      for (const vip of ['198.19.200.1', '198.19.201.1']) {
        const rep = await ext(`${vip}:80`, 'http', ['--count', '40']);
        assertServed(rep, vip, 40);
        assert.deepEqual(Object.keys(rep.byPod).sort(), ['web-1b', 'web-2a'], `${vip} spreads over both nodes' endpoints`);
        assert.deepEqual(Object.keys(rep.seenAs), [N1], 'eTP=Cluster: SNAT to node-1');
        assert.deepEqual(Object.keys(rep.peers), [`${vip}:80`]);
      }
    });

    test('loadBalancerSourceRanges: a client inside the range is served, one outside is dropped; the NodePort is not filtered by default', async () => {
      const inside = await ext('198.19.200.2:80', 'http', ['--count', '5']);
      assertServed(inside, 'client-a (198.18.100.0/24) to the LB IP', 5);
      assert.deepEqual(inside.byPod, { 'web-1b': 5 });
      const outside = await box.external('client-b', 'http', '198.19.200.2:80', ['--count', '2', '--timeout-ms', DROP_TIMEOUT_MS]);
      assertDropped(outside, 'client-b (198.18.101.2) to the LB IP');
      const nodePort = await box.external('client-b', 'http', `${N1}:30084`, ['--count', '3']);
      assertServed(nodePort, 'client-b to the NodePort (kube-proxy applies source ranges to LB IPs only)', 3);
    });

    test('UDP through a NodePort: request and reply, to local and remote backends, and each reply comes from the address the client called', async () => {
      for (const connected of [false, true]) {
        const flags = ['--count', '10', ...(connected ? ['--connected'] : [])];
        const local = await ext(`${NODE1_UPLINK}:30053`, 'udp', flags);
        assertServed(local, `UDP NodePort, local backend (connected=${connected})`, 10);
        assert.deepEqual(local.byPod, { 'web-1a': 10 });
        assert.deepEqual(local.seenAs, { [N1]: 10 });
        assert.deepEqual(Object.keys(local.peers), [`${NODE1_UPLINK}:30053`]);
        const remote = await ext(`${N1}:30054`, 'udp', flags);
        assertServed(remote, `UDP NodePort, remote backend (connected=${connected})`, 10);
        assert.deepEqual(remote.byPod, { 'web-2a': 10 });
        assert.deepEqual(Object.keys(remote.peers), [`${N1}:30054`]);
      }
    });

    test('IPv6: a NodePort serves TCP and UDP over local and remote backends, SNATed to the node IPv6 InternalIP, replies from the address called', async () => {
      const tcp = await ext(`[${NODE1_UPLINK6}]:30086`, 'http', ['--count', '40']);
      assertServed(tcp, 'IPv6 TCP NodePort', 40);
      assert.deepEqual(Object.keys(tcp.byPod).sort(), ['web-1a', 'web-2a']);
      assert.deepEqual(Object.keys(tcp.seenAs), [UNDERLAY6['node-1']], 'SNAT to the IPv6 InternalIP');
      assert.deepEqual(Object.keys(tcp.peers), [`${NODE1_UPLINK6}:30086`]);
      const udp = await ext(`[${UNDERLAY6['node-1']}]:30056`, 'udp', ['--count', '20']);
      assertServed(udp, 'IPv6 UDP NodePort', 20);
      assert.deepEqual(Object.keys(udp.byPod).sort(), ['web-1a', 'web-2a']);
      assert.deepEqual(Object.keys(udp.peers), [`${UNDERLAY6['node-1']}:30056`]);
    });

    test('a pod reaching its own service lands on itself: through the ClusterIP (socket hook) and through the NodePort (socket hook, and tc when outside the cgroup)', async () => {
      const pod = POD['web-1a'];
      const viaCluster = await box.client(box.pods.get('web-1a')!.ns, 'http', '198.19.0.15:80', { cgroupOf: 'node-1', extra: ['--count', '5'] });
      assertServed(viaCluster, 'ClusterIP from the pod in the node cgroup', 5);
      assert.deepEqual(viaCluster.byPod, { 'web-1a': 5 });
      assert.deepEqual(Object.keys(viaCluster.peers), ['198.19.0.15:80']);

      const viaNodePortHook = await box.client(box.pods.get('web-1a')!.ns, 'http', `${N1}:30085`, { cgroupOf: 'node-1', extra: ['--count', '5'] });
      assertServed(viaNodePortHook, 'NodePort from the pod in the node cgroup', 5);
      assert.deepEqual(viaNodePortHook.byPod, { 'web-1a': 5 });
      assert.deepEqual(Object.keys(viaNodePortHook.peers), [`${N1}:30085`]);

      // Outside the cgroup no socket hook runs: the packet leaves the pod for the node and tc hairpins it (SNAT to the node).
      const viaTc = await box.client(box.pods.get('web-1a')!.ns, 'http', `${N1}:30085`, { extra: ['--count', '5'] });
      assertServed(viaTc, 'NodePort from the pod outside the cgroup (tc hairpin)', 5);
      assert.deepEqual(viaTc.byPod, { 'web-1a': 5 });
      assert.deepEqual(viaTc.seenAs, { [N1]: 5 }, `hairpin traffic is SNATed to the node, not seen from ${pod.ip}`);
      assert.deepEqual(Object.keys(viaTc.peers), [`${N1}:30085`]);
    });

    test('in the default mode a pod in the node cgroup is translated by the socket hook: served, and nothing enters conntrack', async () => {
      const caller = POD['web-1b'];
      const rep = await box.client(box.pods.get('web-1b')!.ns, 'http', '198.19.0.11:80', { cgroupOf: 'node-1', extra: ['--count', '5'] });
      assertServed(rep, 'pod in cgroup to a ClusterIP with a remote backend', 5);
      assert.deepEqual(rep.byPod, { 'web-2a': 5 });
      assert.deepEqual(rep.seenAs, { [caller.ip]: 5 }, 'the socket path connects the pod straight to the backend');
      assert.deepEqual(Object.keys(rep.peers), ['198.19.0.11:80']);
      for (const node of ['node-1', 'node-2'] as NodeName[]) {
        // Only this flow matters: earlier tests leave entries where this pod was a backend or a hairpin client.
        const tcNat = ctEntries(node).filter(
          (e) => (e.key.saddr === caller.ip && e.key.daddr === '198.19.0.11') || (e.key.saddr === '198.19.0.11' && e.key.daddr === caller.ip),
        );
        assert.deepEqual(tcNat, [], `${node} conntrack`);
      }
    });

    test('conntrack entries appear for a UDP NodePort flow (original and reply, SNAT recorded) and are swept after the UDP timeout', async () => {
      const rep = await ext(`${NODE1_UPLINK}:30053`, 'udp', ['--count', '1', '--bind', CLIENT_A]);
      assertServed(rep, 'UDP NodePort', 1);
      const flow = (entries: Array<{ key: CtKey; val: CtVal }>) => {
        // The newest such flow: the UDP test above leaves flows from client-a to this NodePort that the
        // sweep may be removing right now (a stale ORIGINAL whose REPLY is already gone).
        let orig: { key: CtKey; val: CtVal } | undefined;
        for (const e of entries) {
          if (e.key.dir !== CT_DIR.ORIGINAL || e.key.proto !== IPPROTO.UDP || e.key.saddr !== CLIENT_A || e.key.daddr !== NODE1_UPLINK || e.key.dport !== 30053)
            continue;
          if (!orig || e.val.expiresNs > orig.val.expiresNs) orig = e;
        }
        const reply =
          orig &&
          entries.find(
            (e) =>
              e.key.dir === CT_DIR.REPLY && e.key.saddr === POD['web-1a'].ip && e.key.sport === 5353 && e.key.daddr === N1 && e.key.dport === orig.val.natSport,
          );
        return { orig, reply };
      };
      const { orig, reply } = flow(ctEntries('node-1'));
      assert.ok(orig, `no ORIGINAL entry for ${CLIENT_A} -> ${NODE1_UPLINK}:30053 in node-1's kpr_ct`);
      assert.equal(orig.val.natDaddr, POD['web-1a'].ip);
      assert.equal(orig.val.natDport, 5353);
      assert.equal(orig.val.natSaddr, N1);
      assert.ok(orig.val.flags & CT_FLAG.SNAT, 'SNAT flag');
      assert.ok(reply, 'no REPLY entry');
      assert.equal(reply.val.natSaddr, NODE1_UPLINK, 'the reply is rewritten to come from the address called');
      assert.equal(reply.val.natSport, 30053);
      assert.equal(reply.val.natDaddr, CLIENT_A);
      assert.equal(reply.val.natDport, orig.key.sport);
      assert.equal(
        ctEntries('node-2').some((e) => e.key.saddr === CLIENT_A && e.key.proto === IPPROTO.UDP && e.key.sport === orig.key.sport),
        false,
        'node-2 tracks nothing of a flow node-1 served',
      );

      const start = Date.now();
      await waitFor(
        'the flow to be swept (--ct-udp-timeout 2s, --ct-sweep-interval 500ms)',
        () => {
          const f = flow(ctEntries('node-1'));
          return (
            !f.orig &&
            !ctEntries('node-1').some(
              (e) => e.key.dir === CT_DIR.REPLY && e.key.saddr === POD['web-1a'].ip && e.key.dport === orig.val.natSport && e.key.proto === IPPROTO.UDP,
            )
          );
        },
        6000,
        100,
      );
      const elapsed = Date.now() - start;
      assert.ok(elapsed >= 1000, `swept after ${elapsed} ms, before the 2 s timeout could have passed`);
    });

    test('the node namespaces have no iptables or nftables rule', () => {
      const rules = (out: string) => out.split('\n').filter((l) => l.startsWith('-A') || /^\s*(chain|rule|table)\b/.test(l));
      for (const node of ['node-1', 'node-2'] as NodeName[]) {
        assert.deepEqual(rules(inNs(box.nodes[node].ns, 'iptables-save')), [], `${node} iptables`);
        assert.deepEqual(rules(inNs(box.nodes[node].ns, 'nft', 'list', 'ruleset')), [], `${node} nftables`);
      }
    });

    test(`the agents attach in ${tcCase.mode} mode, and kpr map list / kpr stats show each attachment with its mode, interface and program id`, () => {
      for (const node of ['node-1', 'node-2'] as NodeName[]) {
        assertAgentMode(box.agents.get(node)!.logs, tcCase.mode, node);
        const args = ['--bpffs', box.nodes[node].bpffsDir, '--netns', nsPath(box.nodes[node].ns), '-o', 'json'];
        const list = spawnSync(cliBin, ['map', 'list', ...args], { encoding: 'utf8' });
        assert.equal(list.status, 0, list.stderr);
        type Row = { mode: string; attachment: string; interface: string; role: string; program: string; progId: number };
        const rows = (JSON.parse(list.stdout) as { tcAttachments: Row[] }).tcAttachments;
        assert.deepEqual(rows.map((r) => r.interface).sort(), box.expectedInterfaces(node).sort(), `${node}: one attachment per interface kpr was given`);
        for (const r of rows) {
          const kernel = withNetns(nsPath(box.nodes[node].ns), () => kprIngressPrograms(tcCase.mode, r.interface));
          assert.deepEqual(kernel, [r.progId], `${node} ${r.interface}: the program id the kernel reports`);
          assert.equal(r.mode, tcCase.mode);
          assert.equal(r.attachment, tcCase.mode === 'tcx' ? 'tcx link' : 'clsact filter');
          assert.equal(r.program, r.role === 'external' ? 'kpr_tc_ext' : 'kpr_tc_pod', JSON.stringify(r));
          assert.equal(r.role, /^(up|ul)/.test(r.interface) ? 'external' : 'pod');
        }
        const stats = spawnSync(cliBin, ['stats', ...args.slice(0, -2)], { encoding: 'utf8' });
        assert.equal(stats.status, 0, stats.stderr);
        assert.match(
          stats.stdout,
          new RegExp(`^ul0\\s+${tcCase.mode === 'tcx' ? 'tcx link' : 'clsact filter'}\\s+external\\s+kpr_tc_ext\\s+\\d+$`, 'm'),
          stats.stdout,
        );
      }
    });

    test("the agent killed and restarted while an external client connects to a NodePort in a loop: not one connection fails; kpr's program on the uplink is replaced in place, never absent", async () => {
      const onUplink = () => withNetns(nsPath(box.nodes['node-1'].ns), () => kprIngressPrograms(tcCase.mode, 'up0'));
      const before = onUplink();
      assert.equal(before.length, 1, `kpr's program on up0: ${JSON.stringify(before)}`);
      const loop = ext(`${NODE1_UPLINK}:30080`, 'loop', ['--duration-ms', String(scaled(5000)), '--timeout-ms', String(scaled(2000))]);
      // Watch the hook the whole time: between polls the event loop runs (agent logs, the client).
      let watching = true;
      let polls = 0;
      const absent: string[] = [];
      const ids = new Set<number>();
      const watcher = (async () => {
        while (watching) {
          const now = onUplink();
          polls++;
          if (now.length !== 1) absent.push(JSON.stringify(now));
          else ids.add(now[0]);
          await yieldToEventLoop();
        }
      })();
      await new Promise((r) => setTimeout(r, scaled(800)));
      const killedAt = Date.now();
      await box.stopAgent('node-1', 'SIGKILL');
      await new Promise((r) => setTimeout(r, scaled(500)));
      const startedAt = Date.now();
      const restarted = await box.startAgent('node-1', AGENT_ARGS);
      const readyAt = Date.now();
      watching = false;
      await watcher;
      const rep = await loop;
      assert.deepEqual(absent, [], `kpr's program was missing from up0 in ${absent.length} of ${polls} polls`);
      assert.ok(polls > 100, `the hook was polled only ${polls} times`);
      const after = onUplink();
      assert.equal(after.length, 1);
      assert.notEqual(after[0], before[0], "the new agent's program replaced the old one");
      assert.deepEqual(
        [...ids].filter((id) => id !== before[0] && id !== after[0]),
        [],
        'only the old and the new program were ever seen',
      );
      const line = restarted.logs.find((l) => l.msg === 'tc program attached' && l.interface === 'up0');
      assert.equal(line?.replaced, true, 'the existing attachment was replaced, not created');
      assertAgentMode(restarted.logs, tcCase.mode, 'restarted node-1');
      const timeline = { killedAt, startedAt, readyAt };
      assert.equal(rep.failed, 0, `failures during the restart: ${JSON.stringify(rep.errors)} ${JSON.stringify({ failures: rep.failures, timeline })}`);
      assert.ok(rep.ok > 20, `only ${rep.ok} connections made`);
    });
  });
}

async function waitForAsync(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
