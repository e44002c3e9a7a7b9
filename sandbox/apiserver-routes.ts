/**
 * The sandbox API server's URL space: resource paths (/api/v1/..., /apis/GROUP/VERSION/...,
 * the legacy /watch/ prefix, namespaced or not, the status subresource) parsed into the
 * resource they name, and the discovery documents client-node reads before it lists.
 */
import { RESOURCES, SERVE_ALL, type ResourceDef, type Served } from './apiserver-resources.js';
import type { ApiError } from './apiserver-status.js';

export interface Route {
  def: ResourceDef;
  namespace?: string;
  name?: string;
  subresource?: 'status';
  legacyWatch: boolean;
}

/** Parses /api/v1/... and /apis/GROUP/VERSION/... paths for the served resources. */
export function parseRoute(pathname: string): Route | ApiError | undefined {
  const parts = pathname
    .split('/')
    .filter((p) => p.length > 0)
    .map(decodeURIComponent);
  let group: string;
  let version: string;
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 2) {
    group = '';
    version = parts[1];
    rest = parts.slice(2);
  } else if (parts[0] === 'apis' && parts.length >= 3) {
    group = parts[1];
    version = parts[2];
    rest = parts.slice(3);
  } else return undefined;
  let legacyWatch = false;
  if (rest[0] === 'watch') {
    legacyWatch = true;
    rest = rest.slice(1);
  }
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const def = RESOURCES.find((r) => r.group === group && r.version === version && r.plural === rest[0]);
  if (!def || rest.length > 3) return undefined;
  if (namespace !== undefined && !def.namespaced) return undefined;
  const name = rest[1];
  let subresource: 'status' | undefined;
  if (rest.length === 3) {
    if (rest[2] !== 'status') return undefined;
    subresource = 'status';
  }
  return { def, namespace, name, subresource, legacyWatch };
}

/**
 * The discovery document at path `p` (/version, /api, /apis, /api/v1, /apis/GROUP/VERSION), or
 * undefined. `serverAddress` ("host:port") is what /api advertises.
 */
export function discoveryDocument(p: string, serverAddress: string, served: Served = SERVE_ALL): unknown {
  if (p === '/version') return { major: '1', minor: '31', gitVersion: 'v1.31.0-kpr-sandbox', platform: `${process.platform}/${process.arch}` };
  if (p === '/api') return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }] };
  if (p === '/apis') {
    return {
      kind: 'APIGroupList',
      apiVersion: 'v1',
      groups: [
        ...new Set(
          RESOURCES.filter(served)
            .map((r) => r.group)
            .filter(Boolean),
        ),
      ].map((name) => ({
        name,
        versions: [{ groupVersion: `${name}/v1`, version: 'v1' }],
        preferredVersion: { groupVersion: `${name}/v1`, version: 'v1' },
      })),
    };
  }
  const gvMatch = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))$/.exec(p);
  if (!gvMatch) return undefined;
  const group = gvMatch[2] ?? '';
  const version = gvMatch[1] ?? gvMatch[3];
  const defs = RESOURCES.filter((r) => r.group === group && r.version === version && served(r));
  if (defs.length === 0) return undefined;
  return {
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: group ? `${group}/${version}` : version,
    resources: defs.map((d) => ({
      name: d.plural,
      singularName: d.kind.toLowerCase(),
      namespaced: d.namespaced,
      kind: d.kind,
      verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
      shortNames: d.shortNames,
    })),
  };
}
