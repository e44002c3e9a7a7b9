/**
 * `bench/run.ts` at N Services: kube-proxy's cold loads (iptables, nftables),
 * kpr's cold floor, its initial sync (COLD_RUNS cold starts, the median),
 * `kpr service list`, endpoint changes
 * interleaved with kube-proxy's partial syncs, periodic resyncs, then the
 * ClusterIP data plane at N.
 */
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { Sandbox } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import {
  endpointChanges,
  PAUSE_MS,
  periodicResyncs,
  splitByPause,
  startAgent,
  startApi,
  type Agent,
  type BenchApiServer,
  type InitialSync,
} from './control-plane.js';
import { runColdSyncChild } from './cold-child.js';
import { setupDataplane } from './data-plane.js';
import { iptablesVersion, setupIptables, IPTABLES_RESTORE, type IptablesChanger } from './iptables.js';
import { NFT, nftVersion, NotFinishedError, setupNftables, type NftChanger } from './nftables.js';
import { deprioritizeHarness } from './priority.js';
import { dist, fmtMs, median, round } from './report.js';
import { timeServiceList } from './cli-timing.js';
import { benchMapSizeArgs, needsOf, shortfall } from './map-sizing.js';
import { makeScenario, serviceCIDRs } from './scenario.js';
import { NODE_BRIDGE_IP } from '../sandbox/topology.js';
import { AGENT_SYNC_PERIOD_MS, CLI_TIMEOUT_MS, cfg, COLD_RUNS, FLOOR_RUNS, log, MiB, RESYNCS } from './run-config.js';
import { childCgroup, removeCgroupDir } from './agent-cgroup.js';
import { loadFailure } from './ruleset-load.js';
import { boundedOut, rssPhases, type KprControl, type Results } from './run-results.js';
import { waitForQuiet } from './settle.js';
import { dataplanePhase } from './run-phases.js';

