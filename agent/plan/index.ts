/** Public surface of the planner. */
export * from './types.js';
export { planService, type PlanContext } from './plan-service.js';
export { planDataplane, compareFrontends, type DataplaneInput } from './plan-dataplane.js';
export {
  categorizeEndpoints,
  topologyMode,
  CLUSTER_ONLY,
  type CategorizedEndpoints,
  type EndpointUse,
  type NodeTopology,
  type TopologyMode,
} from './categorize-endpoints.js';
export { endpointsByServicePort, groupSlicesByService, sliceServiceKey, portId, type Endpoint } from './endpoint-slices.js';
export {
  readServiceInfo,
  serviceKeyOf,
  DEFAULT_AFFINITY_SECONDS,
  MAX_AFFINITY_SECONDS,
  type ServiceInfo,
  type ServicePortInfo,
  type FamilyInfo,
} from './service-info.js';
export { nodePortAddresses, parseNodePortAddresses, type NodePortAddressFilter } from './node-addresses.js';
