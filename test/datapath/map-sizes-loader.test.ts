/**
 * Run-time map sizes and pins of other sizes on the real kernel, through the
 * agent's loader (agent/datapath/loader.ts) in a private bpffs directory and
 * a cgroup of the test's own: the objects load with the configured
 * max_entries (read back from the pins, and a full kpr_svc refuses one entry
 * more); a restart with another size migrates the whole set to a new one
 * (contents copied, the socket programs swapped only when asked, the state
 * maps copied at finish() without overwriting what the new programs made,
 * the pins promoted); a pin that is not kpr's map is started empty with an
 * error line; pins of a newer layout make the loader refuse, touching nothing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, BpfObject, BPF_MAP_TYPE, detachPinnedLink, possibleCpus } from '../../native/index.js';
import { loadDatapath, PinLayoutRefusal, type Datapath } from '../../agent/datapath/loader.js';
import { computeMapSizes, CONNTRACK_MAX_PER_CORE_DEFAULT, CONNTRACK_MIN_DEFAULT, type MapSizeSetting } from '../../agent/datapath/map-sizes.js';
import { probeKernelFeatures } from '../../agent/datapath/kernel-probes.js';
import { mapPinDir, mapPinPath, mapStagingDir } from '../../agent/datapath/pins.js';
import { CT_KEY, CT_VAL, MAP_NAMES } from '../../agent/maps/layout.js';
import { MAPS, type MapId } from '../../agent/maps/registry.js';
import type { Logger } from '../../agent/log/log.js';
import { bpffsTempDir, cgroup2Mount, objPath, requireBpf, rmrf, svcKey, svcVal, unique } from '../support/bpf-fixtures.js';

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
  const m = BpfMap.openPinned(mapPinPath(bpffsDir, name));
  try {
    return { maxEntries: m.maxEntries, id: m.id };
  } finally {
    m.close();
  }
}

test('the loader sizes the maps at run time; a pin at another size migrates the set live; a foreign pin starts empty; a newer layout is refused', () => {
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
    assert.equal(dp1.migration, null);
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

    // A conntrack entry the old programs made (the agent never writes kpr_ct but for sweeping).
    const ctKey = Buffer.alloc(CT_KEY.size, 1);
    const ctOld = Buffer.alloc(CT_VAL.size, 2);
    const ctMine = Buffer.alloc(CT_VAL.size, 3);
    const before = BpfMap.openPinned(mapPinPath(bpffsDir, 'kpr_ct'));
    try {
      before.update(ctKey, ctOld);
      before.update(Buffer.alloc(CT_KEY.size, 4), ctOld);
    } finally {
      before.close();
    }

    // 2. Restart with a larger kpr_svc: the set migrates; the owned maps are copied at load.
    const second = sizes({ services: 80, backends: 300, conntrack: 2048, sourceRanges: 64, revnat: 1000, affinity: 512 });
    const log2 = recordingLogger();
    const dp2 = load(second, log2);
    assert.ok(dp2.migration, 'a migration is pending');
    // The frontend id space follows the service map: its maps change size with it.
    assert.deepEqual(dp2.migration.reasons.map((r) => `${r.map} ${r.reason} ${r.detail}`).sort(), [
      'kpr_maglev_ref size 20 -> 40 entries',
      'kpr_svc size 40 -> 80 entries',
      'kpr_svc_meta size 10 -> 20 entries',
      'kpr_svc_stats size 10 -> 20 entries',
      'kpr_vip size 10 -> 20 entries',
    ]);
    assert.equal(dp2.mapSizes.kpr_svc, 80);
    assert.notEqual(dp2.maps.svc.id, svcId, 'a new map');
    assert.equal(dp2.maps.svc.maxEntries, 80);
    assert.deepEqual(dp2.maps.svc.lookup(svcKey(7)), svcVal(7, 1), 'copied from the old map');
    assert.equal(pinnedMaxEntries(bpffsDir, 'kpr_svc').id, svcId, 'maps/ keeps the old set until the end');
    assert.equal(dp2.attachments.length, 0, 'the socket programs wait for the initial sync');
    assert.equal(dp2.migrating(), true);
    assert.equal(dp2.maps.ct.lookup(ctKey), null, 'state maps are copied once every program runs on the new set');
    assert.equal(log2.lines.filter((l) => l.level === 'error').length, 0, JSON.stringify(log2.lines));
    for (const a of dp2.attachSockPrograms()) assert.ok(a.replaced, 'swapped into the previous links');
    assert.equal(dp2.maps.ct.lookup(ctKey), null, 'not copied at the swap: the programs read through to the old map until finish()');
    // The old programs made two more entries; the new programs made one of the same keys first.
    const late = BpfMap.openPinned(mapPinPath(bpffsDir, 'kpr_ct'));
    try {
      late.update(Buffer.alloc(CT_KEY.size, 6), ctOld);
      late.update(Buffer.alloc(CT_KEY.size, 7), ctOld);
    } finally {
      late.close();
    }
    dp2.maps.ct.update(Buffer.alloc(CT_KEY.size, 7), ctMine);
    let swapped: BpfObject | undefined;
    const summary = dp2.migration.finish((tc) => (swapped = tc));
    assert.equal(dp2.migration, null);
    assert.equal(dp2.migrating(), false);
    assert.ok(swapped && swapped === dp2.tcObject, 'the tc programs are handed over once more');
    assert.deepEqual(summary.copied.kpr_ct, { entries: 4, copied: 3, kept: 1, dropped: 0 });
    assert.deepEqual(dp2.maps.ct.lookup(Buffer.alloc(CT_KEY.size, 7)), ctMine, "the new programs' entry is kept");
    assert.deepEqual(dp2.maps.ct.lookup(Buffer.alloc(CT_KEY.size, 6)), ctOld);
    assert.deepEqual(dp2.maps.ct.lookup(Buffer.alloc(CT_KEY.size, 4)), ctOld);
    assert.equal(pinnedMaxEntries(bpffsDir, 'kpr_svc').id, dp2.maps.svc.id, 'promoted into maps/');
    assert.equal(fs.existsSync(mapStagingDir(bpffsDir)), false);
    const newSvcId = dp2.maps.svc.id;
    dp2.close();

    // 3. A pin that is not kpr's map (another value size): the set migrates, that map starts empty, one error line.
    const termPin = mapPinPath(bpffsDir, 'kpr_term');
    fs.rmSync(termPin);
    const foreign = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 16, 'not_kpr');
    try {
      foreign.pin(termPin);
    } finally {
      foreign.close();
    }
    const incompatible: string[] = [];
    const log3 = recordingLogger();
    const dp3 = loadDatapath(
      { bpfObject: objPath, bpffsDir, cgroupPath: cg, loadUdpIterator: false, mapSizes: second, onIncompatiblePin: (m) => incompatible.push(m) },
      log3,
      features,
    );
    open.push(dp3);
    assert.deepEqual(incompatible, ['kpr_term']);
    assert.deepEqual(
      dp3.migration?.reasons.map((r) => [r.map, r.reason]),
      [['kpr_term', 'foreign']],
    );
    assert.ok(log3.lines.some((l) => l.level === 'error' && /pinned maps are not the maps kpr defines/.test(l.msg)));
    assert.equal(dp3.maps.term.valueSize, 1);
    assert.deepEqual(dp3.maps.svc.lookup(svcKey(7)), svcVal(7, 1), 'the rest is copied');
    for (const a of dp3.attachSockPrograms()) assert.ok(a.linkId > 0);
    dp3.migration!.finish(() => undefined);
    assert.equal(pinnedMaxEntries(bpffsDir, 'kpr_term').maxEntries, 4096);
    assert.notEqual(pinnedMaxEntries(bpffsDir, 'kpr_svc').id, newSvcId);
    dp3.close();

    // 4. A pin of a newer layout: refused before anything is touched.
    const ctPin = mapPinPath(bpffsDir, 'kpr_ct');
    const newer = path.join(mapPinDir(bpffsDir), `kpr_ct@v${MAPS.ct.version + 1}`);
    fs.renameSync(ctPin, newer);
    const links = fs.readdirSync(path.join(bpffsDir, 'links')).sort();
    const log4 = recordingLogger();
    assert.throws(
      () => load(second, log4),
      (err: Error) => {
        assert.ok(err instanceof PinLayoutRefusal);
        assert.match(err.message, new RegExp(`kpr_ct pinned at layout v${MAPS.ct.version + 1} .*this agent knows up to v${MAPS.ct.version}`));
        return true;
      },
    );
    assert.ok(fs.existsSync(newer));
    assert.deepEqual(fs.readdirSync(path.join(bpffsDir, 'links')).sort(), links);
    assert.equal(fs.existsSync(mapStagingDir(bpffsDir)), false);
    fs.renameSync(newer, ctPin);
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
      assert.deepEqual(
        again.incompatiblePins().map((b) => [b.name, b.why]),
        [['kpr_backend', 'max_entries 123 != 200']],
      );
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
