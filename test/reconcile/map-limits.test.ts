/**
 * A full map on real kernel maps: the reconciler reads max_entries from the
 * maps themselves, refuses the Service that does not fit before any write
 * (the kernel never answers E2BIG), leaves what is programmed as it was and
 * programs the refused Service in the same sync that makes room.
 */
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import { instrumentMapErrors } from '../../agent/metrics/instrument-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import type { PlanFrontend } from '../../agent/plan/types.js';
import { liveViolations, programmed } from './support/datapath-state.js';
import { closeMapSet, kernelState, requireBpf, standaloneMapSet } from '../support/bpf-fixtures.js';

const quiet = { info() {}, warn() {}, error() {} };

before(() => requireBpf());

function fe(service: string, address: string, backends: number, from: number): PlanFrontend {
  return {
    service,
    portName: 'http',
    type: 'ClusterIP',
    address,
    port: 80,
    protocol: 'TCP',
    backends: Array.from({ length: backends }, (_, i) => ({ address: `198.18.0.${from + i}`, port: 8080 })),
    trafficPolicy: 'Cluster',
    affinityTimeoutSeconds: 0,
    sourceRanges: [],
  };
}

test('a full kpr_svc refuses the Service that does not fit, corrupts nothing, and takes it once room is made', () => {
  const small = standaloneMapSet(10); // kpr_svc: max_entries 10
  const failures: string[] = [];
  try {
    const d = new BpfDatapathMaps(small);
    assert.equal(d.capacities().svc, 10);
    const r = new Reconciler(
      instrumentMapErrors(d, (map, op) => failures.push(`${map} ${op}`)),
      quiet,
    );
    r.adopt();
    const a = fe('a/x', '198.19.0.1', 5, 1); // 6 entries
    const first = r.sync(new Map([['a/x', [a]]]), { full: true });
    assert.equal(first.ok, true);
    const before = programmed(kernelState(d));

    // b/y needs 6 of the 4 left; c/z needs 2.
    const res = r.sync(
      new Map([
        ['b/y', [fe('b/y', '198.19.0.2', 5, 10)]],
        ['c/z', [fe('c/z', '198.19.0.3', 1, 20)]],
      ]),
      { full: false },
    );
    assert.equal(res.ok, true, res.error);
    assert.deepEqual(
      (res.limits ?? []).map((l) => [l.service, l.limit, l.capacity, l.needed, l.free]),
      [['b/y', 'svc_map', 10, 6, 4]],
    );
    const state = kernelState(d);
    assert.deepEqual(liveViolations(state), []);
    assert.deepEqual(programmed(state), { ...before, '198.19.0.3:80/TCP': ['198.18.0.20:8080'] });
    assert.equal(state.services.size, 8);

    // a/x deleted: its 6 entries go at the end of the sync, then b/y is written.
    const freed = r.sync(new Map([['a/x', []]]), { full: false });
    assert.equal(freed.ok, true, freed.error);
    assert.deepEqual(freed.limits, []);
    const after = kernelState(d);
    assert.deepEqual(liveViolations(after), []);
    assert.deepEqual(Object.keys(programmed(after)).sort(), ['198.19.0.2:80/TCP', '198.19.0.3:80/TCP']);
    assert.equal(programmed(after)['198.19.0.2:80/TCP'].length, 5);
    assert.deepEqual(failures, [], 'no map operation failed: nothing was written that did not fit');
  } finally {
    closeMapSet(small);
  }
});

test('the kernel answers E2BIG where admission counted room (capacity told wrong): one failed sync, then the retry refuses what does not fit', () => {
  const small = standaloneMapSet(10); // kpr_svc: max_entries 10
  const failures: string[] = [];
  const errors: Array<Record<string, unknown>> = [];
  try {
    const d = new BpfDatapathMaps(small);
    const log = { info() {}, warn() {}, error: (msg: string, f: Record<string, unknown> = {}) => void errors.push({ msg, ...f }) };
    // As if max_entries were not known: admission counts on 1,000 entries.
    const r = new Reconciler(
      instrumentMapErrors(d, (map, op) => failures.push(`${map} ${op}`)),
      log,
      { capacities: { svc: 1000 } },
    );
    r.adopt();
    const plans = new Map([1, 2, 3, 4].map((i) => [`ns/s${i}`, [fe(`ns/s${i}`, `198.19.0.${i}`, 3, i * 10)]] as [string, PlanFrontend[]])); // 4 entries each
    const first = r.sync(plans, { full: true });
    assert.equal(first.ok, false);
    assert.match(first.error ?? '', /E2BIG/);
    assert.ok(
      failures.some((f) => f.startsWith('kpr_svc ')),
      failures.join(', '),
    );
    const learned = errors.find((e) => e.msg === 'datapath map full below its capacity: Services are admitted against what it holds');
    assert.ok(learned, JSON.stringify(errors));
    assert.equal(learned.map, 'kpr_svc');
    assert.equal(learned.error, 'E2BIG');

    const retry = r.sync(plans, { full: true });
    assert.equal(retry.ok, true, retry.error);
    const state = kernelState(d);
    assert.deepEqual(liveViolations(state), []);
    assert.equal(Object.keys(programmed(state)).length, 2, 'two Services of four entries fit in ten');
    assert.deepEqual(
      (retry.limits ?? []).map((l) => [l.limit, l.capacity]),
      [
        ['svc_map', 10],
        ['svc_map', 10],
      ],
    );
    const failed = failures.length;
    assert.equal(r.sync(plans, { full: true }).ok, true);
    assert.equal(failures.length, failed, 'no write fails again');
  } finally {
    closeMapSet(small);
  }
});
