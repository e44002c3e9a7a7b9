/**
 * Validation of each watched object on its own, on the raw JSON the API
 * server sent (before client-node's ObjectSerializer turns it into model
 * classes). An object that fails is treated by the watcher as absent: kpr
 * never plans from a half-understood object.
 *
 * The rules are the API server's own (pkg/apis/core/validation and
 * pkg/apis/discovery/validation) for every field kpr reads, so an object a
 * real API server stored always passes; docs/validation.md lists them and
 * where kpr deliberately checks less.
 * Fields the API server fills by defaulting (type, protocol,
 * sessionAffinity, the traffic policies…) may be absent: absent means the
 * default, as the planner reads it. Cross-field rules that only apply when an
 * object is written, and whose tightening over releases left older stored
 * objects behind (e.g. "healthCheckNodePort may only be set when…"), are not
 * checked; the planner ignores those fields where they do not apply.
 *
 * On top of that, every field anywhere in the object must have the JSON type
 * of client-node's model (its OpenAPI type): arrays in particular, which
 * ObjectSerializer iterates (a number throws, a string becomes its
 * characters), so an object that passes always decodes into what kpr expects.
 *
 * Pure: no I/O, no state. Returns the first problem only, with its field path
 * (`spec.ports[2].nodePort`) and a reason quoting the value (≤64 characters).
 *
 * The checks live in agent/k8s/validate/: one module per kind (service.ts,
 * endpoint-slice.ts, node.ts) over the shared rules for metadata, names and
 * addresses, the JSON type checks (json-checks.ts) and the walk against
 * client-node's models (decodable.ts).
 */
import { Problem, object, truncate } from './validate/json-checks.js';
import { validateService } from './validate/service.js';
import { validateSlice } from './validate/endpoint-slice.js';
import { validateNode } from './validate/node.js';
import { decodable } from './validate/decodable.js';

export interface ObjectProblem {
  field: string;
  reason: string;
}

export type ValidatedKind = 'Service' | 'EndpointSlice' | 'Node';

export function validateObject(kind: ValidatedKind, raw: unknown): ObjectProblem | undefined {
  try {
    const o = object(raw, '(root)', true)!;
    if (kind === 'Service') validateService(o);
    else if (kind === 'EndpointSlice') validateSlice(o);
    else validateNode(o);
    decodable(o, MODEL_OF[kind], '');
    return undefined;
  } catch (e) {
    if (e instanceof Problem) return { field: e.field, reason: e.reason };
    // A check that did not foresee the input: still a rejection, never a crash.
    return { field: '(root)', reason: `cannot be validated: ${truncate(String((e as Error)?.message ?? e))}` };
  }
}

const MODEL_OF: Record<ValidatedKind, string> = { Service: 'V1Service', EndpointSlice: 'V1EndpointSlice', Node: 'V1Node' };
