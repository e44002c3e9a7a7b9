/**
 * Destroys connected UDP sockets that still point at backends that left, so
 * long-lived clients (DNS resolvers above all) reconnect to a live backend
 * instead of sending into the void. Two mechanisms, one rule (only sockets
 * the hooks translated, only for the frontend the backend left):
 *  - bpf_sock_destroy (6.5+): the iter/udp program of kpr_sock_term.bpf.c
 *    matches through kpr_term, which this module fills for the run;
 *  - netlink (older kernels with CONFIG_INET_DIAG_DESTROY): sock_diag dumps
 *    and SOCK_DESTROY requests, matched in JS (udp-sock-diag.ts).
 * Either runs once in every network namespace on the node: a UDP socket
 * iterator and a sock_diag socket only see the namespace they were made in,
 * and pods each have their own. Pairs are (backend, frontend): a backend that
 * left one Service may serve another.
 */
import fs from 'node:fs';
import path from 'node:path';
import { SockDiagError, withNetns, withSockDiag, type BpfIterator, type BpfMap } from '../../native/index.js';
import { IPPROTO, STAT, TERM_KEY, encodeTermKey, type TermKey } from '../maps/layout.js';
import { addToStat, readStat } from './datapath-stats.js';
import type { Logger } from '../log/log.js';
import { destroyInNamespace, sockDiagTargets, type UdpBackendLeft } from './udp-sock-diag.js';

export type { UdpBackendLeft } from './udp-sock-diag.js';

/** --udp-termination: auto (bpf_sock_destroy, else netlink sock_diag), bpf, netlink. */
export type UdpTerminationSetting = 'auto' | 'bpf' | 'netlink';

/** The mechanism in use. */
export type UdpTerminationMode = 'bpf_sock_destroy' | 'netlink' | 'off';

/** One path per distinct network namespace of the node's processes (plus our own). */
export function listNetworkNamespaces(procRoot = '/proc'): string[] {
  const seen = new Map<bigint, string>();
  const add = (p: string) => {
    try {
      const ino = fs.statSync(p, { bigint: true }).ino;
      if (!seen.has(ino)) seen.set(ino, p);
    } catch {
      /* the process exited meanwhile */
    }
  };
  add(path.join(procRoot, 'thread-self', 'ns', 'net'));
  for (const entry of fs.readdirSync(procRoot)) {
    if (/^\d+$/.test(entry)) add(path.join(procRoot, entry, 'ns', 'net'));
  }
  return [...seen.values()];
}

/**
 * Can this kernel destroy sockets through sock_diag? null when it can, else
 * why not. Asked in the agent's own namespace; every namespace shares the kernel.
 */
export function probeSockDiagDestroy(): string | null {
  try {
    return withSockDiag(undefined, (d) => d.canDestroy()) ? null : 'the kernel was built without CONFIG_INET_DIAG_DESTROY';
  } catch (err) {
    return (err as Error).message;
  }
}

export interface UdpTerminationChoice {
  mode: UdpTerminationMode;
  /** Why this mode (for the log line). */
  reason: string;
}

/**
 * auto: the iterator when kpr_sock_term.bpf.o loaded, else netlink when the
 * kernel can destroy through it, else off. bpf / netlink: that one or off.
 */
export function chooseUdpTermination(
  setting: UdpTerminationSetting,
  iteratorError: string | undefined,
  probeNetlink: () => string | null,
): UdpTerminationChoice {
  const iterator = iteratorError === undefined;
  if (setting !== 'netlink' && iterator) return { mode: 'bpf_sock_destroy', reason: 'kpr_sock_term.bpf.o loaded (bpf_sock_destroy)' };
  if (setting === 'bpf') return { mode: 'off', reason: `--udp-termination bpf, but kpr_sock_term.bpf.o did not load (needs kernel 6.5+): ${iteratorError}` };
  const netlinkError = probeNetlink();
  if (netlinkError === null) {
    return {
      mode: 'netlink',
      reason:
        setting === 'netlink' ? '--udp-termination netlink' : `kpr_sock_term.bpf.o did not load (${iteratorError}); netlink sock_diag can destroy sockets`,
    };
  }
  const why = setting === 'netlink' ? '--udp-termination netlink' : `kpr_sock_term.bpf.o did not load (${iteratorError})`;
  return { mode: 'off', reason: `${why}, and netlink sock_diag cannot destroy sockets: ${netlinkError}` };
}

export interface UdpTerminatorOptions {
  setting: UdpTerminationSetting;
  /** The iterator of kpr_sock_term.bpf.o, when it loaded. */
  iterator?: BpfIterator;
  /** Why it did not load (or was not loaded). */
  iteratorError?: string;
  maps: { term: BpfMap; revnat: BpfMap; stats: BpfMap };
  log: Logger;
  /** Sockets destroyed by one termination run (the agent's metric). */
  onDestroyed?: (mode: UdpTerminationMode, sockets: number) => void;
  /** The namespaces to scan (default: every one on the node). */
  listNamespaces?: () => string[];
  /** Netlink capability probe (default: probeSockDiagDestroy). */
  probeNetlink?: () => string | null;
}

