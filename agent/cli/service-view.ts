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
  SVC_ALG,
  SVC_ALG_MASK,
  SVC_ALG_SHIFT,
  SVC_FLAG,
  decodeAddr,
  svcAlgOf,
  mapCodecs,
  type SvcKey,
  type SvcMeta,
  type SvcVal,
} from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { fieldReader } from '../maps/struct-codec.js';
import { KeyGroups, U32Index } from './batch-index.js';

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
  /** The frontend id (kpr_svc_val.frontend_id). */
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

const ALG_NAMES = new Map<number, string>(Object.entries(SVC_ALG).map(([name, v]) => [v, name.toLowerCase()]));

/** The selection algorithm of a master's flags by name ("random", "maglev"; "alg-N" for one this build does not know). */
export function algorithmName(flags: number): string {
  const alg = svcAlgOf(flags);
  return ALG_NAMES.get(alg) ?? `alg-${alg}`;
}

/**
 * A master's flags by name; a known selection algorithm other than random
 * (bits 12-15) as "lb-<name>", so random frontends read as before and an
 * algorithm this build does not know shows as its bits.
 */
export function flagNames(flags: number): string[] {
  let names = flagCache.get(flags);
  if (!names) {
    const alg = svcAlgOf(flags);
    const known = alg !== SVC_ALG.RANDOM && ALG_NAMES.has(alg);
    names = bitNames(known ? flags & ~(SVC_ALG_MASK << SVC_ALG_SHIFT) : flags, SVC_FLAG);
    if (known) names.push(`lb-${ALG_NAMES.get(alg)}`);
    flagCache.set(flags, names);
  }
  return [...names];
}

/** A frontend's counters as the CLI shows them (kpr_svc_stats summed over CPUs). */
export interface FrontendCounters {
  balanced: number;
  refused: number;
  droppedNoEndpoint: number;
  droppedNoLocalEndpoint: number;
  droppedSourceRange: number;
}

/** A raw batch of a map (what lookupBatch returns). */
export interface RawBatch {
  count: number;
  keys: Buffer;
  values: Buffer;
}

const BACKEND_VALUE_SIZE = MAPS.backend.value.size;
const BACKEND_KEY = mapCodecs(MAPS.backend).key;
const backendPortAt = fieldReader(MAPS.backend.value, 'port') as (buf: Buffer, off: number) => number;
const BACKEND_ADDR = MAPS.backend.value.at.addr;
const BACKEND_FLAGS = MAPS.backend.value.at.flags;

/**
 * kpr_backend's raw batch indexed by backend id; a record is decoded only
 * into the slot entry that names it. At 1,000,000 backends, decoding them
 * all into objects and a Map of them up front cost the CLI more (in
 * allocation and GC) than the rest of the join.
 */
export class BackendBatch {
  private readonly index: U32Index;
  /** The records' values (kpr_backend's layout, VALUE_SIZE bytes each). */
  readonly values: Buffer;

  constructor(batch: RawBatch) {
    this.index = new U32Index(batch.count, (r) => BACKEND_KEY.decode(batch.keys, r * BACKEND_KEY.size));
    this.values = batch.values;
  }

  static readonly VALUE_SIZE = BACKEND_VALUE_SIZE;

  /** The record of backend `id` in the batch, or -1. */
  record(id: number): number {
    return this.index.get(id);
  }

  /** Slot entry of backend `id`: address "?" and port 0 when kpr_backend has no such id. */
  slotEntry(id: number): ServiceView['backends'][number] {
    const r = this.index.get(id);
    if (r < 0) return { id, address: '?', port: 0 };
    const off = r * BACKEND_VALUE_SIZE;
    const v = this.values;
    const entry: ServiceView['backends'][number] = { id, address: decodeAddr(v, off + BACKEND_ADDR), port: backendPortAt(v, off) };
    if (v[off + BACKEND_FLAGS]! & BE_FLAG.LOCAL) entry.local = true;
    return entry;
  }
}

/** The maps' content, indexed for the join. */
export interface ServiceTables {
  /** Slot-0 entries; a frontend's backend ids by slot are slotIds[base + slot - 1], slots 1..val.count. */
  masters: Array<{ key: SvcKey; val: SvcVal; base: number }>;
  /** Backend ids of every frontend's slots (0: the slot has no entry). */
  slotIds: Uint32Array;
  backends: BackendBatch;
  meta: Map<number, SvcMeta>;
  /** Non-zero counters by frontend id (empty when kpr_svc_stats is not pinned). */
  counters?: Map<number, FrontendCounters>;
  /** Indexes into masters, in the order frontends are listed (frontendOrder). */
  order: Int32Array;
}

const SVC = mapCodecs(MAPS.svc);
const KEY_SIZE = SVC.key.size;
const VALUE_SIZE = SVC.value.size;
const SLOT = MAPS.svc.key.at.slot;
const SLOT_SIZE = MAPS.svc.key.sizes.slot;
const slotOf = fieldReader(MAPS.svc.key, 'slot') as (buf: Buffer, off: number) => number;
const backendIdOf = fieldReader(MAPS.svc.value, 'backend_id') as (buf: Buffer, off: number) => number;

/** Records of kpr_svc's batch that are masters (slot 0). */
function masterRecords(svc: RawBatch): Int32Array {
  let n = 0;
  for (let i = 0; i < svc.count; i++) if (slotOf(svc.keys, i * KEY_SIZE) === 0) n++;
  const out = new Int32Array(n);
  for (let i = 0, j = 0; i < svc.count; i++) if (slotOf(svc.keys, i * KEY_SIZE) === 0) out[j++] = i;
  return out;
}

