/**
 * The agent's initial sync in-process, for side-by-side comparisons of the
 * cold path (cache synced → maps written) without the API server, the
 * informers or the agent's start-up: a few seconds a run instead of the
 * control-plane bench's dozen, and less noise.
 *
 *   node dist/bench/cold-sync.js                       # 8 runs of each mode
 *   node dist/bench/cold-sync.js --modes full,floor    # the agent beside its floor
 *   node dist/bench/cold-sync.js --runs 10 --modes full --base /path/to/other/dist
 *
 * Every run is a fresh node process (the flags of bin/kpr-agent), because
 * what is measured is the first sync, with V8's compilers still cold. The
 * child builds the benchmark's scenario (bench/scenario.ts, 10,000 Services
 * × 10 endpoints), round-trips it through JSON and prunes it as the agent's
 * watch does, creates standalone kernel maps with kpr's layouts (nothing is
 * attached to anything) and the batch writer thread, and times one of:
 *   full       SyncLoop.start(): planning, diffing, encoding, kernel writes
 *   plan       planService over every Service alone
 *   reconcile  Reconciler.sync of plans made before the clock starts
 *   floor      the same kernel entries with no Kubernetes semantics
 *              (bench/cold-floor.ts): what touching every endpoint once
 *              costs here, the bound under any cold-path design in JS
 * Runs alternate between the modes asked for and, with --base DIR (another
 * build's dist/), between the two builds, the same child code driving each
 * build's modules.
 *
 * Prints a table and JSON (stdout, and build/cold-sync-results.json).
 * Needs root (CAP_BPF) for the maps; a failure to create them is an error.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { benchFlags, buildArms, buildLoader, quiet, standaloneMaps } from './bench-child.js';
import { cachedScenario } from './cached-scenario.js';
import { benchMapSizes, scenarioNeeds } from './map-sizing.js';
import { COLD_SYNC_MODES, runColdSyncChild, type ColdSyncChildResult, type ColdSyncMode } from './cold-child.js';
import { floorSync } from './cold-floor.js';
import { median, renderGrid, round } from './report.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const distRoot = path.resolve(here, '..');

/** The node's free memory, KiB: what the sync takes from it counts the kernel's allocations too (the maps' elements, page tables). */
function memFreeKiB(): number {
  const m = /^MemFree:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  return m ? Number(m[1]) : Number.NaN;
}

