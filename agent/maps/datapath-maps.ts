/**
 * The reconciler's view of the kernel maps. The real implementation
 * (bpf-datapath-maps.ts) writes pinned BPF maps through native/; tests of the
 * diff logic use an in-memory one. Every method is a batch so the real one can
 * use the kernel's batch operations.
 */
import type { Backend4, Svc4Key, Svc4Val } from './layout.js';

export interface DatapathMaps {
  dumpServices(): Array<[Svc4Key, Svc4Val]>;
  dumpBackends(): Array<[number, Backend4]>;
  updateServices(entries: Array<[Svc4Key, Svc4Val]>): void;
  deleteServices(keys: Svc4Key[]): void;
  updateBackends(entries: Array<[number, Backend4]>): void;
  deleteBackends(ids: number[]): void;
}
