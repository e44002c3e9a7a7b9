/**
 * Address ownership (agent/reconcile/ownership.ts): which Service's claim on
 * a frontend is programmed when several claim it — ClusterIP > NodePort >
 * LoadBalancer > ExternalIP, then the oldest Service, then the lowest key —
 * and how the losers are reported (skipped, kpr_frontend_conflicts, one log
 * line per loser, a summary when many are new at once). CVE-2020-8554: a
 * Service listing another's ClusterIP in externalIPs gets none of its traffic.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FrontendType, PlanFrontend } from '../../agent/plan/types.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler, type PlanSource, type ReconcileLogger } from '../../agent/reconcile/reconciler.js';
import { CONFLICT_DETAIL_LINES } from '../../agent/reconcile/ownership.js';
import { fe as frontend, plans, quiet, syncChecked } from './support/reconcile-harness.js';
import { copyState, programmed } from './support/datapath-state.js';

/** A frontend of `type` (the harness's, with its type). */
const fe = (service: string, type: FrontendType, address: string, port: number, backends: string[]): PlanFrontend =>
  frontend(service, address, port, backends, { type });

/** A logger that keeps its lines. */
function recorder() {
  const lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> = [];
  const log: ReconcileLogger = {
    info: (msg, fields = {}) => lines.push({ level: 'info', msg, fields }),
    warn: (msg, fields = {}) => lines.push({ level: 'warn', msg, fields }),
    error: (msg, fields = {}) => lines.push({ level: 'error', msg, fields }),
  };
  return { lines, log };
}

/** Plans with creationTimestamps (ms) per Service, as the sync loop gives them. */
function aged(p: Map<string, PlanFrontend[]>, created: Record<string, number>): Map<string, PlanFrontend[]> & PlanSource {
  return Object.assign(p, { created: (s: string) => created[s] });
}

/** Every backend address the maps were ever told to hold. */
function backendsEverWritten(maps: MemoryDatapathMaps): Set<string> {
  const out = new Set<string>();
  for (const op of maps.ops) if (op.kind === 'backend-update') out.add(op.val.addr);
  return out;
}

const WEB = fe('default/web', 'ClusterIP', '10.96.0.10', 80, ['10.0.0.1:8080']);
const EVIL = fe('aaa-evil/web', 'ExternalIP', '10.96.0.10', 80, ['10.0.0.66:8080']);

