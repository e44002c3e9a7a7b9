/** Well-known labels the planner reads (names as in k8s.io/api and pkg/proxy/apis). */

/** On an EndpointSlice: the name of the Service it belongs to (same namespace). */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
/** On a Service: another proxy implementation owns it; kube-proxy (and kpr) ignore it. */
export const LABEL_SERVICE_PROXY_NAME = 'service.kubernetes.io/service-proxy-name';
/** On a Node: its zone, matched against the endpoints' zone hints (rule 20 of docs/semantics.md). */
export const LABEL_TOPOLOGY_ZONE = 'topology.kubernetes.io/zone';
