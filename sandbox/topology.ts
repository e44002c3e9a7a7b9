/**
 * The ClusterIP sandbox topology: one "node" namespace with a bridge, and one
 * namespace per pod attached to it by a veth pair. Clients run in the node
 * namespace inside the run's cgroup, like a process on a Kubernetes node.
 * Addresses come from 198.18.0.0/15 (RFC 2544); nothing routes outside.
 */
import { scaled } from './time-scale.js';
import { once } from 'node:events';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { ipBatch, type Sandbox } from './netns.js';
import { repoRoot } from './repo.js';
import type { ClientReport } from './client.js';

export const NODE_BRIDGE_IP = '198.18.0.1';
/** The bridge's IPv6 address; pods get addresses in the same /64 when given one. */
export const NODE_BRIDGE_IP6 = '2001:db8:18::1';
export const POD_HTTP_PORT = 8080;

export interface PodHandle {
  name: string;
  ip: string;
  ns: string;
  server: ChildProcess;
}

export interface NodeTopology {
  nodeNs: string;
  pods: Map<string, PodHandle>;
}

const distDir = path.join(repoRoot, 'dist', 'sandbox');

/** Resolves once the child prints `line` on stdout; fails with its stderr when it exits or times out. */
export async function waitForLine(child: ChildProcess, line: string, what: string, timeoutMs = 10_000): Promise<void> {
  let seen = '';
  let errText = '';
  child.stderr?.on('data', (d) => (errText += d));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: not ready after ${scaled(timeoutMs)} ms. ${errText}`)), scaled(timeoutMs));
    child.stdout?.on('data', (d) => {
      seen += d;
      if (seen.includes(line)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}: ${errText}`));
    });
  });
}

export function createNode(sandbox: Sandbox): NodeTopology {
  // One ip process for the namespace, one for its commands (a process start costs ~0.4 s in the kernel legs' guests).
  const [nodeNs] = sandbox.addNamespaces([
    [
      'node',
      [
        ['link', 'add', 'br0', 'type', 'bridge'],
        ['addr', 'add', `${NODE_BRIDGE_IP}/24`, 'dev', 'br0'],
        // nodad: usable at once, without waiting for duplicate address detection.
        ['addr', 'add', `${NODE_BRIDGE_IP6}/64`, 'dev', 'br0', 'nodad'],
        ['link', 'set', 'br0', 'up'],
      ],
    ],
  ]);
  return { nodeNs, pods: new Map() };
}

/** Creates a pod namespace wired to the node bridge and starts its servers. */
export async function addPod(sandbox: Sandbox, topo: NodeTopology, name: string, podIp: string, podIp6?: string): Promise<PodHandle> {
  const hostSide = `v${topo.pods.size}${sandbox.runId.slice(-6)}`.slice(0, 15);
  // The pod's eth0 made from its own namespace, its peer (the bridge port) put into the node's.
  const [ns] = sandbox.addNamespaces([
    [
      name,
      [
        ['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', hostSide, 'netns', topo.nodeNs],
        ['addr', 'add', `${podIp}/24`, 'dev', 'eth0'],
        ...(podIp6 ? [['addr', 'add', `${podIp6}/64`, 'dev', 'eth0', 'nodad']] : []),
        ['link', 'set', 'eth0', 'up'],
      ],
    ],
  ]);
  ipBatch(
    [
      ['link', 'set', hostSide, 'master', 'br0'],
      ['link', 'set', hostSide, 'up'],
    ],
    topo.nodeNs,
  );
  const server = sandbox.spawnIn(ns, process.execPath, [path.join(distDir, 'pod-server.js'), '--name', name], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await waitForLine(server, 'ready', `pod ${name}`);
  const pod = { name, ip: podIp, ns, server };
  topo.pods.set(name, pod);
  return pod;
}

export type ClientMode = 'http' | 'udp' | 'loop' | 'once' | 'udploop' | 'get' | 'hold' | 'batch' | 'slowbody';

export interface ClientRun {
  child: ChildProcess;
  report: Promise<ClientReport>;
}

/** Starts the sandbox client in the node namespace and the run's cgroup. */
export function startClient(sandbox: Sandbox, topo: NodeTopology, mode: ClientMode, target: string, extra: string[] = []): ClientRun {
  const child = sandbox.spawnIn(topo.nodeNs, process.execPath, [path.join(distDir, 'client.js'), mode, '--target', target, ...extra], {
    inCgroup: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d) => (out += d));
  child.stderr?.on('data', (d) => (err += d));
  const report = once(child, 'exit').then(([code]) => {
    if (code !== 0) throw new Error(`client ${mode} ${target} exited ${code}: ${err}`);
    return JSON.parse(out) as ClientReport;
  });
  return { child, report };
}

export function runClient(sandbox: Sandbox, topo: NodeTopology, mode: ClientMode, target: string, extra: string[] = []): Promise<ClientReport> {
  return startClient(sandbox, topo, mode, target, extra).report;
}
