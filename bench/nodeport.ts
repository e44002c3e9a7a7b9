/**
 * The NodePort data-plane benchmark (issue 3): request rate and latency from
 * an external client namespace to a backend pod through
 *  - kpr: NodeIP:nodePort, DNATed and SNATed per packet by kpr's tc programs
 *    (the real agent, bound to the node namespace with --netns);
 *  - kube-proxy: NodeIP:nodePort through kube-proxy's nat-table rules for the
 *    same services (bench/kube-proxy-rules.ts: KUBE-SERVICES → KUBE-NODEPORTS
 *    → KUBE-EXT → KUBE-SVC → KUBE-SEP, masquerade in KUBE-POSTROUTING),
 *    loaded with iptables-restore into that stack's node namespace;
 *  - nftables: the same through kube-proxy's nftables mode
 *    (bench/kube-proxy-nft.ts: nat-prerouting → services → the
 *    service-nodeports vmap → external-… → service-… → endpoint-…,
 *    masquerading in nat-postrouting), loaded with `nft -f` into its own
 *    stack's node namespace, the node IP in its nodeport-ips set;
 *  - kpr-tc: the same as kpr with the agent forced to `--tc-attach tc` (a
 *    clsact qdisc with a cls_bpf filter, the mode of kernels before 6.6)
 *    beside the default (tcx links where the kernel has them), on a stack of
 *    its own, so the two attach modes are measured side by side;
 *  - kpr-one (at N > 1): the default agent again, on a stack of its own,
 *    served by a second API server that holds only the echo Service (the
 *    1-Service scenario): kpr at N and kpr at 1 Service in the same rounds,
 *    so their ratio (issue 20's NodePort target) does not carry the
 *    machine's swings between two phases run minutes apart;
 *  - direct: the pod IP, routed through a node with neither.
 * Each path has its own identical client–node–pod stack
 * (bench/nodeport-topology.ts), so kpr's tc programs never see the iptables
 * or direct traffic and the iptables rules never see kpr's. References
 * measure the pod IP directly through the kpr node, the iptables node and the
 * nftables node (what a node's datapath costs traffic that is not a service's).
 *
 * The workload: `services` Services with `endpoints` fake endpoints each, the
 * first MAX_NODE_PORTS of them NodePort Services (externalTrafficPolicy=Cluster)
 * and any further ones ClusterIP only, and the echo Service, whose only
 * endpoint is the real pod, placed in the middle of the NodePort ones
 * (kube-proxy walks its KUBE-NODEPORTS chain in order; every NodePort
 * connection walks all of KUBE-SERVICES' cluster-IP rules first regardless).
 * Node ports are 20000 + the service's index. The agents get the map sizes
 * the workload needs (bench/map-sizing.ts); each kube-proxy load is bounded
 * (`loadTimeoutMs`), one that runs out is reported and its arm left out.
 */
import { counterSwitch, withCountersOff } from './counter-switch.js';
import path from 'node:path';
import { tcxSupported } from '../native/index.js';
import { inNs, Sandbox } from '../sandbox/netns.js';
import { startApi, type BenchApiServer } from './control-plane.js';
import { connloadIn, monitorNote, withMonitorRound, type ConnResult } from './data-plane.js';
import { IPTABLES_RESTORE, natRuleCount, restoreIn } from './iptables.js';
import { fullRestoreChunks, type KpService } from './kube-proxy-rules.js';
import { fullTransactionChunks } from './kube-proxy-nft.js';
import { benchMapSizeArgs, needsOf } from './map-sizing.js';
import { listChainsIn, NFT, nftIn } from './nftables.js';
import { loadFailure, NotFinishedError } from './ruleset-load.js';
import { KprNodes, kprStats, type KprNode } from './nodeport-kpr.js';
import { createNodePortStack, NP_ECHO_PORT, NP_NODE_IP, NP_POD_IP, type NodePortStack } from './nodeport-topology.js';
import { serviceCIDRs } from './scenario.js';
import { makeNodePortScenario, nodePortNodeObject, nodePortObjects } from './nodeport-scenario.js';

