/**
 * Maglev lookup tables (agent/lb/maglev.ts), in-process, no root, no
 * kernel: how long the agent takes to compute every Service's table, how
 * many bytes of table entries the datapath would hold, and how long one
 * endpoint change takes to recompute, at 10,000 and 100,000 Services, beside
 * Cilium's published figure (65.5 KB per Service at M = 16381: 4-byte
 * backend ids × 16381 slots, ~655 MB at 10,000 Services; CFP-34577 and
 * Cilium's docs: quoted, not measured here).
 *
 * The scenario (seeded, the same every run): each Service has 1 port (85%)
 * or 2 (the second to another target port, so another backend set);
 * backend counts 1–3 (50%), 4–10 (30%), 11–30 (12%), 31–100 (6%),
 * 101–500 (2%), every backend a distinct address:port; each port has 1
 * frontend (ClusterIP, 70%), 2 (and a NodePort, 20%) or 3 (and a
 * load-balancer IP, 10%), all with the port's backends.
 *
 * Arms, each at each scale:
 *  - auto M, shared: MaglevTableCache (one table per distinct backend set,
 *    M from agent/lb/prime.ts: 1021 up to 3 backends …);
 *  - auto M, one table per frontend (no sharing);
 *  - M = 16381 for every table (Cilium's M) with kpr's 1- or 2-byte
 *    entries, shared and one per frontend;
 *  - Cilium's layout for the same frontends, computed: 16381 × 4 bytes a
 *    table, one per frontend (no table computed);
 *  - random selection: no table (the
 *    frontend's backend slots, which Maglev's entries index, exist either way).
 * Times are the main thread's wall time for the whole set (after a
 * warm-up) and the process's CPU time over it (the figure to read on a
 * shared machine), entries are the tables' bytes (what the datapath's map would
 * hold, without the kernel's per-map overhead), chunks the kpr_maglev
 * elements the agent's tables take (⌈M/1024⌉ a table, 2-byte slot numbers:
 * agent/reconcile/tables/maglev.ts, which shares tables as the shared arm does). One endpoint change: a
 * Service port's first endpoint removed or put back (its frontends release
 * their table and acquire the new one; the first acquire computes it),
 * --changes of them, uniform over Service ports, timed each; and the same
 * over the ports of 101–500 backends only.
 *
 *   make build && node dist/bench/maglev.js [--services 10000,100000] [--changes 1000] [--fixed-up-to 10000]
 *
 * --fixed-up-to N: the M = 16381 arms run at scales up to N Services
 * (default 10,000: they take ~4× the auto arms' time, and at 100,000 the
 * shared arm holds ~1.9 GB of entries). `make bench` runs it after
 * bench/run.ts (MAGLEV_BENCH_ARGS). Prints tables, then JSON (also written
 * to build/bench-maglev.json).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import v8 from 'node:v8';
import vm from 'node:vm';
import {
  MAGLEV_CILIUM_SIZING,
  MAGLEV_DEFAULT_SIZING,
  MaglevTableCache,
  maglevTable,
  type MaglevBackendInput,
  type MaglevSizing,
  type MaglevTableRef,
} from '../agent/lb/maglev.js';
import { MAGLEV_CHUNK_ENTRIES } from '../agent/maps/registry.js';
import { repoRoot } from '../sandbox/repo.js';
import { dist, renderGrid, round, type Dist } from './report.js';
import { rng } from '../test/support/rng.js';

const { values } = parseArgs({
  options: {
    services: { type: 'string', default: '10000,100000' },
    changes: { type: 'string', default: '1000' },
    'fixed-up-to': { type: 'string', default: '10000' },
    seed: { type: 'string', default: '1' },
  },
});
const scales = values.services!.split(',').map(Number);
const changes = Number(values.changes);
const fixedUpTo = Number(values['fixed-up-to']);

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const log = (s: string) => process.stderr.write(`maglev bench: ${s}\n`);

/** Cilium's published figures (not measured): bytes per Service at M = 16381, and at 10,000 Services. */
const CILIUM_PUBLISHED = { m: 16381, bytesPerService: 65_524, at10k: 655_240_000 };

/** A Service port: its backends and how many frontends carry them. */
interface Port {
  backends: MaglevBackendInput[];
  frontends: number;
}

