/**
 * The joined view of the service, backend and service-name maps that
 * `kpr service list` / `kpr service get` print: each frontend with its names
 * (from kpr_svc_meta, keyed by the frontend id), flags, scope and backends in
 * slot order. Pure: it works on decoded entries, whoever read them.
 */
import {
  BE_FLAG,
  FE_TYPE,
  IPPROTO,
  SCOPE,
  SVC_FLAG,
  encodeAddr,
  mapCodecs,
  type Backend,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { fieldReader } from '../maps/struct-codec.js';

export interface ServiceView {
  /** "namespace/name" from kpr_svc_meta; absent when the map has no entry for the frontend id. */
  service?: string;
  portName?: string;
  /** ClusterIP, NodePort, LoadBalancer or ExternalIP. */
  type?: string;
  protocol: string;
  address: string;
  port: number;
  /** "external" (everyone, or traffic from outside the node) or "internal" (callers on the node). */
  scope: string;
  /** The frontend id (rev_nat_id). */
  id: number;
  flags: string[];
  /** Session affinity timeout, for frontends with the affinity flag. */
  affinityTimeoutSeconds?: number;
  /** This frontend's datapath counters (kpr_svc_stats), when any is non-zero. */
  counters?: FrontendCounters;
  /** Slot order; a slot naming a missing backend shows address "?". */
  backends: Array<{ id: number; address: string; port: number; local?: boolean }>;
}

const PROTO_NAMES = new Map<number, string>(Object.entries(IPPROTO).map(([name, n]) => [n, name]));
const SCOPE_NAMES = new Map<number, string>(Object.entries(SCOPE).map(([name, n]) => [n, name.toLowerCase()]));
const TYPE_NAMES = new Map<number, string>([
  [FE_TYPE.CLUSTER_IP, 'ClusterIP'],
  [FE_TYPE.NODE_PORT, 'NodePort'],
  [FE_TYPE.LOAD_BALANCER, 'LoadBalancer'],
  [FE_TYPE.EXTERNAL_IP, 'ExternalIP'],
]);

export function protoName(proto: number): string {
  return PROTO_NAMES.get(proto) ?? `proto-${proto}`;
}

export function scopeName(scope: number): string {
  return SCOPE_NAMES.get(scope) ?? `scope-${scope}`;
}

export function frontendTypeName(type: number): string {
  return TYPE_NAMES.get(type) ?? `type-${type}`;
}

/** Names of the bits set in `flags`, from a table like SVC_FLAG ("cluster-ip", "affinity"...). */
export function bitNames(flags: number, table: Record<string, number>): string[] {
  const names = Object.entries(table)
    .filter(([, bit]) => (flags & bit) !== 0)
    .map(([name]) => name.toLowerCase().replace(/_/g, '-'));
  let known = 0;
  for (const bit of Object.values(table)) known |= bit;
  if (flags & ~known) names.push(`0x${(flags & ~known).toString(16)}`);
  return names;
}

const flagCache = new Map<number, string[]>();

export function flagNames(flags: number): string[] {
  let names = flagCache.get(flags);
  if (!names) flagCache.set(flags, (names = bitNames(flags, SVC_FLAG)));
  return [...names];
}

/** Sort key of an address: IPv4 (mapped) before IPv6, numeric within a family. */
const addrBuf = Buffer.alloc(16);
function addrSortKey(addr: string): string {
  try {
    encodeAddr(addr, addrBuf, 0);
    return addrBuf.toString('hex');
  } catch {
    return addr;
  }
}

/** A frontend's counters as the CLI shows them (kpr_svc_stats summed over CPUs). */
export interface FrontendCounters {
  balanced: number;
  refused: number;
  droppedNoEndpoint: number;
  droppedNoLocalEndpoint: number;
  droppedSourceRange: number;
}

/** The maps' content, indexed for the join. */
export interface ServiceTables {
  /** Slot-0 entries; `slotKey` identifies the frontend's slots in `slots`. */
  masters: Array<{ key: SvcKey; val: SvcVal; slotKey: string }>;
  /** slotKey → backend id by slot number. */
  slots: Map<string, number[]>;
  backends: Map<number, Backend>;
  meta: Map<number, SvcMeta>;
  /** Non-zero counters by frontend id (empty when kpr_svc_stats is not pinned). */
  counters?: Map<number, FrontendCounters>;
}

const SVC = mapCodecs(MAPS.svc);
const KEY_SIZE = SVC.key.size;
const VALUE_SIZE = SVC.value.size;
const SLOT = MAPS.svc.key.at.slot;
const SLOT_SIZE = MAPS.svc.key.sizes.slot;
const slotOf = fieldReader(MAPS.svc.key, 'slot') as (buf: Buffer, off: number) => number;
const backendIdOf = fieldReader(MAPS.svc.value, 'backend_id') as (buf: Buffer, off: number) => number;
const keyBuf = Buffer.alloc(KEY_SIZE);

/**
 * A frontend's identity in a service-map key: the key's bytes with the slot
 * zeroed, as a latin1 string (cheap to make and hash from a raw batch).
 */
export function slotKeyOf(raw: Buffer, off: number): string {
  for (let i = 0; i < KEY_SIZE; i++) keyBuf[i] = raw[off + i]; // a byte loop beats Buffer.copy at this size
  keyBuf.fill(0, SLOT, SLOT + SLOT_SIZE);
  return keyBuf.toString('latin1', 0, KEY_SIZE);
}

/** Indexes raw batches of kpr_svc (what lookupBatch returns), decoding only the masters. */
export function tablesFromBatch(
  svc: { count: number; keys: Buffer; values: Buffer },
  backends: Map<number, Backend>,
  meta: Map<number, SvcMeta>,
): ServiceTables {
  const masters: ServiceTables['masters'] = [];
  const slots = new Map<string, number[]>();
  for (let i = 0; i < svc.count; i++) {
    const off = i * KEY_SIZE;
    const slot = slotOf(svc.keys, off);
    const slotKey = slotKeyOf(svc.keys, off);
    if (slot === 0) {
      masters.push({ key: SVC.key.decode(svc.keys, off), val: SVC.value.decode(svc.values, i * VALUE_SIZE), slotKey });
      continue;
    }
    let m = slots.get(slotKey);
    if (!m) slots.set(slotKey, (m = []));
    m[slot] = backendIdOf(svc.values, i * VALUE_SIZE);
  }
  return { masters, slots, backends, meta };
}

/** Each frontend with its names and its backends in slot order, sorted by address, port, protocol, scope. */
export function joinTables(t: ServiceTables): ServiceView[] {
  const sortKeys = new Map<ServiceView, string>();
  const views = t.masters.map(({ key: k, val: v, slotKey }): ServiceView => {
    const mySlots = t.slots.get(slotKey);
    const list: ServiceView['backends'] = [];
    for (let slot = 1; slot <= v.count; slot++) {
      const id = mySlots?.[slot] ?? 0;
      const be = t.backends.get(id);
      const entry: ServiceView['backends'][number] = { id, address: be?.addr ?? '?', port: be?.port ?? 0 };
      if (be && be.flags & BE_FLAG.LOCAL) entry.local = true;
      list.push(entry);
    }
    const m = t.meta.get(v.revNatId);
    const view: ServiceView = {
      ...(m ? { service: m.name, portName: m.portName, type: frontendTypeName(m.type) } : {}),
      protocol: protoName(k.proto),
      address: k.addr,
      port: k.port,
      scope: scopeName(k.scope),
      id: v.revNatId,
      flags: flagNames(v.flags),
      ...(v.flags & SVC_FLAG.AFFINITY ? { affinityTimeoutSeconds: v.backendId } : {}),
      ...(t.counters?.has(v.revNatId) ? { counters: t.counters.get(v.revNatId)! } : {}),
      backends: list,
    };
    sortKeys.set(view, `${addrSortKey(k.addr)}|${String(k.port).padStart(5, '0')}|${String(k.proto).padStart(3, '0')}|${k.scope}`);
    return view;
  });
  return views.sort((a, b) => {
    const ka = sortKeys.get(a)!;
    const kb = sortKeys.get(b)!;
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  });
}

const COUNTER_NAMES: Array<[keyof FrontendCounters, string]> = [
  ['balanced', 'balanced'],
  ['refused', 'refused'],
  ['droppedNoEndpoint', 'dropped (no endpoint)'],
  ['droppedNoLocalEndpoint', 'dropped (no local endpoint)'],
  ['droppedSourceRange', 'dropped (source range)'],
];

/** "balanced 12, dropped (source range) 3": the non-zero counters. */
export function formatCounters(c: FrontendCounters): string {
  return COUNTER_NAMES.filter(([k]) => c[k] !== 0).map(([k, label]) => `${label} ${c[k]}`).join(', ');
}

function hostPort(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/** ipvsadm -Ln style, with the service's name when kpr_svc_meta has it. */
export function formatServiceTable(views: ServiceView[]): string {
  const lines: string[] = [];
  for (const v of views) {
    const n = v.backends.length;
    const name = v.service ? `  ${v.type} ${v.service}${v.portName ? `:${v.portName}` : ''}` : '';
    const scope = v.scope === 'external' ? '' : `  (${v.scope})`;
    const flags = v.flags.length ? `  [${v.flags.join(',')}]` : '';
    const aff = v.affinityTimeoutSeconds !== undefined ? `  affinity ${v.affinityTimeoutSeconds}s` : '';
    lines.push(`${v.protocol.padEnd(4)} ${hostPort(v.address, v.port)}  id ${v.id}  ${n} backend${n === 1 ? '' : 's'}${name}${scope}${flags}${aff}`);
    if (v.counters) lines.push(`  counters: ${formatCounters(v.counters)}`);
    if (n === 0) lines.push('  (no backends: new connections are refused)');
    for (const b of v.backends) lines.push(`  -> ${hostPort(b.address, b.port)}${b.local ? '  local' : ''}`);
  }
  if (views.length === 0) lines.push('(no services programmed)');
  return lines.join('\n') + '\n';
}
