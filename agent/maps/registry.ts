/**
 * Every map kpr pins, once: its name, BPF map type, capacity, and the layouts
 * of its key and value (bpf/include/kpr_maps.h and kpr_types.h in C). The
 * codecs (layout.ts), the CLI's decoders and dumps, the fast column packers'
 * offsets and the BTF test (test/bpf/layout.test.ts, which checks every entry
 * against the compiled object) all come from here. Ring buffers (RINGS) have
 * no keys or values: their spec names the record they carry.
 */
import { scalarLayout, structLayout, type StructLayout } from './struct-codec.js';
import * as V1 from './layouts-v1.js';
import type {
  AffinityKey,
  AffinityMatchKey,
  AffinityVal,
  Backend,
  CtKey,
  CtVal,
  KprConfig,
  KprEvent,
  KprMonitor,
  MaglevChunk,
  MaglevKey,
  MaglevRef,
  MaglevRefKey,
  RevNatKey,
  RevNatVal,
  SrcRangeKey,
  SvcCidrKey,
  SvcKey,
  SvcMeta,
  SvcStat,
  SvcVal,
  TermKey,
} from './map-types.js';

// ---------------------------------------------------------------- structs (kpr_types.h)

export const SVC_KEY = structLayout<SvcKey>()('kpr_svc_key', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'slot', kind: 'u16' },
  { c: 'proto', kind: 'u8' },
  { c: 'scope', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 2 },
]);

export const SVC_VAL = structLayout<SvcVal>()('kpr_svc_val', [
  // A union in C: backend_id (slot > 0) or affinity_timeout_s (slot 0).
  { c: 'backend_id', kind: 'u32' },
  { c: 'count', kind: 'u16' },
  { c: 'flags', kind: 'u16' },
  { c: 'frontend_id', kind: 'u32' },
]);

export const BACKEND = structLayout<Backend>()('kpr_backend', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'proto', kind: 'u8' },
  { c: 'flags', kind: 'u8' },
]);

/** A service address: the map's key is the address itself. */
export const VIP_KEY = structLayout<string>()('kpr_vip_key', [{ c: 'addr', kind: 'addr' }], { bare: true });
/** VIP_FLAG bits. */
export const VIP_VAL = structLayout<number>()('kpr_vip_val', [{ c: 'flags', kind: 'u32' }], { bare: true });

export const REVNAT_KEY = structLayout<RevNatKey>()('kpr_revnat_key', [
  { c: 'cookie', kind: 'u64' },
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'pad', kind: 'pad', size: 6 },
]);

export const REVNAT_VAL = structLayout<RevNatVal>()('kpr_revnat_val', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'pad', kind: 'pad', size: 2 },
  { c: 'frontend_id', kind: 'u32' },
]);

export const AFFINITY_KEY = structLayout<AffinityKey>()('kpr_affinity_key', [
  { c: 'netns_cookie', kind: 'u64' },
  { c: 'client', kind: 'addr' },
  { c: 'frontend_id', kind: 'u32' },
  { c: 'pad', kind: 'pad', size: 4 },
]);

export const AFFINITY_VAL = structLayout<AffinityVal>()('kpr_affinity_val', [
  { c: 'last_used_ns', kind: 'u64' },
  { c: 'backend_id', kind: 'u32' },
  { c: 'pad', kind: 'pad', size: 4 },
]);

export const AFFINITY_MATCH_KEY = structLayout<AffinityMatchKey>()('kpr_affinity_match_key', [
  { c: 'backend_id', kind: 'u32' },
  { c: 'frontend_id', kind: 'u32' },
]);

export const TERM_KEY = structLayout<TermKey>()('kpr_term_key', [
  { c: 'addr', kind: 'addr' },
  { c: 'port', kind: 'be16' },
  { c: 'proto', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 1 },
  { c: 'frontend_id', kind: 'u32' },
]);

export const SVC_META = structLayout<SvcMeta>()('kpr_svc_meta', [
  { c: 'name', kind: 'cstr', size: 128 },
  { c: 'port_name', kind: 'cstr', size: 64 },
  { c: 'type', kind: 'u8' },
  { c: 'proto', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 2 },
]);

