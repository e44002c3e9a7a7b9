/**
 * No silent limits: a Service that does not fit the datapath's limits
 * (frontendIds, map capacities; agent/reconcile/limits.ts) is refused whole
 * with a log line, a `skipped` entry and a limit report naming it, the
 * limit and the count; every other Service is programmed at once; and when
 * a sync frees room the refused one is programmed in that same sync. Small
 * limits (a reconciler option, the in-memory maps' capacities) stand in for
 * the real ones, except the u16 slot count, tested at its real 65,535.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler, type ReconcileLogger, type SyncResult } from '../../agent/reconcile/reconciler.js';
import { MAX_SLOTS } from '../../agent/lb/selection.js';
import { fe, plans, syncChecked, syncCheckedPerCall } from './support/reconcile-harness.js';
import { copyState, programmed } from './support/datapath-state.js';

interface Line {
  level: 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}

function recorder(): ReconcileLogger & { lines: Line[] } {
  const lines: Line[] = [];
  const at =
    (level: Line['level']) =>
    (msg: string, fields: Record<string, unknown> = {}) =>
      void lines.push({ level, msg, fields });
  return { lines, info: at('info'), warn: at('warn'), error: at('error') };
}

/** `n` frontends of one Service (ports 1..n of one address), one backend each. */
function ports(service: string, address: string, n: number, backend = '10.0.0.1:80'): PlanFrontend[] {
  return Array.from({ length: n }, (_, i) => fe(service, address, i + 1, [backend]));
}

/** The frontends programmed for an address, as "port". */
function portsOf(maps: MemoryDatapathMaps, address: string): number[] {
  return [...maps.services.values()]
    .filter(([k]) => k.slot === 0 && k.addr === address)
    .map(([k]) => k.port)
    .sort((a, b) => a - b);
}

function limitsOf(res: SyncResult) {
  return (res.limits ?? []).map((l) => `${l.service} ${l.limit} ${l.action} ${l.needed}/${l.capacity}`);
}

