/**
 * Every Kubernetes sig-network e2e test (kubernetes/kubernetes
 * test/e2e/network/*.go) that concerns the Service proxy, and what kpr's
 * conformance suite (test/conformance/*.test.ts) says about it:
 *  - `pass`: a test of the same name asserts what the upstream test asserts,
 *    observed the way it observes it, and passes;
 *  - `difference`: the same, but kpr differs in a way the note states (and
 *    docs/semantics.md or docs/limits.md documents);
 *  - `n/a`: the upstream test checks something that is not the proxy's job
 *    (the note says whose), or needs something no proxy provides;
 *  - `todo`: not written yet (a node:test todo, so the gap shows in every run).
 * docs/conformance.md is generated from this list (table.ts) and a codebase
 * test keeps them equal. Names are upstream's It() text, byte for byte (ginkgo
 * labels such as [Slow] added with f.WithSlow() are not part of it), as of
 * kubernetes/kubernetes master in 2026.
 */

export type ConformanceStatus = 'pass' | 'difference' | 'n/a' | 'todo';

export const UPSTREAM_FILES = [
  'service.go',
  'networking.go',
  'conntrack.go',
  'kube_proxy.go',
  'traffic_distribution.go',
  'loadbalancer.go',
  'dual_stack.go',
] as const;
export type UpstreamFile = (typeof UPSTREAM_FILES)[number];

export interface UpstreamTest {
  file: UpstreamFile;
  /** The upstream ginkgo It() text. */
  name: string;
  status: ConformanceStatus;
  /** Required for `difference` and `n/a`: what differs, or whose job it is; a `todo` may say what is missing. */
  note?: string;
}

const API = 'checks the API server (validation, allocation or the resource lifecycle), not the proxy; the sandbox API server is not under test';
const SCTP_DIFF =
  'kpr does not carry SCTP (docs/semantics.md rule 39): the test sends SCTP INITs (through a raw socket: no sctp.ko needed) to ClusterIP:2105 and the node IP\'s NodePort and asserts no endpoint receives one, where upstream asserts every endpoint answers; an INIT sent straight to each endpoint arrives. From a pod each is dropped by kpr_tc_pod and counted in kpr_datapath_drops_total{reason="sctp"}; from the node kpr never sees them (no socket hook runs for SCTP)';
const HOSTNET_ENDPOINTS =
  "the test container and the host test container run on the first node, the one whose address the NodePort dials go to (upstream schedules them anywhere): from another node, NodePort connections never reach the dialed node's own hostNetwork server, so not every endpoint would answer (docs/semantics.md rule 38, a gap)";
const SCTP_DIFF_V6 =
  "kpr does not carry SCTP (docs/semantics.md rule 39): the test sends SCTP INITs (through a raw socket: no sctp.ko needed) from the test container to the Service's IPv6 ClusterIP:2105 and the first node's IPv6 address at the NodePort and asserts no endpoint receives one and node-1 drops and counts each (kpr_datapath_drops_total{reason=\"sctp\"}), where upstream asserts every endpoint answers; an INIT sent straight to each endpoint's IPv6 address arrives";
const CLOUD =
  "needs a cloud load balancer (a provider's LB that sends traffic to the nodes); kpr serves what reaches the node, covered by the NodePort/LoadBalancer rows";

const SAME_ZONE =
  "upstream's three zones of one node each, over two nodes in two steps, the zones being the Node objects' labels: node-1 in zone-a and node-2 in zone-b, each with a server and a client (each client reaches only its zone's server), then node-2 in zone-c, with no endpoint (its client, upstream's third one, reaches both servers). Not covered: the three clients at once, and the zone-b server on a zone-b node in the second step (its pod runs on node-2, then in zone-c)";
const MULTI_ZONE =
  "upstream's three zones of two nodes each, over two nodes in two steps, the zones being the Node objects' labels (changed between them): zone-1 with both nodes (a client and a server on each: both clients reach both servers, never the zone-2 endpoint), then node-1 in zone-2 (its client reaches only zone-2's endpoint, on node-2) and node-2 in zone-3 (no endpoint there: its client reaches all three). Not covered: all three zones at once, and endpoints on a node of their own zone in every step (the zone-2 endpoint's pod runs on node-2 in step 1, the zone-1 ones on nodes of other zones in step 2)";

