/**
 * The NodePort data-plane topology: one "stack" is an external client, a
 * node and a pod, each in its own network namespace of the run's sandbox.
 *
 *   client 198.18.100.2 ─eth0──up0─ 198.18.100.1  node  198.18.10.1 br0 ─vp0──eth0─ pod 198.18.10.10
 *                                                  (ip_forward=1)                     echo-server :9000
 *
 * The client routes 198.18.10.0/24 (the pod subnet, for the direct arm) via
 * the node; the pod's default route is the node's bridge address. Every stack
 * has the same addresses and interface names (they live in different
 * namespaces), so the benchmark builds identical stacks — one served by kpr,
 * one by kube-proxy's iptables rules, one with neither — and no datapath ever
 * sees another's traffic. Links are created directly inside the sandbox's
 * namespaces, never in the host's; nothing routes outside 198.18.0.0/15.
 */
import type { ChildProcess } from 'node:child_process';
import { inNs, ip, type Sandbox } from '../sandbox/netns.js';
import { startEchoServer } from './data-plane.js';

export const NP_CLIENT_IP = '198.18.100.2';
/** The node's uplink address: the Node object's InternalIP, the NodePort address and kpr's SNAT source. */
export const NP_NODE_IP = '198.18.100.1';
export const NP_BRIDGE_IP = '198.18.10.1';
export const NP_POD_SUBNET = '198.18.10.0/24';
export const NP_POD_IP = '198.18.10.10';
export const NP_ECHO_PORT = 9000;
/** The node's external interface (kpr: --external-interfaces). */
export const NP_UPLINK = 'up0';
/** The pod's bridge port on the node (kpr: --pod-interfaces). */
export const NP_POD_IF = 'vp0';

export interface NodePortStack {
  role: string;
  clientNs: string;
  nodeNs: string;
  podNs: string;
  echo: ChildProcess;
}

/** Builds one client–node–pod stack and starts the echo server in the pod. */
export async function createNodePortStack(sandbox: Sandbox, role: string): Promise<NodePortStack> {
  const clientNs = sandbox.addNamespace(`${role}-cl`);
  const nodeNs = sandbox.addNamespace(`${role}-node`);
  const podNs = sandbox.addNamespace(`${role}-pod`);

  inNs(nodeNs, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
  inNs(nodeNs, 'ip', 'link', 'add', 'br0', 'type', 'bridge');
  inNs(nodeNs, 'ip', 'addr', 'add', `${NP_BRIDGE_IP}/24`, 'dev', 'br0');
  inNs(nodeNs, 'ip', 'link', 'set', 'br0', 'up');

  // Uplink: client eth0 <-> node up0.
  ip('link', 'add', NP_UPLINK, 'netns', nodeNs, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', clientNs);
  inNs(nodeNs, 'ip', 'addr', 'add', `${NP_NODE_IP}/24`, 'dev', NP_UPLINK);
  inNs(nodeNs, 'ip', 'link', 'set', NP_UPLINK, 'up');
  inNs(clientNs, 'ip', 'addr', 'add', `${NP_CLIENT_IP}/24`, 'dev', 'eth0');
  inNs(clientNs, 'ip', 'link', 'set', 'eth0', 'up');
  inNs(clientNs, 'ip', 'route', 'add', NP_POD_SUBNET, 'via', NP_NODE_IP, 'dev', 'eth0');
  // Tens of thousands of sequential connections: a wide ephemeral range, TIME_WAIT reuse.
  inNs(clientNs, 'sysctl', '-q', '-w', 'net.ipv4.ip_local_port_range=1024 65000');
  inNs(clientNs, 'sysctl', '-q', '-w', 'net.ipv4.tcp_tw_reuse=1');

  // Pod: node vp0 (bridge port) <-> pod eth0.
  ip('link', 'add', NP_POD_IF, 'netns', nodeNs, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs);
  inNs(nodeNs, 'ip', 'link', 'set', NP_POD_IF, 'master', 'br0');
  inNs(nodeNs, 'ip', 'link', 'set', NP_POD_IF, 'up');
  inNs(podNs, 'ip', 'addr', 'add', `${NP_POD_IP}/24`, 'dev', 'eth0');
  inNs(podNs, 'ip', 'link', 'set', 'eth0', 'up');
  inNs(podNs, 'ip', 'route', 'add', 'default', 'via', NP_BRIDGE_IP, 'dev', 'eth0');

  const echo = await startEchoServer(sandbox, podNs, NP_ECHO_PORT);
  return { role, clientNs, nodeNs, podNs, echo };
}
