/**
 * The reconciler's view of the kernel maps. The real implementation
 * (bpf-datapath-maps.ts) writes pinned BPF maps through native/; tests of the
 * diff logic use an in-memory one. Every method is a batch so the real one can
 * use the kernel's batch operations.
 */
import type { AffinityMatchKey, Backend, SrcRangeKey, SvcKey, SvcMeta, SvcVal } from './layout.js';

export interface DatapathMaps {
  dumpServices(): Array<[SvcKey, SvcVal]>;
  dumpBackends(): Array<[number, Backend]>;
  updateServices(entries: Array<[SvcKey, SvcVal]>): void;
  deleteServices(keys: SvcKey[]): void;
  updateBackends(entries: Array<[number, Backend]>): void;
  deleteBackends(ids: number[]): void;
  /** kpr_vip: service address → VIP_FLAG bits. */
  dumpVips(): Array<[string, number]>;
  updateVips(entries: Array<[string, number]>): void;
  deleteVips(addrs: string[]): void;
  /** kpr_aff_match: valid (backend, frontend) pairs of frontends with affinity. */
  dumpAffinityMatches(): AffinityMatchKey[];
  updateAffinityMatches(keys: AffinityMatchKey[]): void;
  deleteAffinityMatches(keys: AffinityMatchKey[]): void;
  /** kpr_svc_meta: revNatId → names (read by the CLI only). */
  dumpSvcMeta(): Array<[number, SvcMeta]>;
  updateSvcMeta(entries: Array<[number, SvcMeta]>): void;
  deleteSvcMeta(revNatIds: number[]): void;
  /** kpr_src_range: (revNatId, client CIDR) pairs allowed by loadBalancerSourceRanges. */
  dumpSrcRanges(): SrcRangeKey[];
  updateSrcRanges(keys: SrcRangeKey[]): void;
  deleteSrcRanges(keys: SrcRangeKey[]): void;
  /**
   * Where updates may be queued (BpfDatapathMaps with a BatchWriter): waits
   * until every call so far has reached the kernel, throwing the first
   * failure. Each other method already waits for the calls before it.
   */
  flush?(): void;
}

/**
 * Backend-map values read field by field, by backend id (the reconciler's
 * columnar mirror): what updateBackendColumns encodes, with no object per
 * backend.
 */
export interface BackendColumns {
  /** The IPv4 address as a u32, or -1 when the address is only known as text (addr). */
  ipv4(id: number): number;
  addr(id: number): string;
  port(id: number): number;
  proto(id: number): number;
  flags(id: number): number;
}
