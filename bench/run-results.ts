/** What one `bench/run.ts` run measured (printed as JSON and written to build/bench-results.json). */
import type { Agent, ChangeSamples, InitialSync, ResyncSample } from './control-plane.js';
import type { IptablesCold } from './iptables.js';
import { NotFinishedError, type NftablesCold } from './nftables.js';
import { dist, type DataplaneSummary, type NodePortSummary } from './report.js';
import type { ServiceListTiming } from './cli-timing.js';
import type { ScaleCost, TargetResult } from './scale-targets.js';
import type { Settled } from './settle.js';

export interface KprControl {
  initial: InitialSync;
  /** cacheSyncedToMapsWrittenMs of every cold start (COLD_RUNS), the kept agent's last. */
  coldRunsMs: number[];
  serviceList?: ServiceListTiming;
  changes?: ChangeSamples;
  rssAfterChangesKiB?: number;
  resync?: { resyncs: ResyncSample[]; otherApiToLogMs: number[] };
}

export interface Results {
  meta: Record<string, unknown>;
  config: Record<string, unknown>;
  controlPlane: {
    kpr?: {
      /** The median of coldRunsMs. */
      coldMs: number;
      /** Each cold start's initial sync (cache synced → maps written), in order; the last is the agent measured after. */
      coldRunsMs: number[];
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

/**
 * A kube-proxy load that ran out of its bound is a figure ("not finished
 * within N s", listed under the tables), not a failure of the run; any other
 * error is one.
 */
export function boundedOut(res: Results, msg: string, err: unknown): void {
  (err instanceof NotFinishedError ? res.notFinished : res.errors).push(msg);
}

/** The agent's own RSS readings at its start-up phases (its log lines), in MiB. */
export interface RssPhases {
  datapathLoaded: number;
  cachesSynced: number;
  mapsWritten: number;
}

export function rssPhases(agent: Agent): RssPhases | undefined {
  const waiting = agent.records.find((r) => r.msg === 'waiting for the k8s caches');
  const done = agent.records.find((r) => r.msg === 'initial sync complete');
  if (typeof waiting?.rssMiB !== 'number' || typeof done?.rssMiB !== 'number') return undefined;
  return { datapathLoaded: waiting.rssMiB, cachesSynced: Number(done.cachesSynced?.rssMiB), mapsWritten: done.rssMiB };
}
