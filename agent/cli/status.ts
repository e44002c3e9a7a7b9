/**
 * `kpr status`: the node as the agent on it sees it, in one answer: the
 * agent's /healthz (healthy, and whether Services over a datapath limit are
 * left unserved: which, by limit; whether every attachment is in place), from its /metrics the last sync and the
 * sync results, the API server and watch state and the kernel features in
 * effect, its effective configuration (/configz), and the fill of the pinned
 * maps. The agent's parts need its health server (--healthz-address) and
 * metrics server (--metrics-address), defaults the agent's default ports on
 * loopback; the maps are read from bpffs as `kpr map list` reads them, with
 * or without the agent.
 */
import { DEFAULT_AGENT_TIMEOUT_MS, agentTimeoutMs, agentUrl, fetchAgentText, parsePromText } from './agent-http.js';
import { formatMetricsSummary, summarizeMetrics, type MetricsSummary } from './agent-metrics-summary.js';
import { formatByLimit, type LimitSummary } from '../reconcile/limits.js';
import type { AttachmentHealth } from '../health/attachment-health.js';
import { mapStats, pinnedMapNames, type MapStats } from '../metrics/map-stats.js';
import { table } from './map-commands.js';
import { openPinnedMap } from './pinned-maps.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';

/** What the agent's metrics server told: the summary of /metrics and /configz, or why not. */
interface AgentMetricsView {
  address: string;
  summary?: MetricsSummary;
  error?: string;
  /** /configz: the agent's effective configuration. */
  config?: Record<string, unknown>;
  configError?: string;
}

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
  /** The agent's attachment check (/healthz "attachments"), when it says. */
  attachments?: AttachmentHealth;
  /** The agent's metrics server: sync, API server, watch and kernel state; its config. */
  metrics: AgentMetricsView;
  maps: MapStats[];
  mapsError?: string;
}

/** /healthz "mapSizes" (agent/metrics/observability.ts MapSizeReport). */
interface AgentMapSizes {
  configured: Record<string, number>;
  inUse: Record<string, number>;
  migration?: { state: string; maps: Array<{ map: string; reason: string; detail: string }> };
}

async function agentHealth(address: string, timeoutMs: number): Promise<AgentHealth> {
  const res = await fetchAgentText(address, '/healthz', '--healthz-address', timeoutMs);
  if (res.status === undefined) return { address, error: res.error };
  try {
    return { address, status: res.status, body: JSON.parse(res.text) as Record<string, unknown> };
  } catch {
    return { address, status: res.status, error: `not a /healthz answer: ${res.text.slice(0, 80)}` };
  }
}

async function agentMetrics(address: string, now: () => Date, timeoutMs: number): Promise<AgentMetricsView> {
  const [metrics, configz] = await Promise.all([
    fetchAgentText(address, '/metrics', '--metrics-address', timeoutMs),
    fetchAgentText(address, '/configz', '--metrics-address', timeoutMs),
  ]);
  const view: AgentMetricsView = { address };
  if (metrics.status === 200) view.summary = summarizeMetrics(parsePromText(metrics.text), now());
  else view.error = metrics.error ?? `/metrics answered ${metrics.status}`;
  if (configz.status === 200) {
    try {
      view.config = JSON.parse(configz.text) as Record<string, unknown>;
    } catch {
      view.configError = `not a /configz answer: ${configz.text.slice(0, 80)}`;
    }
  } else {
    view.configError = configz.error ?? (configz.status === 404 ? 'the agent has no /configz (older than this CLI)' : `/configz answered ${configz.status}`);
  }
  return view;
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
    const { map, foreign } = openPinnedMap(bpffsDir, name, { anyVersion: true, foreign: 'report' });
    try {
      // A foreign map (another layout pinned under kpr's name): listed with its type, entries not counted.
      maps.push(
        foreign
          ? { name, type: `${map.typeName} (FOREIGN)`, keySize: map.keySize, valueSize: map.valueSize, entries: null, capacity: map.maxEntries }
          : mapStats(name, map),
      );
    } finally {
      map.close();
    }
  }
  return { maps };
}

