/**
 * The reconciler's view of the kernel maps. The real implementation
 * (bpf-datapath-maps.ts) writes pinned BPF maps through native/; tests of the
 * diff logic use an in-memory one. Every method is a batch so the real one can
 * use the kernel's batch operations.
 */
import type { Backend, SvcKey, SvcVal } from './layout.js';

export interface DatapathMaps {
  dumpServices(): Array<[SvcKey, SvcVal]>;
  dumpBackends(): Array<[number, Backend]>;
  updateServices(entries: Array<[SvcKey, SvcVal]>): void;
  deleteServices(keys: SvcKey[]): void;
  updateBackends(entries: Array<[number, Backend]>): void;
  deleteBackends(ids: number[]): void;
}
