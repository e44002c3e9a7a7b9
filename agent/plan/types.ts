/**
 * The dataplane plan: what one node must program, independent of how. Produced
 * by pure code from Kubernetes objects (agent/plan), consumed by the reconciler
 * (agent/reconcile) and printed by `kpr plan`. Field names follow the JSON that
 * `kpr plan -o json` prints, so the CLI needs no second model.
 */

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type FrontendType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalIP';
export type TrafficPolicy = 'Cluster' | 'Local';

export interface PlanBackend {
  address: string;
  port: number;
}

export interface PlanFrontend {
  /** "namespace/name" of the owning Service. */
  service: string;
  /** The Service port's name ("" when unnamed). */
  portName: string;
  type: FrontendType;
  address: string;
  port: number;
  protocol: Protocol;
  /** Exactly the set this frontend uses on this node, sorted by address then port; empty means refuse. */
  backends: PlanBackend[];
  trafficPolicy: TrafficPolicy;
  affinityTimeoutSeconds: number;
  sourceRanges: string[];
}

export interface SkippedObject {
  /** "KIND NAMESPACE/NAME", e.g. "Service default/web". */
  object: string;
  reason: string;
}

/** What one Service contributes: its frontends and the reasons parts of it were skipped. */
export interface ServicePlan {
  /** "namespace/name". */
  service: string;
  frontends: PlanFrontend[];
  skipped: SkippedObject[];
}

export interface DataplanePlan {
  node: string;
  frontends: PlanFrontend[];
  skipped: SkippedObject[];
}

/** Identity of a frontend in the datapath: one service-map master entry. */
export function frontendKey(f: Pick<PlanFrontend, 'address' | 'port' | 'protocol'>): string {
  return `${f.address}:${f.port}/${f.protocol}`;
}
