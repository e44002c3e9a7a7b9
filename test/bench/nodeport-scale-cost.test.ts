/**
 * The NodePort N-over-1 figure of issue 20 (bench/report.ts,
 * bench/scale-targets.ts): kpr at N Services over the agent served the echo
 * Service alone (arm kpr-one) in the same rounds of the phase at N, preferred
 * over the figure across the two phases, which stays beside it and is the
 * target's where the phase at N has no kpr-one arm.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ConnResult } from '../../bench/data-plane.js';
import { summarizeNodePort, type NodePortSummary } from '../../bench/report.js';
import { nodePortScaleCost, targetResults, type MeasuredAgainstTargets } from '../../bench/scale-targets.js';

function round(p50: number, mean: number, p99 = 2 * p50, rate = 10_000): ConnResult {
  return { count: 1000, errors: 0, p50_us: p50, p99_us: p99, mean_us: mean, conns_per_sec: rate, elapsed_ms: 100, first_error: '' };
}

function phase(services: number, rounds: Partial<Record<string, ConnResult[]>>): NodePortSummary {
  return summarizeNodePort({ services, nodePort: 20000, rounds, tcp: {}, errors: [] });
}

const direct = (p50s: number[]) => p50s.map((p) => round(p, p));

test('kprAtNOverOne: medians over rounds of kpr and kpr-one, and the per-round paired mean ratio', () => {
  const s = phase(2000, {
    kpr: [round(100, 110, 300, 9000), round(120, 130, 500, 8000), round(90, 95, 200, 10_000)],
    'kpr-one': [round(95, 90, 250, 9500), round(100, 130, 260, 9000), round(100, 100, 240, 9800)],
    direct: direct([80, 85, 90]),
  });
  const r = s.ratios.kprAtNOverOne!;
  assert.equal(r.p50, 1); // median 100 over median 100
  assert.equal(r.p99, 1.2); // 300 / 250
  assert.equal(r.connsPerSec, 0.947); // 9000 / 9500
  // Per round 1.222, 1, 0.95: their median, not the medians' ratio (110 / 100).
  assert.equal(r.pairedMean, 1);
  // p50 per round 100/95 = 1.053, 120/100 = 1.2, 90/100 = 0.9: their median.
  assert.equal(r.pairedP50, 1.053);
});

test('the NodePort target is the per-round paired p50 ratio: a drift both arms share between rounds cancels in it, not in the ratio of the medians', () => {
  // The rounds of the recorded 100,000-Service run (5 December 2026, 18:44 UTC): p50 µs of kpr and of kpr-one.
  const kprP50 = [77.6, 69.2, 70, 70.1, 71.9, 67.3, 64.9];
  const oneP50 = [76.6, 68.4, 68.4, 66.6, 63.8, 65.2, 63.5];
  const atN = phase(100_000, {
    kpr: kprP50.map((p) => round(p, p)),
    'kpr-one': oneP50.map((p) => round(p, p)),
    direct: direct(kprP50.map(() => 60)),
  });
  const c = nodePortScaleCost([atN]);
  assert.equal(c.basis, 'same-rounds');
  assert.equal(c.sameRounds!.p50, 1.051, 'median 70 over median 66.6');
  assert.equal(c.sameRounds!.pairedP50, 1.023, 'per round 1.013, 1.012, 1.023, 1.053, 1.127, 1.032, 1.022: their median');
  assert.equal(c.ratio, 1.023);
});

test('kprAtNOverOne is absent without a kpr-one arm (the phase at 1 Service, or --skip kpr-one)', () => {
  const s = phase(1, { kpr: [round(100, 100)], direct: direct([90]) });
  assert.equal(s.ratios.kprAtNOverOne, undefined);
  assert.equal(s.arms['kpr-one'], undefined);
});

test('the NodePort target takes the same-rounds figure of the phase at N where there is one, the cross-phase one kept beside it', () => {
  const atOne = phase(1, { kpr: [round(110, 110)], direct: direct([100]) }); // cost 1.1
  const atN = phase(2000, { kpr: [round(102, 102)], 'kpr-one': [round(100, 100)], direct: direct([80]) }); // cost 1.275
  const c = nodePortScaleCost([atOne, atN]);
  assert.equal(c.basis, 'same-rounds');
  assert.equal(c.ratio, 1.02);
  assert.deepEqual(c.sameRounds, { kprP50AtN: 102, kprP50AtOne: 100, p50: 1.02, pairedP50: 1.02, pairedMean: 1.02 });
  assert.equal(c.services, 2000);
  assert.equal(c.one, 1.1);
  assert.equal(c.atN, 1.275);
  assert.equal(c.crossPhaseRatio, 1.159);

  const measured: MeasuredAgainstTargets = { services: 100_000, clusterIp: {}, nodePort: c };
  const t = targetResults(measured).find((x) => x.name.startsWith('NodePort'))!;
  assert.equal(t.value, 1.02);
  assert.equal(t.pass, true);
  assert.match(t.name, /same rounds/);
});

test('without a kpr-one arm the NodePort target falls back to the figure across the two phases, and says so', () => {
  const atOne = phase(1, { kpr: [round(110, 110)], direct: direct([100]) });
  const atN = phase(2000, { kpr: [round(102, 102)], direct: direct([80]) });
  const c = nodePortScaleCost([atOne, atN]);
  assert.equal(c.basis, 'cross-phase');
  assert.equal(c.ratio, 1.159);
  assert.equal(c.crossPhaseRatio, 1.159);
  assert.equal(c.sameRounds, undefined);

  const t = targetResults({ services: 100_000, clusterIp: {}, nodePort: c }).find((x) => x.name.startsWith('NodePort'))!;
  assert.equal(t.value, 1.159);
  assert.equal(t.pass, false);
  assert.match(t.name, /phases at 1 and at N/);
  assert.doesNotMatch(t.name, /same rounds/);
});

test('the same-rounds figure stands without a phase at 1 Service; with neither there is no figure', () => {
  const atN = phase(2000, { kpr: [round(99, 99)], 'kpr-one': [round(100, 100)], direct: direct([80]) });
  const c = nodePortScaleCost([atN]);
  assert.equal(c.basis, 'same-rounds');
  assert.equal(c.ratio, 0.99);
  assert.equal(c.crossPhaseRatio, undefined);

  const none = nodePortScaleCost([phase(2000, { kpr: [round(99, 99)], direct: direct([80]) })]);
  assert.equal(none.ratio, undefined);
  assert.equal(none.basis, undefined);
  const t = targetResults({ services: 100_000, clusterIp: {}, nodePort: none }).find((x) => x.name.startsWith('NodePort'))!;
  assert.equal(t.pass, null);
});
