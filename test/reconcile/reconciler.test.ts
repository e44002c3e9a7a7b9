/**
 * Reconciler against MemoryDatapathMaps: exact diffs, the write order a live
 * BPF reader needs (checked after every single applied entry), id reuse,
 * adoption of a previous run's maps, failure handling and conflicts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IPPROTO, SCOPE, SVC_FLAG } from '../../agent/maps/layout.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { fe, quiet, plans, setup, syncChecked, syncCheckedPerCall } from './support/reconcile-harness.js';
import { copyState, programmed } from './support/datapath-state.js';

const methods = (maps: MemoryDatapathMaps, from = 0) => maps.calls.slice(from).map((c) => `${c.method}(${c.entries})`);

describe('Reconciler', () => {
  it('programs from empty maps: backends, then slots, then masters', () => {
    const { maps, r } = setup();
    const res = syncChecked(
      maps,
      r,
      plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:8080', '10.0.0.2:8080']), fe('default/dns', '10.96.0.53', 53, ['10.0.0.3:53'], 'UDP')),
      true,
    );
    assert.equal(res.ok, true);
    assert.deepEqual(methods(maps), ['updateBackends(3)', 'updateServices(3)', 'updateSvcMeta(2)', 'updateServices(2)', 'updateVips(2)']);
    assert.deepEqual(programmed(copyState(maps)), {
      '10.96.0.10:80/TCP': ['10.0.0.1:8080', '10.0.0.2:8080'],
      '10.96.0.53:53/UDP': ['10.0.0.3:53'],
    });
    assert.deepEqual(
      { w: res.servicesWritten, d: res.servicesDeleted, bw: res.backendsWritten, bd: res.backendsDeleted, f: res.frontends, b: res.backends },
      { w: 5, d: 0, bw: 3, bd: 0, f: 2, b: 3 },
    );
    // Master layout: count, frontendId (from 1, in Service key order: default/dns first), flags, EXTERNAL scope.
    const master = [...maps.services.values()].find(([k]) => k.slot === 0 && k.port === 80)!;
    assert.deepEqual(master, [
      { addr: '10.96.0.10', port: 80, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL },
      { backendId: 0, count: 2, frontendId: 2, flags: SVC_FLAG.CLUSTER_IP },
    ]);
    assert.deepEqual([...maps.backends.keys()].sort(), [1, 2, 3]);
    assert.deepEqual(res.skipped, []);
  });

  it('a sync that changes nothing performs no map write (full and incremental)', () => {
    const { maps, r } = setup();
    const p = plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:8080', '10.0.0.2:8080']));
    r.sync(p, { full: true });
    const n = maps.calls.length;
    const again = r.sync(p, { full: true });
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:8080', '10.0.0.2:8080'])), { full: false });
    r.sync(new Map(), { full: false });
    assert.equal(maps.calls.length, n);
    assert.deepEqual([again.servicesWritten, again.backendsWritten, again.frontends, again.backends], [0, 0, 1, 2]);
  });

  it('adding a backend writes one backend, one slot and the master', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.2:80'])), { full: true });
    const from = maps.calls.length;
    const res = syncChecked(maps, r, plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'])), false);
    assert.deepEqual(methods(maps, from), ['updateBackends(1)', 'updateServices(1)', 'updateServices(1)']);
    assert.equal(res.servicesWritten, 2);
    assert.deepEqual(programmed(copyState(maps))['10.96.0.10:80/TCP'], ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80']);
  });

  it('removing a middle backend re-points its slot, lowers the count, then deletes the last slot and the backend', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'])), { full: true });
    const from = maps.calls.length;
    const res = syncChecked(maps, r, plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.3:80'])), false);
    assert.deepEqual(methods(maps, from), ['updateServices(1)', 'updateServices(1)', 'deleteServices(1)', 'deleteBackends(1)']);
    assert.deepEqual([res.servicesWritten, res.servicesDeleted, res.backendsWritten, res.backendsDeleted], [2, 1, 0, 1]);
    assert.deepEqual(programmed(copyState(maps))['10.96.0.10:80/TCP'], ['10.0.0.1:80', '10.0.0.3:80']);
  });

  it('scales 3 → 1 → 3 → 0 → 2 with every intermediate state safe for a reader', () => {
    const { maps, r } = setup();
    const steps = [
      ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'],
      ['10.0.0.2:80'],
      ['10.0.0.4:80', '10.0.0.5:80', '10.0.0.6:80'],
      [],
      ['10.0.0.1:80', '10.0.0.6:80'],
    ];
    for (const backends of steps) {
      const res = syncChecked(maps, r, plans(fe('default/web', '10.96.0.10', 80, backends)), false);
      assert.equal(res.ok, true);
      assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': backends });
      assert.equal(maps.backends.size, backends.length);
    }
  });

  it('the op log shows the ordering: slots before the raised count, deletes after the lowered count', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80'])), { full: true });
    maps.clearLog();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'])), { full: false });
    const kinds = maps.ops.map((o) => (o.kind === 'svc-update' ? `svc-update slot ${o.key.slot}` : o.kind));
    assert.deepEqual(kinds, ['backend-update', 'backend-update', 'svc-update slot 2', 'svc-update slot 3', 'svc-update slot 0']);
    maps.clearLog();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.3:80'])), { full: false });
    const kinds2 = maps.ops.map((o) => (o.kind.startsWith('svc') ? `${o.kind} slot ${(o as { key: { slot: number } }).key.slot}` : o.kind));
    assert.deepEqual(kinds2, ['svc-update slot 1', 'svc-update slot 0', 'svc-delete slot 2', 'svc-delete slot 3', 'backend-delete', 'backend-delete']);
  });

  it('a deleted Service loses everything: master first, then slots, then backends; maps return to empty', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('default/web', '10.96.0.10', 80, ['10.0.0.1:80', '10.0.0.2:80']), fe('default/web', '10.96.0.10', 443, ['10.0.0.1:443'])), { full: true });
    maps.clearLog();
    const res = syncChecked(maps, r, new Map([['default/web', []]]), false);
    assert.deepEqual(
      maps.ops.filter((o) => o.kind === 'svc-delete').map((o) => (o as { key: { slot: number; port: number } }).key.slot),
      [0, 0, 1, 1, 2],
    );
    assert.equal(maps.ops.at(-1)!.kind, 'backend-delete');
    assert.deepEqual([maps.services.size, maps.backends.size, res.frontends, res.backends, r.frontendCount, r.backendCount], [0, 0, 0, 0, 0, 0]);
    assert.deepEqual([res.servicesDeleted, res.backendsDeleted], [5, 3]);
  });

  it('a full sync removes every Service it does not list', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80']), fe('b/y', '10.96.0.2', 80, ['10.0.0.2:80'])), { full: true });
    syncChecked(maps, r, plans(fe('b/y', '10.96.0.2', 80, ['10.0.0.2:80'])), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.2:80/TCP': ['10.0.0.2:80'] });
    syncChecked(maps, r, new Map(), true);
    assert.deepEqual([maps.services.size, maps.backends.size], [0, 0]);
  });

  it('incremental sync touches only the Services it lists', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80']), fe('b/y', '10.96.0.2', 80, ['10.0.0.2:80'])), { full: true });
    maps.clearLog();
    syncChecked(maps, r, plans(fe('b/y', '10.96.0.2', 80, ['10.0.0.3:80'])), false);
    assert.ok(maps.ops.every((o) => o.kind.startsWith('backend') || (o as { key: { addr: string } }).key.addr === '10.96.0.2'));
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.1:80'], '10.96.0.2:80/TCP': ['10.0.0.3:80'] });
  });

  it('backend ids and frontendIds are reused, lowest first, and restart from 1 once everything is gone', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80']), fe('b/y', '10.96.0.2', 80, ['10.0.0.3:80'])), { full: true });
    assert.deepEqual([r.frontendIdOf('10.96.0.1', 80, 'TCP'), r.frontendIdOf('10.96.0.2', 80, 'TCP')], [1, 2]);
    r.sync(new Map([['a/x', []]]), { full: false });
    assert.deepEqual([...maps.backends.keys()], [3]);
    r.sync(plans(fe('c/z', '10.96.0.3', 80, ['10.0.0.7:80', '10.0.0.8:80', '10.0.0.9:80'])), { full: false });
    assert.deepEqual([...maps.backends.keys()].sort(), [1, 2, 3, 4]);
    assert.equal(r.frontendIdOf('10.96.0.3', 80, 'TCP'), 1);
    r.sync(new Map(), { full: true });
    r.sync(plans(fe('d/w', '10.96.0.4', 80, ['10.0.0.1:80'])), { full: true });
    assert.deepEqual([...maps.backends.keys()], [1]);
    assert.equal(r.frontendIdOf('10.96.0.4', 80, 'TCP'), 1);
  });

  it('ids freed by a sync are reused only from the next sync on, never re-pointed mid-sync', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80'])), { full: true });
    // Same sync: a/x goes (frontendId 1, backend 1), b/y arrives. While a/x's master and
    // backend 1 still exist, b/y must not take their ids.
    syncChecked(maps, r, plans(fe('b/y', '10.96.0.2', 80, ['10.0.0.2:80'])), true);
    assert.equal(r.frontendIdOf('10.96.0.2', 80, 'TCP'), 2);
    assert.deepEqual([...maps.backends.keys()], [2]);
    assert.ok(maps.ops.every((o) => o.kind !== 'backend-update' || o.id !== 1 || o.val.addr === '10.0.0.1'));
    syncChecked(maps, r, plans(fe('c/z', '10.96.0.3', 80, ['10.0.0.3:80'])), false);
    assert.equal(r.frontendIdOf('10.96.0.3', 80, 'TCP'), 1);
    assert.ok(maps.backends.has(1));
  });

  it('a backend shared by two frontends is one entry, kept until its last user goes', () => {
    const { maps, r } = setup();
    r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80']), fe('b/y', '10.96.0.2', 80, ['10.0.0.1:80'])), { full: true });
    assert.equal(maps.backends.size, 1);
    syncChecked(maps, r, new Map([['a/x', []]]), false);
    assert.equal(maps.backends.size, 1);
    syncChecked(maps, r, new Map([['b/y', []]]), false);
    assert.equal(maps.backends.size, 0);
  });

  it('one backend id per (address, port, protocol): TCP and UDP on the same ip:port are two backends', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('k/dns', '10.96.0.10', 53, ['10.0.0.1:53'], 'UDP'), fe('k/dns', '10.96.0.10', 53, ['10.0.0.1:53'], 'TCP')), true);
    assert.deepEqual([maps.backends.size, r.frontendCount], [2, 2]);
    assert.deepEqual(new Set([...maps.backends.values()].map((b) => b.proto)), new Set([IPPROTO.TCP, IPPROTO.UDP]));
  });

  it('a sync too large for one round writes its upserts in several, each keeping the live order', () => {
    // 1,700 Services × 10 backends queue > 16,384 entries: at least two rounds of
    // backends → slots → masters before the deletions at the end.
    const big = (gen: number) =>
      Array.from({ length: 1700 }, (_, i) =>
        fe(
          `default/s${String(i).padStart(4, '0')}`,
          `10.96.${i >> 8}.${i & 255}`,
          80,
          Array.from({ length: 10 }, (_, j) => `10.${gen}.${i >> 4}.${(i & 15) * 10 + j}:80`),
        ),
      );
    const { maps, r } = setup();
    const first = syncCheckedPerCall(maps, r, plans(...big(1)), true);
    assert.equal(first.ok, true);
    assert.ok(methods(maps).filter((m) => m.startsWith('updateBackends')).length >= 2, methods(maps).join(' '));
    assert.deepEqual([first.frontends, first.backends, first.backendsWritten], [1700, 17000, 17000]);
    // Every backend replaced: new ones in rounds, the 17,000 old ones deleted once at the end.
    const from = maps.calls.length;
    const second = syncCheckedPerCall(maps, r, plans(...big(2)), true);
    assert.equal(second.ok, true);
    const calls = methods(maps, from);
    assert.deepEqual(calls.slice(-1), ['deleteBackends(17000)']);
    assert.equal(calls.filter((m) => m.startsWith('delete')).length, 1);
    assert.equal(programmed(copyState(maps))['10.96.0.1:80/TCP'].length, 10);
    assert.equal(maps.backends.size, 17000);
  });

  it('a frontend with no backends is a master with count 0 (the datapath refuses)', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, [])), true);
    assert.deepEqual(
      [...maps.services.values()].map(([k, v]) => [k.slot, v.count]),
      [[0, 0]],
    );
  });

  it('frontends the datapath cannot serve are skipped with a reason, the rest programmed (SCTP too: rule 39 of docs/semantics.md)', () => {
    const { maps, r } = setup();
    const np = { ...fe('a/x', '10.96.0.1', 30080, ['10.0.0.1:80']), type: 'Magic' as unknown as 'NodePort' };
    const icmp = fe('a/x', '10.96.0.1', 9001, ['10.0.0.1:9001'], 'ICMP' as unknown as 'TCP');
    const sctp = fe('a/x', '10.96.0.1', 9000, ['10.0.0.1:9000'], 'SCTP');
    const bad = fe('a/x', '10.96.0.300', 80, []);
    const badBackend = fe('a/x', '10.96.0.1', 81, ['10.0.0.1:0', '10.0.0.2:81']);
    const res = syncChecked(maps, r, new Map([['a/x', [np, icmp, sctp, bad, badBackend]]]), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:81/TCP': ['10.0.0.2:81'], '10.96.0.1:9000/SCTP': ['10.0.0.1:9000'] });
    assert.equal(res.skipped.length, 4);
    assert.ok(res.skipped.every((s) => s.object === 'Service a/x'));
    assert.match(res.skipped.map((s) => s.reason).join('\n'), /unknown type "Magic"[\s\S]*unknown protocol "ICMP"[\s\S]*invalid address[\s\S]*invalid backend/);
  });

  describe('frontend conflicts', () => {
    it('two Services claiming the same frontend: the first by key wins, the other is reported', () => {
      const { maps, r } = setup();
      const res = syncChecked(maps, r, plans(fe('b/y', '10.96.0.1', 80, ['10.0.0.2:80']), fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80'])), true);
      assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.1:80'] });
      assert.deepEqual(
        res.skipped.map((s) => s.object),
        ['Service b/y'],
      );
      assert.match(res.skipped[0].reason, /10\.96\.0\.1:80\/TCP is also claimed by Service a\/x/);
    });

    it('when the winner goes, the other claimant takes the frontend over (same frontendId)', () => {
      const { maps, r } = setup();
      r.sync(plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80']), fe('b/y', '10.96.0.1', 80, ['10.0.0.2:80'])), { full: true });
      const rn = r.frontendIdOf('10.96.0.1', 80, 'TCP');
      const res = syncChecked(maps, r, new Map([['a/x', []]]), false);
      assert.deepEqual(res.skipped, []);
      assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.2:80'] });
      assert.equal(r.frontendIdOf('10.96.0.1', 80, 'TCP'), rn);
    });

    it('an incremental claim by a lower key takes over, exactly as a full sync would decide', () => {
      const { maps, r } = setup();
      r.sync(plans(fe('b/y', '10.96.0.1', 80, ['10.0.0.2:80'])), { full: true });
      const res = syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80'])), false);
      assert.deepEqual(
        res.skipped.map((s) => s.object),
        ['Service b/y'],
      );
      assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.1:80'] });
    });
  });

  describe('adopt', () => {
    function previousRun() {
      const maps = new MemoryDatapathMaps();
      const first = new Reconciler(maps, quiet);
      const p = plans(
        fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80']),
        fe('b/y', '10.96.0.2', 53, ['10.0.0.3:53'], 'UDP'),
        fe('c/z', '10.96.0.3', 80, ['10.0.0.1:80']),
      );
      first.sync(p, { full: true });
      first.sync(new Map([['b/y', []]]), { full: false }); // leaves a hole in the id spaces
      first.sync(plans(fe('b/y', '10.96.0.2', 53, ['10.0.0.3:53'], 'UDP')), { full: false });
      return { maps, p };
    }

    it('adopting consistent maps and re-syncing the same plan writes nothing and keeps ids', () => {
      const { maps, p } = previousRun();
      const before = copyState(maps);
      const r = new Reconciler(maps, quiet);
      const a = r.adopt();
      assert.deepEqual([a.frontends, a.backends, a.serviceEntries, a.inconsistencies], [3, 3, 7, 0]);
      maps.clearLog();
      const res = r.sync(p, { full: true });
      assert.deepEqual([res.ok, maps.calls.length, res.frontends, res.backends], [true, 0, 3, 3]);
      assert.deepEqual(copyState(maps), before);
      // New ids continue from the adopted ones.
      syncChecked(maps, r, plans(fe('d/w', '10.96.0.4', 80, ['10.0.0.9:80'])), false);
      assert.equal(r.frontendIdOf('10.96.0.4', 80, 'TCP'), 4);
      assert.ok(maps.backends.has(4));
    });

    it('a full sync after adopt removes frontends of the previous run that are no longer wanted', () => {
      const { maps } = previousRun();
      const r = new Reconciler(maps, quiet);
      r.adopt();
      syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80'])), true);
      assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.1:80', '10.0.0.2:80'] });
    });

    it('an incremental sync after adopt leaves unclaimed adopted frontends to the first full sync', () => {
      const { maps } = previousRun();
      const r = new Reconciler(maps, quiet);
      r.adopt();
      syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.2:80'])), false);
      assert.equal(Object.keys(programmed(copyState(maps))).length, 3);
      syncChecked(maps, r, new Map([['a/x', []]]), false); // claimed once, so removable
      assert.equal(Object.keys(programmed(copyState(maps))).length, 2);
      syncChecked(maps, r, new Map(), true);
      assert.deepEqual([maps.services.size, maps.backends.size], [0, 0]);
    });

    it('counts inconsistent entries and repairs them on the next full sync', () => {
      const maps = new MemoryDatapathMaps();
      const k = (addr: string, port: number, slot: number) => ({ addr, port, slot, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL });
      const m = (count: number, frontendId: number) => ({ backendId: 0, count, frontendId, flags: SVC_FLAG.CLUSTER_IP });
      const s = (backendId: number) => ({ backendId, count: 0, frontendId: 0, flags: 0 });
      const b = (addr: string, port: number) => ({ addr, port, proto: IPPROTO.TCP, flags: 0 });
      maps.prefill(
        [
          // 10.96.0.1:80 — count 2 but slot 2 missing, and a slot 3 beyond count.
          [k('10.96.0.1', 80, 0), m(2, 1)],
          [k('10.96.0.1', 80, 1), s(1)],
          [k('10.96.0.1', 80, 3), s(2)],
          // 10.96.0.2:80 — slots without a master.
          [k('10.96.0.2', 80, 1), s(2)],
          // 10.96.0.3:80 — same frontendId as 10.96.0.1, slot naming a missing backend, and a duplicate backend.
          [k('10.96.0.3', 80, 0), m(2, 1)],
          [k('10.96.0.3', 80, 1), s(9)],
          [k('10.96.0.3', 80, 2), s(5)],
        ],
        [
          [1, b('10.0.0.1', 80)],
          [2, b('10.0.0.2', 80)],
          [4, b('10.0.0.4', 80)], // orphan
          [5, b('10.0.0.1', 80)], // duplicate of 1
        ],
      );
      const r = new Reconciler(maps, quiet);
      const a = r.adopt();
      assert.deepEqual(a.details, {
        slotsWithoutMaster: 1,
        slotsBeyondCount: 1,
        missingSlots: 1,
        danglingSlots: 1,
        orphanBackends: 1,
        duplicateBackends: 1,
        badFrontendIds: 1,
        orphanAuxEntries: 0,
      });
      assert.equal(a.inconsistencies, 7);
      const want = plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80']), fe('c/z', '10.96.0.3', 80, ['10.0.0.1:80', '10.0.0.3:80']));
      const res = syncChecked(maps, r, want, true);
      assert.equal(res.ok, true);
      assert.deepEqual(programmed(copyState(maps)), {
        '10.96.0.1:80/TCP': ['10.0.0.1:80', '10.0.0.2:80'],
        '10.96.0.3:80/TCP': ['10.0.0.1:80', '10.0.0.3:80'],
      });
      assert.equal(r.frontendIdOf('10.96.0.1', 80, 'TCP'), 1); // the first by key keeps the shared id
      assert.notEqual(r.frontendIdOf('10.96.0.3', 80, 'TCP'), 1);
      assert.ok(!maps.backends.has(9), 'the dangling id is never handed out while a slot names it');
      // Repaired: adopting again finds nothing wrong, and the next sync writes nothing.
      assert.equal(new Reconciler(maps, quiet).adopt().inconsistencies, 0);
      maps.clearLog();
      r.sync(want, { full: true });
      assert.equal(maps.calls.length, 0);
    });
  });

  describe('failures', () => {
    const start = () => plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80']), fe('b/y', '10.96.0.2', 80, ['10.0.0.4:80']));
    // Touches every step: new backends, changed slots, masters, slot and frontend deletes, backend deletes.
    const next = () => plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.5:80']), fe('c/z', '10.96.0.3', 80, ['10.0.0.6:80', '10.0.0.7:80']));

    for (const call of [1, 2, 3, 4, 5]) {
      for (const afterEntries of [0, 1]) {
        it(`call ${call} of a sync fails after ${afterEntries} entries: state stays safe, the retry converges`, () => {
          const { maps, r } = setup();
          r.sync(start(), { full: true });
          const reference = setup();
          reference.r.sync(next(), { full: true });

          maps.failOnCall({ call: maps.mutationCalls + call, afterEntries });
          const res = syncChecked(maps, r, next(), true);
          assert.equal(res.ok, false);
          assert.match(res.error!, /injected failure/);
          // The reconciler's view matches the kernel after the failure.
          assert.deepEqual([r.frontendCount, r.backendCount], [[...maps.services.values()].filter(([k]) => k.slot === 0).length, maps.backends.size]);

          // A retry (here: an unrelated incremental sync) converges to what a clean run programs.
          const retry = syncChecked(maps, r, new Map(), false);
          assert.equal(retry.ok, true);
          assert.deepEqual(programmed(copyState(maps)), programmed(copyState(reference.maps)));
          maps.clearLog();
          r.sync(next(), { full: true });
          assert.equal(maps.calls.length, 0, 'converged: nothing left to write');
        });
      }
    }

    // The reconciler refuses what does not fit the capacities it knows (reconciler-limits.test.ts); a map
    // fuller than it knows (here: capacities hidden from it) still fails the sync cleanly.
    it('a backend map fuller than the reconciler knows fails the sync; once capacity is raised the retry converges', () => {
      const maps = new MemoryDatapathMaps({ maxBackends: 3 });
      const r = new Reconciler(maps, quiet, { capacities: { backend: Infinity } });
      const res = syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80'])), true);
      assert.equal(res.ok, false);
      assert.match(res.error!, /E2BIG/);
      assert.deepEqual([maps.services.size, r.frontendCount], [0, 0]);
      maps.maxBackends = 10;
      const retry = syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80'])), true);
      assert.equal(retry.ok, true);
      assert.equal(retry.backendsWritten, 1);
      assert.deepEqual([...maps.backends.keys()].sort(), [1, 2, 3, 4]);
    });

    it('a service map fuller than the reconciler knows fails the sync without leaving a master over missing slots', () => {
      const maps = new MemoryDatapathMaps({ maxServices: 2 });
      const r = new Reconciler(maps, quiet, { capacities: { svc: Infinity } });
      const res = syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80'])), true);
      assert.equal(res.ok, false);
      assert.equal([...maps.services.values()].filter(([k]) => k.slot === 0).length, 0);
    });

    it('when the maps cannot even be read back, the next sync reads them first', () => {
      const { maps, r } = setup();
      r.sync(start(), { full: true });
      const dump = maps.dumpServices.bind(maps);
      let broken = true;
      maps.dumpServices = () => {
        if (broken) throw new Error('EIO: dump');
        return dump();
      };
      maps.failNextCall();
      assert.equal(r.sync(next(), { full: true }).ok, false);
      const calls = maps.calls.length;
      assert.equal(r.sync(next(), { full: true }).ok, false); // still unreadable: no write attempted
      assert.equal(r.sync(plans(fe('d/w', '10.96.0.4', 80, ['10.0.0.8:80'])), { full: false }).ok, false);
      assert.equal(maps.calls.length, calls);
      broken = false;
      const res = syncChecked(maps, r, new Map(), false); // nothing asked for while broken was lost
      assert.equal(res.ok, true);
      assert.deepEqual(programmed(copyState(maps)), {
        '10.96.0.1:80/TCP': ['10.0.0.5:80'],
        '10.96.0.3:80/TCP': ['10.0.0.6:80', '10.0.0.7:80'],
        '10.96.0.4:80/TCP': ['10.0.0.8:80'],
      });
    });
  });
});
