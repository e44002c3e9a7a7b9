/**
 * A two-node cluster in a box, for the tc datapath (NodePort, LoadBalancer,
 * externalIPs, service-mesh mode): two node namespaces joined by an underlay
 * veth, pods on a bridge behind each node, and external client namespaces on
 * node-1's uplinks. One real kpr agent per node, each in the root namespace
 * (it reaches the embedded API server on 127.0.0.1) but bound to its node
 * with --netns, its own child cgroup and its own bpffs directory.
 *
 *   client-a 198.18.100.2 ─eth0──up0─ 198.18.100.1
 *                                      node-1 ─ul0══════ul0─ node-2
 *   client-b 198.18.101.2 ─eth0──up1─ 198.18.101.1  198.18.1.1   198.18.1.2
 *                                        │ br0 198.18.10.1          │ br0 198.18.20.1
 *                                        ├─v…── pod 198.18.10.x     ├─v…── pod 198.18.20.x
 *
 * Routing: clients and pods route 198.18.0.0/15 (which holds the service
 * range 198.19.0.0/16) via their gateway; node-1 routes 198.18.20.0/24 via
 * node-2; node-2 routes 198.18.0.0/15 via node-1, which acts as the router to
 * the outside (so replies to a preserved client address, eTP=Local, find
 * their way back, as on any real network). Both nodes forward (ip_forward=1).
 * Nothing routes outside 198.18.0.0/15. The agents attach only to up*, ul0
 * (external) and the pods' bridge ports v* (pod-facing); startAgent checks it.
 *
 * With `ipv6: true` every link also carries 2001:db8::/32 in the same shape
 * (underlay 2001:db8:1::1/::2, pods 2001:db8:10::N / 2001:db8:20::N, clients
 * 2001:db8:100::2 and 2001:db8:101::2, routes to 2001:db8::/32 only), the
 * Node objects list the IPv6 underlay address as a second InternalIP, and the
 * API server allocates ClusterIPs from 2001:db8:19::/112 too (a dual-stack
 * cluster: RequireDualStack / PreferDualStack Services get both families).
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startApiServer, type ApiServer, type KubeObject } from './apiserver.js';
import { inNs, ipBatch, nsPath, Sandbox } from './netns.js';
import { agentBin, repoRoot } from './repo.js';
import type { ClientReport } from './client.js';
import { waitForLine, type ClientMode } from './topology.js';
import { trackAgentLogs, type AgentProcess as TrackedAgent } from './agent-logs.js';

export type NodeName = 'node-1' | 'node-2';
export const NODE_NAMES: NodeName[] = ['node-1', 'node-2'];

export const SERVICE_CIDR = '198.19.0.0/16';
/** The secondary (IPv6) service range of ipv6 boxes: their API server is dual-stack, as a dual-stack cluster's is. */
export const SERVICE_CIDR6 = '2001:db8:19::/112';
export const UNDERLAY = { 'node-1': '198.18.1.1', 'node-2': '198.18.1.2' } as const;
export const POD_SUBNET = { 'node-1': '198.18.10.0/24', 'node-2': '198.18.20.0/24' } as const;
export const POD_GATEWAY = { 'node-1': '198.18.10.1', 'node-2': '198.18.20.1' } as const;
export const ZONE = { 'node-1': 'zone-a', 'node-2': 'zone-b' } as const;

/** IPv6 (with `ipv6: true`): the same shape in 2001:db8::/32. Pod x.x.x.N gets <pod prefix>N. */
export const UNDERLAY6 = { 'node-1': '2001:db8:1::1', 'node-2': '2001:db8:1::2' } as const;
export const POD_PREFIX6 = { 'node-1': '2001:db8:10::', 'node-2': '2001:db8:20::' } as const;
export const POD_GATEWAY6 = { 'node-1': '2001:db8:10::1', 'node-2': '2001:db8:20::1' } as const;
export const CLIENTS6 = {
  'client-a': { ip: '2001:db8:100::2', gateway: '2001:db8:100::1' },
  'client-b': { ip: '2001:db8:101::2', gateway: '2001:db8:101::1' },
} as const;
export const NODE1_UPLINK6 = CLIENTS6['client-a'].gateway;

