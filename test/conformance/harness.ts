/**
 * What the conformance suites share: the upstream list turned into node:test
 * tests, and a two-node box (sandbox/two-node.ts) with the objects and
 * observers the Kubernetes e2e framework uses, in the sandbox's terms:
 *  - a pod is a network namespace on a node's bridge running
 *    sandbox/pod-server.js (it answers with its name, as agnhost
 *    serve-hostname / netexec /hostname do); a client "in a pod" is a
 *    process in that namespace and below its node's cgroup, so the node's
 *    socket hooks serve it exactly as they serve a pod;
 *  - a hostNetwork pod is a process in the node's namespace, below its cgroup;
 *  - there is no endpoint controller: a test writes the EndpointSlices the
 *    controller would write for its pods (ready / serving / terminating),
 *    one per IP family of the Service (dual-stack boxes: `ipv6`), and for
 *    hostNetwork pods (their addresses the node's);
 *  - Services are created through the sandbox API server, which defaults
 *    them and allocates ClusterIPs and node ports as the real one does.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { repoRoot } from '../../sandbox/repo.js';
import { inNs } from '../../sandbox/netns.js';
import { waitForLine } from '../../sandbox/topology.js';
import { waitFor } from '../../sandbox/cluster.js';
import { TwoNodeCluster, UNDERLAY, UNDERLAY6, type NodeName } from '../../sandbox/two-node.js';
import type { BatchStep, ClientReport } from '../../sandbox/client.js';
import type { KubeObject } from '../../sandbox/apiserver.js';
import { upstreamTestsOf, type UpstreamFile } from './upstream-tests.js';

/** One implemented upstream test. */
export type UpstreamImpl = () => Promise<void>;

/**
 * Registers one node:test test per entry of `file` in the upstream list, in
 * list order: `pass` and `difference` run their implementation, `todo` is a
 * node:test todo and `n/a` a skip with its reason. A last test fails when an
 * implementation has no entry, or an entry says pass/difference without one.
 */
export function registerUpstream(file: UpstreamFile, impls: Record<string, UpstreamImpl>): void {
  const entries = upstreamTestsOf(file);
  for (const e of entries) {
    const impl = impls[e.name];
    if (e.status === 'todo') test(e.name, { todo: 'not written yet (docs/conformance.md)' });
    else if (e.status === 'n/a') test(e.name, { skip: `n/a: ${e.note}` });
    else
      test(e.name, async () => {
        assert.ok(impl, `${file} "${e.name}" is listed as ${e.status} but has no test`);
        await impl();
      });
  }
  test(`every test of this file is an upstream ${file} test listed as pass or difference`, () => {
    const listed = new Map(entries.map((e) => [e.name, e.status]));
    assert.deepEqual(
      Object.keys(impls).filter((n) => !listed.has(n)),
      [],
      'tests with no upstream entry',
    );
    assert.deepEqual(
      Object.keys(impls).filter((n) => listed.get(n) === 'todo' || listed.get(n) === 'n/a'),
      [],
      'written tests still listed as todo or n/a',
    );
  });
}

/** Polls `check` until it returns something truthy; fails with `what` and the last value seen. */
export function eventually<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 15_000, intervalMs = 200): Promise<T> {
  return waitFor(what, check, timeoutMs, intervalMs);
}

export interface PodSpec {
  name: string;
  ip: string;
  node: NodeName;
}

export interface EndpointSpec {
  pod: string;
  /** A hostNetwork pod (not in the box's pods) on this node: its addresses are the node's. */
  hostNetworkOn?: NodeName;
  /** The zone the controller copies from the pod's node, and the zone hint it writes (trafficDistribution PreferClose/PreferSameZone). */
  zone?: string;
  hintZone?: string;
  /** Default { ready: true, serving: true, terminating: false }. */
  conditions?: { ready: boolean; serving: boolean; terminating: boolean };
}

export interface SlicePortSpec {
  name: string;
  port: number;
  protocol?: 'TCP' | 'UDP' | 'SCTP';
}

