/**
 * Conformance: kubernetes/kubernetes test/e2e/network/kube_proxy.go
 * ("[sig-network] KubeProxy"), one node:test test per upstream It()
 * (upstream-tests.ts). "should set TCP CLOSE_WAIT timeout": a client pod
 * on node-1 opens a TCP connection to a server on node-2's InternalIP
 * (port 11302, upstream's hostPort: here a hostNetwork server), the server
 * closes its side and the client leaks its own (agnhost nat-closewait-*),
 * and the node-1 conntrack entry of that connection, in CLOSE_WAIT, must
 * carry kube-proxy's timeout, 1h (±60 s), read on node-1 (upstream's
 * `conntrack -L` from a hostNetwork pod; here /proc/net/nf_conntrack in the
 * node's namespace).
 *
 * kpr's agent changes no conntrack sysctl: the chart's conntrack-sysctls
 * init container runs `kpr conntrack-sysctls` with the agent's arguments in
 * the node's network namespace, before the agent starts. The test runs
 * that step in node-1's namespace the same way. A node namespace of the
 * sandbox tracks no connection by itself (no CNI, no iptables), so the test
 * adds the one nftables rule that makes netfilter conntrack track forwarded
 * traffic there, as a CNI's rules do on a real node.
 * Topology: sandbox/two-node.ts; conventions: harness.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { after, before, describe } from 'node:test';
import { scaled } from '../../sandbox/time-scale.js';
import { inNs, nsPath } from '../../sandbox/netns.js';
import { cliBin } from '../../sandbox/repo.js';
import { waitForLine } from '../../sandbox/topology.js';
import { requireRoot } from '../support/preflight.js';
import { ConformanceBox, eventually, registerUpstream, type PodSpec, type UpstreamImpl } from './harness.js';

const PODS: PodSpec[] = [{ name: 'e2e-net-client', ip: '198.18.10.60', node: 'node-1' }];
const TEST_DAEMON_TCP_PORT = 11302;
/** kube-proxy's default conntrack.tcpCloseWaitTimeout, and upstream's tolerance. */
const EXPECTED_TIMEOUT_S = 60 * 60;
const EPSILON_S = 60;

let c: ConformanceBox;
const children: ChildProcess[] = [];

const tests: Record<string, UpstreamImpl> = {
  // kube_proxy.go: "should set TCP CLOSE_WAIT timeout [Privileged]"
  'should set TCP CLOSE_WAIT timeout [Privileged]': async () => {
    const clientNode = c.box.nodes['node-1'];
    const serverIp = c.nodeIp('node-2');
    c.trackConnections('node-1');
    // The chart's init container: `kpr conntrack-sysctls` with the agent's arguments, in the node's namespace.
    const sysctls = spawnSync('nsenter', [`--net=${nsPath(clientNode.ns)}`, cliBin, 'conntrack-sysctls', ...c.box.agentArgs('node-1')], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(sysctls.status, 0, `${sysctls.stdout}\n${sysctls.stderr}`);
    assert.match(sysctls.stdout, /nf_conntrack_tcp_timeout_close_wait\s+\d+\s+3600\s+written/, sysctls.stdout);

    // nat-closewait-server: closes every connection it accepts (its FIN), on node-2's address.
    const server = c.box.sandbox.spawnIn(
      c.box.nodes['node-2'].ns,
      process.execPath,
      [
        '-e',
        `
      require('node:net').createServer((s) => { s.on('error', () => {}); s.end(); })
        .listen(${TEST_DAEMON_TCP_PORT}, '${serverIp}', () => console.log('ready'));
    `,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(server);
    await waitForLine(server, 'ready', 'nat-closewait-server');
    // nat-closewait-client with LeakConnection: reads the server's FIN and never closes its side (CLOSE_WAIT).
    const client = c.box.spawnIn(
      c.podNs('e2e-net-client'),
      process.execPath,
      [
        '-e',
        `
      const s = require('node:net').connect({ host: '${serverIp}', port: ${TEST_DAEMON_TCP_PORT}, allowHalfOpen: true });
      s.on('end', () => console.log('fin received'));
      s.on('error', (e) => { console.log('error ' + e.message); process.exit(1); });
      s.resume();
      setInterval(() => {}, 60_000); // the process (and so its socket) lives until the test ends
    `,
      ],
      { cgroupOf: 'node-1', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(client);
    await waitForLine(client, 'fin received', 'nat-closewait-client');

    // conntrack -L -f ipv4 -d <server node IP> | grep -m 1 'CLOSE_WAIT.*dport=11302', on the client's node.
    const entry = new RegExp(
      `^ipv4\\s+2\\s+tcp\\s+6\\s+(\\d+)\\s+CLOSE_WAIT\\s+src=\\S+\\s+dst=${serverIp.replaceAll('.', '\\.')}\\s+sport=\\d+\\s+dport=${TEST_DAEMON_TCP_PORT}\\s`,
      'm',
    );
    let table = '';
    const timeoutS = await eventually(
      `a CLOSE_WAIT conntrack entry to ${serverIp}:${TEST_DAEMON_TCP_PORT} on node-1`,
      async () => {
        table = inNs(clientNode.ns, 'cat', '/proc/net/nf_conntrack');
        const m = entry.exec(table);
        return m ? Number(m[1]) : undefined;
      },
      15_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nnode-1's conntrack table:\n${table}`);
    });
    assert.ok(Math.abs(timeoutS - EXPECTED_TIMEOUT_S) < EPSILON_S, `wrong TCP CLOSE_WAIT timeout: ${timeoutS} expected: ${EXPECTED_TIMEOUT_S}`);
  },
};

describe('conformance: test/e2e/network/kube_proxy.go', { timeout: scaled(90_000) }, () => {
  before(async () => {
    requireRoot();
    c = await ConformanceBox.start(PODS);
  });
  after(async () => {
    for (const ch of children) ch.kill('SIGKILL');
    await c?.close();
  });
  registerUpstream('kube_proxy.go', tests);
});
