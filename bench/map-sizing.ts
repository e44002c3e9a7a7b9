/**
 * The BPF map sizes the benchmark's agents and in-process children run with,
 * from what the scenario fills. At the default scale (10,000 Services × 10
 * endpoints: 110,012 kpr_svc entries, 100,001 backends) the compiled sizes
 * hold it and the agent runs as deployed, with no --map-size-* flag; at
 * 100,000 × 10 (1.1 M kpr_svc entries, 1 M backends) it gets the flags an
 * operator would give it (docs/configuration.md, *Map sizes*).
 */
import { frontendCapacity } from '../agent/datapath/map-sizes.js';
import { MAPS } from '../agent/maps/registry.js';
import type { KpService } from './kube-proxy-rules.js';

/** What a scenario programs: frontends (ids, kpr_svc_meta, kpr_vip), kpr_svc entries (a master and a slot per backend of each frontend), distinct backends. */
export interface MapNeeds {
  frontends: number;
  svcEntries: number;
  backends: number;
}

/** The max_entries the agent is given: kpr_svc, kpr_backend (and kpr_aff_match), frontend ids (kpr_svc_meta, kpr_vip). */
export interface BenchMapSizes {
  services: number;
  backends: number;
  frontends: number;
}

/**
 * A quarter of headroom over what is programmed: the agent warns at 90% full
 * and a change briefly holds a backend's old and new entries.
 */
const HEADROOM = 1.25;
/** Sizes beyond the defaults are rounded up to this many entries. */
const ROUND = 65536;

/** The needs of a list of bench Services: a ClusterIP frontend each, a NodePort one more where it has a node port (one node address). */
export function needsOf(services: readonly KpService[]): MapNeeds {
  const n: MapNeeds = { frontends: 0, svcEntries: 0, backends: 0 };
  for (const s of services) {
    const frontends = s.nodePort ? 2 : 1;
    n.frontends += frontends;
    n.svcEntries += frontends * (1 + s.endpoints.length);
    n.backends += s.endpoints.length;
  }
  return n;
}

/** needsOf(makeScenario(serviceCount, endpointsPerService).services) without building it: N Services × M endpoints and the echo Service's one. */
export function scenarioNeeds(serviceCount: number, endpointsPerService: number): MapNeeds {
  return {
    frontends: serviceCount + 1,
    svcEntries: serviceCount * (1 + endpointsPerService) + 2,
    backends: serviceCount * endpointsPerService + 1,
  };
}

/** The compiled size when `needed` fits it with the headroom, else what it needs with the headroom, rounded up. */
function sized(needed: number, compiled: number): number {
  const want = needed * HEADROOM;
  return want <= compiled ? compiled : Math.ceil(want / ROUND) * ROUND;
}

export function benchMapSizes(needs: MapNeeds): BenchMapSizes {
  const services = sized(needs.svcEntries, MAPS.svc.maxEntries);
  // The agent's frontend id space follows kpr_svc (a quarter of it) unless told otherwise.
  // Ids run from 1 (0 is never used).
  const ids = needs.frontends + 1;
  const derived = frontendCapacity(services);
  const frontends = ids * HEADROOM <= derived ? derived : sized(ids, derived);
  return { services, backends: sized(needs.backends, MAPS.backend.maxEntries), frontends };
}

/** The agent flags for benchMapSizes(needs): none where the agent's defaults hold the scenario. */
export function benchMapSizeArgs(needs: MapNeeds): string[] {
  const s = benchMapSizes(needs);
  const args: string[] = [];
  if (s.services !== MAPS.svc.maxEntries) args.push('--map-size-services', String(s.services));
  if (s.backends !== MAPS.backend.maxEntries) args.push('--map-size-backends', String(s.backends));
  if (s.frontends !== frontendCapacity(s.services)) args.push('--map-size-frontends', String(s.frontends));
  return args;
}

/**
 * What an agent's initial sync (its 'initial sync complete' log record) left
 * out of the scenario, or undefined when it programmed all of it: a bench
 * figure over part of the Services would not be the figure asked for.
 */
export function shortfall(initialSync: Record<string, unknown>, needs: MapNeeds): string | undefined {
  const problems: string[] = [];
  if (initialSync.overLimit) problems.push(`${initialSync.overLimit} Services refused or cut by a datapath limit`);
  if (initialSync.frontends !== needs.frontends) problems.push(`${initialSync.frontends} frontends programmed of ${needs.frontends}`);
  if (initialSync.backends !== needs.backends) problems.push(`${initialSync.backends} backends programmed of ${needs.backends}`);
  return problems.length ? problems.join('; ') : undefined;
}
