/**
 * The CLI's reads of the running agent's HTTP servers (health and metrics):
 * one GET with a timeout, and the Prometheus text format parsed into samples.
 */
import { parseBindAddress } from '../net/listen-address.js';
import { UsageError } from './errors.js';
import { rejectLeadingZeros } from './address-args.js';
import { parseDuration } from '../config/duration.js';

export interface AgentAnswer {
  /** HTTP status; undefined when nothing came back (then `error` says why). */
  status?: number;
  text: string;
  error?: string;
}

/** http://HOST:PORT for a bind address: a wildcard bind is asked on loopback. */
export function agentUrl(address: string, flag: string): string {
  rejectLeadingZeros(address, flag);
  let parsed: ReturnType<typeof parseBindAddress>;
  try {
    parsed = parseBindAddress(address, flag);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (!parsed) throw new UsageError(`${flag} is empty`);
  const host = parsed.host === '0.0.0.0' ? '127.0.0.1' : parsed.host === '::' ? '::1' : parsed.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${parsed.port}`;
}

/** How long each of the agent's servers may take to answer a CLI command unless its --timeout says otherwise. */
export const DEFAULT_AGENT_TIMEOUT = '5s';
export const DEFAULT_AGENT_TIMEOUT_MS = parseDuration(DEFAULT_AGENT_TIMEOUT);

/** --timeout for a command that asks the agent: a positive duration (`5s`, `1m30s`, `30`), else a UsageError. */
export function agentTimeoutMs(text: string): number {
  let ms: number;
  try {
    ms = parseDuration(text, '--timeout');
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (!(ms > 0)) throw new UsageError(`--timeout must be more than 0 (got ${text})`);
  return ms;
}

export async function fetchAgentText(address: string, path: string, flag: string, timeoutMs: number): Promise<AgentAnswer> {
  const url = agentUrl(address, flag) + path;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, text: await res.text() };
  } catch (err) {
    // fetch's own error is "fetch failed"; its cause says why (ECONNREFUSED, "bad port", ...).
    const e = err as Error & { cause?: { code?: string; message?: string } };
    return { text: '', error: e.cause?.code ?? e.cause?.message ?? (e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : e.message) };
  }
}

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/y;

/** Samples of the Prometheus text exposition format (comments skipped; a line it cannot read is skipped). */
export function parsePromText(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line.trim());
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[2]) {
      LABEL.lastIndex = 0;
      let l: RegExpExecArray | null;
      while ((l = LABEL.exec(m[2])) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_s, c: string) => (c === 'n' ? '\n' : c));
    }
    const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    out.push({ name: m[1], labels, value });
  }
  return out;
}
