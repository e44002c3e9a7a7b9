/**
 * The periodic full resync (with its kernel read-back) in-process, and what
 * an endpoint change made while it runs waits, for side-by-side comparisons
 * of two builds (as bench/cold-sync.ts): real kernel maps with kpr's layouts
 * and the batch writer thread, the bench scenario (10,000 Services × 10
 * endpoints) behind the SyncLoop, no API server.
 *
 *   node dist/bench/resync.js                          # this build, 3 processes
 *   node dist/bench/resync.js --base /path/to/other/dist --runs 3
 *   node dist/bench/resync.js --runs 1 --resyncs 8       # more resyncs per process (the RSS they leave)
 *
 * Each run (a fresh node process with the agent's flags) programs the
 * scenario, then lets the loop's --sync-period timer (2 s) run RESYNCS
 * resyncs while one Service's endpoint flips every 20 ms; a change's wait is
 * from the moment its timer was due (where a watch event would sit in the
 * socket while the loop is busy) to its event sync's report. After each
 * full resync the child does what the agent does (agent.ts): MemoryReleaser's
 * afterResync (a full GC and a malloc_trim only after a resync that churned a
 * lot; a build without it: releaseMemory after every resync), timed apart, and
 * records the RSS after the initial sync's release and after the last resync,
 * and counts V8's own major GCs (not the forced ones) while the resyncs run.
 * Needs root (CAP_BPF).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PerformanceObserver, constants as perf } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { benchFlags, buildArms, buildLoader, quiet, runBenchChild, standaloneMaps } from './bench-child.js';
import { cachedScenario } from './cached-scenario.js';
import { median, renderGrid, round } from './report.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const distRoot = path.resolve(here, '..');
/** Resyncs per process (--resyncs). */
let RESYNCS = 3;
const PERIOD_MS = 2000;
const PACE_MS = 20;

interface ChildResult {
  resyncs: Array<{ durationMs: number; busyMs?: number; readBackMs?: number; slices?: number; longestSliceMs?: number; releaseMs: number; fullGc: boolean; rssMiB: number }>;
  /** RSS after the initial sync's release, MiB. */
  initialRssMiB: number;
  /** Wait of each change whose due time fell inside a resync (start → end), ms. */
  duringMs: number[];
  /** Wait of the other changes. */
  otherMs: number[];
  /** V8's own major GCs (mark-compact, not the ones MemoryReleaser forces) from the initial sync's release to the last resync, and their time (ms). */
  majorGcs?: number;
  majorGcMs?: number;
}