export interface TerminationRun {
  namespaces: number;
  destroyed: number;
}

export class UdpTerminator {
  readonly mode: UdpTerminationMode;
  readonly #opts: UdpTerminatorOptions;
  readonly #listNamespaces: () => string[];

  constructor(opts: UdpTerminatorOptions) {
    const choice = chooseUdpTermination(
      opts.setting,
      opts.iterator ? undefined : (opts.iteratorError ?? 'not loaded'),
      opts.probeNetlink ?? probeSockDiagDestroy,
    );
    this.mode = choice.mode;
    this.#opts = opts;
    this.#listNamespaces = opts.listNamespaces ?? (() => listNetworkNamespaces());
    const fields = { mode: this.mode, setting: opts.setting, reason: choice.reason };
    if (this.mode === 'off') opts.log.warn('UDP socket termination off: connected UDP clients keep a removed backend until they reconnect', fields);
    else opts.log.info('UDP socket termination', fields);
  }

  /** Destroys the sockets of `backends` in every namespace. Never throws: a failure is logged. */
  terminate(backends: UdpBackendLeft[]): TerminationRun {
    if (backends.length === 0 || this.mode === 'off') return { namespaces: 0, destroyed: 0 };
    const run = this.mode === 'bpf_sock_destroy' ? this.#viaIterator(backends) : this.#viaNetlink(backends);
    if (run.destroyed > 0) this.#opts.onDestroyed?.(this.mode, run.destroyed);
    const fields = { mode: this.mode, backends: backends.map((b) => `${b.addr}:${b.port}`), namespaces: run.namespaces, destroyed: run.destroyed };
    if (run.destroyed > 0) this.#opts.log.info('destroyed UDP sockets connected to removed backends', fields);
    else this.#opts.log.debug('no UDP socket connected to the removed backends', fields);
    return run;
  }

  #viaIterator(backends: UdpBackendLeft[]): TerminationRun {
    const { term, stats } = this.#opts.maps;
    const iterator = this.#opts.iterator!;
    const keys: TermKey[] = backends.map((b) => ({ addr: b.addr, port: b.port, frontendId: b.frontendId, proto: IPPROTO.UDP }));
    const buf = Buffer.alloc(keys.length * TERM_KEY.size);
    keys.forEach((k, i) => encodeTermKey(k, buf, i * TERM_KEY.size));
    let namespaces = 0;
    try {
      // The iterator counts what it destroys in SOCK_DESTROYED; the difference is this run's.
      const before = readStat(stats, STAT.SOCK_DESTROYED);
      term.updateBatch(buf, Buffer.alloc(keys.length, 1), keys.length);
      for (const ns of this.#listNamespaces()) {
        try {
          withNetns(ns, () => iterator.run());
          namespaces++;
        } catch (err) {
          this.#opts.log.debug('UDP socket scan skipped a namespace', { netns: ns, error: (err as Error).message });
        }
      }
      return { namespaces, destroyed: Number(readStat(stats, STAT.SOCK_DESTROYED) - before) };
    } catch (err) {
      this.#opts.log.warn('could not destroy UDP sockets of removed backends', { mode: this.mode, error: (err as Error).message });
      return { namespaces, destroyed: 0 };
    } finally {
      try {
        term.deleteBatch(buf, keys.length, { ignoreMissing: true });
      } catch {
        /* best effort: stale entries only match sockets to addresses that are gone */
      }
    }
  }

  #viaNetlink(backends: UdpBackendLeft[]): TerminationRun {
    const { revnat, stats } = this.#opts.maps;
    const targets = sockDiagTargets(backends);
    let namespaces = 0;
    let destroyed = 0;
    let refused: { netns: string; error: string } | undefined;
    for (const ns of this.#listNamespaces()) {
      try {
        destroyed += destroyInNamespace(ns, targets, revnat).destroyed;
        namespaces++;
      } catch (err) {
        // The kernel refusing a request is worth a warning; a namespace that went away is not.
        if (err instanceof SockDiagError) refused ??= { netns: ns, error: err.message };
        else this.#opts.log.debug('UDP socket scan skipped a namespace', { netns: ns, error: (err as Error).message });
      }
    }
    if (refused) this.#opts.log.warn('netlink sock_diag refused a UDP socket scan or destroy', { mode: this.mode, ...refused });
    try {
      addToStat(stats, STAT.SOCK_DESTROYED, destroyed);
    } catch (err) {
      this.#opts.log.debug('could not count destroyed sockets in kpr_stats', { error: (err as Error).message });
    }
    return { namespaces, destroyed };
  }
}
