/**
 * UdpTerminator in both mechanisms on the real kernel, with the same cases:
 * only sockets kpr translated (a kpr_revnat entry for their cookie and peer)
 * and only for the frontend the backend left are destroyed; sockets to the
 * same backend through another Service, sockets kpr never translated and
 * sockets to a backend that stays are left alone. IPv4, IPv6 and
 * IPv4-mapped IPv6 sockets; the kernel counter SOCK_DESTROYED and the
 * agent's callback both see the count.
 *
 * The kpr_revnat entries are written here as the connect hooks would write
 * them, for plain libc sockets whose cookies the test reads with SO_COOKIE.
 * bpf_sock_destroy needs kernel 6.5+: on an older kernel the bpf case asserts
 * that the object refuses to load (the netlink case is the one that runs there).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { rmSync } from 'node:fs';
import os, { constants } from 'node:os';
import { expectedAutoUdpTermination } from '../support/kernel.js';
import { BpfIterator, BpfObject, ensureBpffs, withNetns } from '../../native/index.js';
import { MAP_NAMES, STAT, encodeRevNatKey, encodeRevNatVal } from '../../agent/maps/layout.js';
import { readStat } from '../../agent/datapath/datapath-stats.js';
import { UdpTerminator, chooseUdpTermination, type UdpTerminationSetting } from '../../agent/datapath/udp-terminator.js';
import { silentLogger } from '../../agent/log/log.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { libcSockets } from '../support/libc-udp.js';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const E = constants.errno;
const GONE = '198.18.98.10';
const STAYS = '198.18.98.11';
const GONE6 = '2001:db8:98::10';
const FE = { addr: '198.19.98.1', port: 53 };
const FE6 = { addr: '2001:db8:19::98', port: 53 };

for (const setting of ['bpf', 'netlink'] as const satisfies readonly UdpTerminationSetting[]) {
  test(`UdpTerminator (${setting}): destroys only kpr's sockets to the backend that left, for the frontend it left`, async () => {
    requireRoot();
    const sb = new Sandbox();
    const pins = ensureBpffs(path.join(sb.bpffsDir, 'maps'));
    const sockets = libcSockets();
    const fds: number[] = [];
    const objects: BpfObject[] = [];
    try {
      // kpr_sock.bpf.o owns the maps (it loads on every supported kernel); kpr_sock_term.bpf.o shares them.
      const sock = BpfObject.open(path.join(repoRoot, 'build', 'kpr_sock.bpf.o'), { pinMapsDir: pins });
      objects.push(sock);
      sock.load();
      let iterator: BpfIterator | undefined;
      if (setting === 'bpf') {
        const term = BpfObject.open(path.join(repoRoot, 'build', 'kpr_sock_term.bpf.o'), { pinMapsDir: pins });
        objects.push(term);
        if (expectedAutoUdpTermination() !== 'bpf_sock_destroy') {
          // Before 6.5 the kernel has no bpf_sock_destroy: the object must refuse to load (which is what
          // sends the agent to netlink); the netlink case below is the one that destroys sockets here.
          assert.throws(() => term.load(), /kpr_sock_term\.bpf\.o|EINVAL|ESRCH|bpf_sock_destroy/);
          return;
        }
        try {
          term.load();
        } catch (err) {
          throw new Error(`kpr_sock_term.bpf.o does not load on ${os.release()} (bpf_sock_destroy is 6.5+): ${(err as Error).message}`);
        }
        iterator = BpfIterator.attach(term.program('kpr_sock_term'));
      }
      const maps = { term: sock.map(MAP_NAMES.term), revnat: sock.map(MAP_NAMES.revnat), stats: sock.map(MAP_NAMES.stats) };

      const ns = sb.addNamespace('udpterm');
      for (const a of [`${GONE}/24`, `${STAYS}/24`]) inNs(ns, 'ip', 'addr', 'add', a, 'dev', 'lo');
      inNs(ns, 'ip', 'addr', 'add', `${GONE6}/64`, 'dev', 'lo', 'nodad');
      const inside = (fn: () => number) => {
        const fd = withNetns(nsPath(ns), fn);
        fds.push(fd);
        return fd;
      };
      for (const [a, p] of [
        [GONE, 5353],
        [STAYS, 5353],
        [GONE6, 5353],
      ] as const)
        inside(() => sockets.bind(a, p));
      /** A socket connected to backend:port as if the hooks had translated fe → backend for frontend frontendId. */
      const translated = (connect: () => number, backend: string, frontendId: number, fe = FE) => {
        const fd = inside(connect);
        maps.revnat.update(encodeRevNatKey({ cookie: sockets.cookie(fd), addr: backend, port: 5353 }), encodeRevNatVal({ ...fe, frontendId }));
        return fd;
      };
      const victim = translated(() => sockets.connect4(GONE, 5353), GONE, 7);
      const victim6 = translated(() => sockets.connect6(GONE6, 5353), GONE6, 9, FE6);
      const victimMapped = translated(() => sockets.connect6(`::ffff:${GONE}`, 5353), GONE, 7);
      const otherService = translated(() => sockets.connect4(GONE, 5353), GONE, 8);
      const stays = translated(() => sockets.connect4(STAYS, 5353), STAYS, 7);
      const notKprs = inside(() => sockets.connect4(GONE, 5353));

      const destroyedEvents: Array<[string, number]> = [];
      const terminator = new UdpTerminator({
        setting,
        ...(iterator ? { iterator } : { iteratorError: 'not loaded by this test' }),
        maps,
        log: silentLogger,
        onDestroyed: (mode, n) => destroyedEvents.push([mode, n]),
        listNamespaces: () => [nsPath(ns)],
      });
      const mode = setting === 'bpf' ? 'bpf_sock_destroy' : 'netlink';
      assert.equal(terminator.mode, mode);
      const before = readStat(maps.stats, STAT.SOCK_DESTROYED);
      const run = terminator.terminate([
        { addr: GONE, port: 5353, frontendId: 7 },
        { addr: GONE6, port: 5353, frontendId: 9 },
      ]);
      assert.deepEqual(run, { namespaces: 1, destroyed: 3 });
      assert.deepEqual(destroyedEvents, [[mode, 3]]);
      assert.equal(readStat(maps.stats, STAT.SOCK_DESTROYED) - before, 3n, 'kpr_stats SOCK_DESTROYED counts them');
      for (const fd of [victim, victim6, victimMapped]) assert.equal(sockets.recvErrno(fd), E.ECONNABORTED, `socket ${fd} was destroyed`);
      for (const [what, fd] of [
        ['another Service', otherService],
        ['a backend that stays', stays],
        ['not translated by kpr', notKprs],
      ] as const) {
        assert.equal(sockets.send(fd), 0, `${what}: still connected`);
        assert.equal(sockets.recvErrno(fd), E.EAGAIN, `${what}: no error`);
      }
      assert.equal(maps.term.lookupBatch().count, 0, 'kpr_term is empty again');
      assert.deepEqual(terminator.terminate([{ addr: GONE, port: 5353, frontendId: 7 }]), { namespaces: 1, destroyed: 0 }, 'nothing left to destroy');
    } finally {
      for (const fd of fds) sockets.close(fd);
      for (const o of objects.reverse()) o.close();
      await sb.teardown();
      rmSync(sb.bpffsDir, { recursive: true, force: true });
    }
  });
}

