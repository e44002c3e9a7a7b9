/**
 * The agent's initial sync in-process, for side-by-side comparisons of the
 * cold path (cache synced → maps written) without the API server, the
 * informers or the agent's start-up: a few seconds a run instead of the
 * control-plane bench's dozen, and less noise.
 *
 *   node dist/bench/cold-sync.js                       # 8 runs of each mode
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
 * With --base DIR (another build's dist/), the runs alternate between the
 * two builds, the same child code driving each build's modules.
 *
 * Prints a table and JSON (stdout, and build/cold-sync-results.json).
 * Needs root (CAP_BPF) for the maps; a failure to create them is an error.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { median, renderGrid, round } from './report.js';

const MODES = ['full', 'plan', 'reconcile'] as const;
type Mode = (typeof MODES)[number];

interface ChildResult {
  ms: number;
  /** Heap in use after the sync (no GC forced), MiB. */
  heapMiB: number;
  frontends: number;
  backends: number;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const distRoot = path.resolve(here, '..');

async function child(root: string, mode: Mode, services: number, endpoints: number): Promise<ChildResult> {
  const load = <T>(rel: string): Promise<T> => import(pathToFileURL(path.join(root, rel)).href) as Promise<T>;
  const sc = await load<typeof import('./scenario.js')>('bench/scenario.js');
  const prune = await load<typeof import('../agent/k8s/prune.js')>('agent/k8s/prune.js');
  const { SyncLoop } = await load<typeof import('../agent/sync-loop.js')>('agent/sync-loop.js');
  const { Reconciler } = await load<typeof import('../agent/reconcile/reconciler.js')>('agent/reconcile/reconciler.js');
  const { planService } = await load<typeof import('../agent/plan/index.js')>('agent/plan/index.js');
  const { BpfDatapathMaps } = await load<typeof import('../agent/maps/bpf-datapath-maps.js')>('agent/maps/bpf-datapath-maps.js');
  const native = await load<typeof import('../native/index.js')>('native/index.js');
  const L = await load<typeof import('../agent/maps/layout.js')>('agent/maps/layout.js');

  const scenario = sc.makeScenario(services, endpoints);
  // What the watch caches hold: objects parsed from JSON, then pruned.
  const svcs = (JSON.parse(JSON.stringify(scenario.services.map(sc.serviceObject))) as never[]).map(prune.pruneService);
  const slices = (JSON.parse(JSON.stringify(scenario.services.map((s) => sc.endpointSliceObject(s)))) as never[]).map(prune.pruneEndpointSlice);
  const node = prune.pruneNode(JSON.parse(JSON.stringify(sc.nodeObject())) as never);
  const byKey = new Map<string, (typeof svcs)[number]>();
  const slicesByKey = new Map<string, Array<(typeof slices)[number]>>();
  for (const s of svcs) byKey.set(`${s.metadata!.namespace}/${s.metadata!.name}`, s);
  for (const s of slices) slicesByKey.set(`${s.metadata!.namespace}/${s.metadata!.labels!['kubernetes.io/service-name']}`, [s]);
  const source = {
    serviceKeys: () => byKey.keys(),
    serviceByKey: (k: string) => byKey.get(k),
    endpointSlicesByKey: (k: string) => slicesByKey.get(k) ?? [],
    node: () => node,
  };

  const writer = native.BatchWriter.open(path.join(root, '..', 'build', native.BATCH_WRITER_LIBRARY));
  const M = native.BPF_MAP_TYPE;
  const set = {
    svc: native.BpfMap.create(M.HASH, L.SVC_KEY.size, L.SVC_VAL.size, 262144, 'kpr_svc'),
    backend: native.BpfMap.create(M.HASH, 4, L.BACKEND.size, 262144, 'kpr_backend'),
    vip: native.BpfMap.create(M.HASH, L.VIP_KEY.size, L.VIP_VAL.size, 65536, 'kpr_vip'),
    affinityMatch: native.BpfMap.create(M.HASH, L.AFFINITY_MATCH_KEY.size, 1, 65536, 'kpr_aff_match'),
    svcMeta: native.BpfMap.create(M.HASH, 4, L.SVC_META.size, 65536, 'kpr_svc_meta'),
    srcRange: native.BpfMap.create(M.HASH, L.SRC_RANGE_KEY.size, 1, 16, 'kpr_src_range'),
  };
  try {
    const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet };
    const reconciler = new Reconciler(new BpfDatapathMaps({ ...set, writer }), quiet);
    reconciler.adopt();
    const ctx = { nodeName: sc.NODE_NAME, node };
    const keys = [...byKey.keys()].sort();
    const plans = new Map(mode === 'reconcile' ? keys.map((k) => [k, planService(byKey.get(k)!, source.endpointSlicesByKey(k), ctx).frontends]) : []);
    (globalThis as { gc?: () => void }).gc?.(); // the agent starts its sync on a heap of its own history: start each run alike
    let frontends = 0;
    let backends = 0;
    const t0 = performance.now();
    if (mode === 'plan') {
      for (const k of keys) frontends += planService(byKey.get(k)!, source.endpointSlicesByKey(k), ctx).frontends.length;
    } else if (mode === 'reconcile') {
      const r = reconciler.sync({ keys: () => plans.keys(), get: (k) => plans.get(k) }, { full: true });
      if (!r.ok) throw new Error(r.error);
      ({ frontends, backends } = r);
    } else {
      const loop = new SyncLoop(source as never, reconciler, { nodeName: sc.NODE_NAME, syncPeriodMs: 1e9, minSyncPeriodMs: 0, log: quiet as never });
      const r = loop.start().result;
      loop.stop();
      if (!r.ok) throw new Error(r.error);
      ({ frontends, backends } = r);
    }
    const ms = performance.now() - t0;
    return { ms, heapMiB: process.memoryUsage().heapUsed / 1048576, frontends, backends };
  } finally {
    writer.close();
    for (const m of Object.values(set)) m.close();
  }
}