export const READY = { ready: true, serving: true, terminating: false };
/** A pod being deleted within its grace period, still passing its readiness probe. */
export const TERMINATING_SERVING = { ready: false, serving: true, terminating: true };
/** A pod that fails its readiness probe (not terminating). */
export const UNREADY = { ready: false, serving: false, terminating: false };

/** Where a client runs: a pod, or a node's namespace (a hostNetwork pod). */
export type Who = { pod: string } | { node: NodeName };

export interface Check {
  target: string;
  /** The pod (its name) that must answer, or null: the request must fail. */
  want: string | null;
  udp?: boolean;
}

/** How long a request that must fail may wait (curl --connect-timeout in upstream): a drop costs this much. */
export const FAIL_TIMEOUT_MS = 1000;

/** Namespace of every object of the suites. */
export const NS = 'e2e';

export class ConformanceBox {
  readonly box: TwoNodeCluster;
  readonly pods: Map<string, PodSpec>;
  private readonly clients = new Map<string, { child: ChildProcess; next: Promise<void>; send: (line: string) => Promise<string> }>();
  private constructor(box: TwoNodeCluster, pods: PodSpec[]) {
    this.box = box;
    this.pods = new Map(pods.map((p) => [p.name, p]));
  }

  /**
   * The box with `pods`, and both agents started with `agentArgs` (their servers on loopback ports of their own).
   * `ipv6`: a dual-stack box (sandbox/two-node.ts): every pod and node has an IPv6 address too, and the API server allocates IPv6 ClusterIPs.
   */
  static async start(pods: PodSpec[], agentArgs: string[] = [], opts: { ipv6?: boolean } = {}): Promise<ConformanceBox> {
    const box = await TwoNodeCluster.create({ pods, ipv6: opts.ipv6 ?? false });
    const c = new ConformanceBox(box, pods);
    try {
      await box.startAgents(['--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', ...agentArgs]);
    } catch (err) {
      await box.close();
      throw err;
    }
    return c;
  }

  async close(): Promise<void> {
    for (const cl of this.clients.values()) cl.child.stdin?.end();
    await this.box.close();
  }