/** Every slot's backend id at its frontend's place in slotIds (in a function of its own: V8 optimizes each such loop with its own feedback). */
function fillSlots(svc: RawBatch, groups: KeyGroups, counts: Int32Array, bases: Int32Array, slotIds: Uint32Array): void {
  for (let i = 0; i < svc.count; i++) {
    const slot = slotOf(svc.keys, i * KEY_SIZE);
    if (slot === 0) continue;
    const m = groups.find(i);
    // A slot without its master, or past its count: no frontend shows it.
    if (m >= 0 && slot <= counts[m]!) slotIds[bases[m]! + slot - 1] = backendIdOf(svc.values, i * VALUE_SIZE);
  }
}

/** Indexes raw batches of kpr_svc (what lookupBatch returns), decoding only the masters. */
export function tablesFromBatch(svc: RawBatch, backends: BackendBatch, meta: Map<number, SvcMeta>): ServiceTables {
  const records = masterRecords(svc);
  const n = records.length;
  // A frontend's entries share their key but for the slot.
  const groups = new KeyGroups(svc.keys, KEY_SIZE, SLOT, SLOT_SIZE, n);
  const masters: ServiceTables['masters'] = new Array(n);
  const counts = new Int32Array(n);
  const bases = new Int32Array(n);
  let slotCount = 0;
  for (let m = 0; m < n; m++) {
    const r = records[m]!;
    const val = SVC.value.decode(svc.values, r * VALUE_SIZE);
    masters[m] = { key: SVC.key.decode(svc.keys, r * KEY_SIZE), val, base: slotCount };
    counts[m] = val.count;
    bases[m] = slotCount;
    slotCount += val.count;
    groups.add(r, m);
  }
  const slotIds = new Uint32Array(slotCount);
  fillSlots(svc, groups, counts, bases, slotIds);
  return { masters, slotIds, backends, meta, order: frontendOrder(svc, records) };
}

const ADDR_AT = MAPS.svc.key.at.addr;
const portOf = fieldReader(MAPS.svc.key, 'port') as (buf: Buffer, off: number) => number;
const protoOf = fieldReader(MAPS.svc.key, 'proto') as (buf: Buffer, off: number) => number;
const scopeOf = fieldReader(MAPS.svc.key, 'scope') as (buf: Buffer, off: number) => number;

/**
 * The masters sorted by address (its 16 bytes: IPv4-mapped before IPv6,
 * numeric within a family), port, protocol, then scope as text (the order
 * `kpr service list` has always printed), from the raw keys: a comparison
 * is a few typed-array reads, not a string made per frontend.
 */
function frontendOrder(svc: RawBatch, records: Int32Array): Int32Array {
  const n = records.length;
  const addr = new Uint32Array(n * 4);
  const portProto = new Uint32Array(n);
  const scope = new Uint8Array(n);
  for (let m = 0; m < n; m++) {
    const off = records[m]! * KEY_SIZE;
    for (let w = 0; w < 4; w++) addr[m * 4 + w] = svc.keys.readUInt32BE(off + ADDR_AT + w * 4);
    portProto[m] = portOf(svc.keys, off) * 256 + protoOf(svc.keys, off);
    scope[m] = scopeOf(svc.keys, off);
  }
  const order = new Int32Array(n);
  for (let m = 0; m < n; m++) order[m] = m;
  // Ties (two masters whose keys decode alike) keep the batch's order.
  return order.sort((a, b) => {
    for (let w = 0; w < 4; w++) if (addr[a * 4 + w] !== addr[b * 4 + w]) return addr[a * 4 + w]! - addr[b * 4 + w]!;
    if (portProto[a] !== portProto[b]) return portProto[a]! - portProto[b]!;
    if (scope[a] !== scope[b]) return String(scope[a]) < String(scope[b]) ? -1 : 1;
    return a - b;
  });
}

/** Frontend `m` of the tables (an index into masters) with its names and its backends in slot order. */
export function frontendView(t: ServiceTables, m: number): ServiceView {
  const { key: k, val: v, base } = t.masters[m]!;
  const list: ServiceView['backends'] = new Array(v.count);
  for (let slot = 0; slot < v.count; slot++) list[slot] = t.backends.slotEntry(t.slotIds[base + slot]!);
  const meta = t.meta.get(v.frontendId);
  // Members assigned in the order the JSON output has always had.
  const view = {} as ServiceView;
  if (meta) {
    view.service = meta.name;
    view.portName = meta.portName;
    view.type = frontendTypeName(meta.type);
  }
  view.protocol = protoName(k.proto);
  view.address = k.addr;
  view.port = k.port;
  view.scope = scopeName(k.scope);
  view.id = v.frontendId;
  view.flags = flagNames(v.flags);
  if (v.flags & SVC_FLAG.AFFINITY) view.affinityTimeoutSeconds = v.backendId;
  const counters = t.counters?.get(v.frontendId);
  if (counters) view.counters = counters;
  view.backends = list;
  return view;
}

/** The frontends `which` (indexes into masters; default: all, in their order) as views. */
export function joinTables(t: ServiceTables, which: ArrayLike<number> = t.order): ServiceView[] {
  return Array.from(which, (m) => frontendView(t, m));
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
  return COUNTER_NAMES.filter(([k]) => c[k] !== 0)
    .map(([k, label]) => `${label} ${c[k]}`)
    .join(', ');
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
