/** Public surface of the planner. */
export * from './types.js';
export { planService, type PlanContext } from './plan-service.js';
export { planDataplane, compareFrontends, type DataplaneInput } from './plan-dataplane.js';
export { categorizeEndpoints, CLUSTER_ONLY, type CategorizedEndpoints, type EndpointUse } from './categorize-endpoints.js';
export { endpointsByServicePort, groupSlicesByService, sliceServiceKey, portId, type Endpoint } from './endpoint-slices.js';
export { readServiceInfo, serviceKeyOf, type ServiceInfo, type ServicePortInfo } from './service-info.js';
export { parseIPv4 } from './ip.js';
