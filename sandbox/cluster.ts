/**
 * A one-node cluster in a box: the sandbox namespaces and cgroup, pods with
 * their servers, the embedded API server, and the real kpr agent process
 * pointed at it through an ordinary kubeconfig. Shared by the demo, the
 * end-to-end tests and the benchmarks.
 */
import { scaled } from './time-scale.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startApiServer, type ApiServer } from './apiserver.js';
import { Sandbox, nsPath } from './netns.js';
import { addPod, createNode, runClient, startClient, type ClientMode, type ClientRun, type NodeTopology } from './topology.js';
import { agentBin } from './repo.js';
import { trackAgentLogs, type AgentProcess } from './agent-logs.js';
import type { ClientReport } from './client.js';

export const NODE_NAME = 'node-1';
export const SERVICE_CIDR = '198.19.0.0/16';

export type { AgentProcess } from './agent-logs.js';

export class BoxCluster {
  readonly sandbox: Sandbox;
  readonly topo: NodeTopology;
  readonly api: ApiServer;
  readonly kubeconfig: string;
  agent: AgentProcess | undefined;

  private constructor(sandbox: Sandbox, topo: NodeTopology, api: ApiServer, kubeconfig: string) {
    this.sandbox = sandbox;
    this.topo = topo;
    this.api = api;
    this.kubeconfig = kubeconfig;
  }

  static async create(opts: { pods?: Array<{ name: string; ip: string; ip6?: string }>; apiBookmarkIntervalMs?: number } = {}): Promise<BoxCluster> {
    const sandbox = new Sandbox();
    try {
      const topo = createNode(sandbox);
      for (const p of opts.pods ?? []) await addPod(sandbox, topo, p.name, p.ip, p.ip6);
      const api = await startApiServer({ serviceCIDR: SERVICE_CIDR, bookmarkIntervalMs: opts.apiBookmarkIntervalMs });
      const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-`)));
      const kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
      return new BoxCluster(sandbox, topo, api, kubeconfig);
    } catch (err) {
      await sandbox.teardown();
      throw err;
    }
  }

  /**
   * Starts bin/kpr-agent and waits for its initial sync. `env` is added to
   * this process's environment; `nofile` caps the agent's file descriptors
   * (prlimit), for tests that try to exhaust them.
   */
  async startAgent(extraArgs: string[] = [], env: NodeJS.ProcessEnv = {}, opts: { nofile?: number } = {}): Promise<AgentProcess> {
    const limit = opts.nofile ? ['prlimit', `--nofile=${opts.nofile}:${opts.nofile}`, agentBin] : [agentBin];
    const child = this.sandbox.track(
      spawn(
        limit[0],
        [
          ...limit.slice(1),
          '--kubeconfig',
          this.kubeconfig,
          '--node-name',
          NODE_NAME,
          '--cgroup-path',
          this.sandbox.cgroupPath,
          '--bpffs',
          this.sandbox.bpffsDir,
          // The agent runs in the root namespace: its node is the sandbox's node namespace, and
          // it must never attach tc to an interface of the root namespace (whose eth0 matches the
          // default patterns). Only the sandbox's pod-facing veths are named.
          '--netns',
          nsPath(this.topo.nodeNs),
          '--external-interfaces',
          '',
          '--pod-interfaces',
          'v*',
          // Loopback, any free port: several sandboxes may run at once. Tests that need them pass their own.
          '--healthz-bind-address',
          '127.0.0.1:0',
          '--metrics-bind-address',
          '127.0.0.1:0',
          ...extraArgs,
        ],
        { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } },
      ),
    );
    const agent = trackAgentLogs('kpr', child);
    this.agent = agent;
    await agent.waitForLog('initial sync complete');
    return agent;
  }

  /** Stops the agent: SIGTERM (orderly) or SIGKILL (crash). The pinned datapath stays. */
  async stopAgent(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const a = this.agent;
    if (!a || a.child.exitCode !== null || a.child.signalCode !== null) return;
    a.child.kill(signal);
    await once(a.child, 'exit');
    this.agent = undefined;
  }

  addPod(name: string, ip: string, ip6?: string) {
    return addPod(this.sandbox, this.topo, name, ip, ip6);
  }

  client(mode: ClientMode, target: string, extra: string[] = []): Promise<ClientReport> {
    return runClient(this.sandbox, this.topo, mode, target, extra);
  }

  startClient(mode: ClientMode, target: string, extra: string[] = []): ClientRun {
    return startClient(this.sandbox, this.topo, mode, target, extra);
  }

  async close(): Promise<void> {
    await this.stopAgent('SIGKILL').catch(() => undefined);
    await this.api.close().catch(() => undefined);
    await this.sandbox.teardown();
  }
}

/** Polls until check() returns (or resolves to) a truthy value, or fails with what it last saw. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 5000,
  intervalMs = 20,
): Promise<T> {
  const end = Date.now() + scaled(timeoutMs);
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
