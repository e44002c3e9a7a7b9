/**
 * `kpr status`: the node as the agent on it sees it, in one answer: the
 * agent's /healthz (healthy, and whether Services over a datapath limit are
 * left unserved: which, by limit) and the fill of the pinned maps. The
 * health part needs the agent's health server (--healthz-address, default
 * the agent's default bind address on loopback); the maps are read from
 * bpffs as `kpr map list` reads them, with or without the agent.
 */
import { parseArgs } from 'node:util';
import { DEFAULT_BPFFS_DIR } from '../config.js';
import { parseBindAddress } from '../net/listen-address.js';
import { formatByLimit, type LimitSummary } from '../reconcile/limits.js';
import { mapStats, pinnedMapNames, type MapStats } from '../metrics/map-stats.js';
import { table } from './map-commands.js';
import { CliError, openPinnedMap } from './pinned-maps.js';

export const STATUS_USAGE = `  status                  the node: the agent's /healthz (healthy; Services over a datapath limit, so not
                          served here) and the fill of every pinned map
                          [--healthz-address IP:PORT (default 127.0.0.1:10256)] [--bpffs PATH] [-o table|json];
                          exits 1 when the agent does not answer 200 or leaves a Service unserved`;

/** How long the agent's health server may take to answer. */
const HEALTHZ_TIMEOUT_MS = 5000;

interface AgentHealth {
  address: string;
  /** HTTP status, or undefined when the agent did not answer. */
  status?: number;
  body?: Record<string, unknown>;
  error?: string;
}

export interface StatusReport {
  agent: AgentHealth;
  /** Degraded: some Service is not (wholly) served for want of room; undefined when the agent does not say. */
  degraded?: boolean;
  servicesOverLimit?: LimitSummary;
  /** The agent's run-time map sizes (/healthz "mapSizes"), when it says. */
  mapSizes?: AgentMapSizes;
  maps: MapStats[];
  mapsError?: string;
}

/** /healthz "mapSizes" (agent/metrics/observability.ts MapSizeReport). */
interface AgentMapSizes {
  configured: Record<string, number>;
  inUse: Record<string, number>;
  mismatched: Array<{ map: string; pinned: number; requested: number }>;
}