describe('Reconciler limits: frontendIds', () => {
  it('a Service with more frontends than there are frontendIds is refused whole, named, and the others are programmed', () => {
    const maps = new MemoryDatapathMaps();
    const log = recorder();
    const r = new Reconciler(maps, log, { maxFrontendId: 5 });
    const p = plans(fe('a/small', '10.96.0.1', 80, ['10.0.0.1:80']), ...ports('b/big', '10.96.0.2', 7), fe('c/other', '10.96.0.3', 80, ['10.0.0.3:80']));
    const res = syncChecked(maps, r, p, true);
    assert.equal(res.ok, true);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), [], 'nothing of the refused Service is programmed');
    assert.deepEqual(Object.keys(programmed(copyState(maps))).sort(), ['10.96.0.1:80/TCP', '10.96.0.3:80/TCP']);
    assert.deepEqual(limitsOf(res), ['b/big rev_nat_ids refused 7/5']);
    const skip = res.skipped.filter((s) => s.object === 'Service b/big');
    assert.equal(skip.length, 1);
    assert.match(skip[0].reason, /not programmed: over the limit of 5 frontend ids .*needs 7 more, 4 free/);
    const errors = log.lines.filter((l) => l.level === 'error');
    assert.deepEqual(
      errors.map((l) => [l.msg, l.fields.service, l.fields.limit, l.fields.capacity, l.fields.needed]),
      [['Service refused: over a datapath limit', 'b/big', 'rev_nat_ids', 5, 7]],
    );

    // Still refused at the next full sync: reported in skipped again, not logged again.
    const again = syncChecked(maps, r, p, true);
    assert.deepEqual(limitsOf(again), ['b/big rev_nat_ids refused 7/5']);
    assert.equal(log.lines.filter((l) => l.level === 'error').length, 1);
    // An unrelated event sync keeps the report (for the metric) without a skipped entry or a re-diff.
    const event = syncChecked(maps, r, plans(fe('c/other', '10.96.0.3', 80, ['10.0.0.4:80'])), false);
    assert.deepEqual(limitsOf(event), ['b/big rev_nat_ids refused 7/5']);
    assert.deepEqual(event.skipped, []);
  });

  it('a Service created while another is refused is programmed at once', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, recorder(), { maxFrontendId: 5 });
    syncChecked(maps, r, plans(...ports('b/big', '10.96.0.2', 7)), true);
    const res = syncChecked(maps, r, plans(fe('d/new', '10.96.0.4', 53, ['10.0.0.5:53'])), false);
    assert.equal(res.ok, true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.4:53/TCP': ['10.0.0.5:53'] });
  });

  it('deleting the Service that holds the ids programs the refused one in the same sync', () => {
    const maps = new MemoryDatapathMaps();
    const log = recorder();
    const r = new Reconciler(maps, log, { maxFrontendId: 5 });
    syncChecked(maps, r, plans(...ports('a/hog', '10.96.0.1', 4)), true);
    const refused = syncChecked(maps, r, plans(...ports('b/wants', '10.96.0.2', 3)), false);
    assert.deepEqual(limitsOf(refused), ['b/wants rev_nat_ids refused 3/5']);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), []);

    // Only a/hog's deletion reaches this sync; b/wants is retried after it is applied.
    const res = syncChecked(maps, r, new Map([['a/hog', []]]), false);
    assert.equal(res.ok, true);
    assert.deepEqual(portsOf(maps, '10.96.0.1'), []);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), [1, 2, 3]);
    assert.deepEqual(limitsOf(res), []);
    assert.deepEqual(res.skipped, []);
    assert.ok(log.lines.some((l) => l.level === 'info' && l.msg === 'Service programmed: within the datapath limits again' && l.fields.service === 'b/wants'));
  });

  it('a Service that grows past the limit loses all its frontends, and the room it held goes to a waiting one in the same sync', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, recorder(), { maxFrontendId: 5 });
    syncChecked(maps, r, plans(...ports('a/grows', '10.96.0.1', 3)), true);
    syncChecked(maps, r, plans(...ports('b/waits', '10.96.0.2', 3)), false); // 2 free: refused
    assert.deepEqual(portsOf(maps, '10.96.0.2'), []);
    const res = syncChecked(maps, r, plans(...ports('a/grows', '10.96.0.1', 6)), false);
    assert.equal(res.ok, true);
    assert.deepEqual(portsOf(maps, '10.96.0.1'), [], 'refused whole: never 5 of its 6 frontends');
    assert.deepEqual(portsOf(maps, '10.96.0.2'), [1, 2, 3]);
    assert.deepEqual(limitsOf(res), ['a/grows rev_nat_ids refused 6/5']);
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service a/grows'],
    );
    assert.match(res.skipped[0].reason, /needs 6 more, 5 free/, 'the report of the retry, after its own 3 frontends were removed');
  });

  it('adopted maps where a Service holds ids it no longer fits in: it is removed and a new Service gets them in the same sync', () => {
    // A previous run (with more ids) programmed b/big's 7 frontends; this run has 8 ids and b/big now wants 9.
    const maps = new MemoryDatapathMaps();
    syncChecked(maps, new Reconciler(maps, recorder(), { maxFrontendId: 10 }), plans(...ports('b/big', '10.96.0.2', 7)), true);
    const r = new Reconciler(maps, recorder(), { maxFrontendId: 8 });
    r.adopt();
    const res = syncChecked(maps, r, plans(...ports('b/big', '10.96.0.2', 9), ...ports('c/new', '10.96.0.3', 2)), true);
    assert.equal(res.ok, true);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), []);
    assert.deepEqual(portsOf(maps, '10.96.0.3'), [1, 2]);
    assert.deepEqual(limitsOf(res), ['b/big rev_nat_ids refused 9/8']);
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service b/big'],
      'c/new, refused in the first pass, is not reported: the retry programmed it',
    );
  });

  it('the limit report goes when the refused Service is deleted', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, recorder(), { maxFrontendId: 2 });
    assert.deepEqual(limitsOf(syncChecked(maps, r, plans(...ports('b/big', '10.96.0.2', 3)), true)), ['b/big rev_nat_ids refused 3/2']);
    assert.deepEqual(limitsOf(syncChecked(maps, r, new Map([['b/big', []]]), false)), []);
  });
});

