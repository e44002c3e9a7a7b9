/**
 * SNAT ports that cannot collide with the node's own connections
 * (docs/semantics.md, rule 37). An external client's NodePort flow
 * (eTP=Cluster) leaves node-1 SNATed to node-1's InternalIP; a process on
 * node-1 that then connects from the client's port to the same backend
 * (through the ClusterIP, or to the pod IP directly) must get its own
 * answers. Before kpr owned a SNAT port range, the tc path kept the client's
 * port: the backend took the node process's SYN for the external flow's,
 * and its answer was reverse-NATed to the external client, so the node
 * process timed out.
 *
 * Topology: sandbox/two-node.ts. The backend runs on node-2, so node-1
 * reaches it through the underlay with its InternalIP as source: the very
 * address the tc path SNATs to. Only node-1 runs an agent (node-2 just
 * routes). ip_local_reserved_ports is set and read only inside node-1's
 * namespace.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { withNetns } from '../../native/index.js';
import { readFileSync, writeFileSync } from 'node:fs';
import { CT_DIR, CT_FLAG, IPPROTO, SNAT_PORT_RANGE } from '../../agent/maps/layout.js';
import { pinnedConntrack } from '../support/pinned-maps.js';
import { nsPath } from '../../sandbox/netns.js';
import { waitFor } from '../../sandbox/cluster.js';
import { CLIENTS, TwoNodeCluster, UNDERLAY } from '../../sandbox/two-node.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice } from '../support/e2e-objects.js';
import { cliBin } from '../support/paths.js';
import { metricsUrlOf, metricValue } from '../support/agent-metrics.js';

const BACKEND = { name: 'web-2a', ip: '198.18.20.10', node: 'node-2' as const };
const CLUSTER_IP = '198.19.0.40';
const ECHO_PORT = 7070;
const NODE_PORT = 30091;
const N1 = UNDERLAY['node-1'];
const CLIENT_A = CLIENTS['client-a'].ip;
/** A reserved-ports entry that is not kpr's: the agent must keep it, and so must `kpr cleanup`. */
const FOREIGN_RESERVED = '5000';

/**
 * A TCP connection from a fixed local port that stays open: each line on
 * stdin is sent, each line the peer answers is printed as JSON. Prints
 * {"connected":true} first, or {"error":...} and exits.
 */
const HOLD_JS = `
const net = require('node:net');
const [host, port, localPort] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port), localPort: Number(localPort) });
s.setEncoding('utf8');
let buf = '';
s.on('connect', () => console.log(JSON.stringify({ connected: true })));
s.on('data', (d) => { buf += d; for (let i = buf.indexOf('\\n'); i >= 0; i = buf.indexOf('\\n')) { console.log(JSON.stringify({ line: buf.slice(0, i) })); buf = buf.slice(i + 1); } });
s.on('error', (e) => { console.log(JSON.stringify({ error: e.code || e.message })); process.exit(0); });
s.on('close', () => { console.log(JSON.stringify({ closed: true })); process.exit(0); });
require('node:readline').createInterface({ input: process.stdin }).on('line', (l) => s.write(l + '\\n'));
// RST, not FIN: no TIME_WAIT on the client, so the same client port can connect again at once.
process.on('SIGTERM', () => { s.resetAndDestroy(); setTimeout(() => process.exit(0), 50); });
`;

/** One echo exchange from a fixed local port, then close: prints {"line":...} or {"error":...}. */
const ONCE_JS = `
const net = require('node:net');
const [host, port, localPort, timeoutMs] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port), localPort: Number(localPort) });
s.setEncoding('utf8');
const done = (r) => { console.log(JSON.stringify(r)); s.destroy(); process.exit(0); };
const t = setTimeout(() => done({ error: 'ETIMEDOUT' }), Number(timeoutMs));
let buf = '';
s.on('connect', () => s.write('from-node\\n'));
s.on('data', (d) => { buf += d; const i = buf.indexOf('\\n'); if (i >= 0) { clearTimeout(t); done({ line: buf.slice(0, i), local: s.localAddress + ':' + s.localPort }); } });
s.on('error', (e) => { clearTimeout(t); done({ error: e.code || e.message }); });
`;

interface Held {
  child: ChildProcess;
  next(timeoutMs?: number): Promise<Record<string, unknown>>;
  send(line: string): void;
}

