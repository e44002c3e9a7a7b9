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
 * sync the child does what that build's agent does (agent.ts): a scavenge
 * when the young generation fills, and for builds with MemoryReleaser its
 * full GC after a resync that churned a lot (timed apart; --release never
 * skips it). A 1 ms timer probe (bench/loop-probe.ts) gives the longest
 * event-loop block from a resync's start to the end of what ran after it;
 * the child records the heap and RSS after each resync, and V8's own GCs.
 * Needs root (CAP_BPF).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PerformanceObserver, constants as perf } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { benchFlags, buildArms, buildLoader, quiet, runBenchChild, standaloneMaps } from './bench-child.js';
import { cachedScenario } from './cached-scenario.js';
import { LoopProbe } from './loop-probe.js';
import { benchMapSizes, scenarioNeeds } from './map-sizing.js';
import { median, renderGrid, round } from './report.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const distRoot = path.resolve(here, '..');
/** Resyncs per process (--resyncs). */
let RESYNCS = 3;
const PERIOD_MS = 2000;
const PACE_MS = 20;

interface ResyncRecord {
  durationMs: number;
  busyMs?: number;
  readBackMs?: number;
  slices?: number;
  longestSliceMs?: number;
  /** The full GC and malloc_trim run after it (0 when none ran). */
  releaseMs: number;
  fullGc: boolean;
  /** The longest event-loop block from the resync's start to the end of what ran after it (the timer probe, bench/loop-probe.ts). */
  loopBlockMs: number;
  /**
   * The most main-thread CPU time one slice of it took (the change's sync run
   * before it included), and the release after it: what blocking the loop
   * would cost on an idle machine (CLOCK_THREAD_CPUTIME_ID; the wall times
   * above include the time the thread waited for a CPU).
   */
  sliceCpuMs: number;
  releaseCpuMs: number;
  /** V8's own GC pauses in that window: how many major (mark-compact) ones, and the longest pause of any kind, ms. */
  majorGcs: number;
  longestGcMs: number;
  /** Heap in use right after the resync (before any release), MiB; RSS after it, MiB. */
  heapMiB: number;
  rssMiB: number;
}

interface ChildResult {
  resyncs: ResyncRecord[];
  /** RSS after the initial sync's release, MiB. */
  initialRssMiB: number;
  /** Heap in use after the initial sync's release, MiB. */
  initialHeapMiB: number;
  /** Wait of each change whose due time fell inside a resync (start → end of the release after it), ms. */
  duringMs: number[];
  /** Wait of the other changes (no resync running). */
  otherMs: number[];
  /** V8's own major GCs (mark-compact, not the ones MemoryReleaser forces) from the initial sync's release to the last resync, and their time (ms). */
  majorGcs?: number;
  majorGcMs?: number;
}

/** The calling thread's CPU time in ms (clock_gettime(CLOCK_THREAD_CPUTIME_ID), through koffi as native/ calls libc). */
async function threadCpuClock(): Promise<() => number> {
  const koffi = (await import('koffi')).default;
  const clockGettime = koffi.load('libc.so.6').func('int clock_gettime(int clk, void *ts)') as (clk: number, ts: Buffer) => number;
  const CLOCK_THREAD_CPUTIME_ID = 3;
  const ts = Buffer.alloc(16);
  return () => {
    clockGettime(CLOCK_THREAD_CPUTIME_ID, ts);
    return Number(ts.readBigInt64LE(0)) * 1e3 + Number(ts.readBigInt64LE(8)) / 1e6;
  };
}

/** What a child does after each resync: what the measured build's agent does (agent), or nothing at all (never: V8 alone). */
type ReleasePolicy = 'agent' | 'never';

