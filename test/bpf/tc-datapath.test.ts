/**
 * The tc datapath on crafted packets (BPF_PROG_TEST_RUN): the real program,
 * real maps, no network. Each case checks what a peer would see: addresses,
 * ports, valid checksums, the verdict, and the conntrack entries left behind.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { sumPerCpuU64, testRun, withNetns, type BpfMap, type BpfObject } from '../../native/index.js';
import { nsPath, Sandbox } from '../../sandbox/netns.js';
import {
  CFG_FLAG,
  CONFIG,
  CT_DIR,
  CT_KEY,
  CT_VAL,
  CT_VAL_EXPIRES_OFFSET,
  CT_FLAG,
  codecOf,
  IPPROTO,
  SCOPE,
  SNAT_PORT_RANGE,
  STAT,
  SVC_ALG,
  SVC_ALG_MASK,
  SVC_FLAG,
  svcAlgFlags,
  decodeAffinityKey,
  decodeAffinityVal,
  decodeCtKey,
  decodeCtVal,
  encodeAffinityMatchKey,
  encodeBackendId,
  encodeConfig,
  encodeSrcRangeKey,
  encodeSvcKey,
  encodeSvcVal,
} from '../../agent/maps/layout.js';
import { TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, buildPacket, parsePacket } from '../support/packets.js';
import { loadTcObject, writeFrontend, type TcObject } from '../support/tc-object.js';
import { requireRoot } from '../support/preflight.js';
import { clientPortHashingTo, firstSnatPort } from '../support/snat-port.js';

const TC_ACT_UNSPEC = -1; // "not mine": the next program on the hook runs (TCX_NEXT for tcx)
const TC_ACT_OK = 0;
const TC_ACT_SHOT = 2;
const TC_ACT_REDIRECT = 7;
const NODE_V4 = '198.18.1.1';
const NODE_V6 = '2001:db8:1::1';
const CLIENT = '198.18.100.2';

describe('tc datapath (BPF_PROG_TEST_RUN)', () => {
  let obj: BpfObject;
  let svc: BpfMap, backend: BpfMap, ct: BpfMap, srcRange: BpfMap;

  let tc: TcObject;
  /**
   * The node the programs run for: BPF_PROG_TEST_RUN runs a packet in the
   * caller's network namespace, where kpr_snat.h looks up the node's
   * sockets. A namespace of the test's own: the host's sockets stay out of
   * it, and the test's sockets out of the host.
   */
  let sandbox: Sandbox;
  let nodeNs: string;

  function frontend(addr: string, port: number, proto: number, frontendId: number, flags: number, backends: Array<[number, string, number]>) {
    writeFrontend(tc, { addr, port, proto, frontendId, flags }, backends);
  }

  function ctEntries() {
    const { count, keys, values } = ct.lookupBatch();
    const out = [];
    for (let i = 0; i < count; i++) out.push({ key: decodeCtKey(keys, i * CT_KEY.size), val: decodeCtVal(values, i * CT_VAL.size) });
    return out;
  }

  function run(program: 'kpr_tc_ext' | 'kpr_tc_pod', pkt: Buffer) {
    const r = withNetns(nsPath(nodeNs), () => testRun(obj.program(program), pkt));
    return { verdict: r.retval, out: r.data, parsed: r.data.length >= 34 ? parsePacket(r.data) : undefined };
  }

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
    nodeNs = sandbox.addNamespace('node');
    tc = loadTcObject('kpr-tc-test');
    ({ obj, svc, backend } = tc);
    ct = obj.map('kpr_ct');
    srcRange = obj.map('kpr_src_range');
    obj
      .map('kpr_config')
      .update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE_V4, snatV6: NODE_V6, tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
      );
    assert.equal(CONFIG.size, obj.map('kpr_config').valueSize);
  });

  after(async () => {
    tc?.close();
    await sandbox?.teardown();
  });

  beforeEach(() => {
    for (const m of [svc, backend, ct, srcRange, obj.map('kpr_affinity'), obj.map('kpr_aff_match')]) {
      for (const k of [...m.keys()]) m.delete(k);
    }
  });

  test('a NodePort SYN is DNATed to the backend and SNATed to the node, with valid checksums; the reply is reverse-NATed', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const syn = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 40000, dport: 30080, proto: 'TCP', tcpFlags: TCP_SYN }));
    assert.ok([TC_ACT_OK, TC_ACT_REDIRECT].includes(syn.verdict), `verdict ${syn.verdict}`);
    const p = syn.parsed!;
    const snat = firstSnatPort(CLIENT, 40000);
    assert.deepEqual(
      [p.src, p.sport, p.dst, p.dport],
      [NODE_V4, snat, '198.18.20.10', 8080],
      "SNAT to a port of kpr's range: the first candidate, hashed from the client",
    );
    assert.ok(p.ipChecksumOk, 'IPv4 header checksum');
    assert.ok(p.l4ChecksumOk, 'TCP checksum');
    assert.equal(p.payload.toString(), 'kpr');

    const entries = ctEntries();
    assert.equal(entries.length, 2);
    const orig = entries.find((e) => e.key.dir === CT_DIR.ORIGINAL)!;
    const reply = entries.find((e) => e.key.dir === CT_DIR.REPLY)!;
    assert.deepEqual([orig.key.saddr, orig.key.sport, orig.key.daddr, orig.key.dport], [CLIENT, 40000, NODE_V4, 30080]);
    assert.deepEqual([reply.key.saddr, reply.key.sport, reply.key.daddr, reply.key.dport], ['198.18.20.10', 8080, NODE_V4, snat]);
    assert.equal(orig.val.frontendId, 7);

    const back = run('kpr_tc_ext', buildPacket({ src: '198.18.20.10', dst: NODE_V4, sport: 8080, dport: snat, proto: 'TCP', tcpFlags: TCP_SYN | TCP_ACK }));
    const r = back.parsed!;
    assert.deepEqual([r.src, r.sport, r.dst, r.dport], [NODE_V4, 30080, CLIENT, 40000], 'the client sees the address it called');
    assert.ok(r.ipChecksumOk && r.l4ChecksumOk);

    const again = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 40000, dport: 30080, proto: 'TCP', tcpFlags: TCP_ACK }));
    assert.equal(again.parsed!.dst, '198.18.20.10', 'later packets of the flow follow the same backend');
  });

  test('tc never sends a new flow to the node itself (a hostNetwork endpoint) while another endpoint exists: it chooses among the others, each of them (rule 38)', () => {
    const cfgMap = obj.map('kpr_config');
    const config = (flags: number, hostNetnsCookie: bigint) =>
      cfgMap.update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie, snatV4: NODE_V4, snatV6: NODE_V6, tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags }),
      );
    /** 60 new flows to NODE_V4:30090 through `program`; who they went to. */
    const flows = (program: 'kpr_tc_ext' | 'kpr_tc_pod', src: string, firstPort: number, wantSrc: string) => {
      const seen: Record<string, number> = {};
      for (let i = 0; i < 60; i++) {
        const { parsed } = run(program, buildPacket({ src, dst: NODE_V4, sport: firstPort + i, dport: 30090, proto: 'TCP', tcpFlags: TCP_SYN }));
        assert.equal(parsed!.src, wantSrc);
        seen[parsed!.dst] = (seen[parsed!.dst] ?? 0) + 1;
      }
      return seen;
    };
    try {
      // Three endpoints: the node itself (hostNetwork, on its InternalIP) and two elsewhere.
      frontend(NODE_V4, 30090, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, [
        [20, NODE_V4, 10280],
        [21, '198.18.1.2', 10280],
        [22, '198.18.20.10', 8080],
      ]);
      const cases: Array<[string, 'kpr_tc_ext' | 'kpr_tc_pod', string, number, string, number]> = [
        ['outside client', 'kpr_tc_ext', CLIENT, 0, NODE_V4, 41000],
        ['pod, masquerade on (rule 35)', 'kpr_tc_pod', '198.18.10.50', CFG_FLAG.MASQ_POD, NODE_V4, 42000],
        ['pod, masquerade off', 'kpr_tc_pod', '198.18.10.50', 0, '198.18.10.50', 43000],
      ];
      for (const [who, program, src, flags, wantSrc, firstPort] of cases) {
        config(flags, 1n);
        const seen = flows(program, src, firstPort, wantSrc);
        assert.equal(seen[NODE_V4], undefined, `${who}: never the node's own address: ${JSON.stringify(seen)}`);
        assert.ok(seen['198.18.1.2'] > 0 && seen['198.18.20.10'] > 0, `${who}: both other endpoints chosen: ${JSON.stringify(seen)}`);
      }
      // The node's own server as the only endpoint: nothing else to choose, the flow goes there.
      for (const k of [...svc.keys()]) svc.delete(k);
      frontend(NODE_V4, 30090, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, [[20, NODE_V4, 10280]]);
      assert.deepEqual(flows('kpr_tc_ext', CLIENT, 44000, NODE_V4), { [NODE_V4]: 60 });
    } finally {
      config(0, 0n);
    }
  });

  test('externalTrafficPolicy=Local keeps the client address (no SNAT)', () => {
    frontend(NODE_V4, 30081, IPPROTO.TCP, 8, SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY, [[2, '198.18.10.10', 8080]]);
    const { parsed } = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 40001, dport: 30081, proto: 'TCP' }));
    assert.deepEqual([parsed!.src, parsed!.sport, parsed!.dst, parsed!.dport], [CLIENT, 40001, '198.18.10.10', 8080]);
    assert.ok(parsed!.l4ChecksumOk);
    const back = run('kpr_tc_pod', buildPacket({ src: '198.18.10.10', dst: CLIENT, sport: 8080, dport: 40001, proto: 'TCP', tcpFlags: TCP_ACK }));
    assert.deepEqual([back.parsed!.src, back.parsed!.sport], [NODE_V4, 30081], "a local backend's reply is reverse-NATed on the pod side");
  });

  test('UDP: checksum kept valid, and a zero (absent) IPv4 UDP checksum stays zero', () => {
    frontend(NODE_V4, 30053, IPPROTO.UDP, 9, SVC_FLAG.NODE_PORT, [[3, '198.18.20.11', 5353]]);
    const withSum = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 5000, dport: 30053, proto: 'UDP' })).parsed!;
    assert.deepEqual([withSum.dst, withSum.dport, withSum.src], ['198.18.20.11', 5353, NODE_V4]);
    assert.ok(withSum.l4ChecksumOk);
    assert.notEqual(withSum.l4Checksum, 0);
    const noSum = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 5001, dport: 30053, proto: 'UDP', udpNoChecksum: true })).parsed!;
    assert.equal(noSum.dst, '198.18.20.11');
    assert.equal(noSum.l4Checksum, 0);
  });

  test("IPv6 NodePort: DNAT, SNAT to the node's IPv6 address, valid checksum", () => {
    frontend(NODE_V6, 30080, IPPROTO.TCP, 10, SVC_FLAG.NODE_PORT, [[4, '2001:db8:20::10', 8080]]);
    const p = run('kpr_tc_ext', buildPacket({ src: '2001:db8:100::2', dst: NODE_V6, sport: 41000, dport: 30080, proto: 'TCP' })).parsed!;
    assert.deepEqual([p.src, p.dst, p.dport], [NODE_V6, '2001:db8:20::10', 8080]);
    assert.ok(p.l4ChecksumOk, 'TCP over IPv6 checksum');
  });

  test('loadBalancerSourceRanges: allowed sources pass, others are dropped', () => {
    frontend('198.19.200.1', 80, IPPROTO.TCP, 11, SVC_FLAG.LOAD_BALANCER | SVC_FLAG.SOURCE_RANGES, [[5, '198.18.20.12', 8080]]);
    srcRange.update(encodeSrcRangeKey({ frontendId: 11, cidr: '198.18.100.0/24' }), Buffer.from([1]));
    const ok = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: '198.19.200.1', sport: 42000, dport: 80, proto: 'TCP' }));
    assert.equal(ok.parsed!.dst, '198.18.20.12');
    const denied = run('kpr_tc_ext', buildPacket({ src: '198.18.101.2', dst: '198.19.200.1', sport: 42000, dport: 80, proto: 'TCP' }));
    assert.equal(denied.verdict, TC_ACT_SHOT);
  });

  test('the selection algorithm of slot 0 (bits 12-15 of its flags): RANDOM spreads new flows; one this build does not know selects at random too, and the other flags still hold', () => {
    for (const [port, alg, id] of [
      [30110, SVC_ALG.RANDOM, 20],
      [30111, SVC_ALG_MASK, 22],
    ] as const) {
      frontend(NODE_V4, port, IPPROTO.TCP, id, SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY | svcAlgFlags(alg), [
        [id, '198.18.20.30', 8080],
        [id + 1, '198.18.20.31', 8080],
      ]);
      const seen = new Set<string>();
      for (let i = 0; i < 32; i++) {
        const p = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 44000 + i, dport: port, proto: 'TCP', tcpFlags: TCP_SYN })).parsed!;
        assert.deepEqual([p.src, p.sport], [CLIENT, 44000 + i], `algorithm ${alg}: LOCAL_ONLY still read (no SNAT)`);
        seen.add(p.dst);
      }
      // Uniform over two backends: all 32 flows on one has a chance of 2^-31.
      assert.deepEqual([...seen].sort(), ['198.18.20.30', '198.18.20.31'], `algorithm ${alg}: both backends chosen`);
    }
  });

  test('a frontend without backends drops; traffic to anything else passes untouched', () => {
    frontend(NODE_V4, 30099, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY, []);
    assert.equal(run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 43000, dport: 30099, proto: 'TCP' })).verdict, TC_ACT_SHOT);
    const other = buildPacket({ src: CLIENT, dst: NODE_V4, sport: 43000, dport: 22, proto: 'TCP' });
    const r = run('kpr_tc_ext', other);
    assert.equal(r.verdict, TC_ACT_UNSPEC, 'not a frontend: passed on to the next program, not TC_ACT_OK (which ends the chain)');
    assert.deepEqual(r.out, other);
  });

  test('SCTP to a frontend (NodePort, ClusterIP from a pod, IPv6) is dropped and counted, never rewritten; SCTP to anything else and a truncated SCTP header pass unchanged (rule 39 of docs/semantics.md)', () => {
    frontend(NODE_V4, 30132, IPPROTO.SCTP, 21, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 9132]]);
    frontend('198.19.0.132', 132, IPPROTO.SCTP, 22, SVC_FLAG.CLUSTER_IP, [[2, '198.18.20.10', 9132]]);
    frontend(NODE_V6, 30132, IPPROTO.SCTP, 23, SVC_FLAG.NODE_PORT, [[3, '2001:db8:20::10', 9132]]);
    const stat = (i: number) => sumPerCpuU64(obj.map('kpr_stats').lookup(encodeBackendId(i))!);
    const drops0 = stat(STAT.TC_DROP_SCTP);
    const dnat0 = stat(STAT.TC_DNAT);
    const init = buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45000, dport: 30132, proto: 'SCTP' });
    assert.ok(parsePacket(init).l4ChecksumOk, 'the crafted INIT carries a valid CRC32c');
    assert.equal(run('kpr_tc_ext', init).verdict, TC_ACT_SHOT, 'NodePort from the network');
    assert.equal(
      run('kpr_tc_pod', buildPacket({ src: '198.18.30.5', dst: '198.19.0.132', sport: 45001, dport: 132, proto: 'SCTP' })).verdict,
      TC_ACT_SHOT,
      'ClusterIP from a pod',
    );
    assert.equal(
      run('kpr_tc_ext', buildPacket({ src: '2001:db8:100::2', dst: NODE_V6, sport: 45002, dport: 30132, proto: 'SCTP' })).verdict,
      TC_ACT_SHOT,
      'IPv6 NodePort',
    );
    assert.equal(stat(STAT.TC_DROP_SCTP) - drops0, 3n, 'each drop counted in kpr_datapath_drops_total{reason="sctp"}');
    assert.equal(stat(STAT.TC_DNAT), dnat0, 'nothing translated');
    assert.equal(ctEntries().length, 0, 'no conntrack entry for SCTP');

    // The TCP frontend on the same port number is served as ever: the drop is SCTP's alone.
    frontend(NODE_V4, 30132, IPPROTO.TCP, 24, SVC_FLAG.NODE_PORT, [[4, '198.18.20.10', 8132]]);
    const tcp = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45003, dport: 30132, proto: 'TCP' }));
    assert.ok([TC_ACT_OK, TC_ACT_REDIRECT].includes(tcp.verdict), `TCP verdict ${tcp.verdict}`);
    assert.equal(tcp.parsed!.dst, '198.18.20.10');

    const elsewhere = buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45004, dport: 30133, proto: 'SCTP' });
    const passed = run('kpr_tc_ext', elsewhere);
    assert.equal(passed.verdict, TC_ACT_UNSPEC, "SCTP to no frontend is not kpr's");
    assert.deepEqual(passed.out, elsewhere, 'and is not rewritten');
    const truncated = init.subarray(0, 14 + 20 + 8);
    const malformed0 = stat(STAT.TC_PASS_MALFORMED);
    const cut = run('kpr_tc_ext', truncated);
    assert.equal(cut.verdict, TC_ACT_UNSPEC);
    assert.deepEqual(cut.out, truncated);
    assert.equal(stat(STAT.TC_PASS_MALFORMED) - malformed0, 1n, 'an SCTP header cut short is malformed');
    assert.equal(stat(STAT.TC_DROP_SCTP) - drops0, 3n);
  });

  test('malformed, truncated, fragmented and non-TCP/UDP packets are passed unchanged, never rewritten', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const good = buildPacket({ src: CLIENT, dst: NODE_V4, sport: 44000, dport: 30080, proto: 'TCP' });
    const truncated = good.subarray(0, 14 + 20 + 10); // TCP header cut short
    const fragment = Buffer.from(good);
    fragment.writeUInt16BE(0x2000, 14 + 6); // more fragments
    const icmp = Buffer.from(good);
    icmp[14 + 9] = 1;
    const badIhl = Buffer.from(good);
    badIhl[14] = 0x44;
    const arp = Buffer.from(good);
    arp.writeUInt16BE(0x0806, 12);
    for (const [name, pkt] of Object.entries({ truncated, fragment, icmp, badIhl, arp })) {
      const r = testRun(obj.program('kpr_tc_ext'), pkt);
      assert.equal(r.retval, TC_ACT_UNSPEC, name);
      assert.deepEqual(r.data, pkt, `${name} is not rewritten`);
    }
    assert.equal(ctEntries().length, 0, 'no conntrack state for packets we did not handle');
  });

  test('a SYN reusing the ports of a closed flow is balanced afresh; ARP is not counted as malformed', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const stats = obj.map('kpr_stats');
    const stat = (i: number) => sumPerCpuU64(stats.lookup(encodeBackendId(i))!);
    const dnat0 = stat(STAT.TC_DNAT);
    const malformed0 = stat(STAT.TC_PASS_MALFORMED);
    const pkt = (flags: number) => buildPacket({ src: CLIENT, dst: NODE_V4, sport: 46000, dport: 30080, proto: 'TCP', tcpFlags: flags });
    const first = run('kpr_tc_ext', pkt(TCP_SYN)).parsed!;
    run('kpr_tc_ext', pkt(TCP_SYN)); // a retransmitted SYN of the open flow: same flow
    assert.equal(stat(STAT.TC_DNAT) - dnat0, 1n);
    run('kpr_tc_pod', buildPacket({ src: '198.18.20.10', dst: NODE_V4, sport: 8080, dport: first.sport, proto: 'TCP', tcpFlags: TCP_SYN | TCP_ACK }));
    run('kpr_tc_ext', pkt(TCP_ACK | TCP_FIN));
    const again = run('kpr_tc_ext', pkt(TCP_SYN)).parsed!;
    assert.equal(again.dst, '198.18.20.10');
    assert.equal(
      again.sport,
      firstSnatPort(CLIENT, 46000),
      'the closed flow made room: the new connection leaves with the same SNAT port (the first candidate)',
    );
    assert.equal(stat(STAT.TC_DNAT) - dnat0, 2n, 'the new connection got a fresh translation');
    const arp = Buffer.from(pkt(TCP_SYN));
    arp.writeUInt16BE(0x0806, 12);
    assert.equal(testRun(obj.program('kpr_tc_ext'), arp).retval, TC_ACT_UNSPEC);
    assert.equal(stat(STAT.TC_PASS_MALFORMED), malformed0, 'non-IP traffic is simply not ours');
  });

  test('a client port reused after the closed flow expired: the new connection is answered through the reverse translation', () => {
    frontend(NODE_V4, 30082, IPPROTO.TCP, 9, SVC_FLAG.NODE_PORT, [[3, '198.18.20.10', 8080]]);
    const fromClient = (flags: number) =>
      run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 43700, dport: 30082, proto: 'TCP', tcpFlags: flags }));
    const snat = firstSnatPort(CLIENT, 43700);
    const fromPod = (flags: number) =>
      run('kpr_tc_pod', buildPacket({ src: '198.18.20.10', dst: NODE_V4, sport: 8080, dport: snat, proto: 'TCP', tcpFlags: flags }));
    const connect = () => {
      const syn = fromClient(TCP_SYN).parsed!;
      assert.deepEqual([syn.src, syn.sport, syn.dst, syn.dport], [NODE_V4, snat, '198.18.20.10', 8080]);
      const synAck = fromPod(TCP_SYN | TCP_ACK).parsed!;
      assert.deepEqual([synAck.src, synAck.sport, synAck.dst, synAck.dport], [NODE_V4, 30082, CLIENT, 43700], 'the SYN-ACK reaches the client as the NodePort');
    };
    connect();
    // The pod closes first (an HTTP/1.0 server), then the client.
    fromPod(TCP_FIN | TCP_ACK);
    fromClient(TCP_FIN | TCP_ACK);
    fromPod(TCP_ACK);
    // Both entries expire (the closing timeout passed) but nothing swept them yet.
    const { count, keys, values } = ct.lookupBatch();
    assert.equal(count, 2);
    for (let i = 0; i < count; i++) {
      const v = Buffer.from(values.subarray(i * CT_VAL.size, (i + 1) * CT_VAL.size));
      v.writeBigUInt64LE(1n, CT_VAL_EXPIRES_OFFSET);
      ct.update(keys.subarray(i * CT_KEY.size, (i + 1) * CT_KEY.size), v);
    }
    connect();
  });

  test("a SYN reusing a closed flow's client port leaves the reply entry alone once that reply tuple went to another client's flow", () => {
    frontend(NODE_V4, 30083, IPPROTO.TCP, 10, SVC_FLAG.NODE_PORT, [[4, '198.18.20.10', 8080]]);
    const OTHER = '198.18.100.3';
    const syn = (src: string, sport: number) =>
      run('kpr_tc_ext', buildPacket({ src, dst: NODE_V4, sport, dport: 30083, proto: 'TCP', tcpFlags: TCP_SYN })).parsed!;
    // A flow of CLIENT, SNATed to the node's port `snat`, closed: its ORIGINAL entry remains, its REPLY entry is gone (swept).
    const ctKey = codecOf(CT_KEY);
    const ctVal = codecOf(CT_VAL);
    const otherPort = 43800;
    const snat = firstSnatPort(OTHER, otherPort);
    ct.update(
      ctKey.encode({ saddr: CLIENT, daddr: NODE_V4, sport: 41000, dport: 30083, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL }),
      ctVal.encode({
        natSaddr: NODE_V4,
        natDaddr: '198.18.20.10',
        natSport: snat,
        natDport: 8080,
        backendId: 4,
        expiresNs: 1n,
        frontendId: 10,
        flags: CT_FLAG.SNAT | CT_FLAG.CLOSING,
      }),
    );
    // Another client's connection takes the free reply tuple: its first candidate is that port.
    assert.equal(syn(OTHER, otherPort).sport, snat);
    // CLIENT reuses its port 41000: a new flow, which must not delete the other client's reply entry.
    syn(CLIENT, 41000);
    const synAck = run(
      'kpr_tc_pod',
      buildPacket({ src: '198.18.20.10', dst: NODE_V4, sport: 8080, dport: snat, proto: 'TCP', tcpFlags: TCP_SYN | TCP_ACK }),
    ).parsed!;
    assert.deepEqual([synAck.dst, synAck.dport], [OTHER, otherPort], "the other client's connection is still answered");
  });

  test('ClientIP affinity on the tc path: one client keeps its backend across connections; a backend that leaves breaks it', () => {
    const backends: Array<[number, string, number]> = [
      [21, '198.18.20.21', 8080],
      [22, '198.18.20.22', 8080],
      [23, '198.18.20.23', 8080],
    ];
    frontend(NODE_V4, 30090, IPPROTO.TCP, 30, SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY, backends);
    // The master's backend_id holds the timeout (seconds); every (backend, frontend) pair is valid.
    svc.update(
      encodeSvcKey({ addr: NODE_V4, port: 30090, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
      encodeSvcVal({ backendId: 60, count: 3, frontendId: 30, flags: SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY }),
    );
    const match = obj.map('kpr_aff_match');
    for (const [id] of backends) match.update(encodeAffinityMatchKey({ backendId: id, frontendId: 30 }), Buffer.from([1]));
    const dst = (sport: number, src = CLIENT) => run('kpr_tc_ext', buildPacket({ src, dst: NODE_V4, sport, dport: 30090, proto: 'TCP' })).parsed!.dst;
    const first = dst(47000);
    for (let i = 1; i < 20; i++) assert.equal(dst(47000 + i), first, `connection ${i} of the same client`);
    const others = new Set<string>();
    for (let i = 0; i < 30; i++) others.add(dst(47100, `198.18.100.${10 + i}`));
    assert.ok(others.size > 1, 'other clients are still balanced');
    // The sticky backend leaves the service: its pair goes, so the affinity entry no longer counts.
    const leaving = backends.find(([, a]) => a === first)![0];
    match.delete(encodeAffinityMatchKey({ backendId: leaving, frontendId: 30 }));
    const remaining = backends.filter(([id]) => id !== leaving);
    remaining.forEach(([id], i) =>
      svc.update(
        encodeSvcKey({ addr: NODE_V4, port: 30090, slot: i + 1, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
        encodeSvcVal({ backendId: id, count: 0, frontendId: 0, flags: 0 }),
      ),
    );
    svc.update(
      encodeSvcKey({ addr: NODE_V4, port: 30090, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
      encodeSvcVal({ backendId: 60, count: 2, frontendId: 30, flags: SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY }),
    );
    const next = dst(47500);
    assert.notEqual(next, first);
    for (let i = 1; i < 10; i++) assert.equal(dst(47500 + i), next, 'and sticks to its new backend');
  });

  test("ClientIP affinity on the tc path: each new flow restarts the entry's clock, packets of a tracked flow do not (kube-proxy's nat-table recent --set)", () => {
    const backends: Array<[number, string, number]> = [
      [31, '198.18.20.31', 8080],
      [32, '198.18.20.32', 8080],
    ];
    frontend(NODE_V4, 30091, IPPROTO.TCP, 31, SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY, backends);
    svc.update(
      encodeSvcKey({ addr: NODE_V4, port: 30091, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
      encodeSvcVal({ backendId: 60, count: 2, frontendId: 31, flags: SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY }),
    );
    const match = obj.map('kpr_aff_match');
    for (const [id] of backends) match.update(encodeAffinityMatchKey({ backendId: id, frontendId: 31 }), Buffer.from([1]));
    const affinity = obj.map('kpr_affinity');
    const entry = () => {
      const keys = [...affinity.keys()];
      assert.equal(keys.length, 1, 'one entry: one client, one frontend');
      assert.deepEqual(decodeAffinityKey(keys[0]), { netnsCookie: 0n, client: CLIENT, frontendId: 31 });
      return decodeAffinityVal(affinity.lookup(keys[0])!);
    };
    const send = (sport: number, tcpFlags: number) =>
      run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport, dport: 30091, proto: 'TCP', tcpFlags }));

    send(48000, TCP_SYN);
    const created = entry();
    assert.ok(backends.some(([id]) => id === created.backendId));
    send(48000, TCP_ACK); // the same flow, already tracked
    assert.deepEqual(entry(), created, "a tracked flow's packets leave the entry alone");
    send(48001, TCP_SYN); // a new connection of the same client
    const used = entry();
    assert.equal(used.backendId, created.backendId, 'the new connection keeps the backend');
    assert.ok(used.lastUsedNs > created.lastUsedNs, 'and restarts the timeout');
  });

  test('a mid-flow TCP packet whose conntrack entry is gone (evicted, expired) is counted as a lost flow; a SYN or a tracked packet is not', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const stat = (i: number) => sumPerCpuU64(obj.map('kpr_stats').lookup(encodeBackendId(i))!);
    const lost0 = stat(STAT.TC_CT_LOST);
    run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45000, dport: 30080, proto: 'TCP', tcpFlags: TCP_SYN }));
    run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45000, dport: 30080, proto: 'TCP', tcpFlags: TCP_ACK }));
    assert.equal(stat(STAT.TC_CT_LOST), lost0, 'a new flow and its tracked packets');
    for (const k of [...ct.keys()]) ct.delete(k); // as an LRU eviction would
    const r = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45000, dport: 30080, proto: 'TCP', tcpFlags: TCP_ACK }));
    assert.equal(stat(STAT.TC_CT_LOST) - lost0, 1n);
    assert.equal(r.parsed!.dst, '198.18.20.10', 'balanced afresh (the only backend)');
    run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45001, dport: 22, proto: 'TCP', tcpFlags: TCP_ACK }));
    assert.equal(stat(STAT.TC_CT_LOST) - lost0, 1n, 'not a frontend: not counted');
  });

  describe('a flow whose REPLY entry is gone while its ORIGINAL entry lives (LRU eviction of one direction)', () => {
    const BACKEND = '198.18.20.10';
    const OTHER = '198.18.100.3';
    const stat = (i: number) => sumPerCpuU64(obj.map('kpr_stats').lookup(encodeBackendId(i))!);
    const ctKey = codecOf(CT_KEY);
    const fromClient = (src: string, sport: number, dport: number, flags: number) =>
      run('kpr_tc_ext', buildPacket({ src, dst: NODE_V4, sport, dport, proto: 'TCP', tcpFlags: flags })).parsed!;
    const fromBackend = (dport: number, flags: number) =>
      run('kpr_tc_pod', buildPacket({ src: BACKEND, dst: NODE_V4, sport: 8080, dport, proto: 'TCP', tcpFlags: flags })).parsed!;
    const replyKey = (snatPort: number) =>
      ctKey.encode({ saddr: BACKEND, daddr: NODE_V4, sport: 8080, dport: snatPort, proto: IPPROTO.TCP, dir: CT_DIR.REPLY });
    const entry = (key: Buffer) => {
      const v = ct.lookup(key);
      return v ? decodeCtVal(v) : undefined;
    };
    const original = (src: string, sport: number, dport: number) =>
      entry(ctKey.encode({ saddr: src, daddr: NODE_V4, sport, dport, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL }))!;

    test("the client's next packet puts back the entry new_flow wrote, counted once, and the backend's answer is reverse-NATed again", () => {
      frontend(NODE_V4, 30084, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, [[5, BACKEND, 8080]]);
      const restored0 = stat(STAT.TC_CT_REPLY_RESTORED);
      const snat = firstSnatPort(CLIENT, 43900);
      assert.equal(fromClient(CLIENT, 43900, 30084, TCP_SYN).sport, snat, 'the first candidate is the SNAT port');
      const written = entry(replyKey(snat))!;
      assert.deepEqual([written.natSaddr, written.natSport, written.natDaddr, written.natDport], [NODE_V4, 30084, CLIENT, 43900]);
      fromBackend(snat, TCP_SYN | TCP_ACK);
      fromClient(CLIENT, 43900, 30084, TCP_ACK);
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED), restored0, 'nothing to restore while both entries live');
      ct.delete(replyKey(snat));

      const data = fromClient(CLIENT, 43900, 30084, TCP_ACK);
      assert.deepEqual([data.src, data.sport, data.dst, data.dport], [NODE_V4, snat, BACKEND, 8080], 'the packet still follows its flow');
      const restored = entry(replyKey(snat));
      assert.ok(restored, 'the REPLY entry is back');
      assert.deepEqual({ ...restored, expiresNs: 0n }, { ...written, expiresNs: 0n }, 'as new_flow wrote it');
      assert.equal(restored.expiresNs, original(CLIENT, 43900, 30084).expiresNs, 'with the deadline the flow just got');
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED) - restored0, 1n);
      fromClient(CLIENT, 43900, 30084, TCP_ACK);
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED) - restored0, 1n, 'restored once, not per packet');

      const answer = fromBackend(snat, TCP_ACK);
      assert.deepEqual([answer.src, answer.sport, answer.dst, answer.dport], [NODE_V4, 30084, CLIENT, 43900], 'the client sees the address it called');
      assert.ok(answer.ipChecksumOk && answer.l4ChecksumOk);
    });

    test("a REPLY tuple another client's live flow took meanwhile stays that flow's; the first flow gets it back once it is free", () => {
      frontend(NODE_V4, 30085, IPPROTO.TCP, 13, SVC_FLAG.NODE_PORT, [[6, BACKEND, 8080]]);
      const restored0 = stat(STAT.TC_CT_REPLY_RESTORED);
      const snat = firstSnatPort(CLIENT, 44000);
      const otherPort = clientPortHashingTo(OTHER, snat);
      fromClient(CLIENT, 44000, 30085, TCP_SYN);
      ct.delete(replyKey(snat));
      // With CLIENT's entry gone the tuple looks free: OTHER's new flow leaves on the same SNAT port.
      assert.equal(fromClient(OTHER, otherPort, 30085, TCP_SYN).sport, snat);
      const others = entry(replyKey(snat))!;
      assert.deepEqual([others.natDaddr, others.natDport], [OTHER, otherPort]);

      fromClient(CLIENT, 44000, 30085, TCP_SYN); // CLIENT retransmits its SYN
      assert.deepEqual(entry(replyKey(snat)), others, "the other client's live entry is not overwritten");
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED), restored0);
      const synAck = fromBackend(snat, TCP_SYN | TCP_ACK);
      assert.deepEqual([synAck.dst, synAck.dport], [OTHER, otherPort], "the other client's connection is still answered");

      // OTHER's flow ends and its REPLY entry expires: the tuple is free, CLIENT's next packet takes it back.
      const v = Buffer.from(ct.lookup(replyKey(snat))!);
      v.writeBigUInt64LE(1n, CT_VAL_EXPIRES_OFFSET);
      ct.update(replyKey(snat), v);
      fromClient(CLIENT, 44000, 30085, TCP_SYN);
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED) - restored0, 1n);
      const back = fromBackend(snat, TCP_SYN | TCP_ACK);
      assert.deepEqual([back.src, back.sport, back.dst, back.dport], [NODE_V4, 30085, CLIENT, 44000]);
    });

    test('a new connection whose REPLY entry was lost right after the SYN: the retransmitted SYN restores it and the SYN-ACK reaches the client', () => {
      frontend(NODE_V4, 30086, IPPROTO.TCP, 14, SVC_FLAG.NODE_PORT, [[7, BACKEND, 8080]]);
      const restored0 = stat(STAT.TC_CT_REPLY_RESTORED);
      const dnat0 = stat(STAT.TC_DNAT);
      const snat = firstSnatPort(CLIENT, 44100);
      fromClient(CLIENT, 44100, 30086, TCP_SYN);
      ct.delete(replyKey(snat));
      const lost = fromBackend(snat, TCP_SYN | TCP_ACK);
      assert.deepEqual([lost.src, lost.dst, lost.dport], [BACKEND, NODE_V4, snat], "without its entry the SYN-ACK goes up the node's stack untranslated");

      const retransmitted = fromClient(CLIENT, 44100, 30086, TCP_SYN);
      assert.deepEqual([retransmitted.src, retransmitted.sport, retransmitted.dst, retransmitted.dport], [NODE_V4, snat, BACKEND, 8080]);
      assert.equal(stat(STAT.TC_DNAT) - dnat0, 1n, 'the same flow, not a new translation');
      assert.equal(stat(STAT.TC_CT_REPLY_RESTORED) - restored0, 1n);
      const synAck = fromBackend(snat, TCP_SYN | TCP_ACK);
      assert.deepEqual([synAck.src, synAck.sport, synAck.dst, synAck.dport], [NODE_V4, 30086, CLIENT, 44100]);
      assert.ok(synAck.ipChecksumOk && synAck.l4ChecksumOk);
    });
  });

  describe("a SNAT port that meets a TIME_WAIT connection on the backend (the client resets the old connection's ACK and retries)", () => {
    const BACKENDS = ['198.18.20.10', '198.18.20.11', '198.18.20.12'];
    const OTHER = '198.18.100.3';
    const stat = (i: number) => sumPerCpuU64(obj.map('kpr_stats').lookup(encodeBackendId(i))!);
    const ctKey = codecOf(CT_KEY);
    const ctVal = codecOf(CT_VAL);
    const fromClient = (flags: number) =>
      run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 47000, dport: 30090, proto: 'TCP', tcpFlags: flags })).parsed!;
    const fromBackend = (backend: string, snatPort: number, flags: number) =>
      run('kpr_tc_pod', buildPacket({ src: backend, dst: NODE_V4, sport: 8080, dport: snatPort, proto: 'TCP', tcpFlags: flags })).parsed!;
    const replyKey = (backend: string, snatPort: number) =>
      ctKey.encode({ saddr: backend, daddr: NODE_V4, sport: 8080, dport: snatPort, proto: IPPROTO.TCP, dir: CT_DIR.REPLY });
    const flowEntry = (dir: number, backend?: string, snatPort?: number) => {
      const key =
        dir === CT_DIR.ORIGINAL
          ? ctKey.encode({ saddr: CLIENT, daddr: NODE_V4, sport: 47000, dport: 30090, proto: IPPROTO.TCP, dir })
          : replyKey(backend!, snatPort!);
      const v = ct.lookup(key);
      return v ? decodeCtVal(v) : undefined;
    };

    test('a SYN its client reset before any answer retries the connect on the same backend and SNAT port; once answered, a reset flow is balanced afresh', () => {
      frontend(
        NODE_V4,
        30090,
        IPPROTO.TCP,
        15,
        SVC_FLAG.NODE_PORT,
        BACKENDS.map((b, i): [number, string, number] => [20 + i, b, 8080]),
      );
      // The client's first candidate is another client's live flow towards every backend: the flow's port is a random one,
      // which a retry balanced afresh would not get again.
      const hashed = firstSnatPort(CLIENT, 47000);
      for (const b of BACKENDS)
        ct.update(
          replyKey(b, hashed),
          ctVal.encode({
            natSaddr: NODE_V4,
            natDaddr: OTHER,
            natSport: 30090,
            natDport: 40000,
            backendId: 0,
            expiresNs: 1n << 62n,
            frontendId: 15,
            flags: CT_FLAG.SNAT,
          }),
        );
      const dnat0 = stat(STAT.TC_DNAT);
      const kept0 = stat(STAT.TC_SYN_RETRY_KEPT);

      const first = fromClient(TCP_SYN);
      const backend = first.dst;
      const snat = first.sport;
      assert.ok(BACKENDS.includes(backend));
      assert.notEqual(snat, hashed);
      // The backend's TIME_WAIT connection on (backend, node:snat) answers with its old ACK: the client sees it from the NodePort.
      const oldAck = fromBackend(backend, snat, TCP_ACK);
      assert.deepEqual([oldAck.src, oldAck.sport, oldAck.dst, oldAck.dport], [NODE_V4, 30090, CLIENT, 47000]);
      const reset = fromClient(TCP_RST);
      assert.deepEqual([reset.src, reset.sport, reset.dst, reset.dport], [NODE_V4, snat, backend, 8080], 'the reset reaches the TIME_WAIT connection');
      assert.ok(flowEntry(CT_DIR.ORIGINAL)!.flags & CT_FLAG.CLOSING);

      for (let retry = 1; retry <= 2; retry++) {
        const again = fromClient(TCP_SYN);
        assert.deepEqual([again.src, again.sport, again.dst, again.dport], [NODE_V4, snat, backend, 8080], `retry ${retry}: the same backend and SNAT port`);
        assert.equal(flowEntry(CT_DIR.ORIGINAL)!.flags & CT_FLAG.CLOSING, 0, 'the flow is open again');
        assert.equal(stat(STAT.TC_SYN_RETRY_KEPT) - kept0, BigInt(retry));
        if (retry === 1) fromClient(TCP_RST); // reset once more: still unanswered
      }
      assert.equal(stat(STAT.TC_DNAT) - dnat0, 1n, 'one translation: the retries are the same connect');

      const synAck = fromBackend(backend, snat, TCP_SYN | TCP_ACK);
      assert.deepEqual([synAck.src, synAck.sport, synAck.dst, synAck.dport], [NODE_V4, 30090, CLIENT, 47000]);
      assert.ok(synAck.ipChecksumOk && synAck.l4ChecksumOk);
      assert.ok(flowEntry(CT_DIR.REPLY, backend, snat)!.flags & CT_FLAG.ANSWERED, 'the SYN-ACK is recorded on the REPLY entry');

      // The connection was answered; its client resets it and reuses the port: a new connection, balanced afresh.
      fromClient(TCP_RST);
      const fresh = fromClient(TCP_SYN);
      assert.equal(stat(STAT.TC_DNAT) - dnat0, 2n, 'a fresh translation');
      assert.equal(stat(STAT.TC_SYN_RETRY_KEPT) - kept0, 2n);
      if (fresh.dst !== backend || fresh.sport !== snat)
        assert.equal(flowEntry(CT_DIR.REPLY, backend, snat), undefined, "the closed flow's REPLY entry is gone");
    });
  });

  test('two clients with the same source port get distinct SNAT ports towards one backend', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const a = run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45000, dport: 30080, proto: 'TCP' })).parsed!;
    const b = run('kpr_tc_ext', buildPacket({ src: '198.18.100.3', dst: NODE_V4, sport: 45000, dport: 30080, proto: 'TCP' })).parsed!;
    assert.equal(a.src, NODE_V4);
    assert.equal(b.src, NODE_V4);
    assert.notEqual(a.sport, b.sport);
    assert.ok(a.l4ChecksumOk && b.l4ChecksumOk);
  });

  describe('SNAT ports (kpr_snat.h; docs/semantics.md, rule 37)', () => {
    const BACKEND = '198.18.20.10';
    const stat = (i: number) => sumPerCpuU64(obj.map('kpr_stats').lookup(encodeBackendId(i))!);
    const inRange = (port: number) => port >= SNAT_PORT_RANGE.min && port <= SNAT_PORT_RANGE.max;
    const ctKey = codecOf(CT_KEY);
    const ctVal = codecOf(CT_VAL);

    /** A socket of the node (the test's namespace) holding `port`: a TCP listener or a bound UDP socket. */
    async function nodeSocket(proto: 'tcp' | 'udp', port: number) {
      const js =
        proto === 'tcp'
          ? `require('node:net').createServer().listen(${port}, () => console.log('ready'))`
          : `require('node:dgram').createSocket('udp4').bind(${port}, () => console.log('ready'))`;
      const child = sandbox.spawnIn(nodeNs, process.execPath, ['-e', js], { stdio: ['ignore', 'pipe', 'inherit'] });
      await once(child.stdout!, 'data');
      return {
        close: async () => {
          child.kill('SIGKILL');
          await once(child, 'exit');
        },
      };
    }

    for (const proto of ['tcp', 'udp'] as const) {
      test(`${proto.toUpperCase()}: the first candidate is the client's hash, in kpr's range; a port a node socket holds is skipped and counted`, async () => {
        const ipProto = proto === 'tcp' ? IPPROTO.TCP : IPPROTO.UDP;
        frontend(NODE_V4, 30070, ipProto, 40, SVC_FLAG.NODE_PORT, [[40, BACKEND, 8080]]);
        const send = () =>
          run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport: 45500, dport: 30070, proto: proto === 'tcp' ? 'TCP' : 'UDP', tcpFlags: TCP_SYN }))
            .parsed!;
        const first = firstSnatPort(CLIENT, 45500);
        assert.ok(inRange(first), `first candidate ${first}`);
        const free = send();
        assert.deepEqual(
          [free.src, free.sport, free.dst, free.dport],
          [NODE_V4, first, BACKEND, 8080],
          'nothing holds the first candidate: the flow leaves with it',
        );

        for (const k of [...ct.keys()]) ct.delete(k);
        const sock = await nodeSocket(proto, first);
        try {
          const skipped0 = stat(STAT.TC_SNAT_SKIP_NODE_SOCKET);
          const held = send();
          assert.equal(held.src, NODE_V4);
          assert.notEqual(held.sport, first, "the port the node's socket holds is skipped");
          assert.ok(inRange(held.sport), `the next candidate ${held.sport} is in kpr's range too`);
          assert.ok(held.l4ChecksumOk);
          assert.equal(stat(STAT.TC_SNAT_SKIP_NODE_SOCKET) - skipped0, 1n, 'one collision avoided, counted');
        } finally {
          await sock.close();
        }
      });
    }

    test('a port another kpr flow holds towards the backend is skipped and counted; with every port of the range taken the flow keeps its client port, counted as exhausted, and is dropped when that is taken too', () => {
      frontend(NODE_V4, 30071, IPPROTO.TCP, 41, SVC_FLAG.NODE_PORT, [[41, BACKEND, 8080]]);
      const send = (sport: number) => run('kpr_tc_ext', buildPacket({ src: CLIENT, dst: NODE_V4, sport, dport: 30071, proto: 'TCP', tcpFlags: TCP_SYN }));
      const replyKey = (port: number) => ctKey.encode({ saddr: BACKEND, daddr: NODE_V4, sport: 8080, dport: port, proto: IPPROTO.TCP, dir: CT_DIR.REPLY });
      const otherFlow = (port: number) =>
        ctVal.encode({
          natSaddr: NODE_V4,
          natSport: 30071,
          natDaddr: '198.18.100.9',
          natDport: port,
          backendId: 0,
          expiresNs: 1n << 62n,
          frontendId: 41,
          flags: CT_FLAG.SNAT,
        });
      const first = firstSnatPort(CLIENT, 45600);
      ct.update(replyKey(first), otherFlow(first));
      const skipped0 = stat(STAT.TC_SNAT_SKIP_CONNTRACK);
      const p = send(45600).parsed!;
      assert.notEqual(p.sport, first);
      assert.ok(inRange(p.sport));
      assert.equal(stat(STAT.TC_SNAT_SKIP_CONNTRACK) - skipped0, 1n);

      for (const k of [...ct.keys()]) ct.delete(k);
      for (let port = SNAT_PORT_RANGE.min; port <= SNAT_PORT_RANGE.max; port++) ct.update(replyKey(port), otherFlow(port));
      const [exhausted0, dropped0, skippedAll0] = [stat(STAT.TC_SNAT_EXHAUSTED), stat(STAT.TC_DROP_NO_SNAT_PORT), stat(STAT.TC_SNAT_SKIP_CONNTRACK)];
      const overflow = send(45601).parsed!;
      assert.deepEqual([overflow.src, overflow.sport], [NODE_V4, 45601], "the range full: the client's own port");
      assert.equal(stat(STAT.TC_SNAT_EXHAUSTED) - exhausted0, 1n);
      assert.equal(stat(STAT.TC_DROP_NO_SNAT_PORT) - dropped0, 0n);
      assert.ok(stat(STAT.TC_SNAT_SKIP_CONNTRACK) - skippedAll0 >= 2n, 'every candidate tried was skipped');
      const full = SNAT_PORT_RANGE.max - SNAT_PORT_RANGE.min + 1;
      assert.equal([...ct.keys()].length, full + 2, "the overflowing flow's two entries");

      ct.update(replyKey(45602), otherFlow(45602));
      assert.equal(send(45602).verdict, TC_ACT_SHOT, "the client's port taken too: dropped, never sent with a port that may collide");
      assert.equal(stat(STAT.TC_SNAT_EXHAUSTED) - exhausted0, 2n);
      assert.equal(stat(STAT.TC_DROP_NO_SNAT_PORT) - dropped0, 1n);
      assert.equal([...ct.keys()].length, full + 3, 'and no conntrack entry written for it');
    });
  });
});