/** External clients, each on its own uplink of node-1. */
export const CLIENTS = {
  'client-a': { ip: '198.18.100.2', gateway: '198.18.100.1', uplink: 'up0' },
  'client-b': { ip: '198.18.101.2', gateway: '198.18.101.1', uplink: 'up1' },
} as const;
export type ClientName = keyof typeof CLIENTS;

/** node-1's uplink address, listed as the Node's ExternalIP so NodePorts answer on it too. */
export const NODE1_UPLINK = CLIENTS['client-a'].gateway;

export const EXTERNAL_INTERFACES = 'up*,ul0';
export const POD_INTERFACES = 'v*';

const SANDBOX_RANGE = '198.18.0.0/15';
const SANDBOX_RANGE6 = '2001:db8::/32';

/** The IPv6 address a pod gets beside its IPv4 one (ipv6 boxes). */
export function podIp6(ip4: string, node: NodeName): string {
  return `${POD_PREFIX6[node]}${ip4.split('.')[3]}`;
}
const distDir = path.join(repoRoot, 'dist', 'sandbox');

export interface TwoNodePod {
  name: string;
  ip: string;
  /** Set in ipv6 boxes. */
  ip6?: string;
  node: NodeName;
  ns: string;
  /** The bridge port (host side of the pod's veth) in the node namespace. */
  hostIf: string;
  server: ChildProcess;
}

export interface NodeHandle {
  name: NodeName;
  ns: string;
  /** The node's child cgroup: the agent's socket hooks serve processes below it. */
  cgroup: string;
  bpffsDir: string;
}

export interface AgentProcess extends TrackedAgent {
  node: NodeName;
}

export interface ClientOptions {
  /** Run below this node's cgroup (its socket hooks apply). Default: no kpr cgroup. */
  cgroupOf?: NodeName;
  extra?: string[];
}

/** Node objects are cluster-scoped: their InternalIP is the SNAT source, every address serves NodePorts. */
export function nodeObject(name: NodeName, ipv6 = false): KubeObject {
  const addresses: Array<{ type: string; address: string }> = [{ type: 'InternalIP', address: UNDERLAY[name] }];
  if (ipv6) addresses.push({ type: 'InternalIP', address: UNDERLAY6[name] });
  if (name === 'node-1') addresses.push({ type: 'ExternalIP', address: NODE1_UPLINK });
  if (name === 'node-1' && ipv6) addresses.push({ type: 'ExternalIP', address: NODE1_UPLINK6 });
  addresses.push({ type: 'Hostname', address: name });
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kubernetes.io/hostname': name, 'topology.kubernetes.io/zone': ZONE[name] } },
    status: { addresses },
  };
}

// Child cgroups below the sandbox's run cgroup must go before it can; the
// sandbox's own teardown does not know them, so an exit hook covers the
// interrupted case (it runs after the sandbox's, which then left the run cgroup).
const liveCgroups = new Set<string>();
let exitHookInstalled = false;