async function child(root: string, services: number, endpoints: number, policy: ReleasePolicy): Promise<ChildResult> {
  const load = buildLoader(root);
  const sc = await load<typeof import('./scenario.js')>('bench/scenario.js');
  const prune = await load<typeof import('../agent/k8s/prune.js')>('agent/k8s/prune.js');
  // agent/sync/sync-loop.js; agent/sync-loop.js in builds before the loop was split into modules.
  const { SyncLoop } = await load<typeof import('../agent/sync/sync-loop.js')>('agent/sync/sync-loop.js').catch(() =>
    load<typeof import('../agent/sync/sync-loop.js')>('agent/sync-loop.js'),
  );
  const { Reconciler } = await load<typeof import('../agent/reconcile/reconciler.js')>('agent/reconcile/reconciler.js');
  const { BpfDatapathMaps } = await load<typeof import('../agent/maps/bpf-datapath-maps.js')>('agent/maps/bpf-datapath-maps.js');
  // What the measured build's agent does after a sync: a build with MemoryReleaser (before this one) a full GC after a resync
  // that churned a lot or left the heap 24 MiB above the last release; after every other sync but the initial one, a scavenge if the young generation fills.
  type Released = { ms: number; fullGc: boolean };
  type MemoryModule = {
    releaseMemory(): Released;
    afterInitialSync?(): Released;
    collectYoungIfFilling?(): boolean;
    MemoryReleaser?: new () => { afterInitialSync(): Released; afterResync(r: unknown): Released | undefined };
  };
  // agent/runtime/memory.js; agent/memory.js in builds before the loose top-level modules went into folders.
  const memory = await load<MemoryModule>('agent/runtime/memory.js').catch(() => load<MemoryModule>('agent/memory.js'));
  const releaser = memory.MemoryReleaser ? new memory.MemoryReleaser() : undefined;
  const afterResync = (r: unknown): Released | undefined => {
    const released = policy === 'never' ? undefined : releaser?.afterResync(r);
    if (!released) memory.collectYoungIfFilling?.();
    return released;
  };
  const rssMiB = () => Math.round((process.memoryUsage().rss / 1048576) * 10) / 10;
  const heapMiB = () => Math.round((process.memoryUsage().heapUsed / 1048576) * 10) / 10;
  const native = await load<typeof import('../native/index.js')>('native/index.js');
  const L = await load<typeof import('../agent/maps/layout.js')>('agent/maps/layout.js');
  const source = cachedScenario(services, endpoints, prune);
  const sizes = benchMapSizes(scenarioNeeds(services, endpoints));
  const maps = standaloneMaps(root, native, L, sizes);
  const { set, writer } = maps;
  const reconciler = new Reconciler(new BpfDatapathMaps({ ...set, writer }), quiet, { maxFrontendId: sizes.frontends - 1 });
  reconciler.adopt();
  const target = [...source.serviceKeys()].sort()[0];
  const slices = source.endpointSlicesByKey(target);
  const original = slices[0];
  const out: ChildResult = { resyncs: [], duringMs: [], otherMs: [], initialRssMiB: 0, initialHeapMiB: 0 };
  const windows: Array<[number, number]> = [];
  const waits: Array<{ due: number; ms: number }> = [];
  const gcPauses: Array<{ start: number; ms: number; major: boolean; forced: boolean }> = [];
  const probe = new LoopProbe();
  // Main-thread CPU time of each slice (SyncLoop.runSlice in every build that slices), the largest per resync.
  const cpuMs = await threadCpuClock();
  let sliceCpuMax = 0;
  const loopProto = SyncLoop.prototype as unknown as { runSlice?: () => void };
  const runSlice = loopProto.runSlice;
  if (runSlice) {
    loopProto.runSlice = function (this: unknown) {
      const c0 = cpuMs();
      runSlice.call(this);
      sliceCpuMax = Math.max(sliceCpuMax, cpuMs() - c0);
    };
  }
  let dueAt: number | undefined;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((r) => (resolveDone = r));
  const pendingRecords: Array<{ rec: ResyncRecord; from: number; to: number }> = [];
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
      if (!r.full) memory.collectYoungIfFilling?.();
      if (r.full && r.trigger !== 'initial') {
        const heap = heapMiB();
        const c0 = cpuMs();
        const released = afterResync(r.result);
        const releaseCpuMs = cpuMs() - c0;
        const end = performance.now();
        windows.push([now - r.durationMs, end]);
        const rec: ResyncRecord = {
          durationMs: r.durationMs,
          busyMs: r.busyMs,
          readBackMs: r.result.readBackMs,
          slices: r.slices,
          longestSliceMs: r.longestSliceMs,
          releaseMs: released?.ms ?? 0,
          fullGc: released !== undefined,
          loopBlockMs: 0,
          sliceCpuMs: sliceCpuMax,
          releaseCpuMs,
          majorGcs: 0,
          longestGcMs: 0,
          heapMiB: heap,
          rssMiB: rssMiB(),
        };
        sliceCpuMax = 0;
        out.resyncs.push(rec);
        pendingRecords.push({ rec, from: now - r.durationMs, to: end });
        if (out.resyncs.length >= RESYNCS) resolveDone();
      }
    },
  });
  // V8's GCs: the major ones while the resyncs run (the old-space garbage a resync leaves; forced ones, MemoryReleaser's, not counted), and every pause, by when it ran.
  let countGcs = false;
  const gcs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const d = (e as PerformanceEntry & { detail?: { kind: number; flags: number } }).detail;
      if (!d) continue;
      const major = d.kind === perf.NODE_PERFORMANCE_GC_MAJOR;
      const forced = (d.flags & perf.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0;
      gcPauses.push({ start: e.startTime, ms: e.duration, major, forced });
      if (!countGcs || !major || forced) continue;
      out.majorGcs = (out.majorGcs ?? 0) + 1;
      out.majorGcMs = (out.majorGcMs ?? 0) + e.duration;
    }
  });
  gcs.observe({ entryTypes: ['gc'] });
  try {
    const first = loop.start();
    if (!first.result.ok) throw new Error(first.result.error);
    if (releaser) releaser.afterInitialSync();
    else if (memory.afterInitialSync) memory.afterInitialSync();
    else memory.releaseMemory();
    out.initialRssMiB = rssMiB();
    out.initialHeapMiB = heapMiB();
    out.majorGcs = 0;
    out.majorGcMs = 0;
    countGcs = true;
    probe.start();
    let flip = false;
    let next = performance.now() + PACE_MS;
    let stopped = false;
    const tick = () => {
      if (stopped) return;
      if (dueAt === undefined) {
        flip = !flip;
        const eps = original.endpoints ?? [];
        slices[0] = { ...original, endpoints: flip ? eps.map((e, i) => (i === 0 ? { ...e, conditions: { ...e.conditions, ready: false } } : e)) : eps };
        dueAt = Math.min(next, performance.now()); // the change was due then (a timer may fire a little early); the loop may have been busy since
        loop.serviceChanged(target);
      }
      next += PACE_MS;
      setTimeout(tick, Math.max(0, next - performance.now()));
    };
    setTimeout(tick, PACE_MS);
    await done;
    stopped = true;
    await new Promise((r) => setTimeout(r, 5)); // the probe's and the observer's last entries
    probe.stop();
    countGcs = false;
    gcs.disconnect();
  } finally {
    loop.stop();
    maps.close();
  }
  for (const { rec, from, to } of pendingRecords) {
    rec.loopBlockMs = probe.longestWithin(from, to);
    for (const g of gcPauses) {
      if (g.start + g.ms < from || g.start > to) continue;
      if (g.major && !g.forced) rec.majorGcs++;
      if (g.ms > rec.longestGcMs) rec.longestGcMs = g.ms;
    }
  }
  for (const w of waits) (windows.some(([a, b]) => w.due >= a && w.due <= b) ? out.duringMs : out.otherMs).push(w.ms);
  return out;
}

