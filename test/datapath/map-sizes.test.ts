/**
 * Run-time BPF map sizes (agent/datapath/map-sizes.ts) from the agent's
 * flags and --config keys: explicit sizes, the memory ratio, kube-proxy's
 * conntrack knobs, LRU rounding, and clear errors for bad values.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { computeMapSizes, entryBytes, lruHeadroom, DYNAMIC_MAX, MAP_SIZE_MAX, type HostFacts, type MapSizeOptions } from '../../agent/datapath/map-sizes.js';

const args = ['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1'];
const opts = (extra: string[]) => (parseAgentArgs([...args, ...extra], {}) as AgentConfig).mapSizeOptions;
/** 16 GiB, 4 CPUs (also possible). */
const host: HostFacts = { totalMemoryBytes: 16 * 2 ** 30, cpus: 4, possibleCpus: 4 };
const GiB = 2 ** 30;
/** An LRU map (kpr_ct, kpr_revnat, kpr_affinity) beyond its capacity on `host`: 4 CPUs x (128 + 1). */
const CT_HEADROOM = 516;

test("defaults: the compiled sizes, kpr_ct from kube-proxy's conntrack rule", () => {
  const plan = computeMapSizes(opts([]), host);
  assert.deepEqual(plan.byMapName, {
    kpr_svc: 262144,
    kpr_backend: 262144,
    kpr_aff_match: 262144,
    // LRU maps: the capacity plus the headroom.
    kpr_revnat: 262144 + CT_HEADROOM,
    kpr_affinity: 65536 + CT_HEADROOM,
    // max(32768 x 4, 131072), plus the LRU headroom
    kpr_ct: 131072 + CT_HEADROOM,
    kpr_src_range: 16384,
    // The frontend id space: a quarter of kpr_svc.
    kpr_vip: 65536,
    kpr_svc_meta: 65536,
    kpr_svc_stats: 65536,
    // Maglev table chunks; one table reference per entry set: two per frontend id.
    kpr_maglev: 4096,
    kpr_maglev_ref: 131072,
  });
  assert.equal(plan.frontends, 65536);
  assert.equal(plan.settings.conntrack.source, 'conntrack');
  assert.equal(plan.settings.conntrack.entries, 131072, 'the capacity, without the headroom');
  assert.equal(plan.settings.services.source, 'default');
  // 16 CPUs: 32768 x 16 is above the minimum.
  assert.equal(computeMapSizes(opts([]), { ...host, cpus: 16, possibleCpus: 16 }).byMapName.kpr_ct, 524288 + 16 * 129);
});

test('explicit flags win; kpr_aff_match follows --map-size-backends', () => {
  const plan = computeMapSizes(
    opts([
      '--map-size-services',
      '1000',
      '--map-size-backends=500',
      '--map-size-conntrack',
      '4096',
      '--map-size-source-ranges',
      '64',
      '--map-size-revnat',
      '8192',
      '--map-size-affinity',
      '1024',
      '--map-size-frontends',
      '300',
      '--map-size-maglev',
      '32',
    ]),
    host,
  );
  assert.deepEqual(plan.byMapName, {
    kpr_svc: 1000,
    kpr_backend: 500,
    kpr_aff_match: 500,
    kpr_revnat: 8192 + CT_HEADROOM,
    kpr_affinity: 1024 + CT_HEADROOM,
    kpr_ct: 4096 + CT_HEADROOM,
    kpr_src_range: 64,
    kpr_vip: 300,
    kpr_svc_meta: 300,
    kpr_svc_stats: 300,
    kpr_maglev: 32,
    kpr_maglev_ref: 600,
  });
  for (const s of Object.values(plan.settings)) assert.equal(s.source, 'flag');
  // Without --map-size-frontends: a quarter of --map-size-services.
  const derived = computeMapSizes(opts(['--map-size-services', '1000']), host);
  assert.deepEqual([derived.frontends, derived.settings.frontends.source, derived.byMapName.kpr_svc_meta], [250, 'services', 250]);
});

test('the frontend id space follows --map-size-services (100,000 Services x 10 endpoints: 275,000 ids); counters off keep one kpr_svc_stats slot', () => {
  const big = computeMapSizes(opts(['--map-size-services', '1100000']), host);
  assert.equal(big.frontends, 275000);
  assert.equal(big.byMapName.kpr_svc_stats, 275000);
  assert.equal(big.byMapName.kpr_svc_meta, 275000);
  assert.equal(big.byMapName.kpr_vip, 275000);
  assert.equal(computeMapSizes({ ...opts(['--map-size-services', '1100000']), serviceCounters: false }, host).byMapName.kpr_svc_stats, 1);
  assert.equal(computeMapSizes(opts(['--map-size-services', '1']), host).frontends, 2, 'id 0 is never used: at least one id');
});

test('conntrack knobs: per-core x CPUs against the minimum; per-core 0 leaves the compiled size', () => {
  assert.equal(computeMapSizes(opts(['--conntrack-max-per-core', '100000']), host).byMapName.kpr_ct, 400000 + CT_HEADROOM);
  assert.equal(computeMapSizes(opts(['--conntrack-max-per-core', '1000', '--conntrack-min', '50000']), host).byMapName.kpr_ct, 50000 + CT_HEADROOM);
  const off = computeMapSizes(opts(['--conntrack-max-per-core', '0']), host);
  assert.equal(off.byMapName.kpr_ct, 262144 + CT_HEADROOM);
  assert.equal(off.settings.conntrack.source, 'default');
  // An explicit size overrides the knobs.
  assert.equal(computeMapSizes(opts(['--conntrack-max-per-core', '100000', '--map-size-conntrack', '2048']), host).byMapName.kpr_ct, 2048 + CT_HEADROOM);
});