describe('Reconciler limits: map capacities', () => {
  it('a full backend map refuses the Service that does not fit, programs the others, and corrupts nothing', () => {
    const maps = new MemoryDatapathMaps({ maxBackends: 10 });
    const r = new Reconciler(maps, recorder());
    const a = fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80']);
    syncChecked(maps, r, plans(a), true);
    const before = programmed(copyState(maps));
    const eight = Array.from({ length: 8 }, (_, i) => `10.0.1.${i + 1}:80`);
    const res = syncChecked(maps, r, plans(fe('b/y', '10.96.0.2', 80, eight), fe('c/z', '10.96.0.3', 80, ['10.0.2.1:80', '10.0.2.2:80'])), false);
    assert.equal(res.ok, true, 'no failed write: the refusal comes before any');
    assert.deepEqual(limitsOf(res), ['b/y backend_map refused 8/10']);
    assert.match(res.skipped.find((s) => s.object === 'Service b/y')!.reason, /kpr_backend entries \(max_entries\): needs 8 more, 6 free/);
    assert.deepEqual(programmed(copyState(maps)), { ...before, '10.96.0.3:80/TCP': ['10.0.2.1:80', '10.0.2.2:80'] });
    assert.equal(maps.backends.size, 6);

    // Room made (a/x deleted): b/y is programmed in the same sync.
    const freed = syncChecked(maps, r, new Map([['a/x', []]]), false);
    assert.equal(freed.ok, true);
    assert.deepEqual(programmed(copyState(maps)), {
      '10.96.0.2:80/TCP': eight,
      '10.96.0.3:80/TCP': ['10.0.2.1:80', '10.0.2.2:80'],
    });
    assert.deepEqual(limitsOf(freed), []);
  });

  it('backends a Service shares with programmed ones need no room', () => {
    const maps = new MemoryDatapathMaps({ maxBackends: 3 });
    const r = new Reconciler(maps, recorder());
    const three = ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'];
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, three)), true);
    const res = syncChecked(maps, r, plans(fe('b/y', '10.96.0.2', 80, three)), false);
    assert.deepEqual(limitsOf(res), []);
    assert.deepEqual(programmed(copyState(maps))['10.96.0.2:80/TCP'], three);
  });

  it('a full service map refuses the Service whole (no master without its slots), and it returns when room is made', () => {
    const maps = new MemoryDatapathMaps({ maxServices: 8 });
    const r = new Reconciler(maps, recorder());
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'])), true); // 4 entries
    // b/y: two frontends of 2 entries each + one of 1 = 5 > 4 free.
    const b = [fe('b/y', '10.96.0.2', 80, ['10.0.1.1:80']), fe('b/y', '10.96.0.2', 81, ['10.0.1.1:80']), fe('b/y', '10.96.0.2', 82, [])];
    const res = syncChecked(maps, r, plans(...b), false);
    assert.deepEqual(limitsOf(res), ['b/y svc_map refused 5/8']);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), []);
    assert.equal(maps.services.size, 4);
    // a/x shrinks to one backend: its two slots are deleted at the end of the sync, then 6 are free for b/y's 5.
    const shrunk = syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80'])), false);
    assert.deepEqual(limitsOf(shrunk), []);
    assert.deepEqual(portsOf(maps, '10.96.0.2'), [80, 81, 82]);
    assert.equal(maps.services.size, 7);
  });

  it('a full affinity-match map refuses the Service with affinity; the same Service without affinity fits', () => {
    const maps = new MemoryDatapathMaps({ maxAffinityMatches: 3 });
    const r = new Reconciler(maps, recorder());
    const four = ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80'];
    const res = syncChecked(maps, r, plans(fe('a/sticky', '10.96.0.1', 80, four, { affinityTimeoutSeconds: 60 }), fe('b/plain', '10.96.0.2', 80, four)), true);
    assert.deepEqual(limitsOf(res), ['a/sticky aff_match_map refused 4/3']);
    assert.deepEqual(Object.keys(programmed(copyState(maps))), ['10.96.0.2:80/TCP']);
    assert.equal(maps.affinityMatches.size, 0);
  });

  it('a full source-range map refuses the LoadBalancer Service whose ranges do not fit', () => {
    const maps = new MemoryDatapathMaps({ maxSrcRanges: 2 });
    const r = new Reconciler(maps, recorder());
    const lb = (service: string, address: string, ranges: string[]) =>
      fe(service, address, 80, ['10.0.0.1:80'], { type: 'LoadBalancer', sourceRanges: ranges });
    const res = syncChecked(
      maps,
      r,
      plans(lb('a/open', '203.0.113.1', ['198.51.100.0/24']), lb('b/many', '203.0.113.2', ['192.0.2.0/24', '198.51.100.0/25', '198.51.100.128/25'])),
      true,
    );
    assert.deepEqual(limitsOf(res), ['b/many src_range_map refused 3/2']);
    assert.deepEqual(Object.keys(programmed(copyState(maps))), ['203.0.113.1:80/TCP']);
    assert.equal(maps.srcRanges.size, 1);
  });
});

