/**
 * The kube-proxy (nftables mode) side of the control-plane comparison: loads
 * kube-proxy's nftables ruleset (bench/kube-proxy-nft.ts) with `nft -f` into
 * throwaway network namespaces of the run's sandbox (never the host's), then
 * replays kube-proxy partial syncs for one endpoint change at a time. The
 * same structure as bench/iptables.ts; every nft run is bounded by a timeout
 * and reported as "not finished within X s" when it runs out.
 */
import { execFileSync } from 'node:child_process';
import type { Sandbox } from '../sandbox/netns.js';
import { deleteChainsTransaction, fullTransactionChunks, nftEndpointChain, partialTransaction, type NftOptions } from './kube-proxy-nft.js';
import type { KpService } from './kube-proxy-rules.js';
import { coldLoads, inputSize, NotFinishedError, timedRunIn } from './ruleset-load.js';

export const NFT = process.env.KPR_BENCH_NFT ?? 'nft';

export { NotFinishedError };

export function nftVersion(bin = NFT): string {
  try {
    return execFileSync(bin, ['--version'], { encoding: 'utf8', timeout: 10_000 }).trim();
  } catch (err) {
    return `unavailable (${(err as Error).message.split('\n')[0]})`;
  }
}

/**
 * Runs `nft <flags> -f -` inside a namespace, feeding `input` (one string or
 * chunks, written with back-pressure); resolves with the wall time in ms.
 */
export function nftIn(ns: string, input: string | Iterable<string>, flags: string[] = [], timeoutMs = 120_000, bin = NFT): Promise<number> {
  return timedRunIn(ns, bin, [...flags, '-f', '-'], { input, timeoutMs });
}

const CHAIN_TOKEN = '{"chain": {';

/** `nft -j list chains ip` in a namespace, as kube-proxy runs at every sync; resolves with ms and the chain count. */
export async function listChainsIn(ns: string, timeoutMs = 120_000, bin = NFT): Promise<{ ms: number; chains: number }> {
  let chains = 0;
  let tail = '';
  // Count chain objects without holding the whole document (tens of MB at scale).
  // The tail kept is shorter than the token, so a token split between reads is counted once.
  const ms = await timedRunIn(ns, bin, ['-j', 'list', 'chains', 'ip'], {
    timeoutMs,
    onStdout: (d) => {
      const t = tail + d;
      chains += t.split(CHAIN_TOKEN).length - 1;
      tail = t.slice(-(CHAIN_TOKEN.length - 1));
    },
  });
  return { ms, chains };
}

export interface NftablesCold {
  /** Wall time of each cold full load, ms (a fresh namespace each). */
  coldMs: number[];
  /** Chains in `ip` tables after the load (kube-proxy's fixed chains and every service's). */
  chains: number;
  inputBytes: number;
  inputLines: number;
}

/** One endpoint flip (endpoint 0 of `target` leaves / rejoins), replayed as kube-proxy partial syncs. */
export class NftChanger {
  private notReady = false;
  /** When endpoint 0's chain went stale (flushed by the removal), while it has not been deleted. */
  private staleSince: number | undefined;
  /** kube-proxy's whole partial sync: list the chains, delete stale chains when due, the transaction. */
  readonly exactMs: number[] = [];
  /** The transaction alone (the changed service's chains). */
  readonly minimalMs: number[] = [];
  /** The chain listing of each exact sync. */
  readonly listMs: number[] = [];
  /** Stale-chain deletions run (their time is inside exactMs). */
  staleDeletes = 0;
  private readonly inputs = new Map<boolean, string>();

  constructor(
    private readonly ns: string,
    private readonly target: KpService,
    private readonly timeoutMs = 120_000,
  ) {}

  /** The partial-sync transaction: endpoint 0 gone (`notReady`) or back; built once each. */
  input(notReady: boolean): string {
    let text = this.inputs.get(notReady);
    if (text === undefined) {
      const svc = notReady ? { ...this.target, endpoints: this.target.endpoints.slice(1) } : this.target;
      const stale = notReady ? [nftEndpointChain(this.target, this.target.endpoints[0])] : [];
      text = partialTransaction([svc], stale);
      this.inputs.set(notReady, text);
    }
    return text;
  }

  staleChain(): string {
    return nftEndpointChain(this.target, this.target.endpoints[0]);
  }

  /** Flips the endpoint and applies it with the given partial-sync shape; returns ms. */
  async change(mode: 'exact' | 'minimal'): Promise<number> {
    this.notReady = !this.notReady;
    const t0 = process.hrtime.bigint();
    if (mode === 'exact') {
      const l = await listChainsIn(this.ns, this.timeoutMs);
      this.listMs.push(l.ms);
      // syncProxyRules: stale chains older than a second are deleted first, in a transaction of their own.
      if (this.staleSince !== undefined && Date.now() - this.staleSince >= 1000) {
        await nftIn(this.ns, deleteChainsTransaction([this.staleChain()]), [], this.timeoutMs);
        this.staleSince = undefined;
        this.staleDeletes++;
      }
    }
    await nftIn(this.ns, this.input(this.notReady), [], this.timeoutMs);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    // The removal flushed endpoint 0's chain (stale from now); the rejoin made it active again.
    this.staleSince = this.notReady ? Date.now() : undefined;
    (mode === 'exact' ? this.exactMs : this.minimalMs).push(ms);
    return ms;
  }
}

export interface NftablesSetup {
  cold: NftablesCold;
  /** The namespace left loaded, for the change measurements. */
  ns: string;
  changer: NftChanger;
}

/**
 * Cold-loads the full ruleset `repeats` times (fresh namespace each; all but
 * the last are deleted right away) and returns a changer on the last one.
 * Each load is bounded by `timeoutMs` (NotFinishedError).
 */
export async function setupNftables(
  sandbox: Sandbox,
  services: KpService[],
  target: KpService,
  repeats: number,
  opts: NftOptions,
  log: (m: string) => void,
  timeoutMs: number,
  changeTimeoutMs = 120_000,
): Promise<NftablesSetup> {
  // Generated before the clock starts, in chunks (at 100,000 Services it is longer than one JS string may be).
  const chunks = [...fullTransactionChunks(services, opts)];
  const { inputBytes, inputLines } = inputSize(chunks);
  const { coldMs, ns } = await coldLoads(sandbox, 'nft', repeats, (n) => nftIn(n, chunks, [], timeoutMs), log);
  const { chains } = await listChainsIn(ns, timeoutMs);
  return {
    cold: { coldMs, chains, inputBytes, inputLines },
    ns,
    changer: new NftChanger(ns, target, changeTimeoutMs),
  };
}
