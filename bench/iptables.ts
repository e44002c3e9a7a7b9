/**
 * The kube-proxy (iptables mode) side of the control-plane comparison: loads
 * kube-proxy's ruleset with iptables-restore into throwaway network namespaces
 * of the run's sandbox (never the host's), then replays kube-proxy partial
 * syncs for one endpoint change at a time.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { inNs, ip, nsPath, type Sandbox } from '../sandbox/netns.js';
import { fullRestoreChunks, partialRestore, sepChainName, type KpService } from './kube-proxy-rules.js';
import { NotFinishedError } from './nftables.js';
import { asUnderTest } from './priority.js';

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
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = asUnderTest(spawn('nsenter', [`--net=${nsPath(ns)}`, bin, '-w', '5', ...flags], { stdio: ['pipe', 'ignore', 'pipe'] }));
    let err = '';
    let timedOut = false;
    child.stderr.on('data', (d) => {
      if (err.length < 4000) err += d;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (timedOut) reject(new NotFinishedError(`${bin} ${flags.join(' ')} in ${ns}`, timeoutMs));
      else if (code === 0) resolve(ms);
      else reject(new Error(`${bin} ${flags.join(' ')} in ${ns} failed (${signal ?? code}): ${err.trim().slice(0, 2000)}`));
    });
    child.stdin.on('error', () => {
      /* reported through close */
    });
    if (typeof input === 'string') {
      child.stdin.end(input);
      return;
    }
    const it = input[Symbol.iterator]();
    const pump = () => {
      for (;;) {
        const next = it.next();
        if (next.done) {
          child.stdin.end();
          return;
        }
        if (!child.stdin.write(next.value)) {
          child.stdin.once('drain', pump);
          return;
        }
      }
    };
    pump();
  });
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
  let inputBytes = 0;
  let inputLines = 0;
  for (const c of chunks) {
    inputBytes += Buffer.byteLength(c);
    for (let i = c.indexOf('\n'); i !== -1; i = c.indexOf('\n', i + 1)) inputLines++;
  }
  const coldMs: number[] = [];
  let ns = '';
  for (let r = 0; r < repeats; r++) {
    if (ns) {
      try {
        ip('netns', 'del', ns);
      } catch {
        /* the sandbox retries at teardown */
      }
    }
    ns = sandbox.addNamespace(`ipt${r}`);
    const ms = await restoreIn(ns, chunks, [], IPTABLES_RESTORE, timeoutMs);
    coldMs.push(ms);
    log(`iptables cold load ${r + 1}/${repeats}: ${ms.toFixed(0)} ms`);
  }
  const natRules = natRuleCount(ns);
  return {
    cold: { coldMs, natRules, inputBytes, inputLines },
    ns,
    changer: new IptablesChanger(ns, services, target, changeTimeoutMs),
  };
}

export { inNs };