async function child(root: string, services: number, endpoints: number): Promise<ChildResult> {
  const load = buildLoader(root);
  const sc = await load<typeof import('./scenario.js')>('bench/scenario.js');
  const prune = await load<typeof import('../agent/k8s/prune.js')>('agent/k8s/prune.js');
  const { SyncLoop } = await load<typeof import('../agent/sync-loop.js')>('agent/sync-loop.js');
  const { Reconciler } = await load<typeof import('../agent/reconcile/reconciler.js')>('agent/reconcile/reconciler.js');
  const { BpfDatapathMaps } = await load<typeof import('../agent/maps/bpf-datapath-maps.js')>('agent/maps/bpf-datapath-maps.js');
  const memory = await load<Partial<typeof import('../agent/memory.js')> & Pick<typeof import('../agent/memory.js'), 'releaseMemory'>>('agent/memory.js');
  const { releaseMemory } = memory;
  // What the measured build's agent does after a resync (an older build: a full GC after every one).
  const releaser = memory.MemoryReleaser ? new memory.MemoryReleaser() : undefined;
  const rssMiB = () => Math.round((process.memoryUsage().rss / 1048576) * 10) / 10;
  const native = await load<typeof import('../native/index.js')>('native/index.js');
  const L = await load<typeof import('../agent/maps/layout.js')>('agent/maps/layout.js');
  const source = cachedScenario(services, endpoints, prune);
  const maps = standaloneMaps(root, native, L);
  const { set, writer } = maps;
  const reconciler = new Reconciler(new BpfDatapathMaps({ ...set, writer }), quiet);
  reconciler.adopt();
  const target = [...source.serviceKeys()].sort()[0];
  const slices = source.endpointSlicesByKey(target);
  const original = slices[0];
  const out: ChildResult = { resyncs: [], duringMs: [], otherMs: [], initialRssMiB: 0 };
  const windows: Array<[number, number]> = [];
  const waits: Array<{ due: number; ms: number }> = [];
  let dueAt: number | undefined;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((r) => (resolveDone = r));
  const loop = new SyncLoop(source, reconciler, {
    nodeName: sc.NODE_NAME,
    syncPeriodMs: PERIOD_MS,
    minSyncPeriodMs: 0,
    log: quiet as never,
    onSync: (r) => {
      const now = performance.now();
      if (r.trigger === 'event' && dueAt !== undefined) {
        waits.push({ due: dueAt, ms: now - dueAt });
        dueAt = undefined;
      }
      if (r.full && r.trigger !== 'initial') {
        windows.push([now - r.durationMs, now]);
        const released = releaser ? releaser.afterResync(r.result) : releaseMemory();
        out.resyncs.push({
          durationMs: r.durationMs,
          busyMs: r.busyMs,
          readBackMs: r.result.readBackMs,
          slices: r.slices,
          longestSliceMs: r.longestSliceMs,
          releaseMs: released?.ms ?? 0,
          fullGc: released !== undefined,
          rssMiB: rssMiB(),
        });
        if (out.resyncs.length >= RESYNCS) resolveDone();
      }
    },
  });
  // V8's major GCs while the resyncs run: the old-space garbage a resync leaves (forced ones, MemoryReleaser's, not counted).
  let countGcs = false;
  const gcs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const d = (e as PerformanceEntry & { detail?: { kind: number; flags: number } }).detail;
      if (!countGcs || !d || d.kind !== perf.NODE_PERFORMANCE_GC_MAJOR || (d.flags & perf.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0) continue;
      out.majorGcs = (out.majorGcs ?? 0) + 1;
      out.majorGcMs = (out.majorGcMs ?? 0) + e.duration;
    }
  });
  gcs.observe({ entryTypes: ['gc'] });
  try {
    const first = loop.start();
    if (!first.result.ok) throw new Error(first.result.error);
    if (releaser) releaser.afterInitialSync();
    else releaseMemory();
    out.initialRssMiB = rssMiB();
    out.majorGcs = 0;
    out.majorGcMs = 0;
    countGcs = true;
    let flip = false;
    let next = performance.now() + PACE_MS;
    let stopped = false;
    const tick = () => {
      if (stopped) return;
      if (dueAt === undefined) {
        flip = !flip;
        const eps = original.endpoints ?? [];
        slices[0] = { ...original, endpoints: flip ? eps.map((e, i) => (i === 0 ? { ...e, conditions: { ...e.conditions, ready: false } } : e)) : eps };
        dueAt = next; // the change was due then; the loop may have been busy since
        loop.serviceChanged(target);
      }
      next += PACE_MS;
      setTimeout(tick, Math.max(0, next - performance.now()));
    };
    setTimeout(tick, PACE_MS);
    await done;
    stopped = true;
    await new Promise((r) => setImmediate(r)); // the observer's last entries
    countGcs = false;
    gcs.disconnect();
  } finally {
    loop.stop();
    maps.close();
  }
  for (const w of waits) (windows.some(([a, b]) => w.due >= a && w.due <= b) ? out.duringMs : out.otherMs).push(w.ms);
  return out;
}

