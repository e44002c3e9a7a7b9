/** Public surface of the reconciler. */
export {
  Reconciler,
  type AdoptInconsistencies,
  type AdoptResult,
  type PlanSource,
  type ReconcileLogger,
  type SyncOptions,
  type SyncResult,
} from './reconciler.js';
export { MemoryDatapathMaps, svcKeyId, type FailureSpec, type MapCall, type MapOp, type MemoryDatapathMapsOptions } from './memory-datapath-maps.js';
export { IdAllocator } from './id-allocator.js';
