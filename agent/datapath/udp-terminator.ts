/**
 * Destroys connected UDP sockets that still point at backends that left, so
 * long-lived clients (DNS resolvers above all) reconnect to a live backend
 * instead of sending into the void. The BPF side (kpr_sock_term.bpf.c) does
 * the matching; this module says which backends, and runs the iterator once
 * in every network namespace on the node: a UDP socket iterator only sees
 * the namespace it was created in, and pods each have their own. Pairs are
 * (backend, frontend): a backend that left one Service may serve another.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BpfIterator, withNetns, type BpfMap } from '../../native/index.js';
import { IPPROTO, TERM_KEY, encodeTermKey, type TermKey } from '../maps/layout.js';
import type { Logger } from '../log.js';

/** A UDP backend that left a frontend (the frontend's revNatId). */
export interface UdpBackendLeft {
  addr: string;
  port: number;
  revNatId: number;
}

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

export class UdpTerminator {
  constructor(
    private readonly iterator: BpfIterator,
    private readonly termMap: BpfMap,
    private readonly log: Logger,
  ) {}

  /** Returns the number of namespaces scanned. Never throws: a failure is logged. */
  terminate(backends: UdpBackendLeft[]): number {
    if (backends.length === 0) return 0;
    const keys: TermKey[] = backends.map((b) => ({ addr: b.addr, port: b.port, revNatId: b.revNatId, proto: IPPROTO.UDP }));
    const buf = Buffer.alloc(keys.length * TERM_KEY.size);
    keys.forEach((k, i) => encodeTermKey(k, buf, i * TERM_KEY.size));
    try {
      this.termMap.updateBatch(buf, Buffer.alloc(keys.length, 1), keys.length);
      let scanned = 0;
      for (const ns of listNetworkNamespaces()) {
        try {
          withNetns(ns, () => this.iterator.run());
          scanned++;
        } catch (err) {
          this.log.debug('UDP socket scan skipped a namespace', { netns: ns, error: (err as Error).message });
        }
      }
      this.log.debug('destroyed UDP sockets connected to removed backends', { backends: backends.map((b) => `${b.addr}:${b.port}`), namespaces: scanned });
      return scanned;
    } catch (err) {
      this.log.warn('could not destroy UDP sockets of removed backends', { error: (err as Error).message });
      return 0;
    } finally {
      try {
        this.termMap.deleteBatch(buf, keys.length, { ignoreMissing: true });
      } catch {
        /* best effort: stale entries only match sockets to addresses that are gone */
      }
    }
  }

  close(): void {
    this.iterator.close();
  }
}