function runChild(root: string, services: number, endpoints: number): Promise<ChildResult> {
  const args = ['--child', '--dist', root, '--services', String(services), '--endpoints', String(endpoints), '--resyncs', String(RESYNCS)];
  return runBenchChild(`resync child (${root})`, path.join(here, 'resync.js'), args, 180_000);
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ...benchFlags(distRoot),
      runs: { type: 'string', default: '3' },
      resyncs: { type: 'string', default: String(RESYNCS) },
    },
  });
  RESYNCS = Math.max(1, Number(values.resyncs));
  const services = Number(values.services);
  const endpoints = Number(values.endpoints);
  if (values.child) {
    process.stdout.write(`${JSON.stringify(await child(path.resolve(values.dist!), services, endpoints))}\n`);
    return;
  }
  void cachedScenario; // (the child builds it with the measured build's prune functions)
  const arms = buildArms(distRoot, values.base);
  const all: Record<string, ChildResult[]> = {};
  for (let i = 0; i < Number(values.runs); i++) {
    for (const [arm, root] of arms) {
      const r = await runChild(root, services, endpoints);
      (all[arm] ??= []).push(r);
      process.stderr.write(`[resync] ${arm} run ${i + 1}: resyncs ${r.resyncs.map((x) => round(x.durationMs, 1)).join(', ')} ms; changes during them waited max ${round(Math.max(0, ...r.duringMs), 1)} ms (n=${r.duringMs.length})\n`);
    }
  }
  const summary = Object.fromEntries(
    arms.map(([arm]) => {
      const rs = all[arm].flatMap((r) => r.resyncs);
      const during = all[arm].flatMap((r) => r.duringMs);
      const other = all[arm].flatMap((r) => r.otherMs);
      return [
        arm,
        {
          resyncMs: round(median(rs.map((x) => x.durationMs)), 1),
          busyMs: round(median(rs.map((x) => x.busyMs ?? x.durationMs)), 1),
          readBackMs: round(median(rs.map((x) => x.readBackMs ?? 0)), 1),
          longestBlockMs: round(median(rs.map((x) => x.longestSliceMs ?? x.durationMs)), 1),
          slices: round(median(rs.map((x) => x.slices ?? 1)), 0),
          releaseMs: round(median(rs.map((x) => x.releaseMs)), 1),
          fullGcs: rs.filter((x) => x.fullGc).length,
          longestBlockWithGcMs: round(median(rs.map((x) => Math.max(x.longestSliceMs ?? x.durationMs, x.releaseMs))), 1),
          maxBlockWithGcMs: round(Math.max(...rs.map((x) => Math.max(x.longestSliceMs ?? x.durationMs, x.releaseMs))), 1),
          initialRssMiB: round(median(all[arm].map((r) => r.initialRssMiB)), 1),
          lastRssMiB: round(median(all[arm].map((r) => r.resyncs[r.resyncs.length - 1]?.rssMiB ?? NaN)), 1),
          duringN: during.length,
          duringP50Ms: round(pct(during, 0.5), 2),
          duringMaxMs: round(Math.max(0, ...during), 2),
          otherP99Ms: round(pct(other, 0.99), 2),
          resyncs: rs.length,
          majorGcsPerResync: round(all[arm].reduce((n, r) => n + (r.majorGcs ?? 0), 0) / Math.max(1, rs.length), 2),
          majorGcMsPerResync: round(all[arm].reduce((n, r) => n + (r.majorGcMs ?? 0), 0) / Math.max(1, rs.length), 1),
        },
      ];
    }),
  );
  const head = ['build', 'resync start → end (median)', 'its own work', 'read-back', 'slices', 'longest slice', 'full GC after (median) · how many', 'longest block incl. the GC: median · max', 'RSS initial → after the last resync', 'changes during a resync: n · p50 · max', 'other changes p99', 'V8 major GCs per resync · their ms'];
  const rows = arms.map(([arm]) => {
    const s = summary[arm] as Record<string, number>;
    return [
      arm,
      `${s.resyncMs} ms`,
      `${s.busyMs} ms`,
      `${s.readBackMs} ms`,
      String(s.slices),
      `${s.longestBlockMs} ms`,
      `${s.releaseMs} ms · ${s.fullGcs}/${s.resyncs}`,
      `${s.longestBlockWithGcMs} · ${s.maxBlockWithGcMs} ms`,
      `${s.initialRssMiB} → ${s.lastRssMiB} MiB`,
      `${s.duringN} · ${s.duringP50Ms} · ${s.duringMaxMs} ms`,
      `${s.otherP99Ms} ms`,
      `${s.majorGcsPerResync} · ${s.majorGcMsPerResync} ms`,
    ];
  });
  process.stdout.write(`${renderGrid(`kpr periodic resync in-process (${services} Services × ${endpoints} endpoints, ${values.runs} processes × ${RESYNCS} resyncs per build)`, head, rows)}\n`);
  process.stdout.write(`${JSON.stringify({ services, endpoints, summary }, null, 2)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`resync bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
