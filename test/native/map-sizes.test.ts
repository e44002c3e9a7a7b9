/**
 * Run-time map sizes on the real kernel, through the agent's loader
 * (agent/datapath/loader.ts) in a private bpffs directory and a cgroup of
 * the test's own: the objects load with the configured max_entries (read
 * back from the pins, and a full kpr_svc refuses one entry more); a restart
 * with another size keeps the pinned map at its pinned size (same map,
 * contents kept), says so in one log line and in the Datapath; when another
 * pin is incompatible every map is created anew at the configured sizes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, BpfObject, detachPinnedLink, possibleCpus } from '../../native/index.js';
import { loadDatapath, type Datapath } from '../../agent/datapath/loader.js';
import { computeMapSizes, CONNTRACK_MAX_PER_CORE_DEFAULT, CONNTRACK_MIN_DEFAULT, type MapSizeSetting } from '../../agent/datapath/map-sizes.js';
import { probeKernelFeatures } from '../../agent/datapath/kernel-probes.js';
import { mapPinDir } from '../../agent/datapath/pins.js';
import { MAP_NAMES } from '../../agent/maps/layout.js';
import type { MapId } from '../../agent/maps/registry.js';
import type { Logger } from '../../agent/log.js';
import { bpffsTempDir, cgroup2Mount, objPath, requireBpf, rmrf, svcKey, svcVal, unique } from './helpers.js';

type Line = { level: string; msg: string; fields?: Record<string, unknown> };

function recordingLogger(): Logger & { lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, fields });
  const log = { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug'), child: () => log };
  return log as Logger & { lines: Line[] };
}

function sizes(explicit: Partial<Record<MapSizeSetting, number>>): Record<string, number> {
  return computeMapSizes(
    { explicit, conntrackMaxPerCore: CONNTRACK_MAX_PER_CORE_DEFAULT, conntrackMin: CONNTRACK_MIN_DEFAULT },
    { totalMemoryBytes: 1 << 30, cpus: 1, possibleCpus: possibleCpus() },
  ).byMapName;
}

function pinnedMaxEntries(bpffsDir: string, name: string): { maxEntries: number; id: number } {
  const m = BpfMap.openPinned(path.join(mapPinDir(bpffsDir), name));
  try {
    return { maxEntries: m.maxEntries, id: m.id };
  } finally {
    m.close();
  }
}

test('the loader sizes the maps at run time; a pin at another size keeps its size; an incompatible pin recreates all at the configured sizes', () => {
  requireBpf();
  const cgRoot = cgroup2Mount();
  const cg = path.join(cgRoot, unique());
  assert.notEqual(path.resolve(cg), path.resolve(cgRoot), 'never the root cgroup');
  fs.mkdirSync(cg);
  const bpffsDir = bpffsTempDir();
  const features = probeKernelFeatures({ cgroupPath: cg, bpfObject: objPath }).features;
  const open: Datapath[] = [];
  const load = (mapSizes: Record<string, number>, log: Logger) => {
    const dp = loadDatapath({ bpfObject: objPath, bpffsDir, cgroupPath: cg, loadUdpIterator: false, mapSizes }, log, features);
    open.push(dp);
    return dp;
  };
  try {
    // 1. First start: every sized map is created at the configured size.
    const first = sizes({ services: 40, backends: 300, conntrack: 2048, sourceRanges: 64, revnat: 1000, affinity: 512 });
    assert.notEqual(first.kpr_svc, 262144);
    const log1 = recordingLogger();
    const dp1 = load(first, log1);
    assert.deepEqual(dp1.sizeMismatches, []);
    for (const [name, n] of Object.entries(first)) {
      assert.equal(pinnedMaxEntries(bpffsDir, name).maxEntries, n, `${name}: pinned max_entries`);
      const id = (Object.keys(MAP_NAMES) as MapId[]).find((k) => MAP_NAMES[k] === name)!;
      assert.equal(dp1.maps[id].maxEntries, n, `${name}: the agent's handle`);
    }
    assert.equal(first.kpr_aff_match, 300, 'kpr_aff_match follows --map-size-backends');
    // The tc object shares the same (resized) maps.
    const tcCt = dp1.tcObject.map('kpr_ct');
    assert.equal(tcCt.id, dp1.maps.ct.id);
    // The kernel holds it to 40 entries: the 41st is refused.
    for (let i = 0; i < 40; i++) dp1.maps.svc.update(svcKey(i), svcVal(i, 1));
    assert.throws(() => dp1.maps.svc.update(svcKey(40), svcVal(40, 1)), /E2BIG|full/);
    const svcId = dp1.maps.svc.id;
    for (const a of dp1.attachments) assert.ok(a.linkId > 0);
    dp1.close();

    // 2. Restart with a larger kpr_svc: kept at 40 (same map, entries and all), one warning naming it.
    const second = sizes({ services: 80, backends: 300, conntrack: 2048, sourceRanges: 64, revnat: 1000, affinity: 512 });
    const log2 = recordingLogger();
    const dp2 = load(second, log2);
    assert.deepEqual(dp2.sizeMismatches, [{ name: 'kpr_svc', pinned: 40, requested: 80 }]);
    assert.equal(dp2.mapSizes.kpr_svc, 40);
    assert.equal(dp2.maps.svc.id, svcId, 'the pinned map is reused');
    assert.equal(dp2.maps.svc.maxEntries, 40);
    assert.deepEqual(dp2.maps.svc.lookup(svcKey(7)), svcVal(7, 1));
    assert.deepEqual(dp2.replacedPins, []);
    const warned = log2.lines.filter((l) => l.level === 'warn' && /^map kpr_svc is pinned with max_entries 40, configured 80: kept at 40/.test(l.msg));
    assert.equal(warned.length, 1, JSON.stringify(log2.lines));
    assert.deepEqual(warned[0]!.fields, { map: 'kpr_svc', pinned: 40, requested: 80 });
    assert.equal(log2.lines.filter((l) => l.level === 'error').length, 0, JSON.stringify(log2.lines));
    // The other maps kept their (equal) sizes without a word.
    assert.equal(log2.lines.filter((l) => /is pinned with max_entries/.test(l.msg)).length, 1);
    dp2.close();

    // 3. A map without a run-time size pinned at another size is incompatible: every pin is replaced,
    //    so kpr_svc is created anew at the configured 80.
    fs.rmSync(path.join(mapPinDir(bpffsDir), 'kpr_term'));
    const donorDir = bpffsTempDir();
    try {
      const donor = BpfObject.open(objPath, { pinMapsDir: donorDir, maxEntries: { kpr_term: 16 } });
      try {
        donor.load();
        donor.map('kpr_term').pin(path.join(mapPinDir(bpffsDir), 'kpr_term'));
      } finally {
        donor.close();
      }
    } finally {
      rmrf(donorDir);
    }
    const log3 = recordingLogger();
    const dp3 = load(second, log3);
    assert.deepEqual(dp3.replacedPins, ['kpr_term']);
    assert.deepEqual(dp3.sizeMismatches, []);
    assert.equal(pinnedMaxEntries(bpffsDir, 'kpr_svc').maxEntries, 80);
    assert.notEqual(pinnedMaxEntries(bpffsDir, 'kpr_svc').id, svcId);
    assert.equal(pinnedMaxEntries(bpffsDir, 'kpr_term').maxEntries, 4096);
    assert.ok(log3.lines.some((l) => l.level === 'error' && /pinned maps are not the maps kpr defines/.test(l.msg)));
    for (const a of dp3.attachSockPrograms()) assert.ok(a.linkId > 0);
  } finally {
    for (const dp of open) dp.close();
    for (const f of fs.existsSync(path.join(bpffsDir, 'links')) ? fs.readdirSync(path.join(bpffsDir, 'links')) : []) {
      try {
        detachPinnedLink(path.join(bpffsDir, 'links', f));
      } catch {
        /* removed with the directory */
      }
    }
    rmrf(bpffsDir);
    fs.rmdirSync(cg);
  }
});

