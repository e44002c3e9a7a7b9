/**
 * The dataplane plan: what one node must program, independent of how. Produced
 * by pure code from Kubernetes objects (agent/plan), consumed by the reconciler
 * (agent/reconcile) and printed by `kpr plan`. Field names follow the JSON that
 * `kpr plan -o json` prints, so the CLI needs no second model; the few
 * fields it leaves out (datapath hints) say so.
 */
import { flatKey } from '../runtime/flat-key.js';

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type FrontendType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalIP';
export type TrafficPolicy = 'Cluster' | 'Local';

export interface PlanBackend {
  address: string;
  port: number;
  /** The endpoint runs on this node (backend flag LOCAL). Set only when true; not printed by `kpr plan`. */
  local?: true;
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
  /**
   * Exactly the set this frontend uses on this node for traffic from outside
   * the node (for a ClusterIP: for every caller), sorted by address then
   * port; empty means refuse, or drop when `dropWhenEmpty`.
   */
  backends: PlanBackend[];
  /**
   * The set in-node callers (the socket hooks) use, only when it differs from
   * `backends`: an external frontend with externalTrafficPolicy Local sends
   * node- and pod-originated traffic to the cluster endpoints (rule 25 of docs/semantics.md).
   */
  internalBackends?: PlanBackend[];
  /** The policy whose endpoint set `backends` is: internalTrafficPolicy for ClusterIP, externalTrafficPolicy otherwise. */
  trafficPolicy: TrafficPolicy;
  /** ClientIP session affinity timeout in seconds; 0 without affinity. */
  affinityTimeoutSeconds: number;
  /** Client CIDRs allowed (rule 28 of docs/semantics.md); empty means everyone. */
  sourceRanges: string[];
  /**
   * eTP=Local with endpoints elsewhere but none on this node: external
   * traffic is dropped, not refused (rule 25 of docs/semantics.md). Set only
   * when true; not printed by `kpr plan`. The tc path drops outside traffic
   * to any frontend without backends, so in the maps this is only the
   * LOCAL_ONLY flag every eTP=Local external frontend carries.
   */
  dropWhenEmpty?: true;
  /**
   * 'maglev' when the Service's backends are chosen by Maglev consistent
   * hashing (rule 40 of docs/semantics.md: its annotation, or the node's
   * --lb-algorithm); unset: random, as kube-proxy.
   */
  lbAlgorithm?: 'maglev';
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
  /**
   * For the health-check servers: set only for a LoadBalancer Service with
   * externalTrafficPolicy Local and a healthCheckNodePort (rules 8, 30 of docs/semantics.md).
   */
  healthCheck?: ServiceHealthCheck;
  /** Service ports (per IP family) whose Local policy has endpoints elsewhere but none on this node; set only when any. Not printed by `kpr plan`. */
  noLocalEndpoints?: NoLocalEndpoints;
}

/** kube-proxy's kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy} counts, for one Service or a node. */
export interface NoLocalEndpoints {
  internal: number;
  external: number;
}

export interface ServiceHealthCheck {
  nodePort: number;
  /**
   * kube-proxy's LocalReadyEndpoints (rule 31 of docs/semantics.md): distinct IPs of the ready
   * endpoints on this node, over every port of the Service, counted in the
   * primary IP family (kube-proxy counts per family; a dual-stack pod is one
   * endpoint either way).
   */
  localReadyEndpoints: number;
}

export interface DataplanePlan {
  node: string;
  frontends: PlanFrontend[];
  skipped: SkippedObject[];
}

/**
 * The frontend label: a frontend as people read it, `address:port/PROTO`
 * with the address as the plan wrote it. For log lines, skipped reasons and
 * the plan's own duplicate check (docs/architecture.md, "Names").
 */
export function frontendLabel(f: Pick<PlanFrontend, 'address' | 'port' | 'protocol'>): string {
  return flatKey('', f.address, ':', f.port, '/', f.protocol);
}

/**
 * The frontend key: the reconciler's index of a frontend, `address|port|proto`
 * with the canonical address and the IP protocol number (all of a service-map
 * key but slot and scope). Never shown; frontendLabel() is what people read.
 */
export function frontendKey(f: { addr: string; port: number; proto: number }): string {
  return flatKey('|', f.addr, f.port, f.proto);
}

/** The same backends (address and port) in the same order. */
export function sameBackends(a: readonly PlanBackend[], b: readonly PlanBackend[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i].address !== b[i].address || a[i].port !== b[i].port) return false;
  return true;
}
