/**
 * A ClusterSource the tests fill by hand: the sync loop reads Services and
 * their slices from these maps, as it reads the watch layer's caches.
 */
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import type { ClusterSource } from '../../../agent/sync/sync-loop.js';

export class FakeCluster implements ClusterSource {
  readonly svcs = new Map<string, V1Service>();
  readonly slices = new Map<string, V1EndpointSlice[]>();
  serviceKeys() {
    return this.svcs.keys();
  }
  serviceByKey(key: string) {
    return this.svcs.get(key);
  }
  endpointSlicesByKey(key: string) {
    return this.slices.get(key) ?? [];
  }
  node(): V1Node | undefined {
    return undefined;
  }
}