test('BpfObject: maxEntries sets max_entries before load; names the object lacks are ignored; a bad size fails clearly', () => {
  requireBpf();
  const dir = bpffsTempDir();
  try {
    const obj = BpfObject.open(objPath, { pinMapsDir: dir, maxEntries: { kpr_backend: 123, kpr_not_a_map: 5 } });
    try {
      obj.load();
      assert.equal(obj.map('kpr_backend').maxEntries, 123);
      assert.equal(obj.map('kpr_vip').maxEntries, 65536, 'unsized maps keep the compiled size');
    } finally {
      obj.close();
    }
    const again = BpfObject.open(objPath, { pinMapsDir: dir, maxEntries: { kpr_backend: 200 } });
    try {
      assert.deepEqual(again.pinnedSizeMismatches(), [{ name: 'kpr_backend', pin: path.join(dir, 'kpr_backend'), pinned: 123, requested: 200 }]);
      assert.deepEqual(again.incompatiblePins().map((b) => [b.name, b.why]), [['kpr_backend', 'max_entries 123 != 200']]);
    } finally {
      again.close();
    }
    // A kernel refusal of the size itself (0 entries) names the map.
    const zero = BpfObject.open(objPath, { maxEntries: { kpr_svc: 0 } });
    assert.throws(() => zero.load(), /bpf object load/);
    assert.equal(zero.closed, true);
  } finally {
    rmrf(dir);
  }
});
