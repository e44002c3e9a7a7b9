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
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { tcxSupported } from '../native/index.js';
import { inNs, nsPath, Sandbox } from '../sandbox/netns.js';
import { cliBin } from '../sandbox/repo.js';
import { startAgent, startApi, type Agent, type BenchApiServer } from './control-plane.js';
import { connloadIn, monitorNote, withMonitorRound, type ConnResult } from './data-plane.js';
import { IPTABLES_RESTORE, natRuleCount, restoreIn } from './iptables.js';
import { fullRestoreChunks } from './kube-proxy-rules.js';
import { fullTransactionChunks } from './kube-proxy-nft.js';
import { benchMapSizeArgs, needsOf } from './map-sizing.js';
import { listChainsIn, NFT, nftIn } from './nftables.js';
import { loadFailure, NotFinishedError } from './ruleset-load.js';
import {
  createNodePortStack,
  NP_ECHO_PORT,
  NP_NODE_IP,
  NP_POD_IF,
  NP_POD_IP,
  NP_UPLINK,
  type NodePortStack,
} from './nodeport-topology.js';
import { BENCH_NAMESPACE, ECHO_CLUSTER_IP, serviceCIDRs, SERVICE_PORT } from './scenario.js';
import { makeNodePortScenario, nodePortNodeObject, nodePortObjects, NP_ECHO_SERVICE } from './nodeport-scenario.js';

/**
 * kpr-nocounters: the kpr node with its per-Service counters off (counter-switch.ts), in the same rounds;
 * kpr-monitor: with kpr monitor on and a reader draining (monitor-reader.ts).
 */
export type NodePortArm = 'kpr' | 'kpr-nocounters' | 'kpr-monitor' | 'kpr-tc' | 'iptables' | 'nftables' | 'direct' | 'direct-via-kpr-node' | 'direct-via-iptables-node' | 'direct-via-nftables-node';

/** The agents of the kpr arms: the default tc attach mode, and the classic one forced beside it (when the default is tcx). */
type KprArm = 'kpr' | 'kpr-tc';

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
  tcp: Partial<Record<'kpr' | 'kpr-tc' | 'iptables' | 'nftables' | 'direct', TcpCounters>>;
  errors: string[];
}

export interface TcpCounters {
  clientSynRetrans: number;
  podPawsTimewait: number;
  podTimeWait: number;
}

/** TcpExt counters of a namespace (/proc/net is the reader's network namespace). */
function tcpExt(ns: string): Record<string, number> {
  const lines = inNs(ns, 'cat', '/proc/net/netstat').split('\n').filter((l) => l.startsWith('TcpExt:'));
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

function kprCli(args: string[]): string {
  return execFileSync(cliBin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000, maxBuffer: 1 << 28 });
}

function kprStats(bpffs: string): unknown {
  try {
    return JSON.parse(kprCli(['stats', '--bpffs', bpffs, '-o', 'json']));
  } catch (err) {
    return `kpr stats failed: ${(err as Error).message.split('\n')[0]}`;
  }
}

// The agent's cgroup is a child of the run's; it must go before the run's can.
const childCgroups = new Set<string>();
let exitHook = false;