export async function phaseAtScale(res: Results, withKpr: boolean): Promise<void> {
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
        res.controlPlane.iptables.notFinished = loadFailure(err);
        log(`iptables: ${res.controlPlane.iptables.notFinished}`);
        boundedOut(res, `iptables cold load at ${total} services: ${res.controlPlane.iptables.notFinished}`, err);
      }
    }
    let nftChanger: NftChanger | undefined;
    if (!cfg.skip.has('nftables')) {
      log(`nftables: cold load of ${total} services with ${NFT} -f (${cfg.nftCold}×, each bounded at ${cfg.coldTimeoutMs / 1000} s)`);
      res.controlPlane.nftables = {
        binary: NFT,
        version: nftVersion(),
        changeExactMs: dist([]),
        changeMinimalMs: dist([]),
        listChainsMs: dist([]),
        staleChainDeletes: 0,
      };
      try {
        const opts = { nodeIPs: [NODE_BRIDGE_IP], serviceCIDRs: serviceCIDRs(cfg.services) };
        const nft = await setupNftables(sandbox, scenario.services, target, cfg.nftCold, opts, log, cfg.coldTimeoutMs, cfg.stepTimeoutMs);
        nftChanger = nft.changer;
        res.controlPlane.nftables.cold = { ...nft.cold, coldMs: nft.cold.coldMs.map((v) => round(v)), medianMs: round(median(nft.cold.coldMs)) };
        log(`nftables: ${nft.cold.chains} chains loaded (${(nft.cold.inputBytes / 1e6).toFixed(1)} MB, ${nft.cold.inputLines} lines of transaction)`);
      } catch (err) {
        res.controlPlane.nftables.notFinished = loadFailure(err);
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
      const coldRunsMs: number[] = [];
      for (let i = 1; i < COLD_RUNS; i++) {
        log(`kpr: cold start ${i}/${COLD_RUNS}: an agent on a cgroup and bpffs directory of its own, stopped after its initial sync`);
        const once = await coldStartOnce(sandbox, api, sizeArgs, i);
        coldRunsMs.push(once.cacheSyncedToMapsWrittenMs);
        log(`kpr: initial sync ${fmtMs(once.cacheSyncedToMapsWrittenMs)} (spawn→synced ${fmtMs(once.spawnToSyncedMs)})`);
        const missed = shortfall(once.record, needs);
        if (missed) res.errors.push(`kpr cold start ${i} at ${total} services: ${missed}`);
      }
      log(`kpr: cold start ${COLD_RUNS}/${COLD_RUNS}: the agent measured from here on${sizeArgs.length ? ` (${sizeArgs.join(' ')})` : ''}`);
      const started = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs, { extraArgs: sizeArgs });
      agent = started.agent;
      coldRunsMs.push(started.initial.cacheSyncedToMapsWrittenMs);
      kpr = { initial: started.initial, coldRunsMs };
      log(
        `kpr: initial sync ${fmtMs(started.initial.cacheSyncedToMapsWrittenMs)} (spawn→synced ${fmtMs(started.initial.spawnToSyncedMs)}), RSS ${(started.initial.rssKiB / MiB).toFixed(1)} MiB; cold programming, median of ${COLD_RUNS}: ${fmtMs(median(coldRunsMs))}`,
      );
      const phases = rssPhases(agent);
      if (phases)
        log(
          `kpr: RSS by phase: datapath loaded ${phases.datapathLoaded} MiB, caches synced ${phases.cachesSynced} MiB, maps written ${phases.mapsWritten} MiB`,
        );
      const missing = shortfall(started.initial.record, needs);
      if (missing) {
        log(`ERROR kpr: ${missing}`);
        res.errors.push(`kpr initial sync at ${total} services: ${missing}`);
      }
      if (cfg.cliRuns > 0) {
        log(`kpr: kpr service list -o json, ${cfg.cliRuns}×`);
        try {
          kpr.serviceList = await timeServiceList(sandbox, sandbox.bpffsDir, cfg.cliRuns, CLI_TIMEOUT_MS);
          log(
            `kpr: service list ${kpr.serviceList.runsMs.map((ms) => fmtMs(ms)).join(', ')} (${kpr.serviceList.frontends} frontends, ${(kpr.serviceList.bytes / 1e6).toFixed(1)} MB of JSON)`,
          );
          if (kpr.serviceList.frontends !== needs.frontends)
            res.errors.push(`kpr service list at ${total} services: ${kpr.serviceList.frontends} frontends listed of ${needs.frontends}`);
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
        for (const r of kpr.resync.resyncs)
          log(
            `  resync ${fmtMs(r.durationMs)} (read-back ${fmtMs(r.readBackMs)}), changes during it waited ${r.blockedApiToLogMs.map((v) => fmtMs(v)).join(', ') || 'none made'}`,
          );
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
      log(
        `nftables: ${nftChangerAll.exactMs.length} exact + ${nftChangerAll.minimalMs.length} minimal partial syncs (${nftChangerAll.staleDeletes} stale-chain deletes)`,
      );
    }
    if (kpr) {
      const c = kpr.changes!;
      const byPause = splitByPause(c, PAUSE_MS);
      res.controlPlane.kpr = {
        coldMs: round(median(kpr.coldRunsMs), 3),
        coldRunsMs: kpr.coldRunsMs.map((v) => round(v, 3)),
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

/**
 * One cold start that is only timed: an agent on a child cgroup and bpffs
 * directory of its own, stopped after its initial sync; its pins (maps,
 * links) and cgroup are removed before the next start, which then finds
 * nothing to adopt.
 */
async function coldStartOnce(sandbox: Sandbox, api: BenchApiServer, sizeArgs: string[], i: number): Promise<InitialSync> {
  const cg = childCgroup(sandbox, `cold-${i}`);
  const bpffs = path.join(sandbox.bpffsDir, `cold-${i}`);
  mkdirSync(bpffs, { recursive: true });
  let a: Agent | undefined;
  try {
    const started = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs, { extraArgs: sizeArgs, cgroupPath: cg, bpffsDir: bpffs });
    a = started.agent;
    return started.initial;
  } finally {
    await a?.stop().catch(() => {});
    rmSync(bpffs, { recursive: true, force: true });
    removeCgroupDir(cg);
  }
}