/** Client ports outside kpr's SNAT range (and below the ephemeral range), different per run. */
const BASE_PORT = 20_000 + ((process.pid * 7) % 3_000) * 4;
const PORT = { ClusterIP: BASE_PORT, 'pod IP': BASE_PORT + 1, skip: BASE_PORT + 2 } as const;

describe("SNAT ports cannot collide with the node's own connections (rule 37)", { timeout: scaled(120_000) }, () => {
  let box: TwoNodeCluster;
  let metricsUrl: string;
  const held: Held[] = [];
  const node1 = () => box.nodes['node-1'];

  function hold(localPort: number): Held {
    const child = box.spawnIn(box.clientNs['client-a'], process.execPath, ['-e', HOLD_JS, N1, String(NODE_PORT), String(localPort)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const lines: Array<Record<string, unknown>> = [];
    const waiters: Array<(l: Record<string, unknown>) => void> = [];
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const v = JSON.parse(l) as Record<string, unknown>;
      const w = waiters.shift();
      if (w) w(v);
      else lines.push(v);
    });
    const h: Held = {
      child,
      next: (timeoutMs = 3000) =>
        new Promise((resolve) => {
          const ready = lines.shift();
          if (ready) return resolve(ready);
          const t = setTimeout(() => resolve({ error: 'no answer within ' + timeoutMs + ' ms' }), scaled(timeoutMs));
          waiters.push((v) => {
            clearTimeout(t);
            resolve(v);
          });
        }),
      send: (line) => child.stdin!.write(`${line}\n`),
    };
    held.push(h);
    return h;
  }

  /** A process of node-1 (below its cgroup: the socket hooks translate the ClusterIP) connecting from `localPort`. */
  async function fromNode(host: string, port: number, localPort: number, timeoutMs = 3000): Promise<Record<string, unknown>> {
    const child = box.spawnIn(node1().ns, process.execPath, ['-e', ONCE_JS, host, String(port), String(localPort), String(scaled(timeoutMs))], {
      cgroupOf: 'node-1',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    await once(child, 'exit');
    return JSON.parse(out.trim() || '{"error":"no output"}') as Record<string, unknown>;
  }

  /** The SNAT port the held external flow from `clientPort` left node-1 with (kpr_ct's ORIGINAL entry). */
  function snatPortOf(clientPort: number): number | undefined {
    const e = pinnedConntrack(node1().bpffsDir).find(
      (c) => c.key.dir === CT_DIR.ORIGINAL && c.key.proto === IPPROTO.TCP && c.key.saddr === CLIENT_A && c.key.sport === clientPort,
    );
    return e?.val.natSport;
  }

  const sysctl = (name: string) => withNetns(nsPath(node1().ns), () => readFileSync(`/proc/sys/net/ipv4/${name}`, 'utf8').trim());

  /** The host's own value, which nothing here may change. */
  let hostReserved: string;

  before(async () => {
    requireRoot();
    hostReserved = readFileSync('/proc/sys/net/ipv4/ip_local_reserved_ports', 'utf8');
    box = await TwoNodeCluster.create({ pods: [BACKEND] });
    // Only inside node-1's namespace: a reservation the agent must keep.
    withNetns(nsPath(node1().ns), () => writeFileSync('/proc/sys/net/ipv4/ip_local_reserved_ports', `${FOREIGN_RESERVED}\n`));
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'snat', namespace: 'e2e' },
      spec: {
        type: 'NodePort',
        clusterIP: CLUSTER_IP,
        clusterIPs: [CLUSTER_IP],
        ports: [{ name: 'echo', protocol: 'TCP', port: ECHO_PORT, targetPort: ECHO_PORT, nodePort: NODE_PORT }],
      },
    });
    box.api.create(endpointSlice('e2e', 'snat-1', 'snat', [{ ip: BACKEND.ip, node: BACKEND.node }], [{ name: 'echo', port: ECHO_PORT }]));
    // A long closing timeout: a reset flow's ORIGINAL entry must outlive the (slow, under QEMU) start of the
    // client that reuses its port, or the sweep removes it and its REPLY entry, which the client's RST does
    // not shorten, stays behind holding the SNAT port (the skip would then be kpr_ct's, not the listener's).
    const agent = await box.startAgent('node-1', [
      '--metrics-bind-address',
      '127.0.0.1:0',
      '--healthz-bind-address',
      '127.0.0.1:0',
      '--ct-tcp-closing-timeout',
      '300s',
    ]);
    metricsUrl = await metricsUrlOf(agent);
  });

  after(async () => {
    for (const h of held) h.child.kill('SIGKILL');
    await box?.close();
  });

  test('the agent reserves its SNAT range from the ephemeral ports of the node, keeping what was reserved before', () => {
    assert.equal(sysctl('ip_local_reserved_ports'), `${FOREIGN_RESERVED},${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}`);
  });

  for (const via of ['ClusterIP', 'pod IP'] as const) {
    test(`an external flow holds client port P; a node process connecting from P to the same backend through the ${via} gets its own answers`, async () => {
      const p = PORT[via];
      const ext = hold(p);
      assert.deepEqual(await ext.next(), { connected: true }, `external flow from ${CLIENT_A}:${p}`);
      ext.send('ext-1');
      assert.deepEqual(await ext.next(), { line: `${BACKEND.name} ext-1` }, 'the external flow is served');
      const snat = snatPortOf(p);

      const host = via === 'ClusterIP' ? CLUSTER_IP : BACKEND.ip;
      const r = await fromNode(host, ECHO_PORT, p);
      assert.deepEqual(
        r,
        { line: `${BACKEND.name} from-node`, local: `${N1}:${p}` },
        `node process from port ${p} to ${host}:${ECHO_PORT} (the external flow left node-1 as ${N1}:${snat})`,
      );

      // The external flow is untouched by the node's connection.
      ext.send('ext-2');
      assert.deepEqual(await ext.next(), { line: `${BACKEND.name} ext-2` }, 'the external flow still works');
      assert.ok(
        snat !== undefined && snat >= SNAT_PORT_RANGE.min && snat <= SNAT_PORT_RANGE.max,
        `SNAT port ${snat} is in kpr's range ${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}, not the client's ${p}`,
      );
      ext.child.kill('SIGTERM');
    });
  }

  test('a port a node socket holds is skipped: the flow gets another SNAT port, and the skip is counted', async () => {
    const p = PORT.skip;
    const first = hold(p);
    assert.deepEqual(await first.next(), { connected: true });
    const q = snatPortOf(p)!;
    assert.ok(q >= SNAT_PORT_RANGE.min && q <= SNAT_PORT_RANGE.max, `SNAT port ${q}`);
    first.child.kill('SIGTERM');
    await waitFor('the closed flow to be marked closing', () =>
      pinnedConntrack(node1().bpffsDir).some((c) => c.key.sport === p && (c.val.flags & CT_FLAG.CLOSING) !== 0),
    );

    // A listener of node-1 on q: the same client port would hash to q again, but q is now the node's.
    const listener = box.spawnIn(node1().ns, process.execPath, ['-e', `require('node:net').createServer(() => {}).listen(${q}, () => console.log('ready'))`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    held.push({ child: listener, next: async () => ({}), send: () => undefined });
    await once(listener.stdout!, 'data');
    const skips = async () => ({
      nodeSocket: await metricValue(metricsUrl, 'kpr_datapath_snat_port_skips_total', { reason: 'node_socket' }),
      conntrack: await metricValue(metricsUrl, 'kpr_datapath_snat_port_skips_total', { reason: 'conntrack' }),
    });
    const skippedBefore = await skips();

    const again = hold(p);
    assert.deepEqual(await again.next(), { connected: true });
    again.send('again');
    assert.deepEqual(await again.next(), { line: `${BACKEND.name} again` });
    const q2 = snatPortOf(p)!;
    assert.notEqual(q2, q, `the new flow left with ${q2}, not the port node-1's listener holds`);
    assert.ok(q2 >= SNAT_PORT_RANGE.min && q2 <= SNAT_PORT_RANGE.max, `SNAT port ${q2}`);
    const skippedAfter = await skips();
    assert.ok(
      skippedAfter.nodeSocket > skippedBefore.nodeSocket,
      `the skip is counted as a node socket's: before ${JSON.stringify(skippedBefore)}, after ${JSON.stringify(skippedAfter)}`,
    );
    again.child.kill('SIGTERM');
    listener.kill('SIGTERM');
  });

  test("kpr cleanup releases the SNAT range and keeps the reservation that was not kpr's", async () => {
    await box.stopAgent('node-1');
    const r = spawnSync(cliBin, ['cleanup', '--bpffs', node1().bpffsDir, '--netns', nsPath(node1().ns)], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(sysctl('ip_local_reserved_ports'), FOREIGN_RESERVED);
    assert.equal(readFileSync('/proc/sys/net/ipv4/ip_local_reserved_ports', 'utf8'), hostReserved, "the host's own namespace is untouched");
  });
});