async function agentHealth(address: string): Promise<AgentHealth> {
  let parsed: ReturnType<typeof parseBindAddress>;
  try {
    parsed = parseBindAddress(address, '--healthz-address');
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  if (!parsed) throw new CliError('--healthz-address is empty');
  const host = parsed.host === '0.0.0.0' ? '127.0.0.1' : parsed.host === '::' ? '::1' : parsed.host;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${parsed.port}/healthz`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(HEALTHZ_TIMEOUT_MS) });
    const text = await res.text();
    let body: Record<string, unknown> | undefined;
    try {
      body = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return { address, status: res.status, error: `not a /healthz answer: ${text.slice(0, 80)}` };
    }
    return { address, status: res.status, body };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } };
    return { address, error: e.cause?.code ?? e.message };
  }
}

function readMaps(bpffsDir: string): { maps: MapStats[]; error?: string } {
  let names: string[];
  try {
    names = pinnedMapNames(bpffsDir);
  } catch (err) {
    return { maps: [], error: (err as Error).message };
  }
  if (names.length === 0) return { maps: [], error: `no pinned maps under ${bpffsDir}/maps` };
  const maps: MapStats[] = [];
  for (const name of names) {
    const map = openPinnedMap(bpffsDir, name);
    try {
      maps.push(mapStats(name, map));
    } finally {
      map.close();
    }
  }
  return { maps };
}

export async function statusReport(bpffsDir: string, healthzAddress: string): Promise<StatusReport> {
  const agent = await agentHealth(healthzAddress);
  const { maps, error } = readMaps(bpffsDir);
  const over = agent.body?.servicesOverLimit as LimitSummary | undefined;
  const sizes = agent.body?.mapSizes as AgentMapSizes | undefined;
  return { agent, ...(over ? { degraded: over.degraded, servicesOverLimit: over } : {}), ...(sizes ? { mapSizes: sizes } : {}), maps, ...(error ? { mapsError: error } : {}) };
}

function agentLine(a: AgentHealth): string {
  if (a.status === undefined) return `agent     ${a.address}: no answer (${a.error}); is the kpr agent running with --healthz-bind-address ${a.address}?`;
  if (!a.body) return `agent     ${a.address}: /healthz ${a.status}, ${a.error}`;
  const healthy = a.status === 200 ? 'healthy' : 'unhealthy';
  const why: string[] = [];
  if (a.body.healthy === false) why.push('syncs are not applied in time');
  if (a.body.nodeEligible === false) why.push('node not eligible (unknown, being deleted, or to be deleted by the autoscaler)');
  const caches = a.body.k8sCaches as { healthy?: boolean; reason?: string } | undefined;
  if (caches?.healthy === false) why.push(caches.reason ?? 'k8s caches');
  return `agent     ${a.address}: /healthz ${a.status}, ${healthy}${why.length ? ` (${why.join('; ')})` : ''}`;
}

export function formatStatus(r: StatusReport): string {
  const out: string[] = [agentLine(r.agent)];
  const o = r.servicesOverLimit;
  if (!o) {
    if (r.agent.body) out.push('datapath  not known (the agent has not synced yet, or does not report limits)');
  } else if (!o.degraded) {
    out.push('datapath  every Service within the datapath limits');
  } else {
    out.push(`datapath  degraded: ${o.services} Services over a datapath limit are not served on this node (${formatByLimit(o.byLimit)}); every other Service is`);
    out.push('');
    out.push(table(['SERVICE', 'LIMIT', 'ACTION'], o.listed.map((l) => [l.service, l.limit, l.action])).trimEnd());
    if (o.notListed > 0) out.push(`... and ${o.notListed} more (the agent's log names each: "Service refused: over a datapath limit")`);
  }
  out.push('');
  if (r.mapsError) out.push(`maps      ${r.mapsError}`);
  else {
    const configured = r.mapSizes?.configured ?? {};
    out.push(
      table(
        ['MAP', 'TYPE', 'ENTRIES', 'CAPACITY', 'FILL', 'CONFIGURED'],
        r.maps.map((m) => [
          m.name, m.type, String(m.entries), String(m.capacity),
          m.type.includes('array') ? '-' : `${((100 * m.entries) / m.capacity).toFixed(1)}%`,
          configured[m.name] !== undefined ? String(configured[m.name]) : '-',
        ]),
      ).trimEnd(),
    );
  }
  for (const m of r.mapSizes?.mismatched ?? []) {
    out.push(`map size  ${m.map} is pinned with ${m.pinned} entries, configured ${m.requested}: kept at ${m.pinned} until its pins are removed (docs/architecture.md, Pinned maps)`);
  }
  return out.join('\n') + '\n';
}

/** 0: the agent answered 200 and no Service is over a limit; 1: it did not answer, is unhealthy, or is degraded. */
export function statusExitCode(r: StatusReport): number {
  return r.agent.status === 200 && r.degraded !== true ? 0 : 1;
}

export async function statusCommand(argv: string[]): Promise<string> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bpffs: { type: 'string', default: DEFAULT_BPFFS_DIR },
      'healthz-address': { type: 'string', default: '127.0.0.1:10256' },
      output: { type: 'string', short: 'o', default: 'table' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return `Usage: kpr status [flags]\n${STATUS_USAGE}\n`;
  if (positionals.length > 0) throw new CliError(`kpr status takes no arguments (got ${positionals.join(' ')})`);
  if (!['table', 'json'].includes(values.output!)) throw new CliError(`unknown output format "${values.output}" (table or json)`);
  const r = await statusReport(values.bpffs!, values['healthz-address']!);
  // Scriptable like a probe: 0 only when the agent answered 200 and serves every Service.
  if (statusExitCode(r) !== 0) process.exitCode = statusExitCode(r);
  return values.output === 'json' ? JSON.stringify(r, null, 2) + '\n' : formatStatus(r);
}
