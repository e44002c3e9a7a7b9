/**
 * The chicken-and-egg of a kube-proxy replacement: in a pod, the default way
 * to the API server is the `kubernetes` Service ClusterIP — the very thing kpr
 * implements. Without kube-proxy on the node, and before kpr has programmed
 * anything, nothing translates that ClusterIP, so the agent must be told the
 * API server's real address (--k8s-service-host/--k8s-service-port, chart
 * values k8sServiceHost/k8sServicePort).
 *
 * Whether kube-proxy still runs cannot be read cheaply from the agent (its
 * rules live in iptables/nftables, which the agent never touches), so the
 * agent says what it is doing and what will fail without kube-proxy, loudly,
 * and again if the caches do not sync.
 */
export const K8S_SERVICE_HOST_MESSAGE =
  'in-cluster config without --k8s-service-host: the agent reaches the API server through the kubernetes Service ClusterIP ' +
  '(KUBERNETES_SERVICE_HOST), which only works while kube-proxy (or another service proxy) still serves it on this node; ' +
  'without kube-proxy this connection cannot succeed. Set the chart values k8sServiceHost/k8sServicePort (flags ' +
  "--k8s-service-host/--k8s-service-port) to the API server's real address (a control-plane node IP or a load balancer), e.g. 198.18.0.2 and 6443";

/** True when the agent will dial the API server through the `kubernetes` Service ClusterIP. */
export function apiServerViaServiceIp(cfg: { kubeconfig?: string; k8sServiceHost?: string }, env: NodeJS.ProcessEnv = process.env): boolean {
  return !cfg.kubeconfig && !cfg.k8sServiceHost && Boolean(env.KUBERNETES_SERVICE_HOST);
}