function scenario(services: number, seed: number): Port[] {
  const r = rng(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  let next = 0;
  // Every backend a distinct address:port, addresses in 198.18.0.0/15.
  const backend = (): MaglevBackendInput => {
    const k = next++;
    const a = 0xc6120000 + (k % 131072);
    return { address: `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`, port: 8080 + Math.floor(k / 131072) };
  };
  const ports: Port[] = [];
  for (let s = 0; s < services; s++) {
    const x = r();
    const n = x < 0.5 ? between(1, 3) : x < 0.8 ? between(4, 10) : x < 0.92 ? between(11, 30) : x < 0.98 ? between(31, 100) : between(101, 500);
    const y = r();
    const frontends = y < 0.7 ? 1 : y < 0.9 ? 2 : 3;
    const portCount = r() < 0.85 ? 1 : 2;
    for (let p = 0; p < portCount; p++) ports.push({ backends: Array.from({ length: n }, backend), frontends });
  }
  return ports;
}

interface ArmResult {
  arm: string;
  services: number;
  frontends: number;
  tables: number;
  entryBytes: number;
  /** kpr_maglev elements (chunks of MAGLEV_CHUNK_ENTRIES slot numbers) the tables take; NaN for Cilium's layout. */
  chunks: number;
  bytesPerService: number;
  computeMs: number;
  /** The process's CPU time over the same span (all threads: V8's GC helpers too). */
  cpuMs: number;
  heapMiB?: number;
}

const cpuSince = (c0: NodeJS.CpuUsage): number => {
  const d = process.cpuUsage(c0);
  return (d.user + d.system) / 1000;
};

const heap = () => {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};

const chunksOf = (m: number) => Math.ceil(m / MAGLEV_CHUNK_ENTRIES);

function runShared(name: string, ports: Port[], services: number, sizing: MaglevSizing): { res: ArmResult; cache: MaglevTableCache; refs: MaglevTableRef[][] } {
  const before = heap();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const cache = new MaglevTableCache(sizing);
  const refs = ports.map((p) => Array.from({ length: p.frontends }, () => cache.acquire(p.backends)));
  const computeMs = performance.now() - t0;
  const cpuMs = cpuSince(c0);
  const heapMiB = (heap() - before) / 1048576;
  const frontends = ports.reduce((a, p) => a + p.frontends, 0);
  let chunks = 0;
  for (const r of new Set(refs.flat())) chunks += chunksOf(r.table.m);
  return {
    res: {
      arm: name,
      services,
      frontends,
      tables: cache.tables,
      entryBytes: cache.bytes,
      chunks,
      bytesPerService: cache.bytes / services,
      computeMs,
      cpuMs,
      heapMiB,
    },
    cache,
    refs,
  };
}

function runPerFrontend(name: string, ports: Port[], services: number, sizing: MaglevSizing): ArmResult {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let bytes = 0;
  let tables = 0;
  let chunks = 0;
  for (const p of ports) {
    for (let f = 0; f < p.frontends; f++) {
      const t = maglevTable(p.backends, sizing);
      bytes += t.bytes;
      chunks += chunksOf(t.m);
      tables += t.m ? 1 : 0;
    }
  }
  const computeMs = performance.now() - t0;
  const cpuMs = cpuSince(c0);
  return {
    arm: name,
    services,
    frontends: ports.reduce((a, p) => a + p.frontends, 0),
    tables,
    entryBytes: bytes,
    chunks,
    bytesPerService: bytes / services,
    computeMs,
    cpuMs,
  };
}

/** --changes endpoint flips over `pick`ed ports: each port's first endpoint removed, or put back if it is out. */
function runChanges(ports: Port[], cache: MaglevTableCache, refs: MaglevTableRef[][], count: number, pick: () => number): Dist {
  const out = new Set<number>();
  const times: number[] = [];
  for (let c = 0; c < count; c++) {
    const i = pick();
    const p = ports[i];
    const set = out.has(i) ? p.backends : p.backends.slice(1);
    const t0 = performance.now();
    const held = refs[i];
    const next = held.map(() => cache.acquire(set));
    for (const r of held) cache.release(r);
    refs[i] = next;
    times.push(performance.now() - t0);
    if (out.has(i)) out.delete(i);
    else out.add(i);
  }
  return dist(times);
}

const MB = (b: number) => (b / 1e6).toFixed(b < 1e7 ? 2 : 1);
const KB = (b: number) => (b / 1e3).toFixed(2);

async function main(): Promise<void> {
  // Warm-up: the same code paths on a small scenario, so the timed arms run optimised code.
  const warm = scenario(2000, 99);
  runShared('warm', warm, 2000, MAGLEV_DEFAULT_SIZING);
  runPerFrontend('warm', warm.slice(0, 300), 300, MAGLEV_CILIUM_SIZING);

  const arms: ArmResult[] = [];
  const changeRows: { services: number; arm: string; all: Dist; large: Dist }[] = [];
  for (const services of scales) {
    const ports = scenario(services, Number(values.seed));
    const frontends = ports.reduce((a, p) => a + p.frontends, 0);
    const backends = ports.reduce((a, p) => a + p.backends.length, 0);
    log(`${services} Services: ${ports.length} ports, ${frontends} frontends, ${backends} backends`);
    const sizings: [string, MaglevSizing][] = [['auto M', MAGLEV_DEFAULT_SIZING]];
    if (services <= fixedUpTo) sizings.push(['M = 16381', MAGLEV_CILIUM_SIZING]);
    for (const [label, sizing] of sizings) {
      log(`${label}, shared`);
      const shared = runShared(`kpr, ${label}, shared`, ports, services, sizing);
      arms.push(shared.res);
      const r = rng(7);
      const large = ports.map((p, i) => (p.backends.length > 100 ? i : -1)).filter((i) => i >= 0);
      log(`${label}, ${changes} endpoint changes`);
      const all = runChanges(ports, shared.cache, shared.refs, changes, () => Math.floor(r() * ports.length));
      const big = runChanges(ports, shared.cache, shared.refs, Math.min(changes, 4 * large.length), () => large[Math.floor(r() * large.length)]);
      changeRows.push({ services, arm: `kpr, ${label}`, all, large: big });
      shared.refs.length = 0;
      log(`${label}, one table per frontend`);
      arms.push(runPerFrontend(`kpr, ${label}, one table per frontend`, ports, services, sizing));
    }
    arms.push({
      arm: "Cilium's layout (16381 × 4 B per frontend), computed",
      services,
      frontends,
      tables: frontends,
      entryBytes: frontends * 16381 * 4,
      chunks: NaN,
      bytesPerService: (frontends * 16381 * 4) / services,
      computeMs: NaN,
      cpuMs: NaN,
    });
  }

  const rows = arms.map((a) => [
    a.arm,
    a.services.toLocaleString('en-US'),
    `${a.tables.toLocaleString('en-US')} / ${a.frontends.toLocaleString('en-US')}`,
    `${MB(a.entryBytes)} MB`,
    Number.isNaN(a.chunks) ? '' : a.chunks.toLocaleString('en-US'),
    `${KB(a.bytesPerService)} KB`,
    Number.isNaN(a.computeMs) ? '' : `${(a.computeMs / 1000).toFixed(2)} s / ${(a.cpuMs / 1000).toFixed(2)} s`,
    a.heapMiB === undefined ? '' : `${a.heapMiB.toFixed(1)} MiB`,
  ]);
  for (const s of scales) rows.push(["random selection: no table beyond the backends' slots", s.toLocaleString('en-US'), '0', '0 MB', '0', '0 KB', '0 s', '']);
  for (const s of scales)
    rows.push([
      "Cilium's published figure (not measured)",
      s.toLocaleString('en-US'),
      '',
      `${MB(CILIUM_PUBLISHED.bytesPerService * s)} MB`,
      '',
      `${KB(CILIUM_PUBLISHED.bytesPerService)} KB`,
      '',
      '',
    ]);
  const out = [
    renderGrid(
      'Maglev tables: entries and computation (all Services)',
      ['arm', 'Services', 'tables / frontends', 'table entries', 'kpr_maglev chunks', 'per Service', 'compute, all: wall / CPU', 'bench heap (tables held)'],
      rows,
    ),
    '',
    renderGrid(
      'Maglev: one endpoint change (release + acquire on every frontend of the port), ms',
      ['arm', 'Services', 'any port: p50 / p99 / max', 'ports of 101–500 backends: p50 / p99 / max'],
      changeRows.map((c) => [
        c.arm,
        c.services.toLocaleString('en-US'),
        `${c.all.p50} / ${c.all.p99} / ${c.all.max} (n=${c.all.n})`,
        `${c.large.p50} / ${c.large.p99} / ${c.large.max} (n=${c.large.n})`,
      ]),
    ),
  ].join('\n');
  process.stdout.write(out + '\n');
  const res = {
    bench: 'maglev',
    meta: { date: new Date().toISOString(), host: os.hostname(), cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, node: process.version },
    config: { scales, changes, fixedUpTo, seed: Number(values.seed) },
    ciliumPublished: CILIUM_PUBLISHED,
    arms: arms.map((a) => ({
      ...a,
      computeMs: round(a.computeMs),
      cpuMs: round(a.cpuMs),
      heapMiB: a.heapMiB === undefined ? undefined : round(a.heapMiB, 1),
      bytesPerService: round(a.bytesPerService, 1),
    })),
    changes: changeRows,
  };
  const json = JSON.stringify(res, null, 2);
  process.stdout.write(json + '\n');
  const file = path.join(repoRoot, 'build', 'bench-maglev.json');
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, json + '\n');
  log(`results written to ${path.relative(process.cwd(), file) || file}`);
}

main().catch((err) => {
  log(`fatal: ${(err as Error).stack ?? err}`);
  process.exit(1);
});