describe('address ownership', () => {
  it("a ClusterIP beats another Service's externalIP on it, whatever the names; the loser is never written, even briefly", () => {
    const maps = new MemoryDatapathMaps();
    const { lines, log } = recorder();
    const r = new Reconciler(maps, log);
    const res = syncChecked(maps, r, plans(EVIL, WEB), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.1:8080'] });
    assert.equal(backendsEverWritten(maps).has('10.0.0.66'), false);
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service aaa-evil/web'],
    );
    assert.match(res.skipped[0].reason, /ExternalIP frontend 10\.96\.0\.10:80\/TCP .*ClusterIP of Service default\/web/);
    assert.deepEqual(res.conflicts, [{ type: 'ExternalIP', rule: 'cluster-ip-address', frontends: 1 }]);
    const warned = lines.filter((l) => l.msg === 'frontend conflict');
    assert.equal(warned.length, 1);
    assert.deepEqual([warned[0].fields.service, warned[0].fields.owner, warned[0].fields.type], ['aaa-evil/web', 'default/web', 'ExternalIP']);
  });

  it('the same after a restart: a full sync over adopted maps never hands the ClusterIP to the hijacker', () => {
    const maps = new MemoryDatapathMaps();
    new Reconciler(maps, quiet).sync(plans(WEB), { full: true });
    const r = new Reconciler(maps, quiet);
    r.adopt();
    maps.clearLog();
    syncChecked(maps, r, plans(EVIL, WEB), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.1:8080'] });
    assert.equal(backendsEverWritten(maps).has('10.0.0.66'), false);
    assert.equal(maps.calls.length, 0, 'nothing to write: the owner already has it');
  });

  it('an incremental sync adding the hijacker changes nothing; removing the owner frees the address', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    syncChecked(maps, r, plans(WEB), true);
    maps.clearLog();
    const res = syncChecked(maps, r, plans(EVIL), false);
    assert.equal(maps.calls.length, 0);
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service aaa-evil/web'],
    );
    // Once default/web is gone the externalIP is nobody's ClusterIP any more.
    const gone = syncChecked(maps, r, new Map([['default/web', []]]), false);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.66:8080'] });
    assert.deepEqual([gone.skipped, gone.conflicts], [[], []]);
  });

  it('an externalIP or LB IP equal to a ClusterIP on another port is refused too, and follows the ClusterIP coming and going', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const ext = fe('aaa-evil/web', 'ExternalIP', '10.96.0.10', 8443, ['10.0.0.66:8443']);
    const lb = fe('aaa-evil/lb', 'LoadBalancer', '10.96.0.10', 9000, ['10.0.0.67:9000']);
    const res = syncChecked(maps, r, plans(ext, lb, WEB), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.1:8080'] });
    assert.deepEqual(res.skipped.map((s) => s.object).sort(), ['Service aaa-evil/lb', 'Service aaa-evil/web']);
    assert.deepEqual(
      res.conflicts!.sort((a, b) => a.type.localeCompare(b.type)),
      [
        { type: 'ExternalIP', rule: 'cluster-ip-address', frontends: 1 },
        { type: 'LoadBalancer', rule: 'cluster-ip-address', frontends: 1 },
      ],
    );
    // The ClusterIP Service goes (an incremental sync that names only it): both are programmed.
    syncChecked(maps, r, new Map([['default/web', []]]), false);
    assert.deepEqual(Object.keys(programmed(copyState(maps))).sort(), ['10.96.0.10:8443/TCP', '10.96.0.10:9000/TCP']);
    // It comes back: they are removed in the same incremental sync.
    const back = syncChecked(maps, r, plans(WEB), false);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.1:8080'] });
    assert.equal(back.skipped.length, 2);
  });

  it('a load-balancer IP loses to a ClusterIP on the same frontend', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const lb = fe('a/lb', 'LoadBalancer', '10.96.0.10', 80, ['10.0.0.5:80']);
    const res = syncChecked(maps, r, plans(lb, WEB), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.10:80/TCP': ['10.0.0.1:8080'] });
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service a/lb'],
    );
  });

  it('NodePort beats LoadBalancer beats ExternalIP on one frontend, whatever the names and ages', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const np = fe('z/np', 'NodePort', '198.18.0.1', 30080, ['10.0.0.1:80']);
    const lb = fe('m/lb', 'LoadBalancer', '198.18.0.1', 30080, ['10.0.0.2:80']);
    const ex = fe('a/ex', 'ExternalIP', '198.18.0.1', 30080, ['10.0.0.3:80']);
    const ages = { 'z/np': 3000, 'm/lb': 2000, 'a/ex': 1000 }; // the loser is the oldest
    let res = syncChecked(maps, r, aged(plans(ex, lb, np), ages), true);
    assert.deepEqual(programmed(copyState(maps)), { '198.18.0.1:30080/TCP': ['10.0.0.1:80'] });
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service a/ex', 'Service m/lb'],
    );
    assert.match(res.skipped[1].reason, /LoadBalancer frontend .* claimed by Service z\/np as NodePort, which wins/);
    // Without the NodePort the LoadBalancer IP wins over the externalIP.
    res = syncChecked(maps, r, new Map([['z/np', []]]), false);
    assert.deepEqual(programmed(copyState(maps)), { '198.18.0.1:30080/TCP': ['10.0.0.2:80'] });
    assert.deepEqual(res.conflicts, [{ type: 'ExternalIP', rule: 'outranked', frontends: 1 }]);
  });

  it('between claims of one class the oldest Service wins, then the lowest key; a new claim cannot take over', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const old = fe('zzz/old', 'ExternalIP', '203.0.113.7', 443, ['10.0.0.1:443']);
    const young = fe('aaa/new', 'ExternalIP', '203.0.113.7', 443, ['10.0.0.9:443']);
    const ages = { 'zzz/old': Date.parse('2024-01-01T00:00:00Z'), 'aaa/new': Date.parse('2025-06-01T00:00:00Z') };
    syncChecked(maps, r, aged(plans(old), ages), true);
    const res = syncChecked(maps, r, aged(plans(young), ages), false);
    assert.deepEqual(programmed(copyState(maps)), { '203.0.113.7:443/TCP': ['10.0.0.1:443'] });
    assert.deepEqual(
      res.skipped.map((s) => s.object),
      ['Service aaa/new'],
    );
    // The same decision from a full sync.
    syncChecked(maps, r, aged(plans(young, old), ages), true);
    assert.deepEqual(programmed(copyState(maps)), { '203.0.113.7:443/TCP': ['10.0.0.1:443'] });
    // Equal (or unknown) ages: the lowest key.
    syncChecked(maps, r, aged(plans(young, old), { 'zzz/old': 5, 'aaa/new': 5 }), true);
    assert.deepEqual(programmed(copyState(maps)), { '203.0.113.7:443/TCP': ['10.0.0.9:443'] });
    syncChecked(maps, r, plans(young, old), true);
    assert.deepEqual(programmed(copyState(maps)), { '203.0.113.7:443/TCP': ['10.0.0.9:443'] });
  });

  it('a conflict is logged once per loser, not on every sync; again when its owner changes or it comes back', () => {
    const maps = new MemoryDatapathMaps();
    const { lines, log } = recorder();
    const r = new Reconciler(maps, log);
    const a = fe('a/x', 'ExternalIP', '203.0.113.7', 443, ['10.0.0.1:443']);
    const b = fe('b/y', 'ExternalIP', '203.0.113.7', 443, ['10.0.0.2:443']);
    const c = fe('c/z', 'ExternalIP', '203.0.113.7', 443, ['10.0.0.3:443']);
    for (let i = 0; i < 20; i++) r.sync(plans(a, b, c), { full: true });
    const conflictLines = () => lines.filter((l) => l.msg.startsWith('frontend conflict'));
    assert.deepEqual(
      conflictLines().map((l) => l.fields.service),
      ['b/y', 'c/z'],
    );
    assert.equal(r.conflictCounts()[0].frontends, 2);
    // a/x goes: b/y owns it now, c/z's conflict has a new owner and is logged again; b/y's is gone.
    r.sync(plans(b, c), { full: true });
    assert.deepEqual(
      conflictLines()
        .slice(2)
        .map((l) => [l.fields.service, l.fields.owner]),
      [['c/z', 'b/y']],
    );
    // b/y stops conflicting (b alone), then conflicts again: logged again.
    r.sync(plans(b), { full: true });
    assert.deepEqual(r.conflictCounts(), []);
    r.sync(plans(b, c), { full: true });
    assert.equal(conflictLines().length, 4);
    assert.ok(lines.every((l) => l.level !== 'error'));
  });

  it('two ClusterIP claims (broken input): the older wins; the conflict ends when the loser goes', () => {
    const maps = new MemoryDatapathMaps();
    const r = new Reconciler(maps, quiet);
    const a = fe('a/x', 'ClusterIP', '10.96.0.1', 80, ['10.0.0.1:80']);
    const b = fe('b/y', 'ClusterIP', '10.96.0.1', 80, ['10.0.0.2:80']);
    const res = syncChecked(maps, r, aged(plans(a, b), { 'a/x': 2000, 'b/y': 1000 }), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.2:80'] });
    assert.deepEqual(res.conflicts, [{ type: 'ClusterIP', rule: 'outranked', frontends: 1 }]);
    const after = syncChecked(maps, r, plans(a), true);
    assert.deepEqual(programmed(copyState(maps)), { '10.96.0.1:80/TCP': ['10.0.0.1:80'] });
    assert.deepEqual([after.skipped, after.conflicts], [[], []]);
  });

  it('100 conflicting Services: the first sync logs at most a few details and one summary, later syncs nothing', () => {
    const maps = new MemoryDatapathMaps();
    const { lines, log } = recorder();
    const r = new Reconciler(maps, log);
    const fs: PlanFrontend[] = [];
    for (let i = 0; i < 100; i++) {
      const vip = `10.96.1.${i}`;
      fs.push(fe(`default/svc-${i}`, 'ClusterIP', vip, 80, [`10.0.1.${i}:80`]));
      fs.push(fe(`evil/svc-${i}`, 'ExternalIP', vip, 80, [`10.0.2.${i}:80`]));
    }
    const p = plans(...fs);
    const res = r.sync(p, { full: true });
    assert.equal(res.skipped.length, 100, 'every loser is in skipped');
    assert.deepEqual(res.conflicts, [{ type: 'ExternalIP', rule: 'cluster-ip-address', frontends: 100 }]);
    const first = lines.filter((l) => l.msg.startsWith('frontend conflict'));
    assert.equal(first.filter((l) => l.msg === 'frontend conflict').length, CONFLICT_DETAIL_LINES);
    const summary = first.filter((l) => l.msg === 'frontend conflicts');
    assert.equal(summary.length, 1);
    assert.deepEqual([summary[0].fields.new, summary[0].fields.total, summary[0].fields.notLoggedOneByOne], [100, 100, 100 - CONFLICT_DETAIL_LINES]);
    assert.ok((summary[0].fields.first as string[]).length <= 5);
    for (let i = 0; i < 50; i++) r.sync(p, { full: true });
    for (let i = 0; i < 50; i++) r.sync(plans(fe('evil/svc-7', 'ExternalIP', '10.96.1.7', 80, ['10.0.2.7:80'])), { full: false });
    assert.equal(lines.length, first.length, 'no line from the 100 later syncs');
  });
});
