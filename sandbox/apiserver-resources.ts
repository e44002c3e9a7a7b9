/**
 * The resources the sandbox API server serves: kind, list kind, plural, group
 * and version of each, as its routes, discovery documents and store name them.
 */

export interface ResourceDef {
  kind: string;
  listKind: string;
  plural: string;
  /** '' for the core group. */
  group: string;
  version: string;
  apiVersion: string;
  namespaced: boolean;
  shortNames?: string[];
}

export const RESOURCES: ResourceDef[] = [
  { kind: 'Service', listKind: 'ServiceList', plural: 'services', group: '', version: 'v1', apiVersion: 'v1', namespaced: true, shortNames: ['svc'] },
  {
    kind: 'EndpointSlice',
    listKind: 'EndpointSliceList',
    plural: 'endpointslices',
    group: 'discovery.k8s.io',
    version: 'v1',
    apiVersion: 'discovery.k8s.io/v1',
    namespaced: true,
  },
  { kind: 'Node', listKind: 'NodeList', plural: 'nodes', group: '', version: 'v1', apiVersion: 'v1', namespaced: false, shortNames: ['no'] },
  // The cluster's service ranges (GA in Kubernetes 1.33): served unless ApiServerOptions.unservedKinds names it (a pre-1.33 cluster).
  {
    kind: 'ServiceCIDR',
    listKind: 'ServiceCIDRList',
    plural: 'servicecidrs',
    group: 'networking.k8s.io',
    version: 'v1',
    apiVersion: 'networking.k8s.io/v1',
    namespaced: false,
  },
  // For `kpr cleanup-nodes` (the chart's uninstall clean-up): stored and served, no controller behind them.
  { kind: 'Pod', listKind: 'PodList', plural: 'pods', group: '', version: 'v1', apiVersion: 'v1', namespaced: true, shortNames: ['po'] },
  {
    kind: 'DaemonSet',
    listKind: 'DaemonSetList',
    plural: 'daemonsets',
    group: 'apps',
    version: 'v1',
    apiVersion: 'apps/v1',
    namespaced: true,
    shortNames: ['ds'],
  },
  // For docs/install.md's migration and roll back, run with the real kubectl (kube-proxy's ConfigMap, its copy).
  { kind: 'ConfigMap', listKind: 'ConfigMapList', plural: 'configmaps', group: '', version: 'v1', apiVersion: 'v1', namespaced: true, shortNames: ['cm'] },
];

/** Which resources one server serves (ApiServerOptions.unservedKinds leaves some out). */
export type Served = (def: ResourceDef) => boolean;

export const SERVE_ALL: Served = () => true;

/** Finds a resource by kind, plural or short name (case-insensitive). */
export function resourceFor(kindOrPlural: string): ResourceDef | undefined {
  const k = kindOrPlural.toLowerCase();
  return RESOURCES.find((r) => r.kind.toLowerCase() === k || r.plural === k || (r.shortNames ?? []).includes(k));
}