  /** Creates a Service (namespace e2e); the API server allocates its ClusterIP and node ports. Returns it as stored. */
  createService(name: string, spec: Record<string, unknown>, meta: Record<string, unknown> = {}): KubeObject {
    return this.box.api.create({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: NS, ...meta }, spec });
  }

  /** Reads, changes and writes back a Service, as jig.UpdateService does. */
  updateService(name: string, mutate: (svc: KubeObject) => void): KubeObject {
    const svc = structuredClone(this.box.api.get('Service', NS, name));
    assert.ok(svc, `Service ${name}`);
    mutate(svc);
    const stored = this.box.api.update(svc);
    this.syncSliceLabels(stored);
    return stored;
  }

  deleteService(name: string): void {
    this.box.api.remove('Service', NS, name);
    for (const s of this.box.api.list('EndpointSlice', NS)) {
      if (s.metadata?.labels?.['kubernetes.io/service-name'] === name) this.box.api.remove('EndpointSlice', NS, s.metadata!.name!);
    }
  }

  /**
   * Writes the EndpointSlices of Service `svc` (`slice` names one of several):
   * what the controller writes for these pods, one slice per IP family of the
   * Service (its spec.ipFamilies: `slice` for IPv4, `slice`-ipv6 for IPv6,
   * each endpoint with its pod's address of that family), the Service's labels
   * included (the controller copies them, which is how the headless label
   * reaches the slices the proxy filters on).
   */
  setEndpoints(svc: string, endpoints: EndpointSpec[], ports: SlicePortSpec[] = [{ name: 'http', port: 8080 }], slice = `${svc}-slice`): void {
    const service = this.box.api.get('Service', NS, svc);
    const families: Array<'IPv4' | 'IPv6'> = service?.spec?.ipFamilies ?? ['IPv4'];
    for (const family of ['IPv4', 'IPv6'] as const) {
      const name = family === 'IPv4' ? slice : `${slice}-ipv6`;
      if (!families.includes(family)) {
        if (family === 'IPv6' && this.box.api.get('EndpointSlice', NS, name)) this.box.api.remove('EndpointSlice', NS, name);
        continue;
      }
      const obj: KubeObject = {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name, namespace: NS, labels: { ...(service?.metadata?.labels ?? {}), 'kubernetes.io/service-name': svc } },
        addressType: family,
        ports: ports.map((p) => ({ protocol: 'TCP', ...p })),
        endpoints: endpoints.map((e) => {
          const { address, node } = this.endpointAddress(e, family);
          return {
            addresses: [address],
            conditions: e.conditions ?? READY,
            nodeName: node,
            targetRef: { kind: 'Pod', namespace: NS, name: e.pod },
            ...(e.zone ? { zone: e.zone } : {}),
            ...(e.hintZone ? { hints: { forZones: [{ name: e.hintZone }] } } : {}),
          };
        }),
      };
      this.box.api.apply(obj);
    }
  }

  /** An endpoint's address of one family: its pod's, or its node's for a hostNetwork pod. */
  private endpointAddress(e: EndpointSpec, family: 'IPv4' | 'IPv6'): { address: string; node: NodeName } {
    if (e.hostNetworkOn) return { address: family === 'IPv4' ? this.nodeIp(e.hostNetworkOn) : this.nodeIp6(e.hostNetworkOn), node: e.hostNetworkOn };
    const pod = this.pod(e.pod);
    if (family === 'IPv4') return { address: pod.ip, node: pod.node };
    const ip6 = this.box.pods.get(e.pod)?.ip6;
    assert.ok(ip6, `pod ${e.pod} has no IPv6 address (an ipv6 box gives every pod one)`);
    return { address: ip6, node: pod.node };
  }

  /** The controller's label copy after a Service's labels changed. */
  private syncSliceLabels(svc: KubeObject): void {
    for (const s of this.box.api.list('EndpointSlice', NS)) {
      const name = String(svc.metadata?.name);
      if (s.metadata?.labels?.['kubernetes.io/service-name'] !== name) continue;
      this.box.api.apply({ ...s, metadata: { ...s.metadata, labels: { ...(svc.metadata?.labels ?? {}), 'kubernetes.io/service-name': name } } });
    }
  }

  pod(name: string): PodSpec {
    const p = this.pods.get(name);
    assert.ok(p, `pod ${name}`);
    return p;
  }

  /** The namespace a pod's processes run in. */
  podNs(name: string): string {
    const p = this.box.pods.get(name);
    assert.ok(p, `pod ${name}`);
    return p.ns;
  }

  /** A request (or `--count N` of them) from pod `from`, made by its long-lived client (its node's socket hooks apply, as to any pod). */
  async fromPod(from: string, mode: 'http' | 'udp' | 'once' | 'get', target: string, extra: string[] = []): Promise<ClientReport> {
    return (await this.batch({ pod: from }, [stepOf(mode, target, extra)]))[0];
  }

  /** The same from a hostNetwork pod on `node`: the node's namespace, below its cgroup. */
  async fromNode(node: NodeName, mode: 'http' | 'udp' | 'once' | 'get', target: string, extra: string[] = []): Promise<ClientReport> {
    return (await this.batch({ node }, [stepOf(mode, target, extra)]))[0];
  }

  /**
   * Runs `steps` in order in the long-lived client of `who` (sandbox/client.js serve, started on
   * first use in the pod's or node's namespace and below its node's cgroup); one report per step.
   */
  batch(who: Who, steps: BatchStep[]): Promise<ClientReport[]> {
    const key = 'pod' in who ? `pod/${who.pod}` : `node/${who.node}`;
    let cl = this.clients.get(key);
    if (!cl) {
      const ns = 'pod' in who ? this.podNs(who.pod) : this.box.nodes[who.node].ns;
      const node = 'pod' in who ? this.pod(who.pod).node : who.node;
      const child = this.box.spawnIn(ns, process.execPath, [path.join(repoRoot, 'dist', 'sandbox', 'client.js'), 'serve'], {
        cgroupOf: node,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const lines = createInterface({ input: child.stdout! });
      const waiting: Array<(line: string) => void> = [];
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      lines.on('line', (l) => waiting.shift()?.(l));
      child.once('exit', (code) => {
        for (const w of waiting.splice(0)) w(JSON.stringify({ exited: code, stderr }));
      });
      cl = {
        child,
        next: Promise.resolve(),
        send: (line: string) =>
          new Promise<string>((resolve) => {
            waiting.push(resolve);
            child.stdin!.write(line + '\n');
          }),
      };
      this.clients.set(key, cl);
    }
    const client = cl;
    const run = client.next.then(async () => {
      const out = JSON.parse(await client.send(JSON.stringify(steps))) as ClientReport & { exited?: number; stderr?: string };
      if (out.exited !== undefined) throw new Error(`client of ${key} exited ${out.exited}: ${out.stderr}`);
      return out.steps ?? [];
    });
    client.next = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /**
   * A hostNetwork server on `node`: sandbox/pod-server.js in the node's
   * namespace, answering with the node's name (as agnhost does with the
   * node's hostname); its HTTP port is `httpPort`, UDP and echo the two next.
   */
  async startHostServer(node: NodeName, httpPort: number): Promise<ChildProcess> {
    const child = this.box.sandbox.spawnIn(
      this.box.nodes[node].ns,
      process.execPath,
      [
        path.join(repoRoot, 'dist', 'sandbox', 'pod-server.js'),
        '--name',
        node,
        '--http-port',
        String(httpPort),
        '--udp-port',
        String(httpPort + 1),
        '--echo-port',
        String(httpPort + 2),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitForLine(child, 'ready', `hostNetwork server on ${node}`);
    return child;
  }

  /**
   * `rounds` rounds of one request per check, from `who`, `pauseMs` apart (upstream's
   * execHostnameTest loops): `want` a pod name (that pod answers) or null (the request fails).
   * Each request is its own connection with its own timeout; a round starts `pauseMs` after the
   * previous one started, not after its requests ended (`overlap`), so requests that must fail
   * wait out their timeouts together.
   */
  async expectRounds(who: Who, rounds: number, checks: Check[], pauseMs = 200): Promise<void> {
    const steps: BatchStep[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const ch of checks)
        steps.push({ mode: ch.udp ? 'udp' : 'once', target: ch.target, timeoutMs: ch.want === null ? FAIL_TIMEOUT_MS : 3000, overlap: true });
      if (r < rounds - 1) steps.push({ mode: 'sleep', ms: pauseMs });
    }
    const reports = (await this.batch(who, steps)).filter((_, i) => steps[i].mode !== 'sleep');
    reports.forEach((rep, i) => {
      const ch = checks[i % checks.length];
      const what = `${JSON.stringify(who)} → ${ch.target} (round ${Math.floor(i / checks.length) + 1})`;
      if (ch.want === null) assertNotServed(rep, what);
      else assert.deepEqual(rep.byPod, { [ch.want]: 1 }, `${what}: ${JSON.stringify(rep.errors)}`);
    });
  }

  /**
   * Netfilter conntrack in use in a node's namespace, as a CNI's rules put it on a real node (any ct
   * expression in a hook registers it; a sandbox node has no other rule): forwarded traffic is tracked.
   */
  trackConnections(node: NodeName): void {
    const ns = this.box.nodes[node].ns;
    inNs(ns, 'nft', 'add', 'table', 'inet', 'e2e_cni');
    inNs(ns, 'nft', 'add', 'chain', 'inet', 'e2e_cni', 'forward', '{ type filter hook forward priority 0; policy accept; }');
    inNs(ns, 'nft', 'add', 'rule', 'inet', 'e2e_cni', 'forward', 'ct', 'state', 'invalid', 'counter');
    inNs(ns, 'nft', 'add', 'rule', 'inet', 'e2e_cni', 'forward', 'ct', 'state', 'established,related', 'counter', 'accept');
  }

  /** Forwarded packets conntrack called INVALID on a node, since trackConnections (they pass: no rule drops them). */
  invalidPackets(node: NodeName): number {
    const chain = inNs(this.box.nodes[node].ns, 'nft', 'list', 'chain', 'inet', 'e2e_cni', 'forward');
    const m = /ct state invalid counter packets (\d+)/.exec(chain);
    assert.ok(m, chain);
    return Number(m[1]);
  }

  /** The node's InternalIP (its underlay address). */
  nodeIp(node: NodeName): string {
    return UNDERLAY[node];
  }

  /** The node's IPv6 InternalIP (ipv6 boxes). */
  nodeIp6(node: NodeName): string {
    assert.ok(this.box.ipv6, 'an ipv6 box');
    return UNDERLAY6[node];
  }

  /** A pod's IPv6 address (ipv6 boxes). */
  podIp6(name: string): string {
    const ip6 = this.box.pods.get(name)?.ip6;
    assert.ok(ip6, `pod ${name} has an IPv6 address`);
    return ip6;
  }
}

/**
 * DialFromContainer / DialFromNode: requests from `who` to `target` until every one of `pods`
 * answered (and only they); `tries` requests per round.
 */
export async function dialAll(c: ConformanceBox, who: Who, proto: 'http' | 'udp', target: string, pods: string[], timeoutMs = 15_000): Promise<void> {
  const seen = new Set<string>();
  await eventually(
    `${JSON.stringify(who)} → ${target} (${proto}) reaches ${pods.join(', ')}`,
    async () => {
      const [rep] = await c.batch(who, [{ mode: proto, target, count: 4 * pods.length, timeoutMs: FAIL_TIMEOUT_MS }]);
      for (const p of Object.keys(rep.byPod)) {
        assert.ok(pods.includes(p), `${target}: ${p} answered, not one of ${pods.join(', ')}`);
        seen.add(p);
      }
      return pods.every((p) => seen.has(p));
    },
    timeoutMs,
  );
}

/** The batch step of one request as the client's flags describe it (--count, --timeout-ms, --path, --message). */
function stepOf(mode: 'http' | 'udp' | 'once' | 'get', target: string, extra: string[]): BatchStep {
  const step: BatchStep = { mode, target };
  for (let i = 0; i < extra.length; i += 2) {
    const [flag, value] = [extra[i], extra[i + 1]];
    if (flag === '--count') step.count = Number(value);
    else if (flag === '--timeout-ms') step.timeoutMs = Number(value);
    else if (flag === '--path') step.path = value;
    else if (flag === '--message') step.message = value;
    else throw new Error(`client flag ${flag} is not a batch step field`);
  }
  return step;
}

/** "ip:port", with IPv6 addresses in brackets. */
export function hostPortOf(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** Service fields the suites read back. */
export function clusterIP(svc: KubeObject): string {
  return svc.spec.clusterIP as string;
}

export function nodePortOf(svc: KubeObject, i = 0): number {
  const np = svc.spec.ports[i].nodePort as number;
  assert.ok(np > 0, `${svc.metadata?.name} port ${i} has a node port`);
  return np;
}

/** Every request served, by one of `pods` only (and by each of them when `all`). */
export function assertServedBy(rep: ClientReport, pods: string[], what: string, all = false): void {
  assert.equal(rep.failed, 0, `${what}: ${JSON.stringify(rep.errors)}`);
  assert.ok(rep.ok > 0, what);
  for (const p of Object.keys(rep.byPod)) assert.ok(pods.includes(p), `${what}: served by ${p}, expected ${pods.join('|')}: ${JSON.stringify(rep.byPod)}`);
  if (all) for (const p of pods) assert.ok(rep.byPod[p], `${what}: ${p} never answered: ${JSON.stringify(rep.byPod)}`);
}

/** No request served (refused, reset or timed out: what curl reports as an error). */
export function assertNotServed(rep: ClientReport, what: string): void {
  assert.equal(rep.ok, 0, `${what} was served: ${JSON.stringify(rep.byPod)}`);
  assert.ok(rep.failed > 0, what);
}