describe('Reconciler limits: backends per frontend (the real u16 limit)', () => {
  it('70,000 endpoints in one frontend: the first 65,535 are programmed, reported by name, limit and count', () => {
    const maps = new MemoryDatapathMaps();
    const log = recorder();
    const r = new Reconciler(maps, log);
    const backends = Array.from({ length: 70000 }, (_, i) => ({ address: `10.${1 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`, port: 8080 }));
    const big = fe('a/huge', '10.96.0.1', 80, []);
    big.backends = backends;
    const res = syncCheckedPerCall(maps, r, plans(big, fe('b/other', '10.96.0.2', 80, ['10.0.0.1:80'])), true);
    assert.equal(res.ok, true);
    const master = [...maps.services.values()].find(([k]) => k.slot === 0 && k.addr === '10.96.0.1')!;
    assert.equal(master[1].count, MAX_SLOTS);
    assert.equal(maps.services.has(`10.96.0.1|80|${MAX_SLOTS}|6|0`), true);
    assert.equal(maps.backends.size, MAX_SLOTS + 1);
    assert.deepEqual(programmed(copyState(maps))['10.96.0.1:80/TCP'].slice(-1), ['10.1.255.254:8080'], 'the first 65,535 in the plan order');
    assert.deepEqual(limitsOf(res), [`a/huge backends_per_frontend truncated 70000/${MAX_SLOTS}`]);
    const skip = res.skipped.filter((s) => s.object === 'Service a/huge');
    assert.equal(skip.length, 1);
    assert.match(skip[0].reason, /70000 backends, over the limit of 65535 per frontend \(u16 slot count\): only the first 65535 are programmed/);
    const err = log.lines.filter((l) => l.level === 'error');
    assert.deepEqual(
      err.map((l) => [l.msg, l.fields.service, l.fields.limit, l.fields.capacity, l.fields.needed]),
      [['Service truncated: over a datapath limit', 'a/huge', 'backends_per_frontend', 65535, 70000]],
    );
    assert.ok(programmed(copyState(maps))['10.96.0.2:80/TCP'], 'the other Service is programmed');

    // Back within the limit: the report goes, with one info line.
    big.backends = backends.slice(0, MAX_SLOTS);
    const within = syncCheckedPerCall(maps, r, plans(big), false);
    assert.deepEqual(limitsOf(within), []);
    assert.ok(log.lines.some((l) => l.level === 'info' && l.fields.service === 'a/huge' && l.fields.limit === 'backends_per_frontend'));
  });
});

