/**
 * kpr benchmark: kpr vs kube-proxy (iptables mode and nftables mode), control plane and data plane,
 * all figures from one run, printed as a table and then as JSON (stdout, and
 * build/bench-results.json). Progress goes to stderr.
 *
 *   make bench                                  # full scale: 10,000 services × 10 endpoints
 *   make bench BENCH_ARGS="--services 100000 --cold-timeout-ms 120000"   # 100,000 × 10 (any flags below)
 *   KPR_BENCH_SERVICES=100 make bench           # quick smoke run
 *   node dist/bench/run.js --services 100 --changes 100 --ipt-changes 10 --dp-rounds 3 --dp-conns 2000
 *   node dist/bench/run.js --skip dataplane,controlplane --np-services 10000   # the NodePort benchmark alone
 *
 * Flags (each also settable as the env var in brackets; flags win):
 *   --services N          synthetic Services                     [KPR_BENCH_SERVICES=10000]
 *   --endpoints N         endpoints per Service                  [KPR_BENCH_ENDPOINTS=10]
 *   --changes N           kpr endpoint changes (ready flips)     [KPR_BENCH_CHANGES=1000]
 *   --change-budget-ms N  time bound for the kpr changes          [KPR_BENCH_CHANGE_BUDGET_MS=180000]
 *   --ipt-changes N       iptables partial syncs per shape        [KPR_BENCH_IPT_CHANGES=30]
 *   --ipt-budget-ms N     time bound for all iptables changes     [KPR_BENCH_IPT_BUDGET_MS=120000]
 *   --ipt-cold N          cold iptables loads (fresh netns each)  [KPR_BENCH_IPT_COLD=1]
 *   --nft-changes N       nftables partial syncs per shape        [KPR_BENCH_NFT_CHANGES=--ipt-changes]
 *   --nft-budget-ms N     time bound for all nftables changes     [KPR_BENCH_NFT_BUDGET_MS=--ipt-budget-ms]
 *   --nft-cold N          cold nftables loads (fresh netns each)  [KPR_BENCH_NFT_COLD=--ipt-cold]
 *   --cold-timeout-ms N   bound on each iptables-restore / nft cold load; one that runs out is
 *                         reported "not finished within N s" and its changes are skipped
 *                                                                [KPR_BENCH_COLD_TIMEOUT_MS=300000]
 *   --step-timeout-ms N   bound on each iptables / nftables partial sync [KPR_BENCH_STEP_TIMEOUT_MS=60000]
 *   --dp-rounds N         data-plane rounds per arm               [KPR_BENCH_DP_ROUNDS=5]
 *   --dp-conns N          connections per data-plane round        [KPR_BENCH_DP_CONNS=5000]
 *   --dp-limit-ms N       time bound per data-plane round         [KPR_BENCH_DP_LIMIT_MS=20000]
 *   --np-services N       services of the NodePort data plane at scale (it runs at 1 and at N; the
 *                         first 45,536 are NodePort Services, any further ones ClusterIP only)
 *                                                                [KPR_BENCH_NP_SERVICES=--services]
 *   --np-rounds N         NodePort rounds per arm                 [KPR_BENCH_NP_ROUNDS=5]
 *   --np-conns N          connections per NodePort round          [KPR_BENCH_NP_CONNS=3000]
 *   --np-limit-ms N       time bound per NodePort round           [KPR_BENCH_NP_LIMIT_MS=20000]
 *   --agent-timeout-ms N  wait for the agent's initial sync       [KPR_BENCH_AGENT_TIMEOUT_MS=300000]
 *   --cli-runs N          `kpr service list -o json` runs timed at N services, after the initial sync
 *                                                                [KPR_BENCH_CLI_RUNS=3]
 *   --log-level L         the agent's --log-level                 [KPR_BENCH_LOG_LEVEL=info]
 *   --skip LIST           comma list of: iptables, nftables, agent, dataplane, controlplane, nodeport, kpr-tc, resync [KPR_BENCH_SKIP=]
 *                         (kpr-tc: the NodePort arm with the agent forced to --tc-attach tc, beside the default tcx;
 *                         resync: do not wait for the agent's periodic full resyncs after the changes)
 *                         (iptables, nftables and agent also drop those arms of the NodePort benchmark;
 *                         controlplane skips phase 3 below, ClusterIP data plane at N included)
 * KPR_BENCH_IPTABLES_RESTORE picks the iptables-restore binary (default: iptables-restore;
 * e.g. iptables-legacy-restore); KPR_BENCH_NFT the nft binary (default: nft).
 * --services goes up to 105,960 (bench/scenario.ts). The agents get the map
 * sizes the scenario needs (bench/map-sizing.ts: the defaults at 10,000,
 * --map-size-* flags beyond). The targets checked, and the table saying which
 * were met, depend on the scale (bench/scale-targets.ts: those of 10,000 up
 * to 10,000 Services, those of 100,000 beyond).
 *
 * Safety: every namespace, the cgroup and the bpffs directory belong to this
 * run's Sandbox (sandbox/netns.ts) and are removed on exit or signal; iptables
 * and nftables rules are only ever loaded into the run's own throwaway namespaces; all
 * addresses are in 198.18.0.0/15; every loop is bounded in count and time.
 *
 * Phases: (1) build the C helpers; (2) data plane with 1 Service (its own
 * sandbox and agent); (3) at N Services: iptables cold load(s), nftables cold
 * load(s) (bench/nftables.ts: kube-proxy's nftables mode, `nft -f`), a wait for the
 * machine to go quiet after them (bench/settle.ts), then the cold path's floor (bench/cold-floor.ts in fresh processes), then the kpr
 * agent's initial sync, RSS, kpr endpoint changes interleaved with kube-proxy
 * partial syncs of both modes (kpr's changes also reported split by the agent's idle time
 * before them: back to back, or after a ≥ 50 ms pause such as an iptables
 * step), RSS again, then the data plane at N Services; (4) the
 * NodePort data plane (bench/nodeport.ts) at 1 and at --np-services NodePort
 * Services, each phase in its own sandbox: an external client reaching a pod
 * through NodeIP:nodePort served by kpr's tc programs (the real agent with
 * --netns), through kube-proxy's NodePort rules (iptables-restore in an
 * identical, separate node namespace), through its nftables-mode rules (nft -f
 * in another), and the pod IP directly.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Sandbox } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import {
  agentAvailable,
  endpointChanges,
  PAUSE_MS,
  periodicResyncs,
  splitByPause,
  startAgent,
  startApi,
  type Agent,
  type BenchApiServer,
  type ChangeSamples,
  type InitialSync,
  type ResyncSample,
} from './control-plane.js';
import { runColdSyncChild } from './cold-child.js';
import { buildHelpers, dataplaneRounds, setupDataplane, waitReachable } from './data-plane.js';
import { counterSwitch } from './counter-switch.js';
import { iptablesVersion, setupIptables, IPTABLES_RESTORE, type IptablesCold, type IptablesChanger } from './iptables.js';
import { NFT, nftVersion, NotFinishedError, setupNftables, type NftablesCold, type NftChanger } from './nftables.js';
import { nodePortPhase } from './nodeport.js';
import { deprioritizeHarness, HARNESS_NICE, UNDER_TEST_NICE } from './priority.js';
import {
  dist,
  fmtMs,
  fmtRatio,
  median,
  passFail,
  renderGrid,
  renderTable,
  round,
  summarizeDataplane,
  summarizeNodePort,
  type DataplaneSummary,
  type NodePortSummary,
  type Row,
} from './report.js';
import { timeServiceList, type ServiceListTiming } from './cli-timing.js';
import { waitForQuiet, type Settled } from './settle.js';
import { benchMapSizeArgs, needsOf, shortfall } from './map-sizing.js';
import { clusterIpScaleCost, fmtLimit, nodePortScaleCost, renderTargets, scaleTargets, targetResults, type ScaleCost, type TargetResult } from './scale-targets.js';
import { makeScenario, serviceCIDRs, ECHO_CLUSTER_IP, SERVICE_PORT } from './scenario.js';
import { NODE_BRIDGE_IP } from '../sandbox/topology.js';

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
const cfg = {
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
  skip: new Set(((flags.skip as string | undefined) ?? process.env.KPR_BENCH_SKIP ?? '').split(',').map((s) => s.trim()).filter(Boolean)),
};

/**
 * A kube-proxy load that ran out of its bound is a figure ("not finished
 * within N s", listed under the tables), not a failure of the run; any other
 * error is one.
 */