export async function statusReport(
  bpffsDir: string,
  healthzAddress: string,
  metricsAddress = '127.0.0.1:10249',
  now: () => Date = () => new Date(),
  timeoutMs = DEFAULT_AGENT_TIMEOUT_MS,
): Promise<StatusReport> {
  // Both addresses are checked before anything is asked: a typo is a usage error.
  agentUrl(healthzAddress, '--healthz-address');
  agentUrl(metricsAddress, '--metrics-address');
  const [agent, metrics] = await Promise.all([agentHealth(healthzAddress, timeoutMs), agentMetrics(metricsAddress, now, timeoutMs)]);
  const { maps, error } = readMaps(bpffsDir);
  const over = agent.body?.servicesOverLimit as LimitSummary | undefined;
  const sizes = agent.body?.mapSizes as AgentMapSizes | undefined;
  const attachments = agent.body?.attachments as AttachmentHealth | undefined;
  return {
    agent,
    ...(over ? { degraded: over.degraded, servicesOverLimit: over } : {}),
    ...(sizes ? { mapSizes: sizes } : {}),
    ...(attachments ? { attachments } : {}),
    metrics,
    maps,
    ...(error ? { mapsError: error } : {}),
  };
}

/** The /configz settings worth a line each; --show-config prints them all. */
const CONFIG_HEADLINE = [
  'nodeName',
  'bpffsDir',
  'cgroupPath',
  'syncPeriodMs',
  'externalInterfaces',
  'podInterfaces',
  'nodePortAddresses',
  'tcAttach',
  'socketLbHostOnly',
  'masqueradePodTraffic',
];

function configLines(m: AgentMetricsView, all: boolean): string[] {
  if (!m.config) return m.summary || m.configError !== undefined ? [`config    ${m.configError ?? 'not reported'}`] : [];
  const cfg = (m.config.config ?? m.config) as Record<string, unknown>;
  const keys = all ? Object.keys(cfg) : CONFIG_HEADLINE.filter((k) => k in cfg);
  const shown = keys.map((k) => `${k}=${typeof cfg[k] === 'object' ? JSON.stringify(cfg[k]) : String(cfg[k])}`);
  // Every setting: one a line.
  if (all) return ['config    every setting in effect (/configz):', ...shown.map((x) => `  ${x}`)];
  return [`config    ${shown.join(' ')} (all of it: --show-config or -o json)`];
}

/** /configz "serviceRanges" (agent/sync/service-ranges.ts ServiceRangesReport), as far as the line needs it. */
interface RangesView {
  ranges?: Array<{ cidr?: string; source?: string }>;
  serviceCIDRApi?: string;
  invalid?: unknown[];
}

/** The `ranges` line: the service ranges in force and where they come from (rule 33 of docs/semantics.md). */
export function rangesLine(config: Record<string, unknown> | undefined): string[] {
  const r = config?.serviceRanges as RangesView | undefined;
  if (!r || typeof r !== 'object') return [];
  const list = Array.isArray(r.ranges) ? r.ranges : [];
  const shown = list.length ? list.map((x) => `${x.cidr} (${x.source})`).join(', ') : 'none (unallocated service addresses are not refused)';
  const api = r.serviceCIDRApi ? `; ServiceCIDR API: ${r.serviceCIDRApi.replace('_', ' ')}` : '';
  const bad =
    Array.isArray(r.invalid) && r.invalid.length
      ? `; ${r.invalid.length} invalid entr${r.invalid.length === 1 ? 'y' : 'ies'} left out (the agent's log names each)`
      : '';
  return [`ranges    ${shown}${api}${bad}`];
}

