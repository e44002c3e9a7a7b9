/**
 * The UDP backends that leave a frontend, as the reconciler reports them in
 * a sync's result (udpBackendsLeft): the sync loop terminates their
 * clients' sockets from it. Reported once, by the first sync that succeeds
 * after they left, with the frontend's frontendId of then.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { fe, plans, quiet, setup } from './support/reconcile-harness.js';

/** A UDP ClusterIP frontend. */
const udp = (service: string, address: string, port: number, backends: string[]) => fe(service, address, port, backends, 'UDP');

describe('Reconciler: UDP backends that left a frontend', () => {
  it('reports a backend that left (not one still there, not a TCP one), once', () => {
    const { r } = setup();
    const first = r.sync(
      plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.1:5353', '198.18.0.2:5353']), fe('a/web', '198.19.0.80', 80, ['198.18.0.1:80', '198.18.0.2:80'])),
      { full: true },
    );
    assert.equal(first.ok, true);
    assert.equal(first.udpBackendsLeft, undefined, 'nothing left at the first sync');
    const rn = r.frontendIdOf('198.19.0.53', 53, 'UDP')!;
    const res = r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.2:5353']), fe('a/web', '198.19.0.80', 80, ['198.18.0.2:80'])), { full: false });
    assert.deepEqual(res.udpBackendsLeft, [{ addr: '198.18.0.1', port: 5353, frontendId: rn }]);
    assert.equal(r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.2:5353'])), { full: false }).udpBackendsLeft, undefined, 'reported once');
  });

  it('a removed Service: every backend of its UDP frontends, with the id it had', () => {
    const { r } = setup();
    r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.1:5353', '198.18.0.2:5353'])), { full: true });
    const rn = r.frontendIdOf('198.19.0.53', 53, 'UDP')!;
    const res = r.sync(new Map([['a/dns', []]]), { full: false });
    assert.deepEqual(
      res.udpBackendsLeft,
      ['198.18.0.1', '198.18.0.2'].map((addr) => ({ addr, port: 5353, frontendId: rn })),
    );
    assert.equal(r.frontendIdOf('198.19.0.53', 53, 'UDP'), undefined);
  });

  it('after a failed sync: nothing reported; the retry that succeeds reports the backend, unless it came back', () => {
    const { maps, r } = setup();
    r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.1:5353', '198.18.0.2:5353', '198.18.0.3:5353'])), { full: true });
    const rn = r.frontendIdOf('198.19.0.53', 53, 'UDP')!;
    // The slot write goes through, the master's fails: the kernel's slots then name .3, .2, .3, and .1 is in none of them.
    maps.failOnCall({ call: maps.mutationCalls + 2, afterEntries: 0 });
    const failed = r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.3:5353'])), { full: false });
    assert.equal(failed.ok, false);
    assert.equal(failed.udpBackendsLeft, undefined);
    // The retry: .2 is back meanwhile, .1 is still gone.
    const retry = r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.2:5353', '198.18.0.3:5353'])), { full: false });
    assert.equal(retry.ok, true);
    assert.deepEqual(retry.udpBackendsLeft, [{ addr: '198.18.0.1', port: 5353, frontendId: rn }]);
  });

  it('an agent restarted on the pinned maps reports the backends that left while it was down', () => {
    const { maps, r } = setup();
    r.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.1:5353', '198.18.0.2:5353'])), { full: true });
    const rn = r.frontendIdOf('198.19.0.53', 53, 'UDP')!;
    const next = new Reconciler(maps, quiet);
    next.adopt();
    const res = next.sync(plans(udp('a/dns', '198.19.0.53', 53, ['198.18.0.2:5353'])), { full: true });
    assert.deepEqual(res.udpBackendsLeft, [{ addr: '198.18.0.1', port: 5353, frontendId: rn }]);
  });
});