async function child(root: string, mode: ColdSyncMode, services: number, endpoints: number): Promise<ColdSyncChildResult> {
  const load = buildLoader(root);
  const sc = await load<typeof import('./scenario.js')>('bench/scenario.js');
  const prune = await load<typeof import('../agent/k8s/prune.js')>('agent/k8s/prune.js');
  // agent/sync/sync-loop.js; agent/sync-loop.js in builds before the loop was split into modules.
  const { SyncLoop } = await load<typeof import('../agent/sync/sync-loop.js')>('agent/sync/sync-loop.js').catch(() =>
    load<typeof import('../agent/sync/sync-loop.js')>('agent/sync-loop.js'),
  );
  const { Reconciler } = await load<typeof import('../agent/reconcile/reconciler.js')>('agent/reconcile/reconciler.js');
  const { planService } = await load<typeof import('../agent/plan/index.js')>('agent/plan/index.js');
  const { BpfDatapathMaps } = await load<typeof import('../agent/maps/bpf-datapath-maps.js')>('agent/maps/bpf-datapath-maps.js');
  const native = await load<typeof import('../native/index.js')>('native/index.js');
  const L = await load<typeof import('../agent/maps/layout.js')>('agent/maps/layout.js');

  // What the watch caches hold, pruned by the measured build's own code
  // (the rest of the set-up, and the floor, are always this build's).
  const source = cachedScenario(services, endpoints, prune);
  const node = source.node();

  const sizes = benchMapSizes(scenarioNeeds(services, endpoints));
  const maps = standaloneMaps(root, native, L, sizes);
  const { set, writer } = maps;
  try {
    const reconciler = new Reconciler(new BpfDatapathMaps({ ...set, writer }), quiet, { maxFrontendId: sizes.frontends - 1 });
    reconciler.adopt();
    const ctx = { nodeName: sc.NODE_NAME, node };
    const keys = [...source.serviceKeys()].sort();
    const plans = new Map(mode === 'reconcile' ? keys.map((k) => [k, planService(source.serviceByKey(k)!, source.endpointSlicesByKey(k), ctx).frontends]) : []);
    (globalThis as { gc?: () => void }).gc?.(); // the agent starts its sync on a heap of its own history: start each run alike
    let frontends = 0;
    let backends = 0;
    const cpu0 = process.cpuUsage();
    const faults0 = process.resourceUsage().minorPageFault;
    const free0 = memFreeKiB();
    const t0 = performance.now();
    if (mode === 'plan') {
      for (const k of keys) frontends += planService(source.serviceByKey(k)!, source.endpointSlicesByKey(k), ctx).frontends.length;
    } else if (mode === 'floor') {
      ({ frontends, backends } = floorSync(source, set, writer, sc.NODE_NAME));
    } else if (mode === 'reconcile') {
      const r = reconciler.sync({ keys: () => plans.keys(), get: (k) => plans.get(k) }, { full: true });
      if (!r.ok) throw new Error(r.error);
      ({ frontends, backends } = r);
    } else {
      const loop = new SyncLoop(source, reconciler, { nodeName: sc.NODE_NAME, syncPeriodMs: 1e9, minSyncPeriodMs: 0, log: quiet as never });
      const r = loop.start().result;
      loop.stop();
      if (!r.ok) throw new Error(r.error);
      ({ frontends, backends } = r);
    }
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const freshMiB = (free0 - memFreeKiB()) / 1024;
    const minorFaults = process.resourceUsage().minorPageFault - faults0;
    return { ms, cpuMs: (cpu.user + cpu.system) / 1000, heapMiB: process.memoryUsage().heapUsed / 1048576, minorFaults, freshMiB, frontends, backends };
  } finally {
    maps.close();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ...benchFlags(distRoot),
      runs: { type: 'string', default: '8' },
      modes: { type: 'string', default: COLD_SYNC_MODES.join(',') },
    },
  });
  const services = Number(values.services);
  const endpoints = Number(values.endpoints);
  const modes = values.modes!.split(',').filter((m): m is ColdSyncMode => (COLD_SYNC_MODES as readonly string[]).includes(m));
  if (modes.length === 0) throw new Error(`--modes: one or more of ${COLD_SYNC_MODES.join(', ')}`);
  if (values.child) {
    process.stdout.write(`${JSON.stringify(await child(path.resolve(values.dist!), modes[0], services, endpoints))}\n`);
    return;
  }
  const arms = buildArms(distRoot, values.base);
  const runs = Number(values.runs);
  const samples: Record<string, Record<string, ColdSyncChildResult[]>> = {};
  // Modes and builds alternate run by run, so a slow spell of the machine falls on all of them.
  for (let i = 0; i < runs; i++) {
    for (const mode of modes) {
      for (const [arm, root] of arms) {
        const r = await runColdSyncChild(root, mode, services, endpoints);
        ((samples[mode] ??= {})[arm] ??= []).push(r);
        process.stderr.write(
          `[cold-sync] ${mode} ${arm} run ${i + 1}/${runs}: ${round(r.ms, 1)} ms (CPU ${round(r.cpuMs, 1)} ms, ${r.minorFaults} minor faults, node free memory -${round(r.freshMiB, 1)} MiB)\n`,
        );
      }
    }
  }
  const summary = modes.map((mode) => {
    const byArm = Object.fromEntries(
      arms.map(([arm]) => {
        const ms = samples[mode][arm].map((r) => r.ms);
        const cpu = samples[mode][arm].map((r) => r.cpuMs);
        return [
          arm,
          {
            medianMs: round(median(ms), 1),
            minMs: round(Math.min(...ms), 1),
            maxMs: round(Math.max(...ms), 1),
            medianCpuMs: round(median(cpu), 1),
            heapMiB: round(median(samples[mode][arm].map((r) => r.heapMiB)), 1),
            runs: ms.map((x) => round(x, 1)),
          },
        ];
      }),
    );
    const pairwise = values.base ? samples[mode]['this build'].map((r, i) => r.ms / samples[mode].base[i].ms) : [];
    const pairwiseCpu = values.base ? samples[mode]['this build'].map((r, i) => r.cpuMs / samples[mode].base[i].cpuMs) : [];
    // Each run of a mode beside the floor run of the same round and build.
    const floor = samples.floor;
    const overFloor =
      floor && mode !== 'floor'
        ? Object.fromEntries(arms.map(([arm]) => [arm, round(median(samples[mode][arm].map((r, i) => r.ms / floor[arm][i].ms)), 2)]))
        : undefined;
    return {
      mode,
      arms: byArm,
      pairwiseRatioMedian: pairwise.length ? round(median(pairwise), 3) : undefined,
      pairwiseCpuRatioMedian: pairwiseCpu.length ? round(median(pairwiseCpu), 3) : undefined,
      overFloorMedian: overFloor,
    };
  });
  const head = [
    'mode',
    'build',
    'median ms',
    'min–max ms',
    'CPU ms (median)',
    'heap after (MiB)',
    'this / base (pairwise median)',
    'CPU this / base',
    '÷ floor (pairwise median)',
  ];
  const rows = summary.flatMap((s) =>
    arms.map(([arm]) => {
      const a = s.arms[arm];
      const vsBase = arm === 'this build' && s.pairwiseRatioMedian !== undefined ? `${s.pairwiseRatioMedian}×` : '';
      const cpuVsBase = arm === 'this build' && s.pairwiseCpuRatioMedian !== undefined ? `${s.pairwiseCpuRatioMedian}×` : '';
      return [
        s.mode,
        arm,
        String(a.medianMs),
        `${a.minMs}–${a.maxMs}`,
        String(a.medianCpuMs),
        String(a.heapMiB),
        vsBase,
        cpuVsBase,
        s.overFloorMedian ? `${s.overFloorMedian[arm]}×` : '',
      ];
    }),
  );
  process.stdout.write(
    `${renderGrid(`kpr cold sync in-process (${services} Services × ${endpoints} endpoints, ${runs} fresh processes per build and mode)`, head, rows)}\n`,
  );
  const json = { services, endpoints, runs, node: process.version, summary };
  process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
  const out = path.join(distRoot, '..', 'build', 'cold-sync-results.json');
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(json, null, 2)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`cold-sync: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
