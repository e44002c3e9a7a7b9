/**
 * What a read-back found: entries of one map that differ from what their
 * writer last wrote. The reconciler's maps (agent/reconcile/) and the node's
 * own maps (kpr_config, kpr_svc_cidr: agent/datapath/) report drift in this
 * one shape, so the resync counts and logs both alike.
 */

/** How an entry of a map differs from what the agent last wrote. */
export type DriftKind = 'missing' | 'changed' | 'extra';

/** Entries of one map found to differ in one way. */
export interface DriftCount {
  map: string;
  kind: DriftKind;
  entries: number;
}
