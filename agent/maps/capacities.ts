/**
 * The capacities of the maps a Service's entries go to, as the maps report
 * them (BpfDatapathMaps.capacities(): each map's max_entries). Here, beside
 * the maps, because the flags (a test knob), the kernel writer and the
 * reconciler's admission (agent/reconcile/limits.ts) all read them.
 */

/** Capacities (max_entries) of the maps a Service's entries go to; Infinity where unknown. */
export interface MapCapacities {
  svc: number;
  backend: number;
  affinityMatch: number;
  srcRange: number;
}