function runChild(root: string, mode: Mode, services: number, endpoints: number): ChildResult {
  const args = ['--expose-gc', '--max-semi-space-size=2', fileURLToPath(import.meta.url), '--child', '--dist', root, '--modes', mode, '--services', String(services), '--endpoints', String(endpoints)];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', env: { ...process.env, MALLOC_ARENA_MAX: '1' }, timeout: 120_000 });
  if (r.status !== 0) throw new Error(`cold-sync child (${mode}, ${root}) failed: ${r.stderr || r.stdout || r.error?.message}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as ChildResult;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      child: { type: 'boolean', default: false },
      dist: { type: 'string', default: distRoot },
      base: { type: 'string' },
      runs: { type: 'string', default: '8' },
      modes: { type: 'string', default: MODES.join(',') },
      services: { type: 'string', default: '10000' },
      endpoints: { type: 'string', default: '10' },
    },
  });
  const services = Number(values.services);
  const endpoints = Number(values.endpoints);
  const modes = values.modes!.split(',').filter((m): m is Mode => (MODES as readonly string[]).includes(m));
  if (modes.length === 0) throw new Error(`--modes: one or more of ${MODES.join(', ')}`);
  if (values.child) {
    process.stdout.write(`${JSON.stringify(await child(path.resolve(values.dist!), modes[0], services, endpoints))}\n`);
    return;
  }
  const arms: Array<[string, string]> = [['this build', distRoot]];
  if (values.base) arms.unshift(['base', path.resolve(values.base)]);
  const runs = Number(values.runs);
  const samples: Record<string, Record<string, ChildResult[]>> = {};
  for (const mode of modes) {
    for (let i = 0; i < runs; i++) {
      for (const [arm, root] of arms) {
        const r = runChild(root, mode, services, endpoints);
        ((samples[mode] ??= {})[arm] ??= []).push(r);
        process.stderr.write(`[cold-sync] ${mode} ${arm} run ${i + 1}/${runs}: ${round(r.ms, 1)} ms\n`);
      }
    }
  }
  const summary = modes.map((mode) => {
    const byArm = Object.fromEntries(
      arms.map(([arm]) => {
        const ms = samples[mode][arm].map((r) => r.ms);
        return [arm, { medianMs: round(median(ms), 1), minMs: round(Math.min(...ms), 1), maxMs: round(Math.max(...ms), 1), heapMiB: round(median(samples[mode][arm].map((r) => r.heapMiB)), 1), runs: ms.map((x) => round(x, 1)) }];
      }),
    );
    const pairwise = values.base ? samples[mode]['this build'].map((r, i) => r.ms / samples[mode].base[i].ms) : [];
    return { mode, arms: byArm, pairwiseRatioMedian: pairwise.length ? round(median(pairwise), 3) : undefined };
  });
  const head = ['mode', 'build', 'median ms', 'min–max ms', 'heap after (MiB)', 'this / base (pairwise median)'];
  const rows = summary.flatMap((s) =>
    arms.map(([arm]) => {
      const a = s.arms[arm];
      return [s.mode, arm, String(a.medianMs), `${a.minMs}–${a.maxMs}`, String(a.heapMiB), arm === 'this build' && s.pairwiseRatioMedian !== undefined ? `${s.pairwiseRatioMedian}×` : ''];
    }),
  );
  process.stdout.write(`${renderGrid(`kpr cold sync in-process (${services} Services × ${endpoints} endpoints, ${runs} fresh processes per build and mode)`, head, rows)}\n`);
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
