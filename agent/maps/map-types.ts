/**
 * The value types of the pinned maps: one TypeScript shape per C struct of
 * bpf/include/kpr_types.h, as the codecs of layout.ts decode it. A leaf:
 * the registry (registry.ts, layouts-v1.ts) types its layouts with these and
 * layout.ts derives the codecs from the registry, so neither imports the
 * other for a type.
 *
 * Addresses are strings ("198.19.0.10", "2001:db8::1"), 16 bytes in the
 * maps, IPv4 stored IPv4-mapped (::ffff:a.b.c.d).
 */

export interface SvcKey {
  addr: string;
  port: number;
  slot: number;
  proto: number;
  scope: number;
}

export interface SvcVal {
  /**
   * Slot > 0: the backend id. Slot 0: the affinity timeout in seconds (0
   * without affinity), C's affinity_timeout_s: the same u32, a union there.
   */
  backendId: number;
  count: number;
  frontendId: number;
  flags: number;
}

export interface Backend {
  addr: string;
  port: number;
  proto: number;
  flags: number;
}

export interface RevNatKey {
  cookie: bigint;
  addr: string;
  port: number;
}

export interface RevNatVal {
  addr: string;
  port: number;
  frontendId: number;
}

export interface AffinityKey {
  netnsCookie: bigint;
  /** The client address on the tc path; "::" on the socket path. */
  client: string;
  frontendId: number;
}

export interface AffinityVal {
  lastUsedNs: bigint;
  backendId: number;
}

export interface AffinityMatchKey {
  backendId: number;
  frontendId: number;
}

export interface TermKey {
  addr: string;
  port: number;
  /** The frontend the backend left. */
  frontendId: number;
  proto: number;
}

export interface SvcMeta {
  /** "namespace/name". */
  name: string;
  portName: string;
  type: number;
  /** IPPROTO value of the frontend (0 in entries written before the field existed). */
  proto: number;
}

/** struct kpr_svc_stat: one CPU's counters of a frontend (kpr_svc_stats, indexed by frontend_id). */
export interface SvcStat {
  balanced: bigint;
  refused: bigint;
  droppedNoEndpoint: bigint;
  droppedNoLocalEndpoint: bigint;
  droppedSourceRange: bigint;
}

export interface CtKey {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
  dir: number;
}

export interface CtVal {
  natSaddr: string;
  natDaddr: string;
  natSport: number;
  natDport: number;
  backendId: number;
  expiresNs: bigint;
  frontendId: number;
  flags: number;
}

export interface SrcRangeKey {
  frontendId: number;
  /** "198.18.0.0/15" or "2001:db8::/32". */
  cidr: string;
}

/** A key of kpr_maglev: one chunk of KPR_MAGLEV_CHUNK entries of a Maglev table. */
export interface MaglevKey {
  tableId: number;
  chunk: number;
}

/** A value of kpr_maglev: KPR_MAGLEV_CHUNK slot numbers (1..count; 0 past the table's M). */
export type MaglevChunk = Uint16Array;

/** A key of kpr_maglev_ref: one entry set (frontend id and scope). */
export interface MaglevRefKey {
  frontendId: number;
  scope: number;
}

/** A value of kpr_maglev_ref: the entry set's table and its size M. */
export interface MaglevRef {
  tableId: number;
  m: number;
}

/** A key of kpr_svc_cidr: one service range. */
export interface SvcCidrKey {
  /** Canonical "198.18.0.0/15" or "2001:db8::/108". */
  cidr: string;
}

export interface KprConfig {
  hostNetnsCookie: bigint;
  /** Node address for SNAT of IPv4 flows ("" when the node has none). */
  snatV4: string;
  snatV6: string;
  tcpTimeoutS: number;
  tcpClosingTimeoutS: number;
  udpTimeoutS: number;
  flags: number;
}

/** struct kpr_monitor: events are emitted while bpf_ktime_get_ns() < untilNs (0: off). */
export interface KprMonitor {
  untilNs: bigint;
}

/** struct kpr_event, one record of kpr_events. */
export interface KprEvent {
  tsNs: bigint;
  cookie: bigint;
  netnsCookie: bigint;
  /** "::" on the socket path. */
  client: string;
  frontend: string;
  /** "::" when no backend was chosen. */
  backend: string;
  clientPort: number;
  frontendPort: number;
  backendPort: number;
  type: number;
  hook: number;
  frontendId: number;
  backendId: number;
  proto: number;
  family: number;
  scope: number;
  flags: number;
}