function runChild(root: string, services: number, endpoints: number, policy: ReleasePolicy): Promise<ChildResult> {
  const args = ['--child', '--dist', root, '--services', String(services), '--endpoints', String(endpoints), '--resyncs', String(RESYNCS), '--release', policy];
  return runBenchChild(`resync child (${root})`, root, path.join(here, 'resync.js'), args, 60_000 + RESYNCS * 10_000);
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

/** One build's figures over all its processes. */
function summarize(runs: ChildResult[]): Record<string, number> {
  const rs = runs.flatMap((r) => r.resyncs);
  const during = runs.flatMap((r) => r.duringMs);
  const other = runs.flatMap((r) => r.otherMs);
  const last = (f: (x: ResyncRecord) => number) => median(runs.map((r) => (r.resyncs.length ? f(r.resyncs[r.resyncs.length - 1]) : NaN)));
  return {
    resyncs: rs.length,
    resyncMs: round(median(rs.map((x) => x.durationMs)), 1),
    busyMs: round(median(rs.map((x) => x.busyMs ?? x.durationMs)), 1),
    readBackMs: round(median(rs.map((x) => x.readBackMs ?? 0)), 1),
    slices: round(median(rs.map((x) => x.slices ?? 1)), 0),
    longestSliceMs: round(median(rs.map((x) => x.longestSliceMs ?? x.durationMs)), 1),
    releaseMs: round(median(rs.map((x) => x.releaseMs)), 1),
    fullGcs: rs.filter((x) => x.fullGc).length,
    loopBlockMedianMs: round(median(rs.map((x) => x.loopBlockMs)), 1),
    loopBlockMaxMs: round(Math.max(...rs.map((x) => x.loopBlockMs)), 1),
    cpuBlockMedianMs: round(median(rs.map((x) => Math.max(x.sliceCpuMs, x.releaseCpuMs))), 2),
    cpuBlockMaxMs: round(Math.max(...rs.map((x) => Math.max(x.sliceCpuMs, x.releaseCpuMs))), 2),
    majorGcsPerResync: round(rs.reduce((n, x) => n + x.majorGcs, 0) / Math.max(1, rs.length), 2),
    longestGcMs: round(Math.max(0, ...rs.map((x) => x.longestGcMs)), 1),
    initialHeapMiB: round(median(runs.map((r) => r.initialHeapMiB)), 1),
    lastHeapMiB: round(
      last((x) => x.heapMiB),
      1,
    ),
    maxHeapMiB: round(Math.max(...rs.map((x) => x.heapMiB)), 1),
    initialRssMiB: round(median(runs.map((r) => r.initialRssMiB)), 1),
    lastRssMiB: round(
      last((x) => x.rssMiB),
      1,
    ),
    maxRssMiB: round(Math.max(...rs.map((x) => x.rssMiB)), 1),
    duringN: during.length,
    duringP50Ms: round(pct(during, 0.5), 2),
    duringP99Ms: round(pct(during, 0.99), 2),
    duringMaxMs: round(Math.max(0, ...during), 2),
    otherN: other.length,
    otherP50Ms: round(pct(other, 0.5), 2),
    otherP99Ms: round(pct(other, 0.99), 2),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ...benchFlags(distRoot),
      runs: { type: 'string', default: '3' },
      resyncs: { type: 'string', default: String(RESYNCS) },
      release: { type: 'string', default: 'agent' },
    },
  });
  RESYNCS = Math.max(1, Number(values.resyncs));
  const services = Number(values.services);
  const endpoints = Number(values.endpoints);
  const policy = values.release === 'never' ? 'never' : 'agent';
  if (values.child) {
    process.stdout.write(`${JSON.stringify(await child(path.resolve(values.dist!), services, endpoints, policy))}\n`);
    return;
  }
  void cachedScenario; // (the child builds it with the measured build's prune functions)
  const arms = buildArms(distRoot, values.base);
  const all: Record<string, ChildResult[]> = {};
  for (let i = 0; i < Number(values.runs); i++) {
    for (const [arm, root] of arms) {
      const r = await runChild(root, services, endpoints, policy);
      (all[arm] ??= []).push(r);
      process.stderr.write(
        `[resync] ${arm} run ${i + 1}: resyncs ${r.resyncs.map((x) => round(x.durationMs, 1)).join(', ')} ms; longest loop block ${r.resyncs.map((x) => round(x.loopBlockMs, 1)).join(', ')} ms; heap ${r.resyncs.map((x) => round(x.heapMiB, 0)).join(', ')} MiB; changes during them waited max ${round(Math.max(0, ...r.duringMs), 1)} ms (n=${r.duringMs.length})\n`,
      );
    }
  }
  const summary = Object.fromEntries(arms.map(([arm]) => [arm, summarize(all[arm])]));
  const head = [
    'build',
    'resync start → end · its own work · read-back (median)',
    'slices · longest slice',
    'full GC after: median · how many',
    'longest event-loop block of a resync (probe): median · max',
    'the same in main-thread CPU time (a slice, or the GC after): median · max',
    'V8 major GCs per resync · longest GC pause',
    'a change during a resync: n · p50 · p99 · max',
    'a change with no resync running: n · p50 · p99',
    'heap after the initial sync → after the last resync (max)',
    'RSS after the initial sync → after the last resync (max)',
  ];
  const rows = arms.map(([arm]) => {
    const s = summary[arm];
    return [
      arm,
      `${s.resyncMs} · ${s.busyMs} · ${s.readBackMs} ms`,
      `${s.slices} · ${s.longestSliceMs} ms`,
      `${s.releaseMs} ms · ${s.fullGcs}/${s.resyncs}`,
      `${s.loopBlockMedianMs} · ${s.loopBlockMaxMs} ms`,
      `${s.cpuBlockMedianMs} · ${s.cpuBlockMaxMs} ms`,
      `${s.majorGcsPerResync} · ${s.longestGcMs} ms`,
      `${s.duringN} · ${s.duringP50Ms} · ${s.duringP99Ms} · ${s.duringMaxMs} ms`,
      `${s.otherN} · ${s.otherP50Ms} · ${s.otherP99Ms} ms`,
      `${s.initialHeapMiB} → ${s.lastHeapMiB} (${s.maxHeapMiB}) MiB`,
      `${s.initialRssMiB} → ${s.lastRssMiB} (${s.maxRssMiB}) MiB`,
    ];
  });
  const title = `kpr periodic resync in-process (${services} Services × ${endpoints} endpoints, ${values.runs} processes × ${RESYNCS} resyncs per build${policy === 'never' ? ', no release after a resync' : ''})`;
  process.stdout.write(`${renderGrid(title, head, rows)}\n`);
  process.stdout.write(`${JSON.stringify({ services, endpoints, release: policy, summary }, null, 2)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`resync bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
