/**
 * The in-process benches' two sides of one measured run (bench/cold-sync.ts,
 * bench/resync.ts): the harness starts a fresh node process with the node
 * flags and environment of the measured build's agent (its bin/kpr-agent) at the priority of a program
 * under test (bench/priority.ts), and reads the JSON line it prints last; the
 * child loads the modules of the build it measures (its dist/, another
 * build's with --base: the child code is always this build's) and sets up
 * what the agent's sync writes to: standalone kernel maps with that build's
 * layouts (nothing attached to anything) and its batch writer thread.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BpfMap, BatchWriter } from '../native/index.js';
import { asUnderTest } from './priority.js';
import { agentNodeFlagsOf } from '../image/inputs.js';
import type { BenchMapSizes } from './map-sizing.js';

/** bin/kpr-agent's node flags in builds whose script does not say them in the form agentNodeFlags reads. */
const AGENT_NODE_FLAGS = ['--expose-gc', '--max-semi-space-size=2'];

/**
 * The node flags the build whose dist/ is `distRoot` runs its agent with
 * (its bin/kpr-agent's `${KPR_NODE_FLAGS-…}` default): two builds compared
 * side by side each get their own.
 */
export function agentNodeFlags(distRoot: string): string[] {
  let script: string;
  try {
    script = readFileSync(path.join(distRoot, '..', 'bin', 'kpr-agent'), 'utf8');
  } catch {
    return AGENT_NODE_FLAGS;
  }
  try {
    return agentNodeFlagsOf(script);
  } catch {
    return AGENT_NODE_FLAGS;
  }
}

/**
 * Runs `script` with `args` in a fresh node process with the node flags of
 * the build whose dist/ is `root`; resolves with the last line it prints,
 * parsed; rejects with its output when it fails.
 */
export function runBenchChild<T>(what: string, root: string, script: string, args: string[], timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = asUnderTest(
      spawn(process.execPath, [...agentNodeFlags(root), script, ...args], {
        env: { ...process.env, MALLOC_ARENA_MAX: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`${what} failed (${signal ?? `exit ${code}`}): ${err || out}`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop()!) as T);
      } catch {
        reject(new Error(`${what} printed no result: ${out}`));
      }
    });
  });
}

/**
 * The flags both benches take: --services/--endpoints (the scenario), --base
 * (the other build's dist/, measured alternately with this one), and the
 * child's --child/--dist (which build a child run measures).
 */
export function benchFlags(distRoot: string) {
  return {
    child: { type: 'boolean', default: false },
    dist: { type: 'string', default: distRoot },
    base: { type: 'string' },
    services: { type: 'string', default: '10000' },
    endpoints: { type: 'string', default: '10' },
  } as const;
}

/** The builds a bench alternates, [name, dist/]: the base first when given, then this build. */
export function buildArms(distRoot: string, base: string | undefined): Array<[string, string]> {
  const arms: Array<[string, string]> = [['this build', distRoot]];
  if (base) arms.unshift(['base', path.resolve(base)]);
  return arms;
}

/** Imports a module of the build whose dist/ is `root` (`rel`: its path there, e.g. "agent/sync/sync-loop.js"). */
export function buildLoader(root: string): <T>(rel: string) => Promise<T> {
  return <T>(rel: string) => import(pathToFileURL(path.join(root, rel)).href) as Promise<T>;
}

interface QuietLog {
  info(): void;
  warn(): void;
  error(): void;
  debug(): void;
  child(): QuietLog;
}

/** A logger that says nothing (the agent's child() included). */
export const quiet: QuietLog = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet };

export interface StandaloneMaps {
  /** The maps the reconciler writes, created (not pinned) with the measured build's layouts, at the agent's default sizes. */
  set: { svc: BpfMap; backend: BpfMap; vip: BpfMap; affinityMatch: BpfMap; svcMeta: BpfMap; srcRange: BpfMap; maglev: BpfMap; maglevRef: BpfMap };
  writer: BatchWriter;
  /** Closes the writer and every map. */
  close(): void;
}

/**
 * The maps and the batch writer of the build whose dist/ is `root`, its
 * native binding and layouts loaded by the caller, sized as the agent runs
 * for the scenario (bench/map-sizing.ts: the defaults at 10,000
 * Services).
 */
export function standaloneMaps(
  root: string,
  native: typeof import('../native/index.js'),
  L: typeof import('../agent/maps/layout.js'),
  sizes: BenchMapSizes,
): StandaloneMaps {
  const writer = native.BatchWriter.open(path.join(root, '..', 'build', native.BATCH_WRITER_LIBRARY));
  const M = native.BPF_MAP_TYPE;
  const set = {
    svc: native.BpfMap.create(M.HASH, L.SVC_KEY.size, L.SVC_VAL.size, sizes.services, 'kpr_svc'),
    backend: native.BpfMap.create(M.HASH, 4, L.BACKEND.size, sizes.backends, 'kpr_backend'),
    vip: native.BpfMap.create(M.HASH, L.VIP_KEY.size, L.VIP_VAL.size, sizes.frontends, 'kpr_vip'),
    affinityMatch: native.BpfMap.create(M.HASH, L.AFFINITY_MATCH_KEY.size, 1, sizes.backends, 'kpr_aff_match'),
    svcMeta: native.BpfMap.create(M.HASH, 4, L.SVC_META.size, sizes.frontends, 'kpr_svc_meta'),
    srcRange: native.BpfMap.create(M.HASH, L.SRC_RANGE_KEY.size, 1, 16, 'kpr_src_range'),
    // The Maglev maps (builds before layout.ts exported MAGLEV_KEY ignore them): 16 chunks, the scenario has no Maglev Service.
    maglev: native.BpfMap.create(M.HASH, 8, 2048, 16, 'kpr_maglev'),
    maglevRef: native.BpfMap.create(M.HASH, 8, 8, 16, 'kpr_maglev_ref'),
    // The per-frontend counters, whose slots a frontend's first name zeroes (the agent's maps have them;
    // builds before layout.ts exported SVC_STAT run without).
    ...('SVC_STAT' in L ? { svcStats: native.BpfMap.create(M.PERCPU_ARRAY, 4, L.SVC_STAT.size, sizes.frontends, 'kpr_svc_stats') } : {}),
  };
  return {
    set,
    writer,
    close() {
      writer.close();
      for (const m of Object.values(set)) m.close();
    },
  };
}