/**
 * kpr-nocounters: the kpr node with its per-Service counters off (counter-switch.ts), in the same rounds;
 * kpr-monitor: with kpr monitor on and a reader draining (monitor-reader.ts).
 */
export type NodePortArm =
  | 'kpr'
  | 'kpr-one'
  | 'kpr-nocounters'
  | 'kpr-monitor'
  | 'kpr-tc'
  | 'iptables'
  | 'nftables'
  | 'direct'
  | 'direct-via-kpr-node'
  | 'direct-via-iptables-node'
  | 'direct-via-nftables-node';

/** The agents of the kpr arms: the default tc attach mode, the same at 1 Service, and the classic mode forced beside it (when the default is tcx). */
type KprArm = 'kpr' | 'kpr-one' | 'kpr-tc';

/** The stacks whose TCP counters are read over the rounds. */
type CountedStack = 'kpr' | 'kpr-one' | 'kpr-tc' | 'iptables' | 'nftables' | 'direct';

export interface NodePortConfig {
  services: number;
  endpoints: number;
  rounds: number;
  conns: number;
  limitMs: number;
  agentTimeoutMs: number;
  /** Bound on each kube-proxy ruleset load (iptables-restore, nft -f). */
  loadTimeoutMs: number;
  logLevel: string;
  withKpr: boolean;
  withIptables: boolean;
  /** The kube-proxy nftables-mode arm. Default: false. */
  withNftables?: boolean;
  /** Also measure the agent with --tc-attach tc (arm kpr-tc) beside the default. Default: true. */
  withKprTc?: boolean;
  /** At services > 1, also measure an agent served only the echo Service (arm kpr-one) in the same rounds. Default: true. */
  withKprOne?: boolean;
}

export interface NodePortPhase {
  services: number;
  nodePort: number;
  rounds: Partial<Record<NodePortArm, ConnResult[]>>;
  kpr?: {
    /** How the agent attached its tc programs (its 'tc attach mode' log line): tcx or tc. */
    tcAttachMode?: string;
    /** The agent's cacheSyncedToMapsWrittenMs. */
    initialSyncMs: number;
    /** `kpr service list` entries for the echo service's NodePort. */
    frontends: unknown[];
    /** `kpr stats` after the rounds. */
    stats?: unknown;
  };
  /** The same for the agent forced to --tc-attach tc (arm kpr-tc). */
  kprTc?: { tcAttachMode?: string; initialSyncMs: number; stats?: unknown };
  /** The same for the agent served the 1-Service scenario (arm kpr-one), and its echo Service's node port. */
  kprOne?: { tcAttachMode?: string; initialSyncMs: number; nodePort: number; stats?: unknown };
  iptables?: { loadMs: number; natRules: number; binary: string };
  nftables?: { loadMs: number; chains: number; binary: string };
  /** A kube-proxy load that ran out of loadTimeoutMs (or failed): "not finished within N s". */
  notFinished?: Partial<Record<'iptables' | 'nftables', string>>;
  /**
   * TCP counters of each stack over the measured rounds (its NodePort arm and
   * its direct reference together): the client's SYN retransmissions and the
   * pod's SYNs rejected by PAWS on a TIME_WAIT socket (a new connection whose
   * 4-tuple, as the pod sees it, is still in TIME_WAIT there), which explain
   * tail latency.
   */
  tcp: Partial<Record<CountedStack, TcpCounters>>;
  errors: string[];
}

export interface TcpCounters {
  clientSynRetrans: number;
  podPawsTimewait: number;
  podTimeWait: number;
}

/** TcpExt counters of a namespace (/proc/net is the reader's network namespace). */
function tcpExt(ns: string): Record<string, number> {
  const lines = inNs(ns, 'cat', '/proc/net/netstat')
    .split('\n')
    .filter((l) => l.startsWith('TcpExt:'));
  if (lines.length < 2) return {};
  const keys = lines[0].split(/\s+/).slice(1);
  const vals = lines[1].split(/\s+/).slice(1).map(Number);
  return Object.fromEntries(keys.map((k, i) => [k, vals[i]]));
}

