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
 * The one annotation kpr reads.
 */
export const ANNOTATION_LAST_CHANGE_TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';