describe('Reconciler limits: a map the kernel finds full before admission does', () => {
  it('E2BIG below the capacity admission counted: one failed sync, then the map holds its capacity and the retry refuses what does not fit', () => {
    // The kernel's map holds 10 entries; the reconciler is told 1,000 (as when capacities are unknown or wrong).
    const maps = new MemoryDatapathMaps({ maxServices: 10 });
    const log = recorder();
    const r = new Reconciler(maps, log, { capacities: { svc: 1000 } });
    const all = Array.from({ length: 8 }, (_, i) => fe(`ns/s${i}`, `10.96.0.${i + 1}`, 80, [`10.0.0.${i + 1}:80`])); // 2 entries each
    const first = syncChecked(maps, r, plans(...all), true);
    assert.equal(first.ok, false);
    assert.match(first.error ?? '', /E2BIG/);
    const learned = log.lines.filter((l) => l.msg.startsWith('datapath map full below its capacity'));
    assert.equal(learned.length, 1);
    assert.deepEqual({ map: learned[0].fields.map, capacity: learned[0].fields.capacity }, { map: 'kpr_svc', capacity: 1000 });
    assert.equal(learned[0].fields.holds, maps.services.size);

    // The retry (what the sync loop runs next) succeeds: what fits is programmed, the rest refused against what the map holds.
    const retry = syncChecked(maps, r, plans(...all), true);
    assert.equal(retry.ok, true, retry.error);
    const served = Object.keys(programmed(copyState(maps)));
    assert.equal(served.length, 5, 'ten entries: five Services of two');
    assert.equal(retry.limits?.length, 3);
    assert.ok(retry.limits!.every((l) => l.limit === 'svc_map' && l.capacity === 10));
    // Again and again: no failure, no new log line.
    const lines = log.lines.length;
    for (let i = 0; i < 3; i++) assert.equal(syncChecked(maps, r, plans(...all), true).ok, true);
    assert.equal(
      log.lines.filter((l) => l.level !== 'info').length,
      log.lines.slice(0, lines).filter((l) => l.level !== 'info').length,
      'no new warning or error',
    );

    // Room made (two Services deleted): two refused Services are programmed in that same sync.
    const fewer = all.filter((f) => f.service !== 'ns/s0' && f.service !== 'ns/s1');
    const freed = syncChecked(maps, r, plans(...fewer), true);
    assert.equal(freed.ok, true);
    assert.equal(Object.keys(programmed(copyState(maps))).length, 5);
    assert.equal(freed.limits?.length, 1);
  });

  it('a map whose declared capacity changes (resized, replaced) is admitted against the new capacity', () => {
    const maps = new MemoryDatapathMaps({ maxServices: 4 });
    const log = recorder();
    const caps = { svc: 100 };
    const r = new Reconciler(maps, log, { capacities: caps });
    const all = Array.from({ length: 4 }, (_, i) => fe(`ns/s${i}`, `10.96.0.${i + 1}`, 80, [`10.0.0.${i + 1}:80`]));
    assert.equal(syncChecked(maps, r, plans(...all), true).ok, false);
    assert.equal(syncChecked(maps, r, plans(...all), true).limits?.length, 2);
    // The operator's resize, as the maps report it.
    caps.svc = 8;
    Object.assign(maps, { maxServices: 8 });
    const after = syncChecked(maps, r, plans(...all), true);
    assert.equal(after.ok, true);
    assert.deepEqual(after.limits, []);
    assert.equal(Object.keys(programmed(copyState(maps))).length, 4);
  });
});