function tcpCounters(stack: NodePortStack): TcpCounters {
  const c = tcpExt(stack.clientNs);
  const p = tcpExt(stack.podNs);
  return { clientSynRetrans: c.TCPSynRetrans ?? NaN, podPawsTimewait: p.PAWSTimewait ?? NaN, podTimeWait: p.TW ?? NaN };
}

/** Waits until `count` sequential connections all succeed, or throws with the last result. */
async function waitReachable(sandbox: Sandbox, ns: string, ip: string, port: number, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: ConnResult | undefined;
  while (Date.now() < end) {
    last = await connloadIn(sandbox, ns, ip, port, 20, 3000, false, 0);
    if (last.errors === 0 && last.count === 20) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what}: ${ip}:${port} not reachable from the client after ${timeoutMs} ms: ${JSON.stringify(last)}`);
}

/** One phase: build the stacks, program both sides with `cfg.services` services, alternate the arms. */
export async function nodePortPhase(cfg: NodePortConfig, log: (m: string) => void): Promise<NodePortPhase> {
  const { services, echo } = makeNodePortScenario(cfg.services, cfg.endpoints);
  const nodePort = echo.nodePort!;
  const res: NodePortPhase = { services: cfg.services, nodePort, rounds: {}, tcp: {}, errors: [] };
  const sandbox = new Sandbox();
  const apis: BenchApiServer[] = [];
  const kprNodes = new KprNodes(sandbox, cfg.logLevel, cfg.agentTimeoutMs, log);
  try {
    const plain = await createNodePortStack(sandbox, 'np');
    const targets = new Map<NodePortArm, { stack: NodePortStack; ip: string; port: number }>();
    targets.set('direct', { stack: plain, ip: NP_POD_IP, port: NP_ECHO_PORT });

    // kube-proxy's two modes, each on a node of its own, each load bounded.
    const kubeProxy: Array<{ mode: 'iptables' | 'nftables'; role: string; tool: string; load: (ns: string) => Promise<string> }> = [];
    if (cfg.withIptables) {
      kubeProxy.push({
        mode: 'iptables',
        role: 'npi',
        tool: IPTABLES_RESTORE,
        load: async (ns) => {
          // In chunks: a 100,000-Service ruleset nears the longest JS string.
          const loadMs = await restoreIn(ns, [...fullRestoreChunks(services)], [], IPTABLES_RESTORE, cfg.loadTimeoutMs);
          res.iptables = { loadMs: Math.round(loadMs), natRules: natRuleCount(ns), binary: IPTABLES_RESTORE };
          return `${loadMs.toFixed(0)} ms (${res.iptables.natRules} nat rules)`;
        },
      });
    }
    if (cfg.withNftables) {
      kubeProxy.push({
        mode: 'nftables',
        role: 'npn',
        tool: `${NFT} -f`,
        load: async (ns) => {
          const chunks = [...fullTransactionChunks(services, { nodeIPs: [NP_NODE_IP], serviceCIDRs: serviceCIDRs(services.length) })];
          const loadMs = await nftIn(ns, chunks, [], cfg.loadTimeoutMs);
          res.nftables = { loadMs: Math.round(loadMs), chains: (await listChainsIn(ns)).chains, binary: NFT };
          return `${loadMs.toFixed(0)} ms (${res.nftables.chains} chains)`;
        },
      });
    }
    for (const k of kubeProxy) {
      const stack = await createNodePortStack(sandbox, k.role);
      log(`nodeport: ${k.tool} of ${services.length} services into ${stack.nodeNs} (bounded at ${cfg.loadTimeoutMs / 1000} s)`);
      try {
        log(`nodeport: ${k.mode} loaded in ${await k.load(stack.nodeNs)}`);
        targets.set(k.mode, { stack, ip: NP_NODE_IP, port: nodePort });
        targets.set(`direct-via-${k.mode}-node`, { stack, ip: NP_POD_IP, port: NP_ECHO_PORT });
      } catch (err) {
        // Running out of the bound is a figure (notFinished), any other failure an error.
        (res.notFinished ??= {})[k.mode] = loadFailure(err);
        const msg = `nodeport ${k.mode} at ${cfg.services} services: ${res.notFinished[k.mode]}`;
        if (err instanceof NotFinishedError) log(`nodeport: ${k.mode}: ${res.notFinished[k.mode]}`);
        else {
          log(`ERROR ${msg}`);
          res.errors.push(msg);
        }
      }
    }

    // The kpr arms: the default attach mode, the same at 1 Service (at N > 1), and (when the default is tcx) --tc-attach tc beside it.
    const kprArms: Array<{ arm: KprArm; role: string; bpffs: string; args: string[]; scenario: KpService[]; nodePort: number }> = [];
    const sizeArgs = benchMapSizeArgs(needsOf(services));
    if (cfg.withKpr) {
      kprArms.push({ arm: 'kpr', role: 'npk', bpffs: sandbox.bpffsDir, args: sizeArgs, scenario: services, nodePort });
      if (cfg.services > 1 && (cfg.withKprOne ?? true)) {
        // The echo Service alone (its own node port), map sizes for it as the agent of the phase at 1 Service has.
        const single = makeNodePortScenario(1, cfg.endpoints);
        const args = benchMapSizeArgs(needsOf(single.services));
        kprArms.push({
          arm: 'kpr-one',
          role: 'npo',
          bpffs: path.join(sandbox.bpffsDir, 'one-agent'),
          args,
          scenario: single.services,
          nodePort: single.echo.nodePort!,
        });
      }
      if ((cfg.withKprTc ?? true) && tcxSupported()) {
        kprArms.push({
          arm: 'kpr-tc',
          role: 'npc',
          bpffs: path.join(sandbox.bpffsDir, 'tc-agent'),
          args: ['--tc-attach', 'tc', ...sizeArgs],
          scenario: services,
          nodePort,
        });
      } else if (cfg.withKprTc ?? true)
        log('nodeport: this kernel has no tcx, so the default agent already attaches with a clsact filter: no separate --tc-attach tc arm');
    }
    const kprNode = new Map<KprArm, KprNode>();
    const apiOf = new Map<KpService[], BenchApiServer>();
    for (const k of kprArms) {
      const stack = await createNodePortStack(sandbox, k.role);
      try {
        let api = apiOf.get(k.scenario);
        if (!api) {
          log(`nodeport: loading ${k.scenario.length} Service(s) into ${apis.length ? 'a second' : 'the'} API server`);
          api = await startApi(k.scenario, nodePortNodeObject(), nodePortObjects);
          apis.push(api);
          apiOf.set(k.scenario, api);
        }
        // kpr-one must attach as kpr does: only the Service count may differ between them.
        const expectMode = k.arm === 'kpr-tc' ? 'tc' : k.arm === 'kpr-one' ? kprNode.get('kpr')?.tcAttachMode : undefined;
        const node = await kprNodes.start({ ...k, stack, api, expectMode });
        kprNode.set(k.arm, node);
        const info = { tcAttachMode: node.tcAttachMode, initialSyncMs: node.initialSyncMs };
        if (k.arm === 'kpr') res.kpr = { ...info, frontends: node.frontends };
        else if (k.arm === 'kpr-one') res.kprOne = { ...info, nodePort: k.nodePort };
        else res.kprTc = info;
        targets.set(k.arm, { stack, ip: NP_NODE_IP, port: k.nodePort });
        if (k.arm === 'kpr') targets.set('direct-via-kpr-node', { stack, ip: NP_POD_IP, port: NP_ECHO_PORT });
      } catch (err) {
        const msg = `nodeport ${k.arm} at ${cfg.services} services: ${(err as Error).message}`;
        log(`ERROR ${msg}`);
        res.errors.push(msg);
      }
    }

    // Every path must answer before anything is measured; a failing one is reported and left out.
    for (const [arm, t] of [...targets]) {
      try {
        await waitReachable(sandbox, t.stack.clientNs, t.ip, t.port, arm);
      } catch (err) {
        const node = kprNode.get(arm as KprArm);
        const extra = node ? `; kpr stats: ${JSON.stringify(kprStats(node.bpffs))}; agent log tail:\n${node.agent.lastLines(10)}` : '';
        const msg = `nodeport ${arm} at ${cfg.services} services: ${(err as Error).message}${extra}`;
        log(`ERROR ${msg}`);
        res.errors.push(msg);
        targets.delete(arm);
      }
    }

    if (targets.has('kpr')) targets.set('kpr-nocounters', targets.get('kpr')!);
    if (targets.has('kpr')) targets.set('kpr-monitor', targets.get('kpr')!);
    const counters = counterSwitch(sandbox.bpffsDir);
    // kpr-one next to kpr: the two runs of the target's ratio are adjacent in every round.
    const order: NodePortArm[] = [
      'kpr',
      'kpr-one',
      'kpr-nocounters',
      'kpr-monitor',
      'kpr-tc',
      'iptables',
      'nftables',
      'direct',
      'direct-via-kpr-node',
      'direct-via-iptables-node',
      'direct-via-nftables-node',
    ];
    const arms = order.filter((a) => targets.has(a));
    const stacks = new Map<CountedStack, NodePortStack>();
    for (const k of ['kpr', 'kpr-one', 'kpr-tc', 'iptables', 'nftables', 'direct'] as const) if (targets.has(k)) stacks.set(k, targets.get(k)!.stack);
    const before = new Map([...stacks].map(([k, st]) => [k, tcpCounters(st)]));
    for (const a of arms) res.rounds[a] = [];
    log(`nodeport at ${cfg.services} services (node port ${nodePort}): ${cfg.rounds} rounds × ${cfg.conns} connections per arm: ${arms.join(', ')}`);
    for (let r = 0; r < cfg.rounds; r++) {
      for (const arm of r % 2 === 0 ? arms : [...arms].reverse()) {
        const t = targets.get(arm)!;
        const measure = () => connloadIn(sandbox, t.stack.clientNs, t.ip, t.port, cfg.conns, cfg.limitMs, false);
        const one =
          arm === 'kpr-nocounters'
            ? await withCountersOff(counters, measure, log)
            : arm === 'kpr-monitor'
              ? await withMonitorRound(sandbox.bpffsDir, measure)
              : await measure();
        res.rounds[arm]!.push(one);
        log(
          `  round ${r + 1}/${cfg.rounds} ${arm.padEnd(24)} ${one.count} ok ${one.errors} err  p50 ${one.p50_us} us  p99 ${one.p99_us} us  ${one.conns_per_sec}/s${monitorNote(one)}${one.first_error ? `  (${one.first_error})` : ''}`,
        );
      }
    }
    for (const [k, st] of stacks) {
      const a = tcpCounters(st);
      const b = before.get(k)!;
      res.tcp[k] = {
        clientSynRetrans: a.clientSynRetrans - b.clientSynRetrans,
        podPawsTimewait: a.podPawsTimewait - b.podPawsTimewait,
        podTimeWait: a.podTimeWait - b.podTimeWait,
      };
    }
    log(`nodeport: TCP counters over the rounds: ${JSON.stringify(res.tcp)}`);
    for (const [arm, info] of [
      ['kpr', res.kpr],
      ['kpr-one', res.kprOne],
      ['kpr-tc', res.kprTc],
    ] as const) {
      const node = kprNode.get(arm);
      if (info && node) info.stats = kprStats(node.bpffs);
    }
    return res;
  } finally {
    await kprNodes.stopAll();
    for (const api of apis) await api.close().catch(() => {});
    await sandbox.teardown();
  }
}