export const SVC_STAT = structLayout<SvcStat>()('kpr_svc_stat', [
  { c: 'balanced', kind: 'u64' },
  { c: 'refused', kind: 'u64' },
  { c: 'dropped_no_endpoint', kind: 'u64' },
  { c: 'dropped_no_local_endpoint', kind: 'u64' },
  { c: 'dropped_source_range', kind: 'u64' },
]);

export const CT_KEY = structLayout<CtKey>()('kpr_ct_key', [
  { c: 'saddr', kind: 'addr' },
  { c: 'daddr', kind: 'addr' },
  { c: 'sport', kind: 'be16' },
  { c: 'dport', kind: 'be16' },
  { c: 'proto', kind: 'u8' },
  { c: 'dir', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 2 },
]);

export const CT_VAL = structLayout<CtVal>()('kpr_ct_val', [
  { c: 'nat_saddr', kind: 'addr' },
  { c: 'nat_daddr', kind: 'addr' },
  { c: 'nat_sport', kind: 'be16' },
  { c: 'nat_dport', kind: 'be16' },
  { c: 'backend_id', kind: 'u32' },
  { c: 'expires_ns', kind: 'u64' },
  { c: 'pad0', kind: 'pad', size: 2 },
  { c: 'flags', kind: 'u8' },
  { c: 'pad1', kind: 'pad', size: 1 },
  { c: 'frontend_id', kind: 'u32' },
]);

/** The LPM key; its codec (layout.ts) reads and writes the members as a CIDR. */
export const SRC_RANGE_KEY = structLayout<SrcRangeKey>()('kpr_src_range_key', [
  { c: 'prefixlen', kind: 'u32' },
  { c: 'frontend_id', kind: 'u32' },
  { c: 'addr', kind: 'addr' },
]);

/** The service-range LPM key; its codec (layout.ts) reads and writes it as a CIDR. */
export const SVC_CIDR_KEY = structLayout<SvcCidrKey>()('kpr_svc_cidr_key', [
  { c: 'prefixlen', kind: 'u32' },
  { c: 'addr', kind: 'addr' },
]);

/** Entries of one kpr_maglev element (KPR_MAGLEV_CHUNK). */
export const MAGLEV_CHUNK_ENTRIES = 1024;

export const MAGLEV_KEY = structLayout<MaglevKey>()('kpr_maglev_key', [
  { c: 'table_id', kind: 'u32' },
  { c: 'chunk', kind: 'u32' },
]);

/** KPR_MAGLEV_CHUNK slot numbers; the codec's value is the array itself. */
export const MAGLEV_CHUNK = structLayout<MaglevChunk>()('kpr_maglev_chunk', [{ c: 'slots', kind: 'u16s', size: 2 * MAGLEV_CHUNK_ENTRIES }], { bare: true });

export const MAGLEV_REF_KEY = structLayout<MaglevRefKey>()('kpr_maglev_ref_key', [
  { c: 'frontend_id', kind: 'u32' },
  { c: 'scope', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 3 },
]);

export const MAGLEV_REF = structLayout<MaglevRef>()('kpr_maglev_ref', [
  { c: 'table_id', kind: 'u32' },
  { c: 'm', kind: 'u32' },
]);

export const CONFIG = structLayout<KprConfig>()('kpr_config', [
  { c: 'host_netns_cookie', kind: 'u64' },
  { c: 'snat_v4', kind: 'addrOrEmpty' },
  { c: 'snat_v6', kind: 'addrOrEmpty' },
  { c: 'tcp_timeout_s', kind: 'u32' },
  { c: 'tcp_closing_timeout_s', kind: 'u32' },
  { c: 'udp_timeout_s', kind: 'u32' },
  { c: 'flags', kind: 'u32' },
]);

/** kpr monitor's switch (kpr_event.h). */
export const MONITOR = structLayout<KprMonitor>()('kpr_monitor', [{ c: 'until_ns', kind: 'u64' }]);

