/**
 * kpr monitor's events from the tc programs on crafted packets
 * (BPF_PROG_TEST_RUN), read back through the real ring buffer
 * (native/ring-buffer.ts): nothing while the switch is off or its deadline
 * has passed; while it is on, one event per decision with the fields of that
 * decision and none for packets of known flows; a full ring loses events and
 * counts them (KPR_STAT_MONITOR_LOST). The socket programs' events are
 * checked end to end (test/e2e/monitor.test.ts): BPF_PROG_TEST_RUN cannot
 * run cgroup socket programs.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RingBuffer, sumPerCpuU64, testRun, type BpfMap, type BpfObject } from '../../native/index.js';
import {
  EVENT,
  EVENT_FLAG,
  EVENT_HOOK,
  EVENT_TYPE,
  IPPROTO,
  SCOPE,
  STAT,
  SVC_FLAG,
  decodeEvent,
  encodeAffinityMatchKey,
  encodeBackendId,
  encodeConfig,
  encodeSrcRangeKey,
  encodeSvcKey,
  encodeSvcVal,
  type KprEvent,
} from '../../agent/maps/layout.js';
import { RINGS } from '../../agent/maps/registry.js';
import { MonitorSwitch } from '../../agent/cli/monitor-switch.js';
import { TCP_ACK, TCP_SYN, buildPacket } from '../support/packets.js';
import { loadTcObject, writeFrontend, type TcObject } from '../support/tc-object.js';
import { requireRoot } from '../support/preflight.js';

const TC_ACT_SHOT = 2;
const NODE_V4 = '198.18.1.1';
const NODE_V6 = '2001:db8:1::1';
const CLIENT = '198.18.100.2';
const AF_INET = 2;
const AF_INET6 = 10;

describe('kpr monitor events of the tc programs (BPF_PROG_TEST_RUN)', () => {
  let tc: TcObject;
  let obj: BpfObject;
  let svc: BpfMap, backend: BpfMap, stats: BpfMap;
  let sw: MonitorSwitch;
  let ring: RingBuffer;
  const seen: KprEvent[] = [];

  function frontend(
    addr: string,
    port: number,
    proto: number,
    frontendId: number,
    flags: number,
    backends: Array<[number, string, number]>,
    scope: number = SCOPE.EXTERNAL,
  ) {
    writeFrontend(tc, { addr, port, proto, frontendId, flags, scope }, backends);
  }

  function config(snatV4: string) {
    obj
      .map('kpr_config')
      .update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie: 0n, snatV4, snatV6: NODE_V6, tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
      );
  }

  const stat = (i: number) => sumPerCpuU64(stats.lookup(encodeBackendId(i))!);

  /** Runs the packets and returns the events they made, in order. */
  function events(program: 'kpr_tc_ext' | 'kpr_tc_pod', ...packets: Buffer[]): KprEvent[] {
    ring.consume();
    seen.length = 0;
    for (const p of packets) testRun(obj.program(program), p);
    ring.consume();
    return [...seen];
  }

  const syn = (src: string, sport: number, dst: string, dport: number, tcpFlags = TCP_SYN) => buildPacket({ src, dst, sport, dport, proto: 'TCP', tcpFlags });

  before(() => {
    requireRoot();
    tc = loadTcObject('kpr-monitor-test');
    ({ obj, svc, backend } = tc);
    stats = obj.map('kpr_stats');
    const events = obj.map(RINGS.events.name);
    assert.equal(events.maxEntries, RINGS.events.maxEntries);
    sw = new MonitorSwitch(obj.map('kpr_monitor'));
    ring = new RingBuffer(events, (raw) => {
      assert.equal(raw.length, EVENT.size, 'one struct kpr_event per record');
      seen.push(decodeEvent(raw));
    });
    config(NODE_V4);
  });

  after(async () => {
    ring?.close();
    tc?.close();
  });

  beforeEach(() => {
    for (const m of [svc, backend, obj.map('kpr_ct'), obj.map('kpr_src_range'), obj.map('kpr_affinity'), obj.map('kpr_aff_match')]) {
      for (const k of [...m.keys()]) m.delete(k);
    }
    config(NODE_V4);
    sw.renew();
  });

  test('off: no event, whatever the decisions; a deadline that has passed is off too', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    frontend(NODE_V4, 30099, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, []);
    sw.release();
    assert.equal(sw.deadline(), 0n);
    assert.deepEqual(events('kpr_tc_ext', syn(CLIENT, 40000, NODE_V4, 30080), syn(CLIENT, 40001, NODE_V4, 30099)), []);
    sw.renew(1n); // a lease of 1 ns: lapsed before the program runs
    assert.ok(sw.deadline() > 0n);
    assert.deepEqual(events('kpr_tc_ext', syn(CLIENT, 40002, NODE_V4, 30080), syn(CLIENT, 40003, NODE_V4, 30099)), []);
    assert.equal(sw.isOn(), false);
  });

  test('a new NodePort flow: one translated event naming client, frontend, backend and ids; its later packets and replies make none', () => {
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const t0 = process.hrtime.bigint();
    const [ev, ...rest] = events('kpr_tc_ext', syn(CLIENT, 40000, NODE_V4, 30080));
    const t1 = process.hrtime.bigint();
    assert.deepEqual(rest, []);
    const { tsNs, ...fields } = ev;
    assert.ok(tsNs >= t0 && tsNs <= t1, 'stamped with bpf_ktime_get_ns, the clock the switch uses');
    assert.deepEqual(fields, {
      cookie: 0n,
      netnsCookie: 0n,
      client: CLIENT,
      clientPort: 40000,
      frontend: NODE_V4,
      frontendPort: 30080,
      backend: '198.18.20.10',
      backendPort: 8080,
      type: EVENT_TYPE.TRANSLATED,
      hook: EVENT_HOOK.TC_EXT,
      frontendId: 7,
      backendId: 1,
      proto: IPPROTO.TCP,
      family: AF_INET,
      scope: SCOPE.EXTERNAL,
      flags: EVENT_FLAG.SNAT,
    });
    assert.deepEqual(events('kpr_tc_ext', syn(CLIENT, 40000, NODE_V4, 30080, TCP_ACK)), [], 'a packet of the tracked flow');
    assert.deepEqual(events('kpr_tc_ext', syn('198.18.20.10', 8080, NODE_V4, 40000, TCP_SYN | TCP_ACK)), [], 'the reply');
  });

  test('from a pod: hook tc-pod, the INTERNAL entry set, no SNAT; IPv6 names its family', () => {
    frontend('198.19.0.10', 80, IPPROTO.TCP, 8, SVC_FLAG.CLUSTER_IP, [[2, '198.18.20.11', 8080]], SCOPE.INTERNAL);
    const [pod] = events('kpr_tc_pod', syn('198.18.10.5', 41000, '198.19.0.10', 80));
    assert.deepEqual(
      [pod.type, pod.hook, pod.scope, pod.flags, pod.backend, pod.frontendId],
      [EVENT_TYPE.TRANSLATED, EVENT_HOOK.TC_POD, SCOPE.INTERNAL, 0, '198.18.20.11', 8],
    );
    frontend(NODE_V6, 30080, IPPROTO.TCP, 10, SVC_FLAG.NODE_PORT, [[4, '2001:db8:20::10', 8080]]);
    const [v6] = events('kpr_tc_ext', syn('2001:db8:100::2', 41000, NODE_V6, 30080));
    assert.deepEqual([v6.family, v6.client, v6.frontend, v6.backend], [AF_INET6, '2001:db8:100::2', NODE_V6, '2001:db8:20::10']);
  });

  test('every drop is one event of its kind: no endpoint, no local endpoint, source range, no SNAT port', () => {
    frontend(NODE_V4, 30099, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, []);
    frontend(NODE_V4, 30098, IPPROTO.TCP, 13, SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY, []);
    frontend('198.19.200.1', 80, IPPROTO.TCP, 11, SVC_FLAG.LOAD_BALANCER | SVC_FLAG.SOURCE_RANGES, [[5, '198.18.20.12', 8080]]);
    obj.map('kpr_src_range').update(encodeSrcRangeKey({ frontendId: 11, cidr: '198.18.100.0/24' }), Buffer.from([1]));
    const drops = events(
      'kpr_tc_ext',
      syn(CLIENT, 43000, NODE_V4, 30099),
      syn(CLIENT, 43001, NODE_V4, 30098),
      syn('198.18.101.2', 43002, '198.19.200.1', 80),
      syn(CLIENT, 43003, '198.19.200.1', 80), // allowed: translated
    );
    assert.deepEqual(
      drops.map((e) => [e.type, e.frontendId, e.clientPort, e.backendId]),
      [
        [EVENT_TYPE.NO_ENDPOINT, 12, 43000, 0],
        [EVENT_TYPE.NO_LOCAL_ENDPOINT, 13, 43001, 0],
        [EVENT_TYPE.SOURCE_RANGE, 11, 43002, 0],
        [EVENT_TYPE.TRANSLATED, 11, 43003, 5],
      ],
    );
    config(''); // no node address to SNAT to
    frontend(NODE_V4, 30080, IPPROTO.TCP, 7, SVC_FLAG.NODE_PORT, [[1, '198.18.20.10', 8080]]);
    const [noPort] = events('kpr_tc_ext', syn(CLIENT, 43004, NODE_V4, 30080));
    assert.deepEqual([noPort.type, noPort.backend, noPort.backendId], [EVENT_TYPE.NO_SNAT_PORT, '198.18.20.10', 1]);
  });

  test('SCTP to a frontend: one sctp-unsupported event per packet, naming client, frontend and protocol, no backend (rule 39 of docs/semantics.md)', () => {
    frontend(NODE_V4, 30132, IPPROTO.SCTP, 21, SVC_FLAG.NODE_PORT, [[6, '198.18.20.10', 9132]]);
    frontend('198.19.0.132', 132, IPPROTO.SCTP, 22, SVC_FLAG.CLUSTER_IP, [[7, '198.18.20.10', 9132]], SCOPE.INTERNAL);
    const init = (src: string, sport: number, dst: string, dport: number) => buildPacket({ src, dst, sport, dport, proto: 'SCTP' });
    const [ext, again] = events('kpr_tc_ext', init(CLIENT, 44000, NODE_V4, 30132), init(CLIENT, 44000, NODE_V4, 30132));
    assert.deepEqual(
      [ext.type, ext.hook, ext.proto, ext.frontendId, ext.frontend, ext.frontendPort, ext.client, ext.clientPort, ext.backendId, ext.backend],
      [EVENT_TYPE.SCTP_UNSUPPORTED, EVENT_HOOK.TC_EXT, IPPROTO.SCTP, 21, NODE_V4, 30132, CLIENT, 44000, 0, '::'],
    );
    assert.equal(again.type, EVENT_TYPE.SCTP_UNSUPPORTED, 'no conntrack entry: the retransmission is dropped and told again');
    const [pod] = events('kpr_tc_pod', init('198.18.10.5', 44001, '198.19.0.132', 132));
    assert.deepEqual([pod.type, pod.hook, pod.scope, pod.frontendId], [EVENT_TYPE.SCTP_UNSUPPORTED, EVENT_HOOK.TC_POD, SCOPE.INTERNAL, 22]);
    assert.deepEqual(events('kpr_tc_ext', init(CLIENT, 44002, NODE_V4, 30133)), [], 'SCTP to no frontend: no event');
  });

  test('affinity and lost conntrack are flags of the decision; a backend missing from the maps is one event', () => {
    const backends: Array<[number, string, number]> = [
      [21, '198.18.20.21', 8080],
      [22, '198.18.20.22', 8080],
    ];
    frontend(NODE_V4, 30090, IPPROTO.TCP, 30, SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY, backends);
    svc.update(
      encodeSvcKey({ addr: NODE_V4, port: 30090, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
      encodeSvcVal({ backendId: 60, count: 2, frontendId: 30, flags: SVC_FLAG.NODE_PORT | SVC_FLAG.AFFINITY }),
    );
    for (const [id] of backends) obj.map('kpr_aff_match').update(encodeAffinityMatchKey({ backendId: id, frontendId: 30 }), Buffer.from([1]));
    const [first, second] = events('kpr_tc_ext', syn(CLIENT, 47000, NODE_V4, 30090), syn(CLIENT, 47001, NODE_V4, 30090));
    assert.equal(first.flags & EVENT_FLAG.AFFINITY, 0, 'the first connection is balanced');
    assert.equal(second.flags & EVENT_FLAG.AFFINITY, EVENT_FLAG.AFFINITY, 'the second reuses the remembered backend');
    assert.equal(second.backendId, first.backendId);

    for (const k of [...obj.map('kpr_ct').keys()]) obj.map('kpr_ct').delete(k); // as an LRU eviction would
    const [lost] = events('kpr_tc_ext', syn(CLIENT, 47000, NODE_V4, 30090, TCP_ACK));
    assert.equal(lost.type, EVENT_TYPE.TRANSLATED);
    assert.equal(lost.flags & EVENT_FLAG.CT_LOST, EVENT_FLAG.CT_LOST);

    frontend(NODE_V4, 30070, IPPROTO.TCP, 31, SVC_FLAG.NODE_PORT, [[40, '198.18.20.40', 8080]]);
    backend.delete(encodeBackendId(40)); // the agent mid-write
    const [missing] = events('kpr_tc_ext', syn(CLIENT, 47100, NODE_V4, 30070));
    assert.deepEqual([missing.type, missing.frontendId, missing.backendId, missing.backend], [EVENT_TYPE.BACKEND_MISSING, 31, 40, '::']);
  });

  test('a full ring: the events it has no room for are counted as lost, the decisions are made all the same', () => {
    frontend(NODE_V4, 30099, IPPROTO.TCP, 12, SVC_FLAG.NODE_PORT, []);
    ring.consume();
    const lost0 = stat(STAT.MONITOR_LOST);
    const drops0 = stat(STAT.TC_DROP_NO_BACKEND);
    // Each record takes 8 + 96 bytes: 3,000 runs overflow the 256 KiB ring when nobody reads.
    const runs = 3000;
    const r = testRun(obj.program('kpr_tc_ext'), syn(CLIENT, 44000, NODE_V4, 30099), { repeat: runs });
    assert.equal(r.retval, TC_ACT_SHOT);
    assert.equal(stat(STAT.TC_DROP_NO_BACKEND) - drops0, BigInt(runs), 'every packet dropped');
    seen.length = 0;
    ring.consume();
    const lost = stat(STAT.MONITOR_LOST) - lost0;
    assert.ok(lost > 0n, 'some were lost');
    assert.ok(seen.length > 0, 'the ring held the first ones');
    assert.equal(BigInt(seen.length) + lost, BigInt(runs), 'each decision either recorded or counted as lost');
    assert.ok(seen.every((e) => e.type === EVENT_TYPE.NO_ENDPOINT));
  });
});