test('memory ratio: a share of the budget for the flow-state maps, floored at their defaults, capped', () => {
  const o = opts(['--bpf-map-dynamic-size-ratio', '0.01']);
  const plan = computeMapSizes(o, host);
  const budget = 16 * GiB * 0.01;
  const round4 = (n: number) => Math.ceil(n / 4) * 4;
  assert.equal(plan.byMapName.kpr_ct, round4(Math.floor((budget * 0.6) / entryBytes('ct'))) + CT_HEADROOM);
  assert.equal(plan.byMapName.kpr_revnat, round4(Math.floor((budget * 0.3) / entryBytes('revnat'))) + CT_HEADROOM);
  assert.equal(plan.settings.revnat.entries, round4(Math.floor((budget * 0.3) / entryBytes('revnat'))), 'the capacity, without the headroom');
  assert.equal(plan.settings.conntrack.source, 'ratio');
  assert.ok(plan.byMapName.kpr_ct! > 131072);
  // Not flow state: unchanged.
  assert.equal(plan.byMapName.kpr_svc, 262144);
  // A small node: the ratio gives less than the floors, which stay.
  const small = computeMapSizes(opts(['--bpf-map-dynamic-size-ratio', '0.0025']), { totalMemoryBytes: 2 * GiB, cpus: 2, possibleCpus: 2 });
  assert.equal(small.byMapName.kpr_ct, 131072 + 2 * 129);
  assert.equal(small.settings.conntrack.source, 'conntrack');
  assert.equal(small.byMapName.kpr_affinity, 65536 + 2 * 129);
  // A huge node: capped.
  const huge = computeMapSizes(opts(['--bpf-map-dynamic-size-ratio', '1']), { totalMemoryBytes: 4096 * GiB, cpus: 4, possibleCpus: 4 });
  assert.equal(huge.byMapName.kpr_ct, DYNAMIC_MAX + CT_HEADROOM);
  // An explicit size beats the ratio.
  assert.equal(computeMapSizes(opts(['--bpf-map-dynamic-size-ratio', '0.01', '--map-size-conntrack', '1000']), host).byMapName.kpr_ct, 1000 + CT_HEADROOM);
});

test('every LRU map (kpr_ct, kpr_revnat, kpr_affinity): its capacity plus a batch of free LRU elements per possible CPU, so it never evicts below the capacity', () => {
  assert.equal(lruHeadroom(4), CT_HEADROOM);
  assert.equal(lruHeadroom(1), 129);
  const plan = computeMapSizes(opts(['--map-size-conntrack', String(MAP_SIZE_MAX), '--map-size-revnat', '1000', '--map-size-affinity', '10']), host);
  assert.equal(plan.byMapName.kpr_ct, MAP_SIZE_MAX, 'never beyond the largest size');
  // 10 rounds up to 12 (4 CPUs), then the headroom is added.
  assert.equal(plan.byMapName.kpr_revnat, 1000 + CT_HEADROOM);
  assert.equal(plan.byMapName.kpr_affinity, 12 + CT_HEADROOM);
  assert.deepEqual(
    [plan.settings.revnat.entries, plan.settings.affinity.entries],
    [1000, 12],
    'the settings stay the capacities asked for (rounded to the CPUs)',
  );
  // Hash maps get none: they never evict.
  assert.equal(plan.byMapName.kpr_svc, 262144);
});

test('LRU maps are rounded up to a multiple of the possible CPUs, as the kernel stores them; hash maps are not', () => {
  const plan = computeMapSizes(opts(['--map-size-conntrack', '1001', '--map-size-revnat', '7', '--map-size-services', '1001']), { ...host, possibleCpus: 6 });
  // 1001 + 6 x 129 = 1775, rounded up to 1776; 7 rounds up to 12, plus 774.
  assert.equal(plan.byMapName.kpr_ct, 1776);
  assert.equal(plan.byMapName.kpr_revnat, 12 + 6 * 129);
  assert.equal(plan.byMapName.kpr_svc, 1001);
});

test('bad values are refused with the flag and the bounds', () => {
  const bad = (extra: string[], re: RegExp) => assert.throws(() => parseAgentArgs([...args, ...extra], {}), re);
  bad(['--map-size-services', '0'], /invalid --map-size-services 0: out of range \(1-67108864 entries\)/);
  bad(['--map-size-backends=-5'], /invalid --map-size-backends "-5" \(a whole number of entries/);
  bad(['--map-size-conntrack', '1e6'], /invalid --map-size-conntrack "1e6"/);
  bad(['--map-size-conntrack', String(MAP_SIZE_MAX + 1)], /out of range/);
  bad(['--map-size-source-ranges', 'lots'], /invalid --map-size-source-ranges "lots"/);
  bad(['--bpf-map-dynamic-size-ratio', '1.5'], /invalid --bpf-map-dynamic-size-ratio "1.5" \(a fraction of the node's memory, 0 to 1/);
  bad(['--bpf-map-dynamic-size-ratio', 'x'], /invalid --bpf-map-dynamic-size-ratio/);
  bad(['--conntrack-max-per-core=-1'], /invalid --conntrack-max-per-core/);
  bad(['--conntrack-min', '1.5'], /invalid --conntrack-min/);
});

test('--config keys: the same names, numbers as YAML numbers; the command line overrides the file', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-map-sizes-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, 'map-size-services: 5000\nmap-size-conntrack: 65536\nconntrack-max-per-core: 0\nbpf-map-dynamic-size-ratio: 0.002\n');
    const o: MapSizeOptions = opts(['--config', file, '--map-size-services', '6000']);
    assert.deepEqual(o, { explicit: { services: 6000, conntrack: 65536 }, dynamicSizeRatio: 0.002, conntrackMaxPerCore: 0, conntrackMin: 131072 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
