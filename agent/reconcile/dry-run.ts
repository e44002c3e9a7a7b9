/**
 * A dry run of the agent's first sync: the real Reconciler (its ownership
 * rules, limits and admission, and the diff) over maps in memory of the
 * agent's sizes, and then what those maps hold, read back as the CLI reads
 * the kernel's: a frontend is programmed when its master entry exists and
 * the names at that entry's frontend id (tables/svc-meta.ts) are its
 * Service, port and type.
 * `kpr plan` prints this, so it says what the agent programs and refuses by
 * the agent's own code, not by a second implementation of its rules.
 */
import { FE_TYPE, IPPROTO, SCOPE, type SvcMeta } from '../maps/layout.js';
import type { FrontendType, PlanFrontend, SkippedObject } from '../plan/types.js';
import type { LimitReport, MapCapacities } from './limits.js';
import { MemoryDatapathMaps, svcKeyId } from '../maps/memory-datapath-maps.js';
import { Reconciler } from './reconciler.js';
import type { ReconcileLogger } from './sync-types.js';

export interface DryRunInput {
  /** Each Service's planned frontends ("namespace/name" → what planService returned), in any order. */
  plans: ReadonlyMap<string, PlanFrontend[]>;
  /** metadata.creationTimestamp (ms) by Service: same-class claims on one frontend go to the oldest (ownership.ts). */
  created?: (service: string) => number | undefined;
  /** max_entries of the agent's maps (agent/datapath/map-sizes.ts at its flags). */
  capacities: MapCapacities;
  /** The highest frontend id: the frontend id space less one (id 0 is never used). */
  maxFrontendId: number;
}

export interface DryRunResult {
  /** The planned frontends the sync programmed, in the plans' order; backends cut to what their slots hold. */
  programmed: PlanFrontend[];
  /** What the sync did not program and why (contested frontends, Services over a limit), as the agent logs them. */
  skipped: SkippedObject[];
  limits: readonly LimitReport[];
}

const FE_TYPE_OF: Record<FrontendType, number> = {
  ClusterIP: FE_TYPE.CLUSTER_IP,
  NodePort: FE_TYPE.NODE_PORT,
  LoadBalancer: FE_TYPE.LOAD_BALANCER,
  ExternalIP: FE_TYPE.EXTERNAL_IP,
};
const PROTO: Record<string, number> = IPPROTO;

const silent: ReconcileLogger = { info: () => {}, warn: () => {}, error: () => {} };

/** The agent's initial full sync of `plans`, over empty maps in memory; what it left there. */
export function dryRunSync(input: DryRunInput): DryRunResult {
  const caps = input.capacities;
  const maps = new MemoryDatapathMaps({
    maxServices: caps.svc,
    maxBackends: caps.backend,
    maxAffinityMatches: caps.affinityMatch,
    maxSrcRanges: caps.srcRange,
  });
  const reconciler = new Reconciler(maps, silent, { maxFrontendId: input.maxFrontendId });
  reconciler.adopt();
  const keys = [...input.plans.keys()];
  const result = reconciler.sync({ keys: () => keys, get: (k) => input.plans.get(k), created: input.created }, { full: true });
  if (!result.ok) throw new Error(`dry run: the sync failed: ${result.error ?? 'unknown error'}`);

  const programmed: PlanFrontend[] = [];
  for (const frontends of input.plans.values()) {
    for (const f of frontends) {
      const p = programmedAs(maps, f);
      if (p) programmed.push(p);
    }
  }
  return { programmed, skipped: result.skipped, limits: result.limits ?? [] };
}

/** `f` as the maps hold it (backends cut to the master's count), or undefined when the maps do not hold it for its Service. */
function programmedAs(maps: MemoryDatapathMaps, f: PlanFrontend): PlanFrontend | undefined {
  const proto = PROTO[f.protocol];
  if (proto === undefined) return undefined;
  const master = (scope: number) => maps.services.get(svcKeyId({ addr: f.address, port: f.port, slot: 0, proto, scope }))?.[1];
  const ext = master(SCOPE.EXTERNAL);
  if (!ext || !names(maps.svcMeta.get(ext.frontendId), f)) return undefined;
  const out: PlanFrontend = { ...f, backends: f.backends.slice(0, ext.count) };
  if (f.internalBackends) out.internalBackends = f.internalBackends.slice(0, master(SCOPE.INTERNAL)?.count ?? 0);
  return out;
}

function names(meta: SvcMeta | undefined, f: PlanFrontend): boolean {
  return meta !== undefined && meta.name === f.service && meta.portName === f.portName && meta.type === FE_TYPE_OF[f.type];
}
