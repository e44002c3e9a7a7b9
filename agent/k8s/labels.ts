/**
 * Every Kubernetes label and annotation kpr reads, named once (the names as
 * in k8s.io/api and pkg/proxy/apis). The watch selects and prunes by them,
 * the planner and the metrics read them.
 */

/** On an EndpointSlice: the name of the Service it belongs to (same namespace). */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
/** On a Service or EndpointSlice: another proxy implementation owns it; kube-proxy (and kpr) ignore it. */
export const LABEL_SERVICE_PROXY_NAME = 'service.kubernetes.io/service-proxy-name';
/** On an EndpointSlice: the Service is headless. */
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';
/** On a Node: its zone, matched against the endpoints' zone hints (rule 20 of docs/semantics.md). */
export const LABEL_TOPOLOGY_ZONE = 'topology.kubernetes.io/zone';

/** The labels the watch keeps on Services and EndpointSlices (a Node keeps all of its own). */
export const KEPT_LABELS: readonly string[] = [LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, LABEL_HEADLESS];

/**
 * On an EndpointSlice: when the change that caused it happened, set by the
 * EndpointSlice controller (network programming latency, metrics/change-tracker.ts).
 */
export const ANNOTATION_LAST_CHANGE_TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';

/**
 * On a Service: its backend selection algorithm, `random` or `maglev`,
 * over the node-wide --lb-algorithm (rule 40 of docs/semantics.md).
 */
export const ANNOTATION_LB_ALGORITHM = 'kpr.dev/lb-algorithm';
/** Cilium's name for the same annotation (since Cilium 1.17), accepted as an alias; kpr's own wins when both are set. */
export const ANNOTATION_CILIUM_LB_ALGORITHM = 'service.cilium.io/lb-algorithm';

/** The annotations the watch keeps (every other is dropped on arrival). */
export const KEPT_ANNOTATIONS: readonly string[] = [ANNOTATION_LAST_CHANGE_TRIGGER_TIME, ANNOTATION_LB_ALGORITHM, ANNOTATION_CILIUM_LB_ALGORITHM];
