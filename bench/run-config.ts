/** `bench/run.ts`'s flags (each also an env var), the targets of the scale, its log and constants. */
import { parseArgs } from 'node:util';
import { scaleTargets } from './scale-targets.js';

const { values: flags } = parseArgs({
  options: {
    services: { type: 'string' },
    endpoints: { type: 'string' },
    changes: { type: 'string' },
    'change-budget-ms': { type: 'string' },
    'ipt-changes': { type: 'string' },
    'ipt-budget-ms': { type: 'string' },
    'ipt-cold': { type: 'string' },
    'nft-changes': { type: 'string' },
    'nft-budget-ms': { type: 'string' },
    'nft-cold': { type: 'string' },
    'cold-timeout-ms': { type: 'string' },
    'step-timeout-ms': { type: 'string' },
    'dp-rounds': { type: 'string' },
    'dp-conns': { type: 'string' },
    'dp-limit-ms': { type: 'string' },
    'np-services': { type: 'string' },
    'np-rounds': { type: 'string' },
    'np-conns': { type: 'string' },
    'np-limit-ms': { type: 'string' },
    'agent-timeout-ms': { type: 'string' },
    'cli-runs': { type: 'string' },
    'log-level': { type: 'string' },
    skip: { type: 'string' },
  },
});

function num(flag: keyof typeof flags, env: string, dflt: number): number {
  const raw = (flags[flag] as string | undefined) ?? process.env[env];
  const v = raw === undefined || raw === '' ? dflt : Number(raw);
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${flag} / ${env}: not a number: ${raw}`);
  return v;
}

const services = num('services', 'KPR_BENCH_SERVICES', 10_000);
const iptChanges = num('ipt-changes', 'KPR_BENCH_IPT_CHANGES', 30);
const iptBudgetMs = num('ipt-budget-ms', 'KPR_BENCH_IPT_BUDGET_MS', 120_000);
const iptCold = Math.max(1, num('ipt-cold', 'KPR_BENCH_IPT_COLD', 1));
export const cfg = {
  services,
  endpoints: num('endpoints', 'KPR_BENCH_ENDPOINTS', 10),
  changes: num('changes', 'KPR_BENCH_CHANGES', 1000),
  changeBudgetMs: num('change-budget-ms', 'KPR_BENCH_CHANGE_BUDGET_MS', 180_000),
  iptChanges,
  iptBudgetMs,
  iptCold,
  nftChanges: num('nft-changes', 'KPR_BENCH_NFT_CHANGES', iptChanges),
  nftBudgetMs: num('nft-budget-ms', 'KPR_BENCH_NFT_BUDGET_MS', iptBudgetMs),
  nftCold: Math.max(1, num('nft-cold', 'KPR_BENCH_NFT_COLD', iptCold)),
  coldTimeoutMs: Math.max(1000, num('cold-timeout-ms', 'KPR_BENCH_COLD_TIMEOUT_MS', 300_000)),
  stepTimeoutMs: Math.max(1000, num('step-timeout-ms', 'KPR_BENCH_STEP_TIMEOUT_MS', 60_000)),
  dpRounds: num('dp-rounds', 'KPR_BENCH_DP_ROUNDS', 5),
  dpConns: num('dp-conns', 'KPR_BENCH_DP_CONNS', 5000),
  dpLimitMs: num('dp-limit-ms', 'KPR_BENCH_DP_LIMIT_MS', 20_000),
  npServices: Math.max(1, num('np-services', 'KPR_BENCH_NP_SERVICES', services)),
  npRounds: Math.max(1, num('np-rounds', 'KPR_BENCH_NP_ROUNDS', 5)),
  npConns: Math.max(1, num('np-conns', 'KPR_BENCH_NP_CONNS', 3000)),
  npLimitMs: num('np-limit-ms', 'KPR_BENCH_NP_LIMIT_MS', 20_000),
  agentTimeoutMs: num('agent-timeout-ms', 'KPR_BENCH_AGENT_TIMEOUT_MS', 300_000),
  cliRuns: num('cli-runs', 'KPR_BENCH_CLI_RUNS', 3),
  logLevel: (flags['log-level'] as string | undefined) ?? process.env.KPR_BENCH_LOG_LEVEL ?? 'info',
  skip: new Set(
    ((flags.skip as string | undefined) ?? process.env.KPR_BENCH_SKIP ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  ),
};

/** Fresh processes timing the cold path's floor before the agent starts. */
export const FLOOR_RUNS = 3;
/**
 * Cold starts of the agent whose initial syncs give kpr's cold figure (their
 * median): on this shared VM a spell of 10–20 s in which the same CPU work
 * takes ~1.4× as long (measured on an idle machine) falls on one start in a few, and one start was one
 * draw of it (docs/performance.md, *How `make bench` measures*). The last start is
 * the agent the rest of the phase measures; the others each get a cgroup
 * and bpffs directory of their own, removed before the next.
 */
export const COLD_RUNS = 3;
/** Bound on each timed `kpr service list -o json`. */
export const CLI_TIMEOUT_MS = 120_000;
/** The targets of this scale (bench/scale-targets.ts). */
export const T = scaleTargets(cfg.services);

export const log = (m: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 23)}] ${m}\n`);
export const MiB = 1024;

/** Periodic full resyncs timed after the changes; the agent's --sync-period (its default, as deployed). */
export const RESYNCS = 3;
export const AGENT_SYNC_PERIOD_MS = 30_000;