function boundedOut(res: Results, msg: string, err: unknown): void {
  (err instanceof NotFinishedError ? res.notFinished : res.errors).push(msg);
}

/** What to report for a cold load that did not complete: "not finished within X s", or the failure. */
function coldFailure(err: unknown): string {
  return err instanceof NotFinishedError ? `not finished within ${(err.limitMs / 1000).toFixed(0)} s` : `failed: ${(err as Error).message.split('\n')[0]}`;
}

/** Fresh processes timing the cold path's floor before the agent starts. */
const FLOOR_RUNS = 3;
/** Bound on each timed `kpr service list -o json`. */
const CLI_TIMEOUT_MS = 120_000;
/** The targets of this scale (bench/scale-targets.ts). */
const T = scaleTargets(cfg.services);

const log = (m: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 23)}] ${m}\n`);
const MiB = 1024;

interface KprControl {
  initial: InitialSync;
  serviceList?: ServiceListTiming;
  changes?: ChangeSamples;
  rssAfterChangesKiB?: number;
  resync?: { resyncs: ResyncSample[]; otherApiToLogMs: number[] };
}

/** Periodic full resyncs timed after the changes; the agent's --sync-period (its default, as deployed). */
const RESYNCS = 3;
const AGENT_SYNC_PERIOD_MS = 30_000;

interface Results {
  meta: Record<string, unknown>;
  config: Record<string, unknown>;
  controlPlane: {
    kpr?: {
      coldMs: number;
      /** bench/cold-floor.ts: the same kernel entries with no Kubernetes semantics, each run a fresh process. */
      coldFloor: { runsMs: number[]; medianMs: number };
      spawnToSyncedMs: number;
      initialSyncLog: Record<string, unknown>;
      /** The agent's map-size flags (bench/map-sizing.ts; none at the default sizes). */
      mapSizeArgs: string[];
      /** `kpr service list -o json` against the agent's maps after its initial sync (bench/cli-timing.ts). */
      serviceList?: ServiceListTiming;
      change?: {
        eventToMapsMs: ReturnType<typeof dist>;
        durationMs: ReturnType<typeof dist>;
        apiToLogMs: ReturnType<typeof dist>;
        /** eventToMapsMs of the changes made back to back, and of those made after the agent sat idle ≥ pauseMs. */
        backToBackMs: ReturnType<typeof dist>;
        afterPauseMs: ReturnType<typeof dist>;
        pauseMs: number;
        timeouts: number;
        slowest: Array<{ change: number; eventToMapsMs: number; durationMs: number; atMs: number }>;
      };
      rssMiB: { afterInitialSync: number; afterChanges?: number; phases?: RssPhases };
      /** Periodic full resyncs with kernel read-back (drift repair), and the endpoint changes made while one ran. */
      resync?: {
        durationMs: number[];
        readBackMs: number[];
        /** Each resync's longest slice, and the longest the agent's event loop was held while it ran (its 1 ms probe; agents that log it). */
        longestSliceMs: Array<number | null>;
        loopBlockMs: Array<number | null>;
        /** API update → sync log of the changes made while a resync ran (or just after it), and of those made with none running. */
        blockedApiToLogMs: number[];
        duringApiToLogMs: ReturnType<typeof dist>;
        otherApiToLogMs: ReturnType<typeof dist>;
      };
    };
    iptables?: {
      binary: string;
      version: string;
      /** Set when the cold load ran out of --cold-timeout-ms (or failed): no cold figure, no changes. */
      notFinished?: string;
      cold?: IptablesCold & { medianMs: number };
      /** kube-proxy's real partial sync: KUBE-SERVICES in full + the changed service's chains. */
      changeExactMs: ReturnType<typeof dist>;
      /** Only the changed service's chains (a lower bound for iptables). */
      changeMinimalMs: ReturnType<typeof dist>;
    };
    /** kube-proxy's nftables mode (bench/kube-proxy-nft.ts, loaded with nft -f; bench/nftables.ts). */
    nftables?: {
      binary: string;
      version: string;
      notFinished?: string;
      cold?: NftablesCold & { medianMs: number };
      /** kube-proxy's whole partial sync: `nft -j list chains ip`, the stale-chain delete when due, the transaction. */
      changeExactMs: ReturnType<typeof dist>;
      /** The partial-sync transaction alone: the changed service's chains rewritten (one nft -f). */
      changeMinimalMs: ReturnType<typeof dist>;
      /** The chain listing inside each exact sync. */
      listChainsMs: ReturnType<typeof dist>;
      staleChainDeletes: number;
      /** A partial sync that ran out of --step-timeout-ms or failed (the remaining ones are skipped). */
      changeError?: string;
    };
    ratios?: Record<string, number>;
  };
  dataPlane: DataplaneSummary[];
  /** NodePort from an external client: kpr (tc) vs kube-proxy's iptables and nftables rules vs the pod IP directly. */
  dataPlaneNodePort: NodePortSummary[];
  targets: TargetResult[];
  /** kube-proxy loads that ran out of their bound (--cold-timeout-ms). */
  notFinished: string[];
  /** The wait for a quiet machine after kube-proxy's cold loads, before kpr's control plane is timed (bench/settle.ts). */
  settledBeforeKpr?: Settled;
  /** kpr's connection cost (p50 over direct) at N Services over at 1 Service. */
  scaleCost?: { clusterIp: ScaleCost; nodePort: ScaleCost };
  errors: string[];
}

/** The agent's own RSS readings at its start-up phases (its log lines), in MiB. */
interface RssPhases {
  datapathLoaded: number;
  cachesSynced: number;
  mapsWritten: number;
}

function rssPhases(agent: Agent): RssPhases | undefined {
  const waiting = agent.records.find((r) => r.msg === 'waiting for the k8s caches');
  const done = agent.records.find((r) => r.msg === 'initial sync complete');
  if (typeof waiting?.rssMiB !== 'number' || typeof done?.rssMiB !== 'number') return undefined;
  return { datapathLoaded: waiting.rssMiB, cachesSynced: Number(done.cachesSynced?.rssMiB), mapsWritten: done.rssMiB };
}

async function dataplanePhase(sandbox: Sandbox, env: Awaited<ReturnType<typeof setupDataplane>>, services: number, withKpr: boolean): Promise<DataplaneSummary> {
  const cip = withKpr ? { ip: ECHO_CLUSTER_IP, port: SERVICE_PORT } : undefined;
  if (cip) await waitReachable(sandbox, env, cip.ip, cip.port);
  log(`data plane at ${services} services: ${cfg.dpRounds} rounds × ${cfg.dpConns} connections per arm`);
  const r = await dataplaneRounds(sandbox, env, cip, cfg.dpRounds, cfg.dpConns, cfg.dpLimitMs, log, cip ? counterSwitch(sandbox.bpffsDir) : undefined, cip ? sandbox.bpffsDir : undefined);
  return summarizeDataplane(services, r);
}

/** Data plane with only the echo Service programmed. */
async function phaseOneService(res: Results, withKpr: boolean): Promise<void> {
  const sandbox = new Sandbox();
  let api: BenchApiServer | undefined;
  let agent: Agent | undefined;
  try {
    const env = await setupDataplane(sandbox);
    if (withKpr) {
      const { echo } = makeScenario(0, cfg.endpoints);
      api = await startApi([echo]);
      ({ agent } = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs));
    }
    res.dataPlane.push(await dataplanePhase(sandbox, env, 1, withKpr));
  } finally {
    await agent?.stop().catch(() => {});
    await api?.close().catch(() => {});
    await sandbox.teardown();
  }
}

async function phaseAtScale(res: Results, withKpr: boolean): Promise<void> {
  const sandbox = new Sandbox();
  let restorePriority = () => {};
  let api: BenchApiServer | undefined;
  let agent: Agent | undefined;
  try {
    const scenario = makeScenario(cfg.services, cfg.endpoints);
    // While the control plane is timed, the harness yields the CPUs to the programs under test (bench/priority.ts).
    restorePriority = deprioritizeHarness();
    const total = scenario.services.length;
    const target = scenario.services[Math.floor(cfg.services / 2)];
    log(`scenario: ${total} services (incl. the echo service) × up to ${cfg.endpoints} endpoints; changed service ${target.namespace}/${target.name}`);

    // kube-proxy: cold loads first, while nothing else runs.
    let changer: IptablesChanger | undefined;
    if (!cfg.skip.has('iptables')) {
      log(`iptables: cold load of ${total} services with ${IPTABLES_RESTORE} (${cfg.iptCold}×, each bounded at ${cfg.coldTimeoutMs / 1000} s)`);
      res.controlPlane.iptables = { binary: IPTABLES_RESTORE, version: iptablesVersion(), changeExactMs: dist([]), changeMinimalMs: dist([]) };
      try {
        const ipt = await setupIptables(sandbox, scenario.services, target, cfg.iptCold, log, cfg.coldTimeoutMs, cfg.stepTimeoutMs);
        changer = ipt.changer;
        res.controlPlane.iptables.cold = { ...ipt.cold, coldMs: ipt.cold.coldMs.map((v) => round(v)), medianMs: round(median(ipt.cold.coldMs)) };
      } catch (err) {
        res.controlPlane.iptables.notFinished = coldFailure(err);
        log(`iptables: ${res.controlPlane.iptables.notFinished}`);
        boundedOut(res, `iptables cold load at ${total} services: ${res.controlPlane.iptables.notFinished}`, err);
      }
    }
    let nftChanger: NftChanger | undefined;
    if (!cfg.skip.has('nftables')) {
      log(`nftables: cold load of ${total} services with ${NFT} -f (${cfg.nftCold}×, each bounded at ${cfg.coldTimeoutMs / 1000} s)`);
      res.controlPlane.nftables = { binary: NFT, version: nftVersion(), changeExactMs: dist([]), changeMinimalMs: dist([]), listChainsMs: dist([]), staleChainDeletes: 0 };
      try {
        const opts = { nodeIPs: [NODE_BRIDGE_IP], serviceCIDRs: serviceCIDRs(cfg.services) };
        const nft = await setupNftables(sandbox, scenario.services, target, cfg.nftCold, opts, log, cfg.coldTimeoutMs, cfg.stepTimeoutMs);
        nftChanger = nft.changer;
        res.controlPlane.nftables.cold = { ...nft.cold, coldMs: nft.cold.coldMs.map((v) => round(v)), medianMs: round(median(nft.cold.coldMs)) };
        log(`nftables: ${nft.cold.chains} chains loaded (${(nft.cold.inputBytes / 1e6).toFixed(1)} MB, ${nft.cold.inputLines} lines of transaction)`);
      } catch (err) {
        res.controlPlane.nftables.notFinished = coldFailure(err);
        log(`nftables: ${res.controlPlane.nftables.notFinished}`);
        boundedOut(res, `nftables cold load at ${total} services: ${res.controlPlane.nftables.notFinished}`, err);
      }
    }

    const env = !cfg.skip.has('dataplane') ? await setupDataplane(sandbox) : undefined;

    // iptables partial syncs, interleaved with kpr's changes (or alone).
    const iptTotal = changer ? cfg.iptChanges * 2 : 0;
    const iptDeadline = Date.now() + cfg.iptBudgetMs;
    let iptDone = 0;
    const iptStep = async () => {
      if (!changer || iptDone >= iptTotal || Date.now() > iptDeadline) return;
      try {
        await changer.change(iptDone % 2 === 0 ? 'exact' : 'minimal');
      } catch (err) {
        stepFailed('iptables', err);
        changer = undefined;
        return;
      }
      iptDone++;
      // Let the kernel finish the nft commit's deferred work before kpr's next change is timed.
      await new Promise((r) => setTimeout(r, 100));
    };
    // nftables partial syncs, the same way.
    const nftTotal = nftChanger ? cfg.nftChanges * 2 : 0;
    const nftDeadline = Date.now() + cfg.nftBudgetMs;
    let nftDone = 0;
    const nftStep = async () => {
      if (!nftChanger || nftDone >= nftTotal || Date.now() > nftDeadline) return;
      try {
        // Shapes in pairs (exact remove, exact rejoin, minimal remove, …): the stale-chain delete kube-proxy runs at a rejoin ≥ 1 s later lands in an exact sync.
        await nftChanger.change(Math.floor(nftDone / 2) % 2 === 0 ? 'exact' : 'minimal');
      } catch (err) {
        if (res.controlPlane.nftables) res.controlPlane.nftables.changeError = (err as Error).message;
        stepFailed('nftables', err);
        nftChanger = undefined;
        return;
      }
      nftDone++;
      await new Promise((r) => setTimeout(r, 100));
    };
    const stepFailed = (what: string, err: unknown) => {
      const msg = `${what} partial sync ${err instanceof NotFinishedError ? `not finished within ${err.limitMs / 1000} s` : `failed: ${(err as Error).message}`}; its remaining changes skipped`;
      log(msg);
      boundedOut(res, msg, err);
    };
    const iptChanger = changer;
    const nftChangerAll = nftChanger;

    let kpr: KprControl | undefined;
    const coldFloorMs: number[] = [];
    const needs = needsOf(scenario.services);
    const sizeArgs = benchMapSizeArgs(needs);
    if (withKpr) {
      const settled = await waitForQuiet();
      res.settledBeforeKpr = { ...settled, idle: round(settled.idle, 3) };
      log(`kpr: the machine ${settled.quiet ? 'quiet' : 'still busy'} after ${fmtMs(settled.waitedMs)} (${(settled.idle * 100).toFixed(0)}% idle)`);
      log(`kpr: the cold path's floor (bench/cold-floor.ts), ${FLOOR_RUNS} fresh processes`);
      for (let i = 0; i < FLOOR_RUNS; i++) coldFloorMs.push((await runColdSyncChild(path.join(repoRoot, 'dist'), 'floor', cfg.services, cfg.endpoints)).ms);
      log(`kpr: floor ${coldFloorMs.map((ms) => fmtMs(ms)).join(', ')}`);
      log(`kpr: loading ${total} Services and EndpointSlices into the API server`);
      api = await startApi(scenario.services);
      log(`kpr: starting the agent${sizeArgs.length ? ` (${sizeArgs.join(' ')})` : ''}`);
      const started = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs, { extraArgs: sizeArgs });
      agent = started.agent;
      kpr = { initial: started.initial };
      log(`kpr: initial sync ${fmtMs(started.initial.cacheSyncedToMapsWrittenMs)} (spawn→synced ${fmtMs(started.initial.spawnToSyncedMs)}), RSS ${(started.initial.rssKiB / MiB).toFixed(1)} MiB`);
      const phases = rssPhases(agent);
      if (phases) log(`kpr: RSS by phase: datapath loaded ${phases.datapathLoaded} MiB, caches synced ${phases.cachesSynced} MiB, maps written ${phases.mapsWritten} MiB`);
      const missing = shortfall(started.initial.record, needs);
      if (missing) {
        log(`ERROR kpr: ${missing}`);
        res.errors.push(`kpr initial sync at ${total} services: ${missing}`);
      }
      if (cfg.cliRuns > 0) {
        log(`kpr: kpr service list -o json, ${cfg.cliRuns}×`);
        try {
          kpr.serviceList = await timeServiceList(sandbox, sandbox.bpffsDir, cfg.cliRuns, CLI_TIMEOUT_MS);
          log(`kpr: service list ${kpr.serviceList.runsMs.map((ms) => fmtMs(ms)).join(', ')} (${kpr.serviceList.frontends} frontends, ${(kpr.serviceList.bytes / 1e6).toFixed(1)} MB of JSON)`);
          if (kpr.serviceList.frontends !== needs.frontends) res.errors.push(`kpr service list at ${total} services: ${kpr.serviceList.frontends} frontends listed of ${needs.frontends}`);
        } catch (err) {
          log(`ERROR ${(err as Error).message}`);
          res.errors.push(`kpr service list at ${total} services: ${(err as Error).message}`);
        }
      }
      const steps = Math.max(iptTotal, nftTotal);
      const every = steps > 0 ? Math.max(1, Math.floor(cfg.changes / steps)) : Infinity;
      log(`kpr: ${cfg.changes} endpoint changes${steps ? `, one iptables and one nftables partial sync every ${every}` : ''}`);
      kpr.changes = await endpointChanges(api, agent, target, cfg.changes, cfg.changeBudgetMs, async (i) => {
        if ((i + 1) % 100 === 0) log(`  kpr change ${i + 1}/${cfg.changes}, iptables ${iptDone}/${iptTotal}, nftables ${nftDone}/${nftTotal}`);
        if ((i + 1) % every === 0) {
          await iptStep();
          await nftStep();
        }
      });
      await new Promise((r) => setTimeout(r, 500));
      kpr.rssAfterChangesKiB = agent.rssKiB();
      if (!cfg.skip.has('resync')) {
        log(`kpr: waiting for ${RESYNCS} periodic full resyncs (every ${AGENT_SYNC_PERIOD_MS / 1000} s), endpoint changes every 20 ms meanwhile`);
        kpr.resync = await periodicResyncs(api, agent, target, RESYNCS, AGENT_SYNC_PERIOD_MS + 10_000);
        for (const r of kpr.resync.resyncs) log(`  resync ${fmtMs(r.durationMs)} (read-back ${fmtMs(r.readBackMs)}), changes during it waited ${r.blockedApiToLogMs.map((v) => fmtMs(v)).join(', ') || 'none made'}`);
      }
    }
    while (changer && iptDone < iptTotal && Date.now() <= iptDeadline) await iptStep();
    while (nftChanger && nftDone < nftTotal && Date.now() <= nftDeadline) await nftStep();
    if (iptChanger && res.controlPlane.iptables) {
      res.controlPlane.iptables.changeExactMs = dist(iptChanger.exactMs);
      res.controlPlane.iptables.changeMinimalMs = dist(iptChanger.minimalMs);
      log(`iptables: ${iptChanger.exactMs.length} exact + ${iptChanger.minimalMs.length} minimal partial syncs`);
    }
    if (nftChangerAll && res.controlPlane.nftables) {
      const n = res.controlPlane.nftables;
      n.changeExactMs = dist(nftChangerAll.exactMs);
      n.changeMinimalMs = dist(nftChangerAll.minimalMs);
      n.listChainsMs = dist(nftChangerAll.listMs);
      n.staleChainDeletes = nftChangerAll.staleDeletes;
      log(`nftables: ${nftChangerAll.exactMs.length} exact + ${nftChangerAll.minimalMs.length} minimal partial syncs (${nftChangerAll.staleDeletes} stale-chain deletes)`);
    }
    if (kpr) {
      const c = kpr.changes!;
      const byPause = splitByPause(c, PAUSE_MS);
      res.controlPlane.kpr = {
        coldMs: kpr.initial.cacheSyncedToMapsWrittenMs,
        coldFloor: { runsMs: coldFloorMs.map((v) => round(v)), medianMs: round(median(coldFloorMs)) },
        spawnToSyncedMs: round(kpr.initial.spawnToSyncedMs),
        initialSyncLog: kpr.initial.record,
        mapSizeArgs: sizeArgs,
        serviceList: kpr.serviceList,
        change: {
          eventToMapsMs: dist(c.eventToMapsMs),
          durationMs: dist(c.durationMs),
          apiToLogMs: dist(c.apiToLogMs),
          backToBackMs: dist(byPause.backToBack),
          afterPauseMs: dist(byPause.afterPause),
          pauseMs: PAUSE_MS,
          timeouts: c.timeouts,
          // The tail, for reading what it coincides with (an iptables step every `every` changes, the 30 s full sync).
          slowest: c.eventToMapsMs
            .map((ms, i) => ({ change: i + 1, eventToMapsMs: round(ms, 3), durationMs: round(c.durationMs[i], 3), atMs: round(c.atMs[i]) }))
            .sort((a, b) => b.eventToMapsMs - a.eventToMapsMs)
            .slice(0, 12),
        },
        rssMiB: {
          afterInitialSync: round(kpr.initial.rssKiB / MiB, 1),
          afterChanges: kpr.rssAfterChangesKiB ? round(kpr.rssAfterChangesKiB / MiB, 1) : undefined,
          phases: agent ? rssPhases(agent) : undefined,
        },
        resync: kpr.resync && {
          durationMs: kpr.resync.resyncs.map((r) => round(r.durationMs, 3)),
          readBackMs: kpr.resync.resyncs.map((r) => round(r.readBackMs, 3)),
          longestSliceMs: kpr.resync.resyncs.map((r) => (r.longestSliceMs === undefined ? null : round(r.longestSliceMs, 3))),
          loopBlockMs: kpr.resync.resyncs.map((r) => (r.loopBlockMs === undefined ? null : round(r.loopBlockMs, 3))),
          blockedApiToLogMs: kpr.resync.resyncs.flatMap((r) => r.blockedApiToLogMs.map((v) => round(v, 3))),
          duringApiToLogMs: dist(kpr.resync.resyncs.flatMap((r) => r.blockedApiToLogMs)),
          otherApiToLogMs: dist(kpr.resync.otherApiToLogMs),
        },
      };
    }
    restorePriority();
    if (env) res.dataPlane.push(await dataplanePhase(sandbox, env, cfg.services, withKpr));
  } finally {
    restorePriority();
    await agent?.stop().catch(() => {});
    await api?.close().catch(() => {});
    await sandbox.teardown();
  }
}

