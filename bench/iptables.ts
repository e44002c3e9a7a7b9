/**
 * The kube-proxy (iptables mode) side of the control-plane comparison: loads
 * kube-proxy's ruleset with iptables-restore into throwaway network namespaces
 * of the run's sandbox (never the host's), then replays kube-proxy partial
 * syncs for one endpoint change at a time.
 */
import { execFileSync } from 'node:child_process';
import { inNs, nsPath, type Sandbox } from '../sandbox/netns.js';
import { fullRestoreChunks, partialRestore, sepChainName, type KpService } from './kube-proxy-rules.js';
import { coldLoads, inputSize, timedRunIn } from './ruleset-load.js';

export const IPTABLES_RESTORE = process.env.KPR_BENCH_IPTABLES_RESTORE ?? 'iptables-restore';

export function iptablesVersion(bin = IPTABLES_RESTORE): string {
  try {
    return execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  } catch (err) {
    return `unavailable (${(err as Error).message.split('\n')[0]})`;
  }
}

/**
 * Runs iptables-restore inside a namespace, feeding `input` (one string or
 * chunks, written with back-pressure); resolves with the wall time in ms,
 * rejects with NotFinishedError when it runs out of `timeoutMs`.
 */
export function restoreIn(ns: string, input: string | Iterable<string>, flags: string[] = [], bin = IPTABLES_RESTORE, timeoutMs = 120_000): Promise<number> {
  return timedRunIn(ns, bin, ['-w', '5', ...flags], { input, timeoutMs });
}

/** Rules in a namespace's nat table (to check a load really happened). */
export function natRuleCount(ns: string): number {
  const out = execFileSync('nsenter', [`--net=${nsPath(ns)}`, IPTABLES_RESTORE.replace('-restore', '-save'), '-t', 'nat'], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
    timeout: 300_000,
  });
  let n = 0;
  for (const line of out.split('\n')) if (line.startsWith('-A ')) n++;
  return n;
}

export interface IptablesCold {
  /** Wall time of each cold full load, ms (a fresh namespace each). */
  coldMs: number[];
  natRules: number;
  inputBytes: number;
  inputLines: number;
}

/** One endpoint flip (endpoint 0 of `target` leaves / rejoins), replayed as kube-proxy partial syncs. */
export class IptablesChanger {
  private notReady = false;
  readonly exactMs: number[] = [];
  readonly minimalMs: number[] = [];
  private readonly inputs = new Map<string, string>();

  constructor(
    private readonly ns: string,
    private readonly all: KpService[],
    private readonly target: KpService,
    private readonly timeoutMs = 120_000,
  ) {}

  /**
   * The iptables-restore input of one partial sync: endpoint 0 gone
   * (`notReady`) or back. Only four exist (mode × state), each built once, so
   * the bench process does not build and collect a 10,000-Service text at
   * every step, between the agent's timed changes.
   */
  input(mode: 'exact' | 'minimal', notReady: boolean): string {
    const cacheKey = `${mode}|${notReady}`;
    let text = this.inputs.get(cacheKey);
    if (text === undefined) {
      const svc = notReady ? { ...this.target, endpoints: this.target.endpoints.slice(1) } : this.target;
      const stale = notReady ? [sepChainName(this.target, this.target.endpoints[0])] : [];
      const all = mode === 'exact' ? this.all.map((s) => (s === this.target ? svc : s)) : undefined;
      text = partialRestore([svc], { mode, all, staleSepChains: stale });
      this.inputs.set(cacheKey, text);
    }
    return text;
  }

  /** Flips the endpoint and applies it with the given partial-sync shape; returns ms. */
  async change(mode: 'exact' | 'minimal'): Promise<number> {
    this.notReady = !this.notReady;
    const ms = await restoreIn(this.ns, this.input(mode, this.notReady), ['--noflush'], IPTABLES_RESTORE, this.timeoutMs);
    (mode === 'exact' ? this.exactMs : this.minimalMs).push(ms);
    return ms;
  }
}

export interface IptablesSetup {
  cold: IptablesCold;
  /** The namespace left loaded, for the change measurements. */
  ns: string;
  changer: IptablesChanger;
}

/**
 * Cold-loads the full ruleset `repeats` times (fresh namespace each; all but
 * the last are deleted right away) and returns a changer on the last one.
 * Each load is bounded by `timeoutMs` (NotFinishedError), each change by `changeTimeoutMs`.
 */
export async function setupIptables(
  sandbox: Sandbox,
  services: KpService[],
  target: KpService,
  repeats: number,
  log: (m: string) => void,
  timeoutMs = 120_000,
  changeTimeoutMs = 120_000,
): Promise<IptablesSetup> {
  // Generated before the clock starts, in chunks (a 100,000-Service ruleset nears the longest JS string).
  const chunks = [...fullRestoreChunks(services)];
  const { inputBytes, inputLines } = inputSize(chunks);
  const { coldMs, ns } = await coldLoads(sandbox, 'ipt', repeats, (n) => restoreIn(n, chunks, [], IPTABLES_RESTORE, timeoutMs), log);
  const natRules = natRuleCount(ns);
  return {
    cold: { coldMs, natRules, inputBytes, inputLines },
    ns,
    changer: new IptablesChanger(ns, services, target, changeTimeoutMs),
  };
}

export { inNs };
