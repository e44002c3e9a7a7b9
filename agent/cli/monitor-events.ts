/**
 * kpr monitor's events as people and programs read them: a record of
 * kpr_events (struct kpr_event) named (event type, hook, verdict, flags,
 * the frontend's Service through kpr_svc_meta), filtered, and printed as a
 * table row or a JSON object. Pure: the maps are read by monitor.ts.
 */
import { formatAddress } from '../net/listen-address.js';
import { EVENT_FLAG, EVENT_HOOK, EVENT_TYPE, type KprEvent, type SvcMeta } from '../maps/layout.js';
import { bitNames, frontendTypeName, protoName, scopeName } from './service-view.js';

const kebab = (name: string) => name.toLowerCase().replace(/_/g, '-');
const TYPE_NAMES = new Map<number, string>(Object.entries(EVENT_TYPE).map(([name, n]) => [n, kebab(name)]));
const HOOK_NAMES = new Map<number, string>(Object.entries(EVENT_HOOK).map(([name, n]) => [n, kebab(name)]));

export type Verdict = 'translated' | 'refused' | 'dropped' | 'passed';

/** Every event type name ("translated", "no-endpoint", ...). */
export const EVENT_TYPE_NAMES = [...TYPE_NAMES.values()];
/** Every flag name ("affinity", "snat", "ct-lost"). */
export const EVENT_FLAG_NAMES = Object.keys(EVENT_FLAG).map(kebab);
export const VERDICTS: readonly Verdict[] = ['translated', 'refused', 'dropped', 'passed'];

function isSocketHook(hook: number): boolean {
  return hook >= EVENT_HOOK.CONNECT4 && hook <= EVENT_HOOK.SENDMSG6;
}

/** What the datapath did with the connection or packet (kpr_sock.bpf.c / kpr_tc.bpf.c). */
export function verdictOf(type: number, hook: number): Verdict {
  if (type === EVENT_TYPE.TRANSLATED) return 'translated';
  // A vanished backend is a race with the agent: the call or packet goes on untranslated.
  // So does a pod connection left to the tc path for masquerade (its tc-pod event follows).
  if (type === EVENT_TYPE.BACKEND_MISSING || type === EVENT_TYPE.MASQ_DIVERT) return 'passed';
  return isSocketHook(hook) ? 'refused' : 'dropped';
}

export interface MonitorEvent {
  /** Wall-clock time of the decision (ISO 8601, UTC). */
  time: string;
  /** bpf_ktime_get_ns() of the decision, as a decimal string. */
  tsNs: string;
  type: string;
  verdict: Verdict;
  hook: string;
  path: 'socket' | 'tc';
  protocol: string;
  family: 'IPv4' | 'IPv6';
  frontend: { address: string; port: number; id: number; scope: string };
  /** "namespace/name" from kpr_svc_meta; absent for an unknown port (no frontend). */
  service?: string;
  portName?: string;
  frontendType?: string;
  /** tc path: the packet's source. */
  client?: { address: string; port: number };
  /** Socket path: the socket's and its network namespace's cookies (decimal strings). */
  socketCookie?: string;
  netnsCookie?: string;
  /** The backend chosen (translated, a drop for want of a SNAT port; backend-missing: its id, address ""). */
  backend?: { address: string; port: number; id: number };
  flags: string[];
}

/** What a frontend id names, or undefined when kpr_svc_meta does not know it. */
export type FrontendNames = (frontendId: number) => SvcMeta | undefined;

/** Monotonic nanoseconds → wall-clock milliseconds, from one reading of both clocks. */
export function wallClock(nowMs: number = Date.now(), nowNs: bigint = process.hrtime.bigint()): (tsNs: bigint) => number {
  return (tsNs) => nowMs + Number(tsNs - nowNs) / 1e6;
}