const t = (file: UpstreamFile, name: string, status: ConformanceStatus, note?: string): UpstreamTest => ({ file, name, status, ...(note ? { note } : {}) });

export const UPSTREAM_TESTS: UpstreamTest[] = [
  // ---------------------------------------------------------------- service.go ("[sig-network] Services")
  t('service.go', 'should provide secure master service', 'n/a', API),
  t('service.go', 'should serve a basic endpoint from pods', 'pass'),
  t('service.go', 'should serve multiport endpoints from pods', 'pass'),
  t('service.go', 'should be updated after adding or deleting ports ', 'pass'),
  t('service.go', 'should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]', 'pass'),
  t('service.go', 'should allow pods to hairpin back to themselves through services', 'pass'),
  t('service.go', 'should be able to up and down services', 'pass'),
  t('service.go', 'should work after the service has been recreated', 'pass'),
  t(
    'service.go',
    'should work after restarting kube-proxy',
    'pass',
    'the agent process is killed and started again (SIGKILL), as deleting the kube-proxy pod does',
  ),
  t(
    'service.go',
    'should work after restarting apiserver',
    'pass',
    'the sandbox API server is stopped (every connection cut mid-stream, the port refused) and started again on the same address with its objects and resourceVersions, as kube-apiserver restarts over the same etcd',
  ),
  t('service.go', 'should be able to create a functioning NodePort service', 'pass'),
  t(
    'service.go',
    'should be possible to connect to a service via ExternalIP when the external IP is not assigned to a node',
    'pass',
    'the external IP is 198.19.201.250 instead of 203.0.113.250: the sandbox uses 198.18.0.0/15 only',
  ),
  t('service.go', 'should be able to update service type to NodePort listening on same port number but different protocols', 'pass'),
  t('service.go', 'should be able to change the type from ExternalName to ClusterIP', 'pass'),
  t('service.go', 'should be able to change the type from ExternalName to NodePort', 'pass'),
  t(
    'service.go',
    'should be able to change the type from ClusterIP to ExternalName',
    'difference',
    "upstream reaches the ExternalName through cluster DNS (a CNAME); the sandbox has no DNS, so the test asserts the proxy's part: the old ClusterIP and its port stop being served",
  ),
  t(
    'service.go',
    'should be able to change the type from NodePort to ExternalName',
    'difference',
    "as ClusterIP to ExternalName: the DNS half is not the proxy's; the test asserts the ClusterIP and the NodePort stop being served and nothing listens on the NodePort",
  ),
  t('service.go', 'should prevent NodePort collisions', 'n/a', API),
  t('service.go', 'should check NodePort out-of-range', 'n/a', API),
  t('service.go', 'should release NodePorts on delete', 'pass'),
  t(
    'service.go',
    'should create endpoints for unready pods',
    'pass',
    'no endpoint controller in the sandbox: the test writes the EndpointSlices the controller writes for each step (ready = publishNotReadyAddresses || pod ready)',
  ),
  t('service.go', 'should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true', 'pass'),
  t('service.go', 'should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is false', 'pass'),
  t('service.go', 'should have session affinity work for service with type clusterIP [LinuxOnly]', 'pass'),
  t(
    'service.go',
    'should have session affinity timeout work for service with type clusterIP [LinuxOnly]',
    'pass',
    "timeoutSeconds is 2 instead of 125 (the suite's time budget); what is asserted is the same",
  ),
  t('service.go', 'should be able to switch session affinity for service with type clusterIP [LinuxOnly]', 'pass'),
  t('service.go', 'should have session affinity work for NodePort service [LinuxOnly]', 'pass'),
  t(
    'service.go',
    'should have session affinity timeout work for NodePort service [LinuxOnly]',
    'pass',
    "timeoutSeconds is 2 instead of 125 (the suite's time budget)",
  ),
  t('service.go', 'should be able to switch session affinity for NodePort service [LinuxOnly]', 'pass'),
  t('service.go', 'should implement service.kubernetes.io/service-proxy-name', 'pass'),
  t('service.go', 'should implement service.kubernetes.io/headless', 'pass'),
  t(
    'service.go',
    'should be rejected when no endpoints exist',
    'difference',
    'the caller gets ECONNREFUSED at once, as upstream expects, on Linux 5.18 and later (bpf_set_retval); before 5.18 the socket hook refuses with EPERM, which contains no "REFUSED" (docs/semantics.md rule 23)',
  ),
  t(
    'service.go',
    'should be rejected for evicted pods (no endpoints exist)',
    'difference',
    'as "should be rejected when no endpoints exist": ECONNREFUSED from 5.18, EPERM before',
  ),
  t('service.go', 'should respect internalTrafficPolicy=Local Pod to Pod', 'pass'),
  t('service.go', 'should respect internalTrafficPolicy=Local Pod (hostNetwork: true) to Pod', 'pass'),
  t('service.go', 'should respect internalTrafficPolicy=Local Pod and Node, to Pod (hostNetwork: true)', 'pass'),
  t('service.go', 'should fail health check node port if there are only terminating endpoints', 'pass'),
  t('service.go', 'should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster', 'pass'),
  t('service.go', 'should fallback to local terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Local', 'pass'),
  t('service.go', 'should fallback to terminating endpoints when there are no ready endpoints with externallTrafficPolicy=Cluster', 'pass'),
  t('service.go', 'should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local', 'pass'),
  t('service.go', 'should find a service from listing all namespaces', 'n/a', API),
  t('service.go', 'should test the lifecycle of an Endpoint', 'n/a', API),
  t('service.go', 'should complete a service status lifecycle', 'n/a', API),
  t('service.go', 'should delete a collection of services', 'n/a', API),
  t('service.go', 'should serve endpoints on same port and different protocols', 'pass'),
  t('service.go', 'should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer ', 'pass'),
  t(
    'service.go',
    'should allow creating a basic SCTP service with pod and endpoints [LinuxOnly]',
    'n/a',
    'checks the EndpointSlices of an SCTP Service and that sctp.ko stays unloaded; no traffic. kpr never opens an SCTP socket, so it loads no module',
  ),

  // ---------------------------------------------------------------- networking.go ("[sig-network] Networking")
  t('networking.go', 'should provide Internet connection for containers', 'n/a', 'pod egress to the Internet (CNI, node routing), not Services'),
  t('networking.go', 'should provider Internet connection for containers using DNS', 'n/a', 'pod egress and DNS, not Services'),
  t('networking.go', 'should provide unchanging, static URL paths for kubernetes api services', 'n/a', API),
  t(
    'networking.go',
    'should check kube-proxy urls',
    'difference',
    'the agent serves both URLs in its own network namespace, which in the sandbox is the root namespace shared by two agents: the test reads the bound ports from the agent log instead of 10256/10249. /proxyMode answers "kpr"',
  ),
  t('networking.go', 'should function for pod-Service: http', 'pass'),
  t('networking.go', 'should function for pod-Service: udp', 'pass'),
  t('networking.go', 'should function for pod-Service: sctp', 'difference', SCTP_DIFF),
  t('networking.go', 'should function for node-Service: http', 'pass'),
  t('networking.go', 'should function for node-Service: udp', 'pass'),
  t('networking.go', 'should function for node-Service: sctp', 'difference', SCTP_DIFF),
  t('networking.go', 'should function for endpoint-Service: http', 'pass'),
  t('networking.go', 'should function for endpoint-Service: udp', 'pass'),
  t('networking.go', 'should function for endpoint-Service: sctp', 'difference', SCTP_DIFF),
  t('networking.go', 'should function for multiple endpoint-Services with same selector', 'pass'),
  t('networking.go', 'should update endpoints: http', 'pass'),
  t('networking.go', 'should update endpoints: udp', 'pass'),
  t('networking.go', 'should update nodePort: http', 'pass'),
  t('networking.go', 'should support basic nodePort: udp functionality', 'pass'),
  t('networking.go', 'should update nodePort: udp', 'pass'),
  t('networking.go', 'should function for client IP based session affinity: http [LinuxOnly]', 'pass'),
  t('networking.go', 'should function for client IP based session affinity: udp [LinuxOnly]', 'pass'),
  t('networking.go', 'should be able to handle large requests: http', 'pass'),
  t('networking.go', 'should be able to handle large requests: udp', 'pass'),
  t('networking.go', 'should function for service endpoints using hostNetwork', 'difference', HOSTNET_ENDPOINTS),
  t(
    'networking.go',
    'should recreate its iptables rules if they are deleted',
    'n/a',
    'kpr installs no iptables rules (a test asserts it adds none); its analogue, the agent repairing maps changed underneath it, is test/e2e/drift-and-faults.test.ts',
  ),
  t('networking.go', 'should allow creating a Pod with an SCTP HostPort [LinuxOnly]', 'n/a', "hostPort is the CNI portmap plugin's, not the Service proxy's"),

  // ---------------------------------------------------------------- conntrack.go ("[sig-network] Conntrack")
  t('conntrack.go', 'should be able to preserve UDP traffic when server pod cycles for a NodePort service', 'pass'),
  t('conntrack.go', 'should be able to preserve UDP traffic when server pod cycles for a ClusterIP service', 'pass'),
  t('conntrack.go', 'should be able to preserve UDP traffic when initial unready endpoints get ready', 'pass'),
  t(
    'conntrack.go',
    'proxy implementation should not be vulnerable to the invalid conntrack state bug [Privileged]',
    'pass',
    "boom-server is sandbox/out-of-window.py (a raw socket in the backend pod sends the client segments of its connection a gigabyte past the window, INVALID to netfilter conntrack); the nodes track connections through one nftables ct rule, as a CNI's rules do. The same test fails (the client resets the connection) against a NAT rule without an INVALID drop",
  ),

  // ---------------------------------------------------------------- kube_proxy.go ("[sig-network] KubeProxy")
  t(
    'kube_proxy.go',
    'should set TCP CLOSE_WAIT timeout [Privileged]',
    'difference',
    "kpr's agent changes no conntrack sysctl: the 1h CLOSE_WAIT timeout is set by the chart's conntrack-sysctls init container (`kpr conntrack-sysctls`, on by default only with kubeProxyConfigMap.enabled; conntrackSysctls.enabled otherwise; docs/install.md, Conntrack sysctls), which the test runs in the node's namespace with the agent's arguments, as the chart does. The sandbox node tracks connections through one nftables ct rule standing for the CNI's; the entry is read from /proc/net/nf_conntrack instead of conntrack -L, and the server listens on the node (upstream: a hostPort)",
  ),

  // ---------------------------------------------------------------- traffic_distribution.go ("[sig-network] Traffic Distribution")
  t('traffic_distribution.go', 'should route traffic to an endpoint in the same zone when using PreferClose', 'difference', SAME_ZONE),
  t('traffic_distribution.go', 'should route traffic correctly between pods on multiple nodes when using PreferClose', 'difference', MULTI_ZONE),
  t('traffic_distribution.go', 'should route traffic to an endpoint in the same zone when using PreferSameZone', 'difference', SAME_ZONE),
  t('traffic_distribution.go', 'should route traffic correctly between pods on multiple nodes when using PreferSameZone', 'difference', MULTI_ZONE),

  // ---------------------------------------------------------------- loadbalancer.go ("[sig-network] LoadBalancers", "LoadBalancers ESIPP"; [Feature:LoadBalancer])
  t('loadbalancer.go', 'should be able to change the type and ports of a TCP service', 'n/a', CLOUD),
  t('loadbalancer.go', 'should be able to change the type and ports of a UDP service', 'n/a', CLOUD),
  t('loadbalancer.go', 'should only allow access from service loadbalancer source ranges', 'n/a', CLOUD),
  t('loadbalancer.go', 'should have session affinity work for LoadBalancer service with ESIPP on', 'n/a', CLOUD),
  t('loadbalancer.go', 'should be able to switch session affinity for LoadBalancer service with ESIPP on', 'n/a', CLOUD),
  t('loadbalancer.go', 'should have session affinity work for LoadBalancer service with ESIPP off', 'n/a', CLOUD),
  t('loadbalancer.go', 'should be able to switch session affinity for LoadBalancer service with ESIPP off', 'n/a', CLOUD),
  t('loadbalancer.go', 'should handle load balancer cleanup finalizer for service', 'n/a', API),
  t('loadbalancer.go', 'should be able to create LoadBalancer Service without NodePort and change it', 'n/a', CLOUD),
  t('loadbalancer.go', 'should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on different nodes', 'n/a', CLOUD),
  t('loadbalancer.go', 'should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on the same nodes', 'n/a', CLOUD),
  t('loadbalancer.go', 'should not have connectivity disruption during rolling update with externalTrafficPolicy=Cluster', 'n/a', CLOUD),
  t('loadbalancer.go', 'should not have connectivity disruption during rolling update with externalTrafficPolicy=Local', 'n/a', CLOUD),
  t('loadbalancer.go', 'should work for type=LoadBalancer', 'n/a', CLOUD),
  t(
    'loadbalancer.go',
    'should work for type=NodePort',
    'pass',
    "LoadBalancers ESIPP: a NodePort Service with externalTrafficPolicy=Local; needs no cloud load balancer. The test container pod runs on the endpoint's node and on the other node",
  ),
  t('loadbalancer.go', 'should only target nodes with endpoints', 'n/a', CLOUD),
  t('loadbalancer.go', 'should work from pods', 'n/a', CLOUD),
  t('loadbalancer.go', 'should handle updates to ExternalTrafficPolicy field', 'n/a', CLOUD),

  // ---------------------------------------------------------------- dual_stack.go ("[sig-network] [Feature:IPv6DualStack]")
  t('dual_stack.go', 'should have ipv4 and ipv6 internal node ip', 'n/a', 'Node addresses (kubelet), not Services'),
  t('dual_stack.go', 'should create pod, add ipv6 and ipv4 ip to pod ips', 'n/a', 'pod IPs (CNI, kubelet), not Services'),
  t('dual_stack.go', 'should create pod, add ipv6 and ipv4 ip to host ips', 'n/a', 'pod host IPs (kubelet), not Services'),
  t('dual_stack.go', 'should be able to reach pod on ipv4 and ipv6 ip', 'n/a', 'pod-to-pod reachability (CNI), no Service'),
  t('dual_stack.go', 'should create a single stack service with cluster ip from primary service range', 'n/a', API),
  t('dual_stack.go', 'should create service with ipv4 cluster ip', 'n/a', API),
  t('dual_stack.go', 'should create service with ipv6 cluster ip', 'n/a', API),
  t('dual_stack.go', 'should create service with ipv4,v6 cluster ip', 'n/a', API),
  t('dual_stack.go', 'should create service with ipv6,v4 cluster ip', 'n/a', API),
  t('dual_stack.go', 'should function for pod-Service: http', 'pass'),
  t('dual_stack.go', 'should function for pod-Service: udp', 'pass'),
  t('dual_stack.go', 'should function for pod-Service: sctp', 'difference', SCTP_DIFF_V6),
  t('dual_stack.go', 'should function for node-Service: http', 'pass'),
  t('dual_stack.go', 'should function for node-Service: udp', 'pass'),
  t('dual_stack.go', 'should function for endpoint-Service: http', 'pass'),
  t('dual_stack.go', 'should function for endpoint-Service: udp', 'pass'),
  t('dual_stack.go', 'should update endpoints: http', 'pass'),
  t('dual_stack.go', 'should update endpoints: udp', 'pass'),
  t('dual_stack.go', 'should function for client IP based session affinity: http [LinuxOnly]', 'pass'),
  t('dual_stack.go', 'should function for client IP based session affinity: udp [LinuxOnly]', 'pass'),
  t('dual_stack.go', 'should be able to handle large requests: http', 'pass'),
  t('dual_stack.go', 'should be able to handle large requests: udp', 'pass'),
  t('dual_stack.go', 'should function for service endpoints using hostNetwork', 'difference', HOSTNET_ENDPOINTS),
];

/** The entries of one upstream file. */
export function upstreamTestsOf(file: UpstreamFile): UpstreamTest[] {
  return UPSTREAM_TESTS.filter((e) => e.file === file);
}
