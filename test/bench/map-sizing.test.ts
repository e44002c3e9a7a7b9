/**
 * The map sizes the benchmark gives its agents (bench/map-sizing.ts): none
 * at the default scale, and at 100,000 Services × 10 flags that the agent's
 * own parser and sizing turn into maps holding the whole scenario.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { computeMapSizes } from '../../agent/datapath/map-sizes.js';
import { benchMapSizeArgs, benchMapSizes, needsOf, scenarioNeeds, shortfall, type MapNeeds } from '../../bench/map-sizing.js';
import { makeNodePortScenario, MAX_NODE_PORTS } from '../../bench/nodeport-scenario.js';
import { makeScenario } from '../../bench/scenario.js';

/** The agent's map sizes (kpr_* → max_entries) for the bench's flags, on a 2-CPU host. */
function agentSizes(flags: string[]): Record<string, number> {
  const cfg = parseAgentArgs(['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1', ...flags], {}) as AgentConfig;
  return computeMapSizes(cfg.mapSizeOptions, { totalMemoryBytes: 8 * 2 ** 30, cpus: 2, possibleCpus: 2 }).byMapName;
}

function assertHolds(sizes: Record<string, number>, needs: MapNeeds): void {
  assert.ok(sizes.kpr_svc >= needs.svcEntries * 1.25, `kpr_svc ${sizes.kpr_svc} for ${needs.svcEntries}`);
  assert.ok(sizes.kpr_backend >= needs.backends * 1.25, `kpr_backend ${sizes.kpr_backend} for ${needs.backends}`);
  assert.ok(sizes.kpr_aff_match >= needs.backends);
  // Frontend ids 1 .. n-1.
  for (const m of ['kpr_svc_meta', 'kpr_vip', 'kpr_svc_stats']) assert.ok(sizes[m] - 1 >= needs.frontends * 1.25, `${m} ${sizes[m]} for ${needs.frontends}`);
}

test("the scenario's needs, counted without building it", () => {
  for (const [n, e] of [
    [0, 10],
    [100, 3],
    [66_000, 2],
  ])
    assert.deepEqual(scenarioNeeds(n, e), needsOf(makeScenario(n, e).services), `${n} × ${e}`);
});

test('10,000 × 10: the agent runs on its default sizes, which hold the scenario', () => {
  const needs = scenarioNeeds(10_000, 10);
  assert.deepEqual(benchMapSizeArgs(needs), []);
  assertHolds(agentSizes([]), needs);
});

test("100,000 × 10: the flags size every map to hold the scenario, and the in-process maps match the agent's", () => {
  const needs = scenarioNeeds(100_000, 10);
  assert.deepEqual(needs, { frontends: 100_001, svcEntries: 1_100_002, backends: 1_000_001 });
  const flags = benchMapSizeArgs(needs);
  const sizes = agentSizes(flags);
  assertHolds(sizes, needs);
  const own = benchMapSizes(needs);
  assert.deepEqual({ services: sizes.kpr_svc, backends: sizes.kpr_backend, frontends: sizes.kpr_svc_meta }, own);
});

test('the NodePort scenario beyond the node ports: the rest ClusterIP only, two frontends per NodePort Service', () => {
  const total = MAX_NODE_PORTS + 1000;
  const { services, echo } = makeNodePortScenario(total, 2);
  assert.equal(services.length, total);
  assert.equal(services.filter((s) => s.nodePort).length, MAX_NODE_PORTS);
  assert.equal(echo.nodePort! - 20000, Math.floor((MAX_NODE_PORTS - 1) / 2));
  const needs = needsOf(services);
  assert.equal(needs.frontends, total + MAX_NODE_PORTS);
  assertHolds(agentSizes(benchMapSizeArgs(needs)), needs);
});

test('an initial sync that left Services out is a shortfall', () => {
  const needs = scenarioNeeds(10, 2);
  assert.equal(shortfall({ frontends: 11, backends: 21 }, needs), undefined);
  assert.match(shortfall({ frontends: 9, backends: 21, overLimit: 2 }, needs)!, /2 Services refused.*9 frontends programmed of 11/);
});