/** A record of the kpr_events ring buffer (kpr_event.h). */
export const EVENT = structLayout<KprEvent>()('kpr_event', [
  { c: 'ts_ns', kind: 'u64' },
  { c: 'cookie', kind: 'u64' },
  { c: 'netns_cookie', kind: 'u64' },
  { c: 'client', kind: 'addr' },
  { c: 'frontend', kind: 'addr' },
  { c: 'backend', kind: 'addr' },
  { c: 'client_port', kind: 'be16' },
  { c: 'frontend_port', kind: 'be16' },
  { c: 'backend_port', kind: 'be16' },
  { c: 'type', kind: 'u8' },
  { c: 'hook', kind: 'u8' },
  { c: 'frontend_id', kind: 'u32' },
  { c: 'backend_id', kind: 'u32' },
  { c: 'proto', kind: 'u8' },
  { c: 'family', kind: 'u8' },
  { c: 'scope', kind: 'u8' },
  { c: 'flags', kind: 'u8' },
  { c: 'pad', kind: 'pad', size: 4 },
]);

/** A bare __u32 (ids, array indexes). */
export const U32 = scalarLayout<number>('__u32', 'u32');
/** A bare __u8 (the value of the maps where presence is what counts). */
export const U8 = scalarLayout<number>('__u8', 'u8');
/** A bare __u64 (the per-CPU counters). */
export const U64 = scalarLayout<bigint>('__u64', 'u64');

// ---------------------------------------------------------------- maps (kpr_maps.h)

/** libbpf's name of the map type (what `bpftool map` and BpfMap.typeName say). */
export type MapTypeName = 'hash' | 'lru_hash' | 'lpm_trie' | 'array' | 'percpu_array' | 'ringbuf';

/**
 * What a live migration (agent/datapath/migration.ts) does with a map's
 * entries when it builds the new set beside the old pins:
 *  - plan: the agent's own content (and the programs' counters), copied
 *    into the new map before the reconciler adopts it, so ids survive and
 *    the initial sync writes only the difference;
 *  - state: written by the programs as traffic flows (conntrack, reverse
 *    NAT, affinity), copied after the programs are swapped (entries the new
 *    programs made first are kept), the new programs reading through to the
 *    old map on a miss until then (bpf/include/kpr_migrate.h);
 *  - scratch: not copied (kpr_term: one UDP termination run's list).
 */
export type MigrateAs = 'plan' | 'state' | 'scratch';

/** A layout an older release pinned a map with, which this agent reads (and converts member by member, by name). */
export interface OlderLayout {
  version: number;
  key: StructLayout;
  value: StructLayout;
}

export interface MapSpec<K = unknown, V = unknown, N extends string = string> {
  /** The map's name (the C variable); pinned as `name` (version 1) or `name@v<version>` (agent/datapath/pins.ts). */
  name: N;
  type: MapTypeName;
  /** max_entries in the compiled object. */
  maxEntries: number;
  key: StructLayout<K>;
  value: StructLayout<V>;
  /** This release's layout version: raised whenever key or value change. */
  version: number;
  /** The older layouts an agent may find pinned, newest first. */
  older: readonly OlderLayout[];
  migrate: MigrateAs;
}

function mapSpec<const N extends string, K, V>(
  name: N,
  type: MapTypeName,
  maxEntries: number,
  key: StructLayout<K>,
  value: StructLayout<V>,
  opts: { migrate?: MigrateAs; version?: number; older?: readonly OlderLayout[] } = {},
): MapSpec<K, V, N> {
  return { name, type, maxEntries, key, value, version: opts.version ?? 1, older: opts.older ?? [], migrate: opts.migrate ?? 'plan' };
}