function removeCgroupDir(cg: string): boolean {
  if (!existsSync(cg)) return true;
  for (let attempt = 0; attempt < 40; attempt++) {
    try {
      for (const pid of readFileSync(path.join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          /* gone */
        }
      }
      rmdirSync(cg);
      return true;
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
  try {
    writeFileSync(path.join(cg, 'cgroup.kill'), '1');
    rmdirSync(cg);
    return true;
  } catch (err) {
    console.error(`kpr two-node sandbox: could not remove cgroup ${cg}: ${(err as Error).message}`);
    return false;
  }
}

/** Node cgroups live two levels below the cgroup root, run cgroups one. */
const isNodeCgroup = (cg: string) => liveCgroups.has(path.dirname(cg));

function cleanCgroups(onlyNodeCgroups = false): void {
  // Children first (deepest paths first), then whatever parent is left.
  for (const cg of [...liveCgroups].sort((a, b) => b.length - a.length)) {
    if (onlyNodeCgroups && !isNodeCgroup(cg)) continue;
    if (removeCgroupDir(cg)) liveCgroups.delete(cg);
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // On a signal, the node cgroups go before the sandbox's own handler removes the run cgroup.
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.prependListener(sig, () => cleanCgroups(true));
  process.on('exit', () => cleanCgroups());
}

export class TwoNodeCluster {
  readonly sandbox: Sandbox;
  readonly api: ApiServer;
  readonly kubeconfig: string;
  readonly nodes: Record<NodeName, NodeHandle>;
  readonly clientNs: Record<ClientName, string>;
  readonly pods = new Map<string, TwoNodePod>();
  readonly agents = new Map<NodeName, AgentProcess>();
  readonly ipv6: boolean;
  private podSeq = 0;

  private constructor(
    sandbox: Sandbox,
    api: ApiServer,
    kubeconfig: string,
    nodes: Record<NodeName, NodeHandle>,
    clientNs: Record<ClientName, string>,
    ipv6: boolean,
  ) {
    this.ipv6 = ipv6;
    this.sandbox = sandbox;
    this.api = api;
    this.kubeconfig = kubeconfig;
    this.nodes = nodes;
    this.clientNs = clientNs;
  }

  /** Builds the namespaces, routes, pods and API server (with both Node objects); agents are started separately. */
  /** `unservedKinds`: kinds the API server does not serve (e.g. ['ServiceCIDR']: a cluster older than 1.33). */
  static async create(
    opts: { pods?: Array<{ name: string; ip: string; node: NodeName }>; ipv6?: boolean; unservedKinds?: string[] } = {},
  ): Promise<TwoNodeCluster> {
    const v6 = opts.ipv6 ?? false;
    const sandbox = new Sandbox();
    installExitHook();
    liveCgroups.add(sandbox.cgroupPath);
    let api: ApiServer | undefined;
    try {
      // Every namespace's ip(8) commands in one process (Sandbox.addNamespaces): the nodes first, as
      // their commands make the veths whose other end is the peer's, a client's or a pod's eth0. A
      // batch line takes no -6: the address or prefix gives the family.
      const nsOf = (role: string) => sandbox.nsName(role);
      const n2 = nsOf('node-2');
      const pods = (opts.pods ?? []).map((p, i) => ({ ...p, hostIf: `v${i}${sandbox.runId.slice(-6)}`.slice(0, 15) }));
      const nodeCommands = (name: NodeName): string[][] => {
        const cmds: string[][] = [
          ['link', 'add', 'br0', 'type', 'bridge'],
          ['addr', 'add', `${POD_GATEWAY[name]}/24`, 'dev', 'br0'],
          ...(v6 ? [['addr', 'add', `${POD_GATEWAY6[name]}/64`, 'dev', 'br0', 'nodad']] : []),
          ['link', 'set', 'br0', 'up'],
        ];
        // Underlay: created directly inside the node namespaces (never in the root one).
        if (name === 'node-1') cmds.push(['link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul0', 'netns', n2]);
        cmds.push(['addr', 'add', `${UNDERLAY[name]}/24`, 'dev', 'ul0']);
        if (v6) cmds.push(['addr', 'add', `${UNDERLAY6[name]}/64`, 'dev', 'ul0', 'nodad']);
        cmds.push(['link', 'set', 'ul0', 'up']);
        if (name === 'node-1') {
          cmds.push(['route', 'add', POD_SUBNET['node-2'], 'via', UNDERLAY['node-2'], 'dev', 'ul0']);
          if (v6) cmds.push(['route', 'add', `${POD_PREFIX6['node-2']}/64`, 'via', UNDERLAY6['node-2'], 'dev', 'ul0']);
          // External clients on node-1's uplinks.
          for (const [cname, c] of Object.entries(CLIENTS) as Array<[ClientName, (typeof CLIENTS)[ClientName]]>) {
            cmds.push(
              ['link', 'add', c.uplink, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', nsOf(cname)],
              ['addr', 'add', `${c.gateway}/24`, 'dev', c.uplink],
            );
            if (v6) cmds.push(['addr', 'add', `${CLIENTS6[cname].gateway}/64`, 'dev', c.uplink, 'nodad']);
            cmds.push(['link', 'set', c.uplink, 'up']);
          }
        } else {
          cmds.push(['route', 'add', SANDBOX_RANGE, 'via', UNDERLAY['node-1'], 'dev', 'ul0']);
          if (v6) cmds.push(['route', 'add', SANDBOX_RANGE6, 'via', UNDERLAY6['node-1'], 'dev', 'ul0']);
        }
        for (const p of pods.filter((p) => p.node === name)) cmds.push(...TwoNodeCluster.podBridgePort(p.hostIf, nsOf(p.name)));
        return cmds;
      };
      const clientCommands = (cname: ClientName): string[][] => {
        const c = CLIENTS[cname];
        const cmds = [
          ['addr', 'add', `${c.ip}/24`, 'dev', 'eth0'],
          ['link', 'set', 'eth0', 'up'],
          ['route', 'add', SANDBOX_RANGE, 'via', c.gateway, 'dev', 'eth0'],
        ];
        if (v6)
          cmds.push(
            ['addr', 'add', `${CLIENTS6[cname].ip}/64`, 'dev', 'eth0', 'nodad'],
            ['route', 'add', SANDBOX_RANGE6, 'via', CLIENTS6[cname].gateway, 'dev', 'eth0'],
          );
        return cmds;
      };
      const clientNames = Object.keys(CLIENTS) as ClientName[];
      sandbox.addNamespaces([
        ...NODE_NAMES.map((name): [string, string[][]] => [name, nodeCommands(name)]),
        ...clientNames.map((cname): [string, string[][]] => [cname, clientCommands(cname)]),
        ...pods.map((p): [string, string[][]] => [p.name, TwoNodeCluster.podEth0(p.ip, p.node, v6)]),
      ]);
      const nodes = {} as Record<NodeName, NodeHandle>;
      for (const name of NODE_NAMES) {
        const ns = nsOf(name);
        const cgroup = path.join(sandbox.cgroupPath, name);
        mkdirSync(cgroup);
        liveCgroups.add(cgroup);
        nodes[name] = { name, ns, cgroup, bpffsDir: path.join(sandbox.bpffsDir, name) };
        inNs(ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1', ...(v6 ? ['net.ipv6.conf.all.forwarding=1'] : []));
      }
      const clientNs = Object.fromEntries(clientNames.map((cname) => [cname, nsOf(cname)])) as Record<ClientName, string>;

      api = await startApiServer({
        serviceCIDR: v6 ? `${SERVICE_CIDR},${SERVICE_CIDR6}` : SERVICE_CIDR,
        ...(opts.unservedKinds ? { unservedKinds: opts.unservedKinds } : {}),
      });
      for (const name of NODE_NAMES) api.create(nodeObject(name, v6));
      const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-`)));
      const kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
      const cluster = new TwoNodeCluster(sandbox, api, kubeconfig, nodes, clientNs, v6);
      cluster.podSeq = pods.length;
      // The pods' servers start together (a Node start is seconds on an emulated CPU).
      await Promise.all(pods.map((p) => cluster.startPod(p.name, p.ip, p.node, nsOf(p.name), p.hostIf)));
      return cluster;
    } catch (err) {
      await api?.close().catch(() => undefined);
      await sandbox.teardown();
      cleanCgroups();
      throw err;
    }
  }

  /** A pod's bridge port, in its node's namespace: the veth whose other end is the pod's eth0. */
  private static podBridgePort(hostIf: string, podNs: string): string[][] {
    return [
      ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs],
      ['link', 'set', hostIf, 'master', 'br0'],
      ['link', 'set', hostIf, 'up'],
    ];
  }

  /** A pod's eth0, in its namespace: its address(es), default-routed (within the sandbox range) via the node. */
  private static podEth0(podIp: string, node: NodeName, v6: boolean): string[][] {
    const cmds = [
      ['addr', 'add', `${podIp}/24`, 'dev', 'eth0'],
      ['link', 'set', 'eth0', 'up'],
      ['route', 'add', SANDBOX_RANGE, 'via', POD_GATEWAY[node], 'dev', 'eth0'],
    ];
    if (v6)
      cmds.push(
        ['addr', 'add', `${podIp6(podIp, node)}/64`, 'dev', 'eth0', 'nodad'],
        ['route', 'add', SANDBOX_RANGE6, 'via', POD_GATEWAY6[node], 'dev', 'eth0'],
      );
    return cmds;
  }

  /** A pod namespace on a node's bridge, default-routed (within the sandbox range) via the node, running pod-server. */
  async addPod(name: string, podIp: string, node: NodeName): Promise<TwoNodePod> {
    const hostIf = `v${this.podSeq++}${this.sandbox.runId.slice(-6)}`.slice(0, 15);
    const [ns] = this.sandbox.addNamespaces([[name, []]]);
    ipBatch(TwoNodeCluster.podBridgePort(hostIf, ns), this.nodes[node].ns);
    ipBatch(TwoNodeCluster.podEth0(podIp, node, this.ipv6), ns);
    return this.startPod(name, podIp, node, ns, hostIf);
  }

  /** Starts pod-server in a pod's namespace (its links made) and records the pod once it is ready. */
  private async startPod(name: string, podIp: string, node: NodeName, ns: string, hostIf: string): Promise<TwoNodePod> {
    const ip6 = this.ipv6 ? podIp6(podIp, node) : undefined;
    const server = this.sandbox.spawnIn(ns, process.execPath, [path.join(distDir, 'pod-server.js'), '--name', name], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await waitForLine(server, 'ready', `pod ${name}`);
    const pod: TwoNodePod = { name, ip: podIp, ...(ip6 ? { ip6 } : {}), node, ns, hostIf, server };
    this.pods.set(name, pod);
    return pod;
  }

  /** The agent flags that bind an agent to one node of this box. */
  agentArgs(node: NodeName): string[] {
    const n = this.nodes[node];
    return [
      '--kubeconfig',
      this.kubeconfig,
      '--node-name',
      node,
      '--netns',
      nsPath(n.ns),
      '--cgroup-path',
      n.cgroup,
      '--bpffs',
      n.bpffsDir,
      '--external-interfaces',
      EXTERNAL_INTERFACES,
      '--pod-interfaces',
      POD_INTERFACES,
      // The agent process stays in the host's namespace (--netns is where it programs): its health and metrics
      // servers would take the host's 10256 and 10249, and the two nodes' agents each other's. Ports of their own
      // (the log line says which); a test that wants others passes them later, and the last flag wins.
      '--healthz-bind-address',
      '127.0.0.1:0',
      '--metrics-bind-address',
      '127.0.0.1:0',
    ];
  }

  /**
   * Starts one agent per node and waits until each has synced, written its
   * node settings and attached tc to every interface of its node it should.
   */
  async startAgents(extraArgs: string[] = []): Promise<void> {
    await Promise.all(NODE_NAMES.map((n) => this.startAgent(n, extraArgs)));
  }

  async startAgent(node: NodeName, extraArgs: string[] = []): Promise<AgentProcess> {
    const child = this.sandbox.track(spawn(agentBin, [...this.agentArgs(node), ...extraArgs], { stdio: ['ignore', 'ignore', 'pipe'] }));
    const agent: AgentProcess = { node, ...trackAgentLogs(node, child) };
    this.agents.set(node, agent);
    await agent.waitForLog('initial sync complete', 20_000);
    await agent.waitForLog((l) => l.msg === 'node datapath settings' && l.snatV4 === UNDERLAY[node] && (!this.ipv6 || l.snatV6 === UNDERLAY6[node]));
    const expected = this.expectedInterfaces(node);
    for (const ifname of expected) {
      await agent.waitForLog((l) => l.msg === 'tc program attached' && l.interface === ifname, 10_000);
    }
    const stray = agent.logs.filter((l) => l.msg === 'tc program attached' && !expected.includes(String(l.interface)));
    if (stray.length > 0) throw new Error(`${node} agent attached to interfaces it was not given: ${JSON.stringify(stray)}`);
    return agent;
  }

  /** Interfaces of a node's namespace the agent must have attached to. */
  expectedInterfaces(node: NodeName): string[] {
    const ifs = ['ul0', ...[...this.pods.values()].filter((p) => p.node === node).map((p) => p.hostIf)];
    if (node === 'node-1') ifs.push(...Object.values(CLIENTS).map((c) => c.uplink));
    return ifs;
  }

  async stopAgent(node: NodeName, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const a = this.agents.get(node);
    this.agents.delete(node);
    if (!a || a.child.exitCode !== null || a.child.signalCode !== null) return;
    a.child.kill(signal);
    await once(a.child, 'exit');
  }

  /** Spawns a process in a namespace, optionally below a node's cgroup (cgroup first, then nsenter). */
  spawnIn(ns: string, cmd: string, args: string[], opts: SpawnOptions & { cgroupOf?: NodeName } = {}): ChildProcess {
    const { cgroupOf, ...spawnOpts } = opts;
    if (!cgroupOf) return this.sandbox.spawnIn(ns, cmd, args, spawnOpts);
    const nsenter = ['nsenter', `--net=${nsPath(ns)}`, cmd, ...args];
    const child = spawn('sh', ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', this.nodes[cgroupOf].cgroup, ...nsenter], spawnOpts);
    return this.sandbox.track(child);
  }

  /** Runs sandbox/client.js in any namespace of the box and returns its report. */
  client(ns: string, mode: ClientMode | 'get', target: string, opts: ClientOptions = {}): Promise<ClientReport> {
    return this.startClient(ns, mode, ['--target', target, ...(opts.extra ?? [])], opts).report;
  }

  /** Starts sandbox/client.js in any namespace of the box; `report` resolves when it exits (SIGTERM ends the loop modes). */
  startClient<R extends ClientReport = ClientReport>(
    ns: string,
    mode: ClientMode,
    args: string[],
    opts: Omit<ClientOptions, 'extra'> = {},
  ): { child: ChildProcess; report: Promise<R> } {
    const child = this.spawnIn(ns, process.execPath, [path.join(distDir, 'client.js'), mode, ...args], {
      cgroupOf: opts.cgroupOf,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (err += d));
    const report = once(child, 'exit').then(([code]) => {
      if (code !== 0) throw new Error(`client ${mode} ${args.join(' ')} in ${ns} exited ${code}: ${err}`);
      return JSON.parse(out) as R;
    });
    return { child, report };
  }

  /** A client on an external client namespace (no kpr cgroup: only tc can serve it). */
  external(client: ClientName, mode: ClientMode | 'get', target: string, extra: string[] = []): Promise<ClientReport> {
    return this.client(this.clientNs[client], mode, target, { extra });
  }

  async close(): Promise<void> {
    for (const n of NODE_NAMES) await this.stopAgent(n, 'SIGKILL').catch(() => undefined);
    await this.api.close().catch(() => undefined);
    // Processes below the node cgroups first, so the sandbox can remove its run cgroup.
    for (const n of NODE_NAMES) if (removeCgroupDir(this.nodes[n].cgroup)) liveCgroups.delete(this.nodes[n].cgroup);
    await this.sandbox.teardown();
    liveCgroups.delete(this.sandbox.cgroupPath);
  }
}
