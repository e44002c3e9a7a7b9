/**
 * kpr's tc program beside another program on the same hook, with real
 * traffic, in namespaces the test creates: client ── node ── backend, kpr's
 * kpr_tc_ext at the node's ingress of both links, and a second program (the
 * fixture test/fixtures/bpf-chain/tc_counter.bpf.c, counting packets by
 * destination port) at the client link's ingress after kpr's: a later tcx
 * program, a classic clsact filter of a higher priority number, and, on a
 * kernel with tcx, a classic filter behind kpr's tcx link (the kernel runs
 * every tcx program before the classic filters).
 *
 * What must hold in every arrangement: traffic that is not a Service's
 * reaches the second program (kpr returns TC_ACT_UNSPEC, "next") and still
 * flows; a NodePort connection is still translated and answered, and its
 * packets end at kpr (translated and redirected: the second program never
 * sees them).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import {
  BpfObject,
  BPF_TC,
  KPR_TC_FILTER,
  attachTcFilter,
  attachTcx,
  ensureBpffs,
  sumPerCpuU64,
  tcxSupported,
  TCX,
  withNetns,
  type BpfProgram,
  type TcFilterId,
} from '../../native/index.js';
import { IPPROTO, STAT, SVC_FLAG, encodeBackendId, encodeConfig } from '../../agent/maps/layout.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { waitForLine } from '../../sandbox/topology.js';
import { writeFrontend } from '../support/tc-object.js';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const CLIENT = '198.18.51.2';
const NODE = '198.18.51.1';
const NODE_B = '198.18.52.1';
const BACKEND = '198.18.52.2';
const NODE_PORT = 30080;
const BACKEND_PORT = 8080;
const PLAIN_PORT = 9000; // a listener on the node itself: no Service
/** The second program's filter: a priority number above kpr's (0x6b70), so it runs after kpr's filter. */
const COUNTER_FILTER = { handle: 0x63, priority: KPR_TC_FILTER.priority + 0x100 };

type Arrangement = { kpr: 'tcx' | 'tc'; second: 'tcx' | 'tc'; label: string };

function arrangements(): Arrangement[] {
  const classic: Arrangement = { kpr: 'tc', second: 'tc', label: 'kpr clsact filter, a second filter at a higher priority number' };
  if (!tcxSupported()) return [classic];
  return [
    { kpr: 'tcx', second: 'tcx', label: 'kpr tcx link, a second tcx program attached after it' },
    { kpr: 'tcx', second: 'tc', label: 'kpr tcx link, a classic clsact filter on the same hook' },
    classic,
  ];
}

const ECHO_SERVER = `const net=require('net');const [h,p]=process.argv.slice(1);net.createServer(s=>s.pipe(s)).listen(+p,h,()=>console.log('ready'));`;
const ECHO_CLIENT = `const net=require('net');const [h,p]=process.argv.slice(1);const t=setTimeout(()=>{console.error('timeout');process.exit(2)},5000);
const s=net.connect(+p,h,()=>s.write('kpr-chain'));let got='';s.on('data',d=>{got+=d;if(got==='kpr-chain'){clearTimeout(t);s.end();console.log('echoed');process.exit(0)}});s.on('error',e=>{console.error(e.message);process.exit(1)});`;

/** One TCP round trip from the client namespace; true when the echo came back. */
function echoFrom(ns: string, host: string, port: number): { ok: boolean; detail: string } {
  const r = spawnSync('nsenter', [`--net=${nsPath(ns)}`, process.execPath, '-e', ECHO_CLIENT, host, String(port)], { encoding: 'utf8', timeout: 15_000 });
  return { ok: r.status === 0 && r.stdout.includes('echoed'), detail: `${r.status} ${r.stdout} ${r.stderr}` };
}