export const MAPS = {
  svc: mapSpec('kpr_svc', 'hash', 262144, SVC_KEY, SVC_VAL, { version: 2, older: [{ version: 1, key: SVC_KEY, value: V1.SVC_VAL_V1 }] }),
  backend: mapSpec('kpr_backend', 'hash', 262144, U32, BACKEND),
  vip: mapSpec('kpr_vip', 'hash', 65536, VIP_KEY, VIP_VAL),
  revnat: mapSpec('kpr_revnat', 'lru_hash', 262144, REVNAT_KEY, REVNAT_VAL, {
    migrate: 'state',
    version: 2,
    older: [{ version: 1, key: REVNAT_KEY, value: V1.REVNAT_VAL_V1 }],
  }),
  affinity: mapSpec('kpr_affinity', 'lru_hash', 65536, AFFINITY_KEY, AFFINITY_VAL, {
    migrate: 'state',
    version: 2,
    older: [{ version: 1, key: V1.AFFINITY_KEY_V1, value: AFFINITY_VAL }],
  }),
  affinityMatch: mapSpec('kpr_aff_match', 'hash', 262144, AFFINITY_MATCH_KEY, U8, {
    version: 2,
    older: [{ version: 1, key: V1.AFFINITY_MATCH_KEY_V1, value: U8 }],
  }),
  term: mapSpec('kpr_term', 'hash', 4096, TERM_KEY, U8, { migrate: 'scratch', version: 2, older: [{ version: 1, key: V1.TERM_KEY_V1, value: U8 }] }),
  svcMeta: mapSpec('kpr_svc_meta', 'hash', 65536, U32, SVC_META, { version: 2, older: [{ version: 1, key: U32, value: V1.SVC_META_V1 }] }),
  ct: mapSpec('kpr_ct', 'lru_hash', 262144, CT_KEY, CT_VAL, { migrate: 'state', version: 2, older: [{ version: 1, key: CT_KEY, value: V1.CT_VAL_V1 }] }),
  srcRange: mapSpec('kpr_src_range', 'lpm_trie', 16384, SRC_RANGE_KEY, U8, { version: 2, older: [{ version: 1, key: V1.SRC_RANGE_KEY_V1, value: U8 }] }),
  svcCidr: mapSpec('kpr_svc_cidr', 'lpm_trie', 256, SVC_CIDR_KEY, U8),
  maglev: mapSpec('kpr_maglev', 'hash', 4096, MAGLEV_KEY, MAGLEV_CHUNK),
  maglevRef: mapSpec('kpr_maglev_ref', 'hash', 131072, MAGLEV_REF_KEY, MAGLEV_REF),
  config: mapSpec('kpr_config', 'array', 1, U32, CONFIG),
  stats: mapSpec('kpr_stats', 'percpu_array', 32, U32, U64),
  svcStats: mapSpec('kpr_svc_stats', 'percpu_array', 65536, U32, SVC_STAT),
  monitor: mapSpec('kpr_monitor', 'array', 1, U32, MONITOR),
} as const;

/** The maps with keys and values (every pinned map but the ring buffers). */
export type MapId = keyof typeof MAPS;

/** A BPF_MAP_TYPE_RINGBUF: records of one layout, read in order by one consumer (never looked up). */
export interface RingSpec<R = unknown, N extends string = string> {
  name: N;
  type: 'ringbuf';
  /** max_entries: the ring's size in bytes (a power of 2, a multiple of the page size). */
  maxEntries: number;
  record: StructLayout<R>;
}

function ringSpec<const N extends string, R>(name: N, bytes: number, record: StructLayout<R>): RingSpec<R, N> {
  return { name, type: 'ringbuf', maxEntries: bytes, record };
}

export const RINGS = {
  events: ringSpec('kpr_events', 256 * 1024, EVENT),
} as const;

export type RingId = keyof typeof RINGS;

/** Every pinned map, keyed or ring, by its registry id. */
export const ALL_MAPS: { readonly [I in MapId | RingId]: I extends MapId ? (typeof MAPS)[I] : I extends RingId ? (typeof RINGS)[I] : never } = {
  ...MAPS,
  ...RINGS,
};

/** Pinned name of each map (rings included), by its registry id. */
export const MAP_NAMES = Object.fromEntries(Object.entries(ALL_MAPS).map(([id, m]) => [id, m.name])) as {
  readonly [I in MapId | RingId]: (typeof ALL_MAPS)[I]['name'];
};

/** Every struct the maps hold (scalars aside). */
export const ALL_LAYOUTS: StructLayout[] = [
  ...new Set([...Object.values(MAPS).flatMap((m): StructLayout[] => [m.key, m.value]), ...Object.values(RINGS).map((r) => r.record as StructLayout)]),
].filter((l) => !l.scalar);

/** Registry entries of the keyed maps by map name (the rings are never migrated: agent/datapath/pins.ts). */
export const MAP_BY_NAME: ReadonlyMap<string, MapSpec & { id: MapId }> = new Map(
  Object.entries(MAPS).map(([id, m]) => [m.name, { ...(m as MapSpec), id: id as MapId }]),
);

/** A map's key and value layouts at `version` (this release's or an older one it reads); undefined for a version it does not know. */
export function layoutsAt(spec: MapSpec, version: number): { key: StructLayout; value: StructLayout } | undefined {
  if (version === spec.version) return { key: spec.key, value: spec.value };
  return spec.older.find((o) => o.version === version);
}
