/** The API server's limits (pkg/apis/discovery/validation, pkg/apis/core/validation). */
export const LIMITS = Object.freeze({
  sliceEndpoints: 1000,
  endpointAddresses: 100,
  slicePorts: 20000,
  zoneHints: 8,
  nodeHints: 8,
  ipFamilies: 2,
  clusterIPs: 2,
  annotationBytes: 256 * 1024,
  affinitySeconds: 86400,
});