function metricsLines(m: AgentMetricsView, showConfig: boolean): string[] {
  // No metrics server, no /configz: one line says so.
  if (!m.summary) return [`metrics   ${m.address}: ${m.error}; is the kpr agent running with --metrics-bind-address ${m.address}?`];
  return [...formatMetricsSummary(m.summary), ...rangesLine(m.config), ...configLines(m, showConfig)];
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
  const attachments = a.body.attachments as { healthy?: boolean } | undefined;
  if (attachments?.healthy === false) why.push('an attachment is missing');
  return `agent     ${a.address}: /healthz ${a.status}, ${healthy}${why.length ? ` (${why.join('; ')})` : ''}`;
}

const byHook = (counts: Partial<Record<string, number>>) =>
  Object.entries(counts)
    .map(([hook, n]) => `${hook} ${n ?? 0}`)
    .join(', ');

/** The "attach" line: kpr's attachments as the agent last checked them (every 2 s), and the missing ones, one a line. */
function attachLines(r: StatusReport): string[] {
  const a = r.attachments;
  if (!a) return r.agent.body ? ['attach    not known (the agent has not checked its attachments yet, or does not report them)'] : [];
  const repaired = Object.values(a.repaired).some((n) => (n ?? 0) > 0) ? `; repaired since start: ${byHook(a.repaired)}` : '';
  if (a.healthy) return [`attach    every attachment in place (${byHook(a.attached)}; checked ${a.checkedSecondsAgo}s ago)${repaired}`];
  return [
    `attach    MISSING: ${a.missing.length} attachment${a.missing.length > 1 ? 's' : ''} not in place and not attached again (${byHook(a.attached)} in place${repaired})`,
    ...a.missing.map((m) => `  ${m.program} on ${m.hook} ${m.target}: ${m.found}; ${m.error}`),
  ];
}

export function formatStatus(r: StatusReport, showConfig = false): string {
  const out: string[] = [agentLine(r.agent), ...metricsLines(r.metrics, showConfig), ...attachLines(r)];
  const o = r.servicesOverLimit;
  if (!o) {
    if (r.agent.body) out.push('datapath  not known (the agent has not synced yet, or does not report limits)');
  } else if (!o.degraded) {
    out.push('datapath  every Service within the datapath limits');
  } else {
    out.push(
      `datapath  degraded: ${o.services} Services over a datapath limit are not served on this node (${formatByLimit(o.byLimit)}); every other Service is`,
    );
    out.push('');
    out.push(
      table(
        ['SERVICE', 'LIMIT', 'ACTION'],
        o.listed.map((l) => [l.service, l.limit, l.action]),
      ).trimEnd(),
    );
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
          m.name,
          m.type,
          m.entries === null ? '-' : String(m.entries),
          String(m.capacity),
          m.type.includes('array') || m.entries === null ? '-' : `${((100 * m.entries) / m.capacity).toFixed(1)}%`,
          configured[m.name] !== undefined ? String(configured[m.name]) : '-',
        ]),
      ).trimEnd(),
    );
  }
  const mig = r.mapSizes?.migration;
  if (mig) {
    out.push(
      `migration ${mig.state} at this start: ${mig.maps.map((m) => `${m.map} ${m.detail}`).join(', ') || 'the set moved with the maps of another release'} (docs/architecture.md, Upgrades)`,
    );
  }
  return out.join('\n') + '\n';
}

/** 0: the agent answered 200, no Service is over a limit and no attachment is missing; 1: it did not answer, is unhealthy, or is degraded. */
export function statusExitCode(r: StatusReport): number {
  return r.agent.status === 200 && r.degraded !== true && r.attachments?.healthy !== false ? 0 : 1;
}

export async function statusCommand(argv: string[]): Promise<string> {
  const { values } = parseCommand(commandSpec('status'), argv);
  const r = await statusReport(
    values.bpffs as string,
    values['healthz-address'] as string,
    values['metrics-address'] as string,
    undefined,
    agentTimeoutMs(values.timeout as string),
  );
  // Scriptable like a probe: 0 only when the agent answered 200 and serves every Service.
  if (statusExitCode(r) !== 0) process.exitCode = statusExitCode(r);
  return values.output === 'json' ? JSON.stringify(r, null, 2) + '\n' : formatStatus(r, values['show-config'] === true);
}
