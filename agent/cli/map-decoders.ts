/**
 * How `kpr map dump` shows each pinned map: for every map of the registry
 * (agent/maps/registry.ts), rows made from its decoded keys and values
 * (the registry's codecs), numbers turned into names (protocols, flags,
 * stat names). A map added to the registry without its rows here does not
 * compile.
 */
import { BE_FLAG, CFG_FLAG, CT_DIR, CT_FLAG, STAT, VIP_FLAG, mapCodecs } from '../maps/layout.js';
import { MAPS, RINGS, type MapId, type MapSpec } from '../maps/registry.js';
import { sumPerCpuU64 } from '../../native/index.js';
import { bitNames, flagNames, frontendTypeName, protoName, scopeName } from './service-view.js';

export type Row = Record<string, unknown>;

export interface MapDecoder {
  /** Decodes the key at `off` of the keys buffer. */
  key(buf: Buffer, off: number): Row;
  /**
   * Decodes one value; `value` is the whole value (all CPU slots for per-CPU
   * maps, `slot` bytes each); `key` is the decoded key.
   */
  value(value: Buffer, slot: number, key: Row): Row;
  /** What the map holds, for `kpr map list`. */
  about: string;
  /** Entries with an all-zero value are left out of dumps. */
  sparse: boolean;
}

const STAT_NAMES = new Map<number, string>(Object.entries(STAT).map(([name, i]) => [i, name.toLowerCase()]));
/** struct kpr_svc_stat's counters: name (camelCase, as in JSON) and offset in one CPU's slot. */
export const SVC_STAT_FIELDS: Array<[string, number]> = MAPS.svcStats.value.placed.filter((f) => f.prop).map((f) => [f.prop!, f.offset]);
const CT_DIR_NAMES = new Map<number, string>(Object.entries(CT_DIR).map(([name, i]) => [i, name.toLowerCase()]));

/** Nanosecond clocks are u64: shown as decimal strings so JSON keeps every digit. */
const big = (n: bigint) => n.toString();

type KeyOf<I extends MapId> = (typeof MAPS)[I] extends MapSpec<infer K, unknown> ? K : never;
type ValueOf<I extends MapId> = (typeof MAPS)[I] extends MapSpec<unknown, infer V> ? V : never;

/** A map's rows from its decoded entries; `perCpu` gets the value's raw CPU slots instead. */
interface Rows<K, V> {
  about: string;
  key(k: K): Row;
  value?(v: V, key: Row): Row;
  perCpu?(value: Buffer, slot: number): Row;
  /** An array whose untouched slots are noise: entries with an all-zero value are left out of dumps. */
  sparse?: boolean;
}

