/** The data-plane phases of `bench/run.ts`: ClusterIP at 1 Service and at N, NodePort at 1 and at N (each its own sandbox). */
import { Sandbox } from '../sandbox/netns.js';
import { startAgent, startApi, type Agent, type BenchApiServer } from './control-plane.js';
import { dataplaneRounds, setupDataplane, waitReachable } from './data-plane.js';
import { counterSwitch } from './counter-switch.js';
import { nodePortPhase } from './nodeport.js';
import { summarizeDataplane, summarizeNodePort, type DataplaneSummary } from './report.js';
import { makeScenario, ECHO_CLUSTER_IP, SERVICE_PORT } from './scenario.js';
import { cfg, log } from './run-config.js';
import type { Results } from './run-results.js';

export async function dataplanePhase(
  sandbox: Sandbox,
  env: Awaited<ReturnType<typeof setupDataplane>>,
  services: number,
  withKpr: boolean,
): Promise<DataplaneSummary> {
  const cip = withKpr ? { ip: ECHO_CLUSTER_IP, port: SERVICE_PORT } : undefined;
  if (cip) await waitReachable(sandbox, env, cip.ip, cip.port);
  log(`data plane at ${services} services: ${cfg.dpRounds} rounds × ${cfg.dpConns} connections per arm`);
  const r = await dataplaneRounds(
    sandbox,
    env,
    cip,
    cfg.dpRounds,
    cfg.dpConns,
    cfg.dpLimitMs,
    log,
    cip ? counterSwitch(sandbox.bpffsDir) : undefined,
    cip ? sandbox.bpffsDir : undefined,
  );
  return summarizeDataplane(services, r);
}

/** Data plane with only the echo Service programmed. */
export async function phaseOneService(res: Results, withKpr: boolean): Promise<void> {
  const sandbox = new Sandbox();
  let api: BenchApiServer | undefined;
  let agent: Agent | undefined;
  try {
    const env = await setupDataplane(sandbox);
    if (withKpr) {
      const { echo } = makeScenario(0, cfg.endpoints);
      api = await startApi([echo]);
      ({ agent } = await startAgent(sandbox, api, cfg.logLevel, cfg.agentTimeoutMs));
    }
    res.dataPlane.push(await dataplanePhase(sandbox, env, 1, withKpr));
  } finally {
    await agent?.stop().catch(() => {});
    await api?.close().catch(() => {});
    await sandbox.teardown();
  }
}

/** NodePort data plane at `services` NodePort Services (a sandbox of its own; above 1, with the agent at 1 Service beside kpr). */
export async function phaseNodePort(res: Results, services: number, withKpr: boolean): Promise<void> {
  log(`nodeport: phase at ${services} service(s)`);
  const p = await nodePortPhase(
    {
      services,
      endpoints: cfg.endpoints,
      rounds: cfg.npRounds,
      conns: cfg.npConns,
      limitMs: cfg.npLimitMs,
      agentTimeoutMs: cfg.agentTimeoutMs,
      loadTimeoutMs: cfg.coldTimeoutMs,
      logLevel: cfg.logLevel,
      withKpr,
      withIptables: !cfg.skip.has('iptables'),
      withNftables: !cfg.skip.has('nftables'),
      withKprTc: !cfg.skip.has('kpr-tc'),
      withKprOne: !cfg.skip.has('kpr-one'),
    },
    log,
  );
  res.errors.push(...p.errors);
  for (const [mode, what] of Object.entries(p.notFinished ?? {})) res.notFinished.push(`nodeport ${mode} at ${services} services: ${what}`);
  res.dataPlaneNodePort.push(summarizeNodePort(p));
}
