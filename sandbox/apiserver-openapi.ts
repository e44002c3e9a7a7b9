/**
 * The sandbox API server's OpenAPI v3 documents, as far as kubectl reads them:
 * the index (/openapi/v3) and, per group-version, each served resource's
 * object path with its PATCH operation, its kind (x-kubernetes-group-version-kind)
 * and the `fieldValidation` query parameter. kubectl create/apply/replace
 * validate through the server when that parameter is listed for the kind;
 * without these documents they validate client side, which needs /openapi/v2,
 * and fail ("failed to download openapi"). No schemas: the server accepts
 * the parameter and does not check fields (unknown ones are kept).
 */
import { RESOURCES, SERVE_ALL, type ResourceDef, type Served } from './apiserver-resources.js';

const gvPath = (d: ResourceDef) => (d.group ? `apis/${d.group}/${d.version}` : `api/${d.version}`);

function objectPath(d: ResourceDef): string {
  return `/${gvPath(d)}/${d.namespaced ? 'namespaces/{namespace}/' : ''}${d.plural}/{name}`;
}

/**
 * /openapi/v2 (protobuf, the only encoding kubectl reads it in): a document with
 * `swagger: "2.0"` and no definitions, so client-side validation, which kubectl
 * falls back to for a kind the v3 documents do not list (a `kind: List` file),
 * finds no schema and checks nothing.
 */
export const OPENAPI_V2_PROTOBUF = Buffer.from([0x0a, 0x03, ...Buffer.from('2.0')]);

/** The document at `p` (/openapi/v3, /openapi/v3/api/v1, /openapi/v3/apis/GROUP/VERSION), or undefined. */
export function openApiDocument(p: string, served: Served = SERVE_ALL): unknown {
  if (p === '/openapi/v3') {
    const paths: Record<string, { serverRelativeURL: string }> = {};
    for (const d of RESOURCES.filter(served)) paths[gvPath(d)] = { serverRelativeURL: `/openapi/v3/${gvPath(d)}` };
    return { paths };
  }
  if (!p.startsWith('/openapi/v3/')) return undefined;
  const gv = p.slice('/openapi/v3/'.length);
  const defs = RESOURCES.filter((d) => gvPath(d) === gv && served(d));
  if (defs.length === 0) return undefined;
  const paths: Record<string, unknown> = {};
  for (const d of defs) {
    paths[objectPath(d)] = {
      patch: {
        operationId: `patch${d.namespaced ? 'Namespaced' : ''}${d.kind}`,
        parameters: [{ name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } }],
        'x-kubernetes-action': 'patch',
        'x-kubernetes-group-version-kind': { group: d.group, version: d.version, kind: d.kind },
      },
    };
  }
  return { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.31.0-kpr-sandbox' }, paths };
}