export function describeEvent(e: KprEvent, names: FrontendNames, wallMs: (tsNs: bigint) => number): MonitorEvent {
  const socket = isSocketHook(e.hook);
  const hasFrontend = e.type !== EVENT_TYPE.UNKNOWN_PORT && e.type !== EVENT_TYPE.UNALLOCATED;
  const meta = hasFrontend ? names(e.frontendId) : undefined;
  // A backend-missing event names the id of a backend the maps no longer hold: its address is unknown ("").
  const hasBackend = e.backendId !== 0 || e.backend !== '::';
  return {
    time: new Date(wallMs(e.tsNs)).toISOString(),
    tsNs: e.tsNs.toString(),
    type: TYPE_NAMES.get(e.type) ?? `type-${e.type}`,
    verdict: verdictOf(e.type, e.hook),
    hook: HOOK_NAMES.get(e.hook) ?? `hook-${e.hook}`,
    path: socket ? 'socket' : 'tc',
    protocol: protoName(e.proto),
    family: e.family === 10 ? 'IPv6' : 'IPv4',
    frontend: { address: e.frontend, port: e.frontendPort, id: e.frontendId, scope: scopeName(e.scope) },
    ...(meta ? { service: meta.name, portName: meta.portName, frontendType: frontendTypeName(meta.type) } : {}),
    ...(socket ? { socketCookie: e.cookie.toString(), netnsCookie: e.netnsCookie.toString() } : { client: { address: e.client, port: e.clientPort } }),
    ...(hasBackend ? { backend: { address: e.backend === '::' ? '' : e.backend, port: e.backendPort, id: e.backendId } } : {}),
    flags: bitNames(e.flags, EVENT_FLAG),
  };
}

export interface EventFilter {
  /** --frontend: the address called, and its port when given. */
  frontend?: { addr: string; port?: number };
  /** --type: event types, verdicts or flags; an event matches when it has one of them. */
  types?: ReadonlySet<string>;
}

export function eventMatches(ev: MonitorEvent, f: EventFilter): boolean {
  if (f.frontend && (ev.frontend.address !== f.frontend.addr || (f.frontend.port !== undefined && ev.frontend.port !== f.frontend.port))) return false;
  if (f.types && !f.types.has(ev.type) && !f.types.has(ev.verdict) && !ev.flags.some((x) => f.types!.has(x))) return false;
  return true;
}

/** --type's list, checked: each name an event type, a verdict or a flag. Returns the unknown names too. */
export function parseEventTypes(list: string): { types: Set<string>; unknown: string[] } {
  const known = new Set<string>([...EVENT_TYPE_NAMES, ...VERDICTS, ...EVENT_FLAG_NAMES]);
  const names = list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return { types: new Set(names.filter((n) => known.has(n))), unknown: names.filter((n) => !known.has(n)) };
}

// ---------------------------------------------------------------- table

/** Column widths of the streamed table (rows are printed as they come, so widths cannot follow the content). */
const COLUMNS: Array<[string, number]> = [
  ['TIME', 12],
  ['HOOK', 8],
  ['PROTO', 5],
  ['CLIENT', 20],
  ['FRONTEND', 20],
  ['SERVICE', 22],
  ['EVENT', 17],
  ['RESULT', 22],
  ['FLAGS', 0],
];

function row(cells: string[]): string {
  return cells
    .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(COLUMNS[i][1])))
    .join('  ')
    .trimEnd();
}

export const EVENT_TABLE_HEADER = row(COLUMNS.map(([h]) => h));

/** One event as a table row. */
export function formatEventRow(ev: MonitorEvent): string {
  const service = ev.service ? `${ev.service}${ev.portName ? `:${ev.portName}` : ''}` : '-';
  const result = ev.verdict === 'translated' && ev.backend?.address ? `${formatAddress(ev.backend.address, ev.backend.port)} #${ev.backend.id}` : ev.verdict;
  return row([
    ev.time.slice(11, 23),
    ev.hook,
    ev.protocol,
    ev.client ? formatAddress(ev.client.address, ev.client.port) : '-',
    formatAddress(ev.frontend.address, ev.frontend.port),
    service,
    ev.type,
    result,
    ev.flags.join(',') || '-',
  ]);
}