const ROWS: { [I in MapId]: Rows<KeyOf<I>, ValueOf<I>> } = {
  svc: {
    about: 'frontends: slot 0 = master {count, id, flags}, slots 1..count = backend ids',
    key: (k) => ({ address: k.addr, port: k.port, protocol: protoName(k.proto), scope: scopeName(k.scope), slot: k.slot }),
    value: (d, key) =>
      key.slot === 0
        ? { count: d.count, id: d.frontendId, flags: flagNames(d.flags), ...(d.backendId ? { affinityTimeoutSeconds: d.backendId } : {}) }
        : { backendId: d.backendId },
  },
  backend: {
    about: 'backend id -> address, port, protocol',
    key: (id) => ({ id }),
    value: (d) => ({ address: d.addr, port: d.port, protocol: protoName(d.proto), flags: bitNames(d.flags, BE_FLAG) }),
  },
  vip: {
    about: 'service addresses; unknown ports on them are refused',
    key: (address) => ({ address }),
    value: (flags) => ({ flags: bitNames(flags, VIP_FLAG) }),
  },
  revnat: {
    about: 'socket reverse NAT: (socket cookie, backend) -> the frontend it called',
    key: (k) => ({ cookie: big(k.cookie), backend: k.addr, backendPort: k.port }),
    value: (d) => ({ address: d.addr, port: d.port, id: d.frontendId }),
  },
  affinity: {
    about: 'session affinity: (netns cookie or client, frontend id) -> backend',
    key: (k) => ({ netnsCookie: big(k.netnsCookie), client: k.client, id: k.frontendId }),
    value: (d) => ({ backendId: d.backendId, lastUsedNs: big(d.lastUsedNs) }),
  },
  affinityMatch: {
    about: 'valid (backend, frontend) pairs of frontends with affinity',
    key: (k) => ({ backendId: k.backendId, id: k.frontendId }),
  },
  term: {
    about: 'UDP backends whose connected sockets are to be destroyed',
    // `id` as in every other map's rows; `revNatId`, its old name, kept for scripts reading the JSON (CHANGELOG).
    key: (k) => ({ address: k.addr, port: k.port, id: k.frontendId, revNatId: k.frontendId, protocol: protoName(k.proto) }),
  },
  svcMeta: {
    about: 'frontend id -> service name, port name, type',
    key: (id) => ({ id }),
    value: (d) => ({ service: d.name, portName: d.portName, type: frontendTypeName(d.type), ...(d.proto ? { protocol: protoName(d.proto) } : {}) }),
  },
  ct: {
    about: 'tc-path connection tracking',
    key: (k) => ({
      source: k.saddr,
      sourcePort: k.sport,
      destination: k.daddr,
      destinationPort: k.dport,
      protocol: protoName(k.proto),
      dir: CT_DIR_NAMES.get(k.dir) ?? k.dir,
    }),
    value: (d) => ({
      natSource: d.natSaddr,
      natSourcePort: d.natSport,
      natDestination: d.natDaddr,
      natDestinationPort: d.natDport,
      backendId: d.backendId,
      id: d.frontendId,
      flags: bitNames(d.flags, CT_FLAG),
      expiresNs: big(d.expiresNs),
    }),
  },
  srcRange: {
    about: 'loadBalancerSourceRanges: (frontend id, CIDR) allowed',
    key: (k) => ({ id: k.frontendId, cidr: k.cidr }),
  },
  maglev: {
    about: 'Maglev tables: (table id, chunk) -> 1024 entries, each the slot (1..count) a flow hashing there takes; trailing zeros (past M) left out',
    key: (k) => ({ tableId: k.tableId, chunk: k.chunk }),
    value: (v) => {
      let end = v.length;
      while (end > 0 && v[end - 1] === 0) end--;
      return { slots: Array.from(v.subarray(0, end)) };
    },
  },
  maglevRef: {
    about: 'Maglev entry sets: (frontend id, scope) -> table id and size M',
    key: (k) => ({ id: k.frontendId, scope: scopeName(k.scope) }),
    value: (v) => ({ tableId: v.tableId, m: v.m }),
  },
  svcCidr: {
    about: 'service ranges (ServiceCIDR objects or --service-cluster-ip-range): their unallocated addresses are refused/dropped',
    key: (k) => ({ cidr: k.cidr }),
  },
  config: {
    about: 'node-wide datapath settings',
    key: (index) => ({ index }),
    value: (c) => ({
      hostNetnsCookie: big(c.hostNetnsCookie),
      snatV4: c.snatV4,
      snatV6: c.snatV6,
      tcpTimeoutSeconds: c.tcpTimeoutS,
      tcpClosingTimeoutSeconds: c.tcpClosingTimeoutS,
      udpTimeoutSeconds: c.udpTimeoutS,
      flags: bitNames(c.flags, CFG_FLAG),
    }),
  },
  svcStats: {
    about: 'per-frontend counters (per CPU), by frontend id',
    sparse: true,
    key: (id) => ({ id }),
    perCpu: (v, slot) => {
      const row: Row = {};
      SVC_STAT_FIELDS.forEach(([name, off]) => (row[name] = big(sumPerCpuU64(v, slot, off))));
      return row;
    },
  },
  monitor: {
    about: "kpr monitor's switch: events are recorded until this deadline (bpf_ktime_get_ns; 0: off)",
    key: (index) => ({ index }),
    value: (m) => ({ untilNs: big(m.untilNs), on: m.untilNs > process.hrtime.bigint() }),
  },
  stats: {
    about: 'datapath counters (per CPU)',
    key: (i) => ({ index: i, stat: STAT_NAMES.get(i) ?? `unused-${i}` }),
    perCpu: (v, slot) => {
      const perCpu: string[] = [];
      for (let off = 0; off + 8 <= v.length; off += slot) perCpu.push(big(v.readBigUInt64LE(off)));
      return { total: big(sumPerCpuU64(v, slot, 0)), perCpu };
    },
  },
};

function decoderOf<K, V>(spec: MapSpec<K, V>, rows: Rows<K, V>): MapDecoder {
  const c = mapCodecs(spec);
  const value = rows.value;
  const perCpu = rows.perCpu;
  return {
    about: rows.about,
    sparse: rows.sparse ?? false,
    key: (b, o) => rows.key(c.key.decode(b, o)),
    value: perCpu ? (v, slot) => perCpu(v, slot) : value ? (v, _slot, key) => value(c.value.decode(v, 0), key) : () => ({}),
  };
}

/** Each pinned map's decoder, by its pinned name. */
export const DECODERS: Record<string, MapDecoder> = Object.fromEntries(
  (Object.keys(MAPS) as MapId[]).map((id) => [MAPS[id].name, decoderOf(MAPS[id] as MapSpec, ROWS[id] as Rows<unknown, unknown>)]),
);

/** What each ring buffer carries, for `kpr map list` (a ring has no entries to dump). */
export const RING_ABOUT: Record<string, string> = {
  [RINGS.events.name]: "kpr monitor's events while it runs (ring buffer; capacity in bytes); read with kpr monitor",
};

export function knownMapNames(): string[] {
  return Object.keys(DECODERS).sort();
}
