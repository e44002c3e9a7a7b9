/**
 * native/sock-diag.ts on the real kernel: connected UDP sockets opened in a
 * test namespace are listed with their cookie, only in their own namespace
 * and only for the peer port asked for; destroying one aborts it (its owner's
 * next receive fails with ECONNABORTED) and leaves the others alone.
 *
 * The sockets are plain libc sockets made here (koffi), so the test knows
 * their cookies from SO_COOKIE independently of sock_diag.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { constants } from 'node:os';
import { SockDiag, withNetns, withSockDiag, type UdpSocketEntry } from '../../native/index.js';
import { libcSockets } from '../support/libc-udp.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { requireRoot } from '../support/preflight.js';

const E = constants.errno;
const PEER4 = '198.18.99.2';
const PEER6 = '2001:db8:99::2';

test('sock_diag: dump finds connected UDP sockets with their cookies, destroy aborts exactly the one named', async () => {
  requireRoot();
  const sb = new Sandbox();
  const sockets = libcSockets();
  const fds: number[] = [];
  try {
    const a = sb.addNamespace('diag-a');
    const b = sb.addNamespace('diag-b');
    inNs(a, 'ip', 'addr', 'add', '198.18.99.1/24', 'dev', 'lo');
    inNs(a, 'ip', 'addr', 'add', '2001:db8:99::1/64', 'dev', 'lo', 'nodad');
    inNs(a, 'ip', 'addr', 'add', `${PEER4}/24`, 'dev', 'lo');
    inNs(a, 'ip', 'addr', 'add', `${PEER6}/64`, 'dev', 'lo', 'nodad');
    const open = (fn: () => number) => {
      const fd = withNetns(nsPath(a), fn);
      fds.push(fd);
      return fd;
    };
    // Peers that receive, so no ICMP error lands on the survivors.
    for (const [addr, port] of [
      [PEER4, 5353],
      [PEER4, 5354],
      [PEER6, 5353],
    ] as const)
      open(() => sockets.bind(addr, port));
    // Two sockets to the same peer port (only one will be destroyed), one to another port,
    // an IPv6 one and an IPv4-mapped IPv6 one.
    const victim = open(() => sockets.connect4(PEER4, 5353));
    const sibling = open(() => sockets.connect4(PEER4, 5353));
    const otherPort = open(() => sockets.connect4(PEER4, 5354));
    const v6 = open(() => sockets.connect6(PEER6, 5353));
    const mapped = open(() => sockets.connect6(`::ffff:${PEER4}`, 5353));
    const cookie = (fd: number) => sockets.cookie(fd);

    const dump4 = withSockDiag(nsPath(a), (d) => d.dumpUdp({ family: 4, dport: 5353 }));
    assert.deepEqual(
      dump4.map((s) => s.cookie).sort(),
      [cookie(victim), cookie(sibling)].sort(),
      'the IPv4 dump filtered on peer port 5353 lists exactly the two sockets connected there',
    );
    const entry = dump4.find((s) => s.cookie === cookie(victim))!;
    assert.equal(entry.dst, PEER4);
    assert.equal(entry.dport, 5353);
    assert.equal(entry.src, '198.18.99.1', 'the local address the connect picked');
    assert.equal(entry.sport, sockets.localPort(victim));

    const dump6 = withSockDiag(nsPath(a), (d) => d.dumpUdp({ family: 6, dport: 5353 }));
    const byCookie = new Map(dump6.map((s) => [s.cookie, s] as [bigint, UdpSocketEntry]));
    assert.equal(byCookie.size, 2, `IPv6 dump: ${JSON.stringify(dump6, bigintJson)}`);
    assert.equal(byCookie.get(cookie(v6))?.dst, PEER6);
    assert.equal(byCookie.get(cookie(mapped))?.dst, `::ffff:c612:6302`, 'an IPv4-mapped peer, as the URL parser writes it');

    const all4 = withSockDiag(nsPath(a), (d) => d.dumpUdp({ family: 4 }));
    assert.ok(
      all4.some((s) => s.cookie === cookie(otherPort)),
      'without a port filter the socket to 5354 is listed too',
    );
    assert.deepEqual(
      withSockDiag(nsPath(b), (d) => d.dumpUdp({ family: 4 })),
      [],
      'another namespace sees none of them',
    );

    assert.equal(
      withSockDiag(nsPath(a), (d) => d.canDestroy()),
      true,
      'this kernel has CONFIG_INET_DIAG_DESTROY',
    );
    assert.equal(
      withSockDiag(nsPath(b), (d) => d.destroyUdp(entry)),
      false,
      'from another namespace the socket cannot be found',
    );
    assert.equal(sockets.send(victim), 0, 'the victim still sends before the destroy');

    assert.equal(
      withSockDiag(nsPath(a), (d) => d.destroyUdp(entry)),
      true,
    );
    assert.equal(sockets.recvErrno(victim), E.ECONNABORTED, 'the owner of the destroyed socket sees ECONNABORTED');
    assert.equal(
      withSockDiag(nsPath(a), (d) => d.destroyUdp(entry)),
      false,
      'a second destroy finds nothing',
    );

    const after = withSockDiag(nsPath(a), (d) => [...d.dumpUdp({ family: 4 }), ...d.dumpUdp({ family: 6 })]).map((s) => s.cookie);
    assert.ok(!after.includes(cookie(victim)), 'the destroyed socket is no longer connected');
    for (const fd of [sibling, otherPort, v6, mapped]) {
      assert.ok(after.includes(cookie(fd)), `socket ${fd} is still connected`);
      assert.equal(sockets.send(fd), 0, `socket ${fd} still sends`);
      assert.equal(sockets.recvErrno(fd), E.EAGAIN, `socket ${fd} has no pending error`);
    }

    // A stale id (right addresses and ports, wrong cookie) destroys nothing.
    const sib = dump4.find((s) => s.cookie === cookie(sibling))!;
    const stale = Buffer.from(sib.sockid);
    stale.writeUInt32LE((stale.readUInt32LE(40) + 1) >>> 0, 40);
    assert.equal(
      withSockDiag(nsPath(a), (d) => d.destroyUdp({ family: 4, sockid: stale })),
      false,
    );
    assert.equal(sockets.recvErrno(sibling), E.EAGAIN, 'the sibling survives a destroy naming a different cookie');
  } finally {
    for (const fd of fds) sockets.close(fd);
    await sb.teardown();
  }
});

test('sock_diag: a closed handle refuses requests with a clear error instead of using a stale fd', () => {
  requireRoot();
  const sb = new Sandbox();
  try {
    const ns = sb.addNamespace('diag-c');
    const d = withNetns(nsPath(ns), () => SockDiag.open());
    d.close();
    assert.equal(d.closed, true);
    assert.throws(() => d.dumpUdp({ family: 4 }), /sock_diag dump udp: EBADF .*closed/);
  } finally {
    sb.teardownSync();
  }
});

function bigintJson(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? v.toString() : v;
}