for (const a of arrangements()) {
  test(`tc chain: ${a.label}: other traffic reaches the second program and flows, a NodePort flow is translated and ends at kpr`, async () => {
    requireRoot();
    const sb = new Sandbox();
    const kpr = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: ensureBpffs(path.join(sb.bpffsDir, 'maps')) });
    const second = BpfObject.open(path.join(repoRoot, 'build', 'fixtures', 'tc_counter.bpf.o'));
    try {
      kpr.load();
      second.load();
      const client = sb.addNamespace('cl');
      const node = sb.addNamespace('nd');
      const backend = sb.addNamespace('be');
      inNs(node, 'ip', 'link', 'add', 'n0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client);
      inNs(node, 'ip', 'link', 'add', 'n1', 'type', 'veth', 'peer', 'name', 'b0', 'netns', backend);
      inNs(node, 'ip', 'addr', 'add', `${NODE}/24`, 'dev', 'n0');
      inNs(node, 'ip', 'addr', 'add', `${NODE_B}/24`, 'dev', 'n1');
      inNs(node, 'ip', 'link', 'set', 'n0', 'up');
      inNs(node, 'ip', 'link', 'set', 'n1', 'up');
      inNs(node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'); // the test's own namespace
      inNs(client, 'ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
      inNs(client, 'ip', 'link', 'set', 'c0', 'up');
      inNs(client, 'ip', 'route', 'add', 'default', 'via', NODE);
      inNs(backend, 'ip', 'addr', 'add', `${BACKEND}/24`, 'dev', 'b0');
      inNs(backend, 'ip', 'link', 'set', 'b0', 'up');
      inNs(backend, 'ip', 'route', 'add', 'default', 'via', NODE_B);

      kpr
        .map('kpr_config')
        .update(
          Buffer.alloc(4),
          encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE, snatV6: '::', tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
        );
      writeFrontend(
        { svc: kpr.map('kpr_svc'), backend: kpr.map('kpr_backend') },
        { addr: NODE, port: NODE_PORT, proto: IPPROTO.TCP, frontendId: 1, flags: SVC_FLAG.NODE_PORT },
        [[1, BACKEND, BACKEND_PORT]],
      );

      const ext = kpr.program('kpr_tc_ext');
      const counter = second.program('chain_counter');
      const attach = (mode: 'tcx' | 'tc', prog: BpfProgram, ifname: string, pin: string, filter: TcFilterId = KPR_TC_FILTER) =>
        withNetns(nsPath(node), () =>
          mode === 'tcx' ? attachTcx(prog, ifname, TCX.INGRESS, path.join(sb.bpffsDir, pin)) : attachTcFilter(prog, ifname, BPF_TC.INGRESS, filter),
        );
      attach(a.kpr, ext, 'n0', 'kpr-n0');
      attach(a.kpr, ext, 'n1', 'kpr-n1');
      // After kpr's: a tcx program attached later is appended behind it; a classic filter runs after every tcx program.
      attach(a.second, counter, 'n0', 'second-n0', COUNTER_FILTER);

      for (const [ns, host, port] of [
        [node, NODE, PLAIN_PORT],
        [backend, BACKEND, BACKEND_PORT],
      ] as const) {
        const srv = sb.spawnIn(ns, process.execPath, ['-e', ECHO_SERVER, host, String(port)]);
        await waitForLine(srv, 'ready', `echo server ${host}:${port}`);
      }

      const seen = (slot: number) =>
        second
          .map('chain_seen')
          .lookup(Buffer.from(new Uint32Array([slot]).buffer))!
          .readBigUInt64LE(0);
      const dnat = () => sumPerCpuU64(kpr.map('kpr_stats').lookup(encodeBackendId(STAT.TC_DNAT))!);

      const plain = echoFrom(client, NODE, PLAIN_PORT);
      assert.ok(plain.ok, `a connection to a port that is no Service works with both programs on the hook: ${plain.detail}`);
      assert.ok(seen(PLAIN_PORT) >= 3n, `the second program saw the plain connection's packets (handshake, data, close): ${seen(PLAIN_PORT)}`);

      const dnat0 = dnat();
      const viaNodePort = echoFrom(client, NODE, NODE_PORT);
      assert.ok(viaNodePort.ok, `the NodePort connection is translated and answered by the backend: ${viaNodePort.detail}`);
      assert.equal(dnat() - dnat0, 1n, 'kpr translated one new flow');
      assert.equal(seen(NODE_PORT), 0n, 'translated packets end at kpr: the second program never sees the NodePort flow');
      assert.equal(seen(BACKEND_PORT), 0n, 'nor the rewritten packets');
      assert.ok(seen(0) >= seen(PLAIN_PORT), 'slot 0 counts every packet the second program saw');
    } finally {
      kpr.close();
      second.close();
      await sb.teardown();
    }
  });
}