test('the mechanism: auto prefers the iterator, falls back to netlink, and says why when neither works', () => {
  const ok = () => null;
  const no = () => 'EOPNOTSUPP';
  assert.equal(chooseUdpTermination('auto', undefined, no).mode, 'bpf_sock_destroy');
  assert.equal(chooseUdpTermination('auto', 'ENOENT kfunc', ok).mode, 'netlink');
  assert.match(
    chooseUdpTermination('auto', 'ENOENT kfunc', no).reason,
    /did not load \(ENOENT kfunc\), and netlink sock_diag cannot destroy sockets: EOPNOTSUPP/,
  );
  assert.equal(chooseUdpTermination('auto', 'ENOENT kfunc', no).mode, 'off');
  assert.equal(chooseUdpTermination('netlink', undefined, ok).mode, 'netlink', 'forced netlink even where the iterator loads');
  assert.equal(chooseUdpTermination('netlink', undefined, no).mode, 'off');
  assert.equal(chooseUdpTermination('bpf', undefined, no).mode, 'bpf_sock_destroy');
  const bpfOnly = chooseUdpTermination('bpf', 'ENOENT kfunc', ok);
  assert.equal(bpfOnly.mode, 'off', 'forced bpf never falls back');
  assert.match(bpfOnly.reason, /needs kernel 6\.5\+/);
});
