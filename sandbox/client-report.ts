/** What every mode of the sandbox client (client.ts, hold.ts) reports, and the helpers that fill it. */
import type { SlowBodyReport } from './slow-body.js';

export interface ClientReport {
  ok: number;
  failed: number;
  byPod: Record<string, number>;
  errors: Record<string, number>;
  /** The first failures in detail: when (wall clock, ms), the code, the message and the local port if one was bound. */
  failures?: Array<{ atMs: number; code: string; message: string; localPort?: number }>;
  /** Peer addresses the application saw (getpeername / recvfrom). */
  peers: Record<string, number>;
  /** Client addresses the backends reported seeing. */
  seenAs: Record<string, number>;
  elapsedMs: number;
  latenciesUs?: number[];
  /** `get` mode: what the server answered. */
  responses?: Array<{ status: number; headers: Record<string, string>; body: string }>;
  /** `batch` mode: one report per step, in order. */
  steps?: ClientReport[];
  /** `slowbody` mode: the flood and its probes. */
  slowBody?: SlowBodyReport;
}

export function emptyReport(): ClientReport {
  return { ok: 0, failed: 0, byPod: {}, errors: {}, peers: {}, seenAs: {}, elapsedMs: 0 };
}

export function bump(rec: Record<string, number>, key: string): void {
  rec[key] = (rec[key] ?? 0) + 1;
}

export function splitTarget(target: string): { host: string; port: number } {
  const i = target.lastIndexOf(':');
  // "[2001:db8::1]:80" and "[::ffff:198.19.0.10]:80" carry IPv6 hosts in brackets.
  return { host: target.slice(0, i).replace(/^\[(.*)\]$/, '$1'), port: Number(target.slice(i + 1)) };
}

/** A served request: "<pod> <client address as the pod saw it>" and the peer the application saw. */
export function record(rep: ClientReport, body: string, peer: string): void {
  const [pod, seenAs] = body.trim().split(' ');
  rep.ok++;
  bump(rep.byPod, pod);
  bump(rep.peers, peer);
  if (seenAs) bump(rep.seenAs, seenAs);
}

/** Failures kept in detail: enough to tell when and how a loop failed, bounded for long loops. */
const FAILURE_DETAILS = 20;

export function fail(rep: ClientReport, err: unknown): void {
  rep.failed++;
  const e = err as NodeJS.ErrnoException & { localPort?: number };
  const code = e.code ?? String(err);
  bump(rep.errors, code);
  rep.failures ??= [];
  if (rep.failures.length < FAILURE_DETAILS) rep.failures.push({ atMs: Date.now(), code, message: e.message ?? String(err), localPort: e.localPort });
}