function buildRows(res: Results): { control: Row[]; data: Row[] } {
  const k = res.controlPlane.kpr;
  const i = res.controlPlane.iptables;
  const n = `${cfg.services.toLocaleString('en-US')} svc × ${cfg.endpoints} ep`;
  const control: Row[] = [];
  const ratios: Record<string, number> = {};
  const ratio = (key: string, a?: number, b?: number) => {
    if (a !== undefined && b !== undefined && Number.isFinite(a) && Number.isFinite(b) && b > 0) ratios[key] = round(a / b, 6);
    return fmtRatio(a, b);
  };
  control.push({
    metric: `cold programming, ${n}`,
    kpr: fmtMs(k?.coldMs),
    other: i ? (i.cold ? `${fmtMs(i.cold.medianMs)} (iptables-restore)` : `${i.notFinished} (iptables-restore)`) : 'n/a',
    ratio: ratio('cold', k?.coldMs, i?.cold?.medianMs),
    target: fmtLimit(T.coldMs, 'ms'),
    result: passFail(k?.coldMs, T.coldMs),
  });
  control.push({
    metric: `  its floor: the same entries, no Kubernetes rules (median of ${FLOOR_RUNS})`,
    kpr: fmtMs(k?.coldFloor.medianMs),
    other: '',
    ratio: k ? `kpr ÷ floor ${ratio('coldOverFloor', k.coldMs, k.coldFloor.medianMs)}` : '',
    target: '',
    result: '',
  });
  const ch = k?.change;
  control.push({
    metric: `one endpoint change p50 (n=${ch?.eventToMapsMs.n ?? 0} / ${i?.changeMinimalMs.n ?? 0})`,
    kpr: fmtMs(ch?.eventToMapsMs.p50),
    other: i ? `${fmtMs(i.changeMinimalMs.p50)} (changed chains only)` : 'n/a',
    ratio: ratio('changeP50', ch?.eventToMapsMs.p50, i?.changeMinimalMs.p50),
    target: '',
    result: '',
  });
  control.push({
    metric: 'one endpoint change p99',
    kpr: fmtMs(ch?.eventToMapsMs.p99),
    other: i ? `${fmtMs(i.changeMinimalMs.p99)} (changed chains only)` : 'n/a',
    ratio: ratio('changeP99', ch?.eventToMapsMs.p99, i?.changeMinimalMs.p99),
    target: fmtLimit(T.changeP99Ms, 'ms'),
    result: passFail(ch?.eventToMapsMs.p99, T.changeP99Ms),
  });
  control.push({
    metric: `  kube-proxy's real partial sync p50 / p99, ratio on p99 (n=${i?.changeExactMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: i ? `${fmtMs(i.changeExactMs.p50)} / ${fmtMs(i.changeExactMs.p99)} (+KUBE-SERVICES)` : 'n/a',
    ratio: ratio('changeExactP99', ch?.eventToMapsMs.p99, i?.changeExactMs.p99),
    target: '',
    result: '',
  });
  const nf = res.controlPlane.nftables;
  control.push({
    metric: `kube-proxy nftables mode: cold programming, ${n}`,
    kpr: fmtMs(k?.coldMs),
    other: nf ? `${nf.cold ? fmtMs(nf.cold.medianMs) : nf.notFinished} (nft -f)` : 'n/a',
    ratio: ratio('coldNft', k?.coldMs, nf?.cold?.medianMs),
    target: '',
    result: '',
  });
  ratio('changeNftP50', ch?.eventToMapsMs.p50, nf?.changeMinimalMs.p50);
  control.push({
    metric: `  one endpoint change p50 / p99, ratio on p99 (n=${ch?.eventToMapsMs.n ?? 0} / ${nf?.changeMinimalMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: nf ? `${fmtMs(nf.changeMinimalMs.p50)} / ${fmtMs(nf.changeMinimalMs.p99)} (the nft -f transaction)` : 'n/a',
    ratio: ratio('changeNftP99', ch?.eventToMapsMs.p99, nf?.changeMinimalMs.p99),
    target: '',
    result: '',
  });
  control.push({
    metric: `  kube-proxy's real partial sync p50 / p99, ratio on p99 (n=${nf?.changeExactMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: nf ? `${fmtMs(nf.changeExactMs.p50)} / ${fmtMs(nf.changeExactMs.p99)} (+nft -j list chains: ${fmtMs(nf.listChainsMs.p50)})` : 'n/a',
    ratio: ratio('changeNftExactP99', ch?.eventToMapsMs.p99, nf?.changeExactMs.p99),
    target: '',
    result: '',
  });
  control.push({
    metric: `  kpr change p50 / p99 back to back (n=${ch?.backToBackMs.n ?? 0}) · after a ≥ ${ch?.pauseMs ?? PAUSE_MS} ms pause (n=${ch?.afterPauseMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.backToBackMs.p50)} / ${fmtMs(ch.backToBackMs.p99)} · ${fmtMs(ch.afterPauseMs.p50)} / ${fmtMs(ch.afterPauseMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: '  kpr sync durationMs p50 / p99',
    kpr: ch ? `${fmtMs(ch.durationMs.p50)} / ${fmtMs(ch.durationMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: '  kpr API update → sync log seen p50 / p99',
    kpr: ch ? `${fmtMs(ch.apiToLogMs.p50)} / ${fmtMs(ch.apiToLogMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: 'agent RSS after initial sync',
    kpr: k ? `${k.rssMiB.afterInitialSync} MiB` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.rssMiB, 'MiB'),
    result: passFail(k?.rssMiB.afterInitialSync, T.rssMiB),
  });
  control.push({
    metric: `agent RSS after ${ch?.eventToMapsMs.n ?? 0} changes`,
    kpr: k?.rssMiB.afterChanges !== undefined ? `${k.rssMiB.afterChanges} MiB` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.rssMiB, 'MiB'),
    result: passFail(k?.rssMiB.afterChanges, T.rssMiB),
  });
  const sl = k?.serviceList;
  control.push({
    metric: `kpr service list -o json, ${n} (median of ${sl?.runsMs.length ?? 0}; ${sl ? `${sl.frontends.toLocaleString('en-US')} frontends, ${(sl.bytes / 1e6).toFixed(1)} MB` : 'not run'})`,
    kpr: sl ? `${fmtMs(sl.medianMs)} (${sl.runsMs.map((v) => fmtMs(v)).join(', ')})` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.serviceListMs, 'ms'),
    result: T.serviceListMs !== undefined ? passFail(sl?.medianMs, T.serviceListMs) : '',
  });
  const rs = k?.resync;
  control.push({
    metric: `periodic full resync with kernel read-back, ${n} (n=${rs?.durationMs.length ?? 0})`,
    kpr: rs?.durationMs.length ? `${rs.durationMs.map((v) => fmtMs(v)).join(', ')} (read-back ${rs.readBackMs.map((v) => fmtMs(v)).join(', ')})` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  const listMs = (xs: Array<number | null> | undefined) => (xs?.length && xs.every((x) => x !== null) ? xs.map((v) => fmtMs(v!)).join(', ') : 'n/a');
  control.push({
    metric: '  its longest event-loop block (the agent\'s 1 ms probe) · its longest slice',
    kpr: rs ? `${listMs(rs.loopBlockMs)} · ${listMs(rs.longestSliceMs)}` : 'n/a',
    other: '',
    ratio: '',
    target: '≤ a few ms',
    result: '',
  });
  const during = rs?.duringApiToLogMs;
  const none = rs?.otherApiToLogMs;
  control.push({
    metric: `  an endpoint change, API update → synced, p50 / p99: made during a resync (n=${during?.n ?? 0}) · with none running (n=${none?.n ?? 0})`,
    kpr: during && none ? `${fmtMs(during.p50)} / ${fmtMs(during.p99)} · ${fmtMs(none.p50)} / ${fmtMs(none.p99)} (during ÷ none ${ratio('resyncChangeP50', during.p50, none.p50)} / ${ratio('resyncChangeP99', during.p99, none.p99)})` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  res.controlPlane.ratios = ratios;

  const data: Row[] = [];
  for (const d of res.dataPlane) {
    const c = d.arms.clusterip;
    const x = d.arms.direct;
    const h = d.arms['direct-nohook'];
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const isScale = d.services === cfg.services && d.services > 1 && T.clusterIpVsDirect !== undefined;
    data.push({
      metric: `conn p50 latency, ${at} (ClusterIP vs pod IP)`,
      kpr: c ? `${c.p50_us} µs` : 'n/a',
      other: x ? `${x.p50_us} µs` : 'n/a',
      ratio: fmtRatio(c?.p50_us, x?.p50_us),
      target: isScale ? fmtLimit(T.clusterIpVsDirect, '×') : '',
      result: isScale ? passFail(d.costRatioP50, T.clusterIpVsDirect!) : '',
    });
    const off = d.arms['clusterip-nocounters'];
    if (c && off) {
      data.push({
        metric: `conn p50, ${at}: per-Service counters on vs off`,
        kpr: `${c.p50_us} µs`,
        other: `${off.p50_us} µs`,
        ratio: fmtRatio(c.p50_us, off.p50_us),
        target: '≤ 1.02×',
        result: passFail(d.countersCost?.p50 ?? undefined, 1.02),
      });
    }
    const mon = d.monitorCost;
    const on = d.arms['clusterip-monitor'];
    if (c && on && mon) {
      data.push({
        metric: `conn p50 / p99, ${at}: kpr monitor on (reader draining; ${mon.events} events read, ${mon.lost} lost) vs off`,
        kpr: `${on.p50_us} / ${on.p99_us} µs`,
        other: `${c.p50_us} / ${c.p99_us} µs`,
        ratio: `${fmtRatio(on.p50_us, c.p50_us)} / ${fmtRatio(on.p99_us, c.p99_us)}`,
        target: '',
        result: '',
      });
    }
    data.push({
      metric: `conn p99 latency, ${at}`,
      kpr: c ? `${c.p99_us} µs` : 'n/a',
      other: x ? `${x.p99_us} µs` : 'n/a',
      ratio: fmtRatio(c?.p99_us, x?.p99_us),
      target: '',
      result: '',
    });
    data.push({
      metric: `conns/s, ${at}`,
      kpr: c ? `${c.conns_per_sec}` : 'n/a',
      other: x ? `${x.conns_per_sec}` : 'n/a',
      ratio: fmtRatio(c?.conns_per_sec, x?.conns_per_sec),
      target: '',
      result: '',
    });
    data.push({
      metric: `  paired mean-latency ratio, ${at}`,
      kpr: d.costRatioMean !== undefined ? `${d.costRatioMean}×` : 'n/a',
      other: h ? `no-hook p50 ${h.p50_us} µs` : '',
      ratio: '',
      target: '',
      result: '',
    });
  }
  for (const [what, c] of [['ClusterIP', clusterIpScaleCost(res.dataPlane)], ['NodePort', nodePortScaleCost(res.dataPlaneNodePort)]] as const) {
    if (c.services === undefined) continue;
    data.push({
      metric: `${what} cost at ${c.services.toLocaleString('en-US')} svc over at 1 svc (p50 over direct at each)`,
      kpr: `${c.atN ?? 'n/a'}× vs ${c.one ?? 'n/a'}×`,
      other: '',
      ratio: c.ratio !== undefined ? `${c.ratio.toFixed(3)}×` : 'n/a',
      target: fmtLimit(T.atScaleVsOne, '×'),
      result: T.atScaleVsOne !== undefined ? passFail(c.ratio, T.atScaleVsOne) : '',
    });
  }
  return { control, data };
}

/** NodePort data plane at `services` NodePort Services (a sandbox of its own). */
async function phaseNodePort(res: Results, services: number, withKpr: boolean): Promise<void> {
  log(`nodeport: phase at ${services} service(s)`);
  const p = await nodePortPhase(
    {
      services,
      endpoints: cfg.endpoints,
      rounds: cfg.npRounds,
      conns: cfg.npConns,
      limitMs: cfg.npLimitMs,
      agentTimeoutMs: cfg.agentTimeoutMs,
      loadTimeoutMs: cfg.coldTimeoutMs,
      logLevel: cfg.logLevel,
      withKpr,
      withIptables: !cfg.skip.has('iptables'),
      withNftables: !cfg.skip.has('nftables'),
      withKprTc: !cfg.skip.has('kpr-tc'),
    },
    log,
  );
  res.errors.push(...p.errors);
  for (const [mode, what] of Object.entries(p.notFinished ?? {})) res.notFinished.push(`nodeport ${mode} at ${services} services: ${what}`);
  res.dataPlaneNodePort.push(summarizeNodePort(p));
}

/**
 * Rows of the NodePort table: metric, kpr, iptables, nftables, direct,
 * kpr/direct, iptables/direct, nftables/direct, kpr/iptables, kpr/nftables.
 */
function nodePortRows(res: Results): string[][] {
  const rows: string[][] = [];
  for (const d of res.dataPlaneNodePort) {
    const k = d.arms.kpr;
    const i = d.arms.iptables;
    const f = d.arms.nftables;
    const x = d.arms.direct;
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const us = (v?: number) => (v === undefined ? 'n/a' : `${v} µs`);
    const five = (kv?: number, iv?: number, fv?: number, xv?: number) => [
      fmtRatio(kv, xv),
      fmtRatio(iv, xv),
      fmtRatio(fv, xv),
      fmtRatio(kv, iv),
      fmtRatio(kv, fv),
    ];
    const line = (metric: string, g: (a: NonNullable<typeof k>) => number, fmt: (v?: number) => string) => {
      const [kv, iv, fv, xv] = [k && g(k), i && g(i), f && g(f), x && g(x)];
      return [metric, fmt(kv), fmt(iv), fmt(fv), fmt(xv), ...five(kv, iv, fv, xv)];
    };
    const load = (mode: 'iptables' | 'nftables') => {
      const done = d[mode] as { loadMs?: number } | undefined;
      return done?.loadMs !== undefined ? fmtMs(done.loadMs) : (d.notFinished?.[mode] ?? '');
    };
    const kprSync = (d.kpr as { initialSyncMs?: number } | undefined)?.initialSyncMs;
    rows.push([`  programming ${at} (kpr: cache synced → maps written; kube-proxy: the ruleset's load)`, kprSync !== undefined ? fmtMs(kprSync) : '', load('iptables'), load('nftables'), '', '', '', '', '', '']);
    rows.push(line(`NodePort conn p50 latency, ${at}`, (a) => a.p50_us, us));
    rows.push(line(`NodePort conn p99 latency, ${at}`, (a) => a.p99_us, us));
    rows.push(line(`NodePort conns/s, ${at}`, (a) => a.conns_per_sec, (v) => (v === undefined ? 'n/a' : `${v}`)));
    const pm = (r?: { pairedMean: number | null }) => (r?.pairedMean != null ? `${r.pairedMean}×` : 'n/a');
    rows.push([
      `  paired mean-latency ratio, ${at}`,
      '',
      '',
      '',
      '',
      pm(d.ratios.kprDirect),
      pm(d.ratios.iptablesDirect),
      pm(d.ratios.nftablesDirect),
      pm(d.ratios.kprIptables),
      pm(d.ratios.kprNftables),
    ]);
    const vk = d.arms['direct-via-kpr-node'];
    const vi = d.arms['direct-via-iptables-node'];
    const vf = d.arms['direct-via-nftables-node'];
    rows.push([`  pod IP direct through that node, p50, ${at}`, us(vk?.p50_us), us(vi?.p50_us), us(vf?.p50_us), us(x?.p50_us), ...five(vk?.p50_us, vi?.p50_us, vf?.p50_us, x?.p50_us)]);
    const tc = (t?: { clientSynRetrans: number; podPawsTimewait: number }) => (t ? `${t.clientSynRetrans} / ${t.podPawsTimewait}` : 'n/a');
    rows.push([`  client SYN retransmits / pod PAWS-rejected SYNs, ${at}`, tc(d.tcp.kpr), tc(d.tcp.iptables), tc(d.tcp.nftables), tc(d.tcp.direct), '', '', '', '', '']);
    const off = d.arms['kpr-nocounters'];
    if (k && off) {
      // Same node, same rounds: the kpr column with its per-Service counters on, the direct column with them off.
      const r = d.ratios.countersOnOff;
      rows.push([`  kpr p50 per-Service counters on / off (target ≤ 1.02×), ${at}`, us(k.p50_us), '', '', `off: ${us(off.p50_us)}`, `${fmtRatio(k.p50_us, off.p50_us)} ${passFail(r?.p50 ?? undefined, 1.02)}`, '', '', '', '']);
    }
    const on = d.arms['kpr-monitor'];
    const mon = d.ratios.monitorOnOff;
    if (k && on && mon) {
      // Same node, same rounds: the kpr column with kpr monitor on (a reader draining), the direct column with it off.
      rows.push([
        `  kpr p50 / p99 kpr monitor on / off (${mon.events} events read, ${mon.lost} lost), ${at}`,
        `${us(on.p50_us)} / ${us(on.p99_us)}`,
        '',
        '',
        `off: ${us(k.p50_us)} / ${us(k.p99_us)}`,
        `${fmtRatio(on.p50_us, k.p50_us)} / ${fmtRatio(on.p99_us, k.p99_us)}`,
        '',
        '',
        '',
        '',
      ]);
    }
  }
  return rows;
}

/** Rows of the tc attach mode table: metric, tcx link, clsact filter, direct, tc / tcx (measured side by side in the same rounds). */
function tcModeRows(res: Results): string[][] {
  const rows: string[][] = [];
  for (const d of res.dataPlaneNodePort) {
    const x = d.arms.kpr;
    const c = d.arms['kpr-tc'];
    if (!x || !c) continue;
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const us = (v?: number) => (v === undefined ? 'n/a' : `${v} µs`);
    const direct = d.arms.direct;
    rows.push([`NodePort conn p50 latency, ${at}`, us(x.p50_us), us(c.p50_us), us(direct?.p50_us), fmtRatio(c.p50_us, x.p50_us)]);
    rows.push([`NodePort conn p99 latency, ${at}`, us(x.p99_us), us(c.p99_us), us(direct?.p99_us), fmtRatio(c.p99_us, x.p99_us)]);
    rows.push([`NodePort conns/s, ${at}`, String(x.conns_per_sec), String(c.conns_per_sec), String(direct?.conns_per_sec ?? 'n/a'), fmtRatio(c.conns_per_sec, x.conns_per_sec)]);
    const pm = d.ratios.kprTcKpr?.pairedMean;
    rows.push([`  paired mean-latency ratio, ${at}`, '', '', '', pm != null ? `${pm}×` : 'n/a']);
  }
  return rows;
}

function collectTargets(res: Results): void {
  const k = res.controlPlane.kpr;
  const scale = res.dataPlane.find((d) => d.services === cfg.services && d.services > 1);
  res.scaleCost = { clusterIp: clusterIpScaleCost(res.dataPlane), nodePort: nodePortScaleCost(res.dataPlaneNodePort) };
  res.targets = targetResults({
    services: cfg.services,
    coldMs: k?.coldMs,
    changeP99Ms: k?.change?.eventToMapsMs.p99,
    rssMiB: k ? Math.max(k.rssMiB.afterInitialSync, k.rssMiB.afterChanges ?? 0) : undefined,
    serviceListMs: k?.serviceList?.medianMs,
    clusterIpVsDirect: scale?.costRatioP50,
    ...res.scaleCost,
  });
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (network namespaces, cgroups, BPF)');
  const res: Results = {
    meta: {
      date: new Date().toISOString(),
      host: os.hostname(),
      kernel: os.release(),
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      node: process.version,
      iptables: iptablesVersion(),
      nftables: nftVersion(),
      // Control-plane phase: the harness's nice and that of the programs it times (bench/priority.ts).
      nice: { harness: HARNESS_NICE, underTest: UNDER_TEST_NICE },
    },
    config: { ...cfg, skip: [...cfg.skip] },
    controlPlane: {},
    dataPlane: [],
    dataPlaneNodePort: [],
    targets: [],
    notFinished: [],
    errors: [],
  };
  buildHelpers();
  const withKpr = !cfg.skip.has('agent') && agentAvailable();
  if (!withKpr) {
    const why = cfg.skip.has('agent') ? 'skipped (--skip agent)' : 'dist/kpr-agent.mjs is missing (make build)';
    log(`kpr agent: ${why}; measuring the iptables and direct-to-pod halves only`);
    res.errors.push(`kpr agent not run: ${why}`);
  }
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      const msg = `${what}: ${(err as Error).stack ?? err}`;
      log(`ERROR ${msg}`);
      res.errors.push(msg);
    }
  };
  if (!cfg.skip.has('dataplane')) await attempt('data plane at 1 service', () => phaseOneService(res, withKpr));
  if (!cfg.skip.has('controlplane')) await attempt(`control plane and data plane at ${cfg.services} services`, () => phaseAtScale(res, withKpr));
  if (!cfg.skip.has('nodeport')) {
    for (const n of cfg.npServices > 1 ? [1, cfg.npServices] : [1]) await attempt(`NodePort data plane at ${n} services`, () => phaseNodePort(res, n, withKpr));
  }

  const rows = buildRows(res);
  collectTargets(res);
  const out = [
    renderTable(
      `kpr benchmark — control plane (${os.cpus().length} CPUs, ${os.release()}; ${res.meta.iptables}; ${res.meta.nftables}; harness at nice ${HARNESS_NICE}, kpr, iptables-restore and nft at ${UNDER_TEST_NICE})`,
      rows.control,
      { other: 'kube-proxy (iptables; nftables rows marked)', ratio: 'kpr / kube-proxy' },
    ),
    '',
    renderTable(
      `kpr benchmark — data plane (connect + 1-byte request + 1-byte reply + close, sequential, C client; medians of ${cfg.dpRounds} alternating rounds × ${cfg.dpConns} connections)`,
      rows.data,
      { kpr: 'ClusterIP via kpr', other: 'pod IP direct', ratio: 'kpr / direct' },
    ),
    '',
    ...(res.dataPlaneNodePort.length
      ? [
          renderGrid(
            `kpr benchmark — NodePort data plane (external client namespace → NodeIP:nodePort → pod, eTP=Cluster, SNAT; same request loop; medians of ${cfg.npRounds} alternating rounds × ${cfg.npConns} connections; each path on its own identical node)`,
            ['metric', 'kpr (tc, default attach mode)', 'kube-proxy (iptables)', 'kube-proxy (nftables)', 'pod IP direct', 'kpr / direct', 'iptables / direct', 'nftables / direct', 'kpr / iptables', 'kpr / nftables'],
            nodePortRows(res),
          ),
          '',
        ]
      : []),
    ...(tcModeRows(res).length
      ? [
          renderGrid(
            'kpr benchmark — NodePort through each tc attach mode (the same agent with --tc-attach tc beside the default, each on its own identical node, in the same alternating rounds)',
            ['metric', `kpr, ${(res.dataPlaneNodePort[0]?.kpr as { tcAttachMode?: string } | undefined)?.tcAttachMode === 'tcx' ? 'tcx link' : 'default'}`, 'kpr, clsact filter (--tc-attach tc)', 'pod IP direct', 'tc / tcx'],
            tcModeRows(res),
          ),
          '',
        ]
      : []),
    renderTargets(cfg.services, res.targets),
    '',
    ...(res.notFinished.length ? ['kube-proxy loads not finished within their bound:', ...res.notFinished.map((e) => '  ' + e), ''] : []),
    ...(res.errors.length ? ['errors:', ...res.errors.map((e) => '  ' + e.split('\n')[0]), ''] : []),
  ].join('\n');
  process.stdout.write(out + '\n');
  const json = JSON.stringify(res, null, 2);
  process.stdout.write(json + '\n');
  const file = path.join(repoRoot, 'build', 'bench-results.json');
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, json + '\n');
  log(`results written to ${path.relative(process.cwd(), file) || file}`);
  if (res.errors.length && withKpr) process.exitCode = 1;
}

main().catch((err) => {
  log(`fatal: ${(err as Error).stack ?? err}`);
  process.exit(1);
});
