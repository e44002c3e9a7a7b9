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
 *   --skip LIST           comma list of: iptables, nftables, agent, dataplane, controlplane, nodeport, kpr-tc, kpr-one,
 *                         resync [KPR_BENCH_SKIP=]
 *                         (kpr-tc: the NodePort arm with the agent forced to --tc-attach tc, beside the default tcx;
 *                         kpr-one: the NodePort arm, in the phase at N, of an agent served the echo Service alone,
 *                         which the NodePort N-over-1 target is measured against in the same rounds;
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
 * in another), and the pod IP directly; at N, also through a second agent
 * served the echo Service alone, kpr at 1 Service in the same rounds.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../sandbox/repo.js';
import { agentAvailable } from './control-plane.js';
import { buildHelpers } from './data-plane.js';
import { iptablesVersion } from './iptables.js';
import { nftVersion } from './nftables.js';
import { HARNESS_NICE, UNDER_TEST_NICE } from './priority.js';
import { renderGrid, renderTable } from './report.js';
import { renderTargets } from './scale-targets.js';
import { cfg, log } from './run-config.js';
import type { Results } from './run-results.js';
import { phaseNodePort, phaseOneService } from './run-phases.js';
import { phaseAtScale } from './run-at-scale.js';
import { buildRows, collectTargets } from './run-rows.js';
import { nodePortRows, tcModeRows } from './run-nodeport-rows.js';

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
            [
              'metric',
              'kpr (tc, default attach mode)',
              'kube-proxy (iptables)',
              'kube-proxy (nftables)',
              'pod IP direct',
              'kpr / direct',
              'iptables / direct',
              'nftables / direct',
              'kpr / iptables',
              'kpr / nftables',
            ],
            nodePortRows(res),
          ),
          '',
        ]
      : []),
    ...(tcModeRows(res).length
      ? [
          renderGrid(
            'kpr benchmark — NodePort through each tc attach mode (the same agent with --tc-attach tc beside the default, each on its own identical node, in the same alternating rounds)',
            [
              'metric',
              `kpr, ${(res.dataPlaneNodePort[0]?.kpr as { tcAttachMode?: string } | undefined)?.tcAttachMode === 'tcx' ? 'tcx link' : 'default'}`,
              'kpr, clsact filter (--tc-attach tc)',
              'pod IP direct',
              'tc / tcx',
            ],
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
