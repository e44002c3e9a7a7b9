/**
 * The kpr agents of the NodePort benchmark (bench/nodeport.ts): each arm's
 * agent runs in a child cgroup of the run's and its own bpffs directory,
 * bound to its stack's node namespace with --netns, and is verified before
 * anything is measured: its tc programs attached to exactly the uplink and
 * the pod port, the node address seen as its SNAT source, and the echo
 * Service's NodePort frontend programmed with the pod as its backend.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { nsPath, type Sandbox } from '../sandbox/netns.js';
import { childCgroup, removeCgroupDir } from './agent-cgroup.js';
import { cliBin } from '../sandbox/repo.js';
import { startAgent, type Agent, type BenchApiServer } from './control-plane.js';
import { NP_ECHO_PORT, NP_NODE_IP, NP_POD_IF, NP_POD_IP, NP_UPLINK, type NodePortStack } from './nodeport-topology.js';
import { NP_ECHO_SERVICE } from './nodeport-scenario.js';
import { BENCH_NAMESPACE, ECHO_CLUSTER_IP, SERVICE_PORT } from './scenario.js';

export function kprCli(args: string[]): string {
  return execFileSync(cliBin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000, maxBuffer: 1 << 28 });
}

export function kprStats(bpffs: string): unknown {
  try {
    return JSON.parse(kprCli(['stats', '--bpffs', bpffs, '-o', 'json']));
  } catch (err) {
    return `kpr stats failed: ${(err as Error).message.split('\n')[0]}`;
  }
}

export interface KprNodeSpec {
  /** The arm's name, in errors and the log. */
  arm: string;
  /** Names the agent's cgroup. */
  role: string;
  stack: NodePortStack;
  api: BenchApiServer;
  bpffs: string;
  /** Agent flags beyond the node's (--netns, the interfaces): map sizes, --tc-attach. */
  args: string[];
  /** The echo Service's node port in the scenario this agent is served. */
  nodePort: number;
  /** The attach mode the agent must report (its 'tc attach mode' log line), if any. */
  expectMode?: string;
}

export interface KprNode {
  agent: Agent;
  bpffs: string;
  /** How the agent attached its tc programs: tcx or tc. */
  tcAttachMode?: string;
  /** The agent's cacheSyncedToMapsWrittenMs. */
  initialSyncMs: number;
  /** `kpr service list` entries on the echo Service's ClusterIP and NodePort addresses. */
  frontends: Array<Record<string, any>>;
}

/** The agents of one phase: started and verified one by one, all stopped (and their cgroups removed) by stopAll(). */
export class KprNodes {
  private readonly agents: Agent[] = [];
  private readonly cgroups: string[] = [];

  constructor(
    private readonly sandbox: Sandbox,
    private readonly logLevel: string,
    private readonly timeoutMs: number,
    private readonly log: (m: string) => void,
  ) {}

  /** Starts the agent of one arm and checks it serves the echo NodePort on its node; throws with what it saw if not. */
  async start(k: KprNodeSpec): Promise<KprNode> {
    const cg = childCgroup(this.sandbox, `${k.role}-agent`);
    this.cgroups.push(cg);
    mkdirSync(k.bpffs, { recursive: true });
    const started = await startAgent(this.sandbox, k.api, this.logLevel, this.timeoutMs, {
      cgroupPath: cg,
      bpffsDir: k.bpffs,
      extraArgs: ['--netns', nsPath(k.stack.nodeNs), '--external-interfaces', NP_UPLINK, '--pod-interfaces', NP_POD_IF, ...k.args],
    });
    const a = started.agent;
    this.agents.push(a);
    for (const ifname of [NP_UPLINK, NP_POD_IF]) {
      await a.waitLog((r) => r.msg === 'tc program attached' && r.interface === ifname, 20_000, `waiting for tc on ${ifname}`);
    }
    await a.waitLog((r) => r.msg === 'node datapath settings' && r.snatV4 === NP_NODE_IP, 20_000, `waiting for the SNAT address ${NP_NODE_IP}`);
    const stray = a.records.filter((r) => r.msg === 'tc program attached' && r.interface !== NP_UPLINK && r.interface !== NP_POD_IF);
    if (stray.length) throw new Error(`the agent attached to interfaces it was not given: ${JSON.stringify(stray)}`);
    const tcAttachMode = a.records.find((r) => r.msg === 'tc attach mode')?.mode as string | undefined;
    if (k.expectMode !== undefined && tcAttachMode !== k.expectMode) throw new Error(`the agent attached in ${tcAttachMode} mode, not ${k.expectMode}`);
    this.log(
      `nodeport: ${k.arm} agent synced (${started.initial.cacheSyncedToMapsWrittenMs} ms), tc attached to ${NP_UPLINK} and ${NP_POD_IF} (${tcAttachMode} mode)`,
    );
    // The frontends on the echo service's addresses (not `service get`): an unprogrammed one is "no frontend", not a CLI error.
    const on = (frontend: string) =>
      JSON.parse(kprCli(['service', 'list', '--bpffs', k.bpffs, '-o', 'json', '--frontend', frontend])) as Array<Record<string, any>>;
    const views = [...on(`${ECHO_CLUSTER_IP}:${SERVICE_PORT}`), ...on(`${NP_NODE_IP}:${k.nodePort}`)];
    const ours = views.find((v) => v.address === NP_NODE_IP && v.port === k.nodePort);
    if (!ours) {
      throw new Error(
        `kpr programmed no NodePort frontend ${NP_NODE_IP}:${k.nodePort} for ${BENCH_NAMESPACE}/${NP_ECHO_SERVICE}; ` +
          `its frontends: ${JSON.stringify(views.map((v) => `${v.type} ${v.address}:${v.port} ${v.scope}`))}; ` +
          `initial sync: ${JSON.stringify(started.initial.record)}; ` +
          `agent warnings: ${JSON.stringify(a.records.filter((r) => r.level === 'warn' || r.level === 'error').slice(0, 5))}`,
      );
    }
    if (ours.type !== 'NodePort' && !ours.flags?.includes('node-port')) {
      throw new Error(`kpr's frontend ${NP_NODE_IP}:${k.nodePort} is not a NodePort frontend: ${JSON.stringify(ours)}`);
    }
    if (ours.service !== `${BENCH_NAMESPACE}/${NP_ECHO_SERVICE}`) {
      this.log(
        `nodeport: note: \`kpr service list\` shows the NodePort frontend without its service name/type (kpr_svc_meta): ${JSON.stringify({ service: ours.service, type: ours.type, flags: ours.flags })}`,
      );
    }
    if (!ours.backends?.some((b: any) => b.address === NP_POD_IP && b.port === NP_ECHO_PORT)) {
      throw new Error(`kpr's NodePort frontend has not the pod as its backend: ${JSON.stringify(ours)}`);
    }
    return { agent: a, bpffs: k.bpffs, tcAttachMode, initialSyncMs: started.initial.cacheSyncedToMapsWrittenMs, frontends: views };
  }

  async stopAll(): Promise<void> {
    for (const a of this.agents) await a.stop().catch(() => {});
    for (const cg of this.cgroups) removeCgroupDir(cg);
  }
}