function removeCgroupDir(cg: string): void {
  for (let i = 0; i < 40 && existsSync(cg); i++) {
    try {
      rmdirSync(cg);
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}

function childCgroup(sandbox: Sandbox, name: string): string {
  const cg = path.join(sandbox.cgroupPath, name);
  mkdirSync(cg);
  childCgroups.add(cg);
  if (!exitHook) {
    exitHook = true;
    // Interrupted runs: the sandbox's own hook could not remove the run cgroup while this child existed.
    process.on('exit', () => {
      for (const c of childCgroups) {
        removeCgroupDir(c);
        removeCgroupDir(path.dirname(c));
      }
    });
  }
  return cg;
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
  let api: BenchApiServer | undefined;
  let agent: Agent | undefined;
  const agents: Agent[] = [];
  const agentCgs: string[] = [];
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

    // The kpr arms: the default attach mode, and (when that is tcx) --tc-attach tc beside it.
    const kprArms: Array<{ arm: KprArm; role: string; bpffs: string; args: string[] }> = [];
    const sizeArgs = benchMapSizeArgs(needsOf(services));
    if (cfg.withKpr) {
      kprArms.push({ arm: 'kpr', role: 'npk', bpffs: sandbox.bpffsDir, args: sizeArgs });
      if ((cfg.withKprTc ?? true) && tcxSupported()) kprArms.push({ arm: 'kpr-tc', role: 'npc', bpffs: path.join(sandbox.bpffsDir, 'tc-agent'), args: ['--tc-attach', 'tc', ...sizeArgs] });
      else if (cfg.withKprTc ?? true) log('nodeport: this kernel has no tcx, so the default agent already attaches with a clsact filter: no separate --tc-attach tc arm');
    }
    for (const k of kprArms) {
      const stack = await createNodePortStack(sandbox, k.role);
      try {
        const cg = childCgroup(sandbox, `${k.role}-agent`);
        agentCgs.push(cg);
        if (!api) {
          log(`nodeport: loading ${services.length} Services into the API server`);
          api = await startApi(services, nodePortNodeObject(), nodePortObjects);
        }
        mkdirSync(k.bpffs, { recursive: true });
        const started = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs, {
          cgroupPath: cg,
          bpffsDir: k.bpffs,
          extraArgs: ['--netns', nsPath(stack.nodeNs), '--external-interfaces', NP_UPLINK, '--pod-interfaces', NP_POD_IF, ...k.args],
        });
        const a = started.agent;
        agents.push(a);
        if (k.arm === 'kpr') agent = a;
        for (const ifname of [NP_UPLINK, NP_POD_IF]) {
          await a.waitLog((r) => r.msg === 'tc program attached' && r.interface === ifname, 20_000, `waiting for tc on ${ifname}`);
        }
        await a.waitLog((r) => r.msg === 'node datapath settings' && r.snatV4 === NP_NODE_IP, 20_000, `waiting for the SNAT address ${NP_NODE_IP}`);
        const stray = a.records.filter((r) => r.msg === 'tc program attached' && r.interface !== NP_UPLINK && r.interface !== NP_POD_IF);
        if (stray.length) throw new Error(`the agent attached to interfaces it was not given: ${JSON.stringify(stray)}`);
        const tcAttachMode = a.records.find((r) => r.msg === 'tc attach mode')?.mode as string | undefined;
        if (k.arm === 'kpr-tc' && tcAttachMode !== 'tc') throw new Error(`the --tc-attach tc agent attached in ${tcAttachMode} mode`);
        log(`nodeport: ${k.arm} agent synced (${started.initial.cacheSyncedToMapsWrittenMs} ms), tc attached to ${NP_UPLINK} and ${NP_POD_IF} (${tcAttachMode} mode)`);
        // The frontends on the echo service's addresses (not `service get`): an unprogrammed one is "no frontend", not a CLI error.
        const on = (frontend: string) => JSON.parse(kprCli(['service', 'list', '--bpffs', k.bpffs, '-o', 'json', '--frontend', frontend])) as Array<Record<string, any>>;
        const views = [...on(`${ECHO_CLUSTER_IP}:${SERVICE_PORT}`), ...on(`${NP_NODE_IP}:${nodePort}`)];
        if (k.arm === 'kpr') res.kpr = { tcAttachMode, initialSyncMs: started.initial.cacheSyncedToMapsWrittenMs, frontends: views };
        else res.kprTc = { tcAttachMode, initialSyncMs: started.initial.cacheSyncedToMapsWrittenMs };
        const ours = views.find((v) => v.address === NP_NODE_IP && v.port === nodePort);
        if (ours && ours.type !== 'NodePort' && !ours.flags?.includes('node-port')) {
          throw new Error(`kpr's frontend ${NP_NODE_IP}:${nodePort} is not a NodePort frontend: ${JSON.stringify(ours)}`);
        }
        if (ours && ours.service !== `${BENCH_NAMESPACE}/${NP_ECHO_SERVICE}`) {
          log(`nodeport: note: \`kpr service list\` shows the NodePort frontend without its service name/type (kpr_svc_meta): ${JSON.stringify({ service: ours.service, type: ours.type, flags: ours.flags })}`);
        }
        if (!ours) {
          throw new Error(
            `kpr programmed no NodePort frontend ${NP_NODE_IP}:${nodePort} for ${BENCH_NAMESPACE}/${NP_ECHO_SERVICE}; ` +
              `its frontends: ${JSON.stringify(views.map((v) => `${v.type} ${v.address}:${v.port} ${v.scope}`))}; ` +
              `initial sync: ${JSON.stringify(started.initial.record)}; ` +
              `agent warnings: ${JSON.stringify(a.records.filter((r) => r.level === 'warn' || r.level === 'error').slice(0, 5))}`,
          );
        }
        if (!ours.backends?.some((b: any) => b.address === NP_POD_IP && b.port === NP_ECHO_PORT)) {
          throw new Error(`kpr's NodePort frontend has not the pod as its backend: ${JSON.stringify(ours)}`);
        }
        targets.set(k.arm, { stack, ip: NP_NODE_IP, port: nodePort });
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
        const extra = arm === 'kpr' ? `; kpr stats: ${JSON.stringify(kprStats(sandbox.bpffsDir))}; agent log tail:\n${agent?.lastLines(10)}` : arm === 'kpr-tc' ? `; agent log tail:\n${agents.at(-1)?.lastLines(10)}` : '';
        const msg = `nodeport ${arm} at ${cfg.services} services: ${(err as Error).message}${extra}`;
        log(`ERROR ${msg}`);
        res.errors.push(msg);
        targets.delete(arm);
      }
    }

    if (targets.has('kpr')) targets.set('kpr-nocounters', targets.get('kpr')!);
    if (targets.has('kpr')) targets.set('kpr-monitor', targets.get('kpr')!);
    const counters = counterSwitch(sandbox.bpffsDir);
    const order: NodePortArm[] = ['kpr', 'kpr-nocounters', 'kpr-monitor', 'kpr-tc', 'iptables', 'nftables', 'direct', 'direct-via-kpr-node', 'direct-via-iptables-node', 'direct-via-nftables-node'];
    const arms = order.filter((a) => targets.has(a));
    const stacks = new Map<'kpr' | 'kpr-tc' | 'iptables' | 'nftables' | 'direct', NodePortStack>();
    for (const k of ['kpr', 'kpr-tc', 'iptables', 'nftables', 'direct'] as const) if (targets.has(k)) stacks.set(k, targets.get(k)!.stack);
    const before = new Map([...stacks].map(([k, st]) => [k, tcpCounters(st)]));
    for (const a of arms) res.rounds[a] = [];
    log(`nodeport at ${cfg.services} services (node port ${nodePort}): ${cfg.rounds} rounds × ${cfg.conns} connections per arm: ${arms.join(', ')}`);
    for (let r = 0; r < cfg.rounds; r++) {
      for (const arm of r % 2 === 0 ? arms : [...arms].reverse()) {
        const t = targets.get(arm)!;
        const measure = () => connloadIn(sandbox, t.stack.clientNs, t.ip, t.port, cfg.conns, cfg.limitMs, false);
        const one =
          arm === 'kpr-nocounters' ? await withCountersOff(counters, measure, log) : arm === 'kpr-monitor' ? await withMonitorRound(sandbox.bpffsDir, measure) : await measure();
        res.rounds[arm]!.push(one);
        log(
          `  round ${r + 1}/${cfg.rounds} ${arm.padEnd(24)} ${one.count} ok ${one.errors} err  p50 ${one.p50_us} us  p99 ${one.p99_us} us  ${one.conns_per_sec}/s${monitorNote(one)}${one.first_error ? `  (${one.first_error})` : ''}`,
        );
      }
    }
    for (const [k, st] of stacks) {
      const a = tcpCounters(st);
      const b = before.get(k)!;
      res.tcp[k] = { clientSynRetrans: a.clientSynRetrans - b.clientSynRetrans, podPawsTimewait: a.podPawsTimewait - b.podPawsTimewait, podTimeWait: a.podTimeWait - b.podTimeWait };
    }
    log(`nodeport: TCP counters over the rounds: ${JSON.stringify(res.tcp)}`);
    if (res.kpr) res.kpr.stats = kprStats(sandbox.bpffsDir);
    if (res.kprTc) res.kprTc.stats = kprStats(path.join(sandbox.bpffsDir, 'tc-agent'));
    return res;
  } finally {
    for (const a of agents) await a.stop().catch(() => {});
    await api?.close().catch(() => {});
    for (const cg of agentCgs) {
      removeCgroupDir(cg);
      if (!existsSync(cg)) childCgroups.delete(cg);
    }
    await sandbox.teardown();
  }
}
