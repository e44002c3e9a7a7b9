/**
 * Decodability: every field anywhere in the object has the JSON type of
 * client-node's model (its OpenAPI type), walked as ObjectSerializer.deserialize
 * would walk it; arrays in particular, which ObjectSerializer iterates (a
 * number throws, a string becomes its characters).
 */
import {
  DiscoveryV1EndpointPort,
  V1AttachedVolume,
  V1ClientIPConfig,
  V1Condition,
  V1ConfigMapNodeConfigSource,
  V1ContainerImage,
  V1DaemonEndpoint,
  V1Endpoint,
  V1EndpointConditions,
  V1EndpointHints,
  V1EndpointSlice,
  V1ForNode,
  V1ForZone,
  V1LoadBalancerIngress,
  V1LoadBalancerStatus,
  V1ManagedFieldsEntry,
  V1Node,
  V1NodeAddress,
  V1NodeCondition,
  V1NodeConfigSource,
  V1NodeConfigStatus,
  V1NodeDaemonEndpoints,
  V1NodeFeatures,
  V1NodeRuntimeHandler,
  V1NodeRuntimeHandlerFeatures,
  V1NodeSpec,
  V1NodeStatus,
  V1NodeSwapStatus,
  V1NodeSystemInfo,
  V1ObjectMeta,
  V1ObjectReference,
  V1OwnerReference,
  V1PortStatus,
  V1Service,
  V1ServicePort,
  V1ServiceSpec,
  V1ServiceStatus,
  V1SessionAffinityConfig,
  V1Taint,
} from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { fail, isObj, show, typeOf } from './json-checks.js';

interface AttributeType {
  baseName: string;
  type: string;
}
type Model = { getAttributeTypeMap(): AttributeType[] };
/**
 * The client-node models a Service, an EndpointSlice or a Node holds, by the
 * names their attribute maps use (named, not `import *`, so the agent's bundle
 * keeps no namespace of client-node's 2,500 models); a model missing here is
 * not walked (test/k8s/validate.test.ts checks none is).
 */
export const MODELS: Readonly<Record<string, Model | undefined>> = Object.freeze({
  DiscoveryV1EndpointPort,
  V1AttachedVolume,
  V1ClientIPConfig,
  V1Condition,
  V1ConfigMapNodeConfigSource,
  V1ContainerImage,
  V1DaemonEndpoint,
  V1Endpoint,
  V1EndpointConditions,
  V1EndpointHints,
  V1EndpointSlice,
  V1ForNode,
  V1ForZone,
  V1LoadBalancerIngress,
  V1LoadBalancerStatus,
  V1ManagedFieldsEntry,
  V1Node,
  V1NodeAddress,
  V1NodeCondition,
  V1NodeConfigSource,
  V1NodeConfigStatus,
  V1NodeDaemonEndpoints,
  V1NodeFeatures,
  V1NodeRuntimeHandler,
  V1NodeRuntimeHandlerFeatures,
  V1NodeSpec,
  V1NodeStatus,
  V1NodeSwapStatus,
  V1NodeSystemInfo,
  V1ObjectMeta,
  V1ObjectReference,
  V1OwnerReference,
  V1PortStatus,
  V1Service,
  V1ServicePort,
  V1ServiceSpec,
  V1ServiceStatus,
  V1SessionAffinityConfig,
  V1Taint,
});
const MAP_PREFIX = '{ [key: string]: ';

function join(path: string, child: string): string {
  return path === '' ? child : `${path}.${child}`;
}

const PRIMITIVE: Record<string, string> = { string: 'string', number: 'number', boolean: 'boolean', Date: 'string' };

/** Walks `v` as client-node's ObjectSerializer.deserialize would, failing at the first value not of the model's type. */
export function decodable(v: unknown, type: string, path: string): void {
  if (v === undefined || v === null) return;
  const primitive = PRIMITIVE[type];
  if (primitive !== undefined) {
    if (typeof v !== primitive) fail(path, `must be a ${primitive}, not ${typeOf(v)} (${show(v)})`);
    return;
  }
  if (type.startsWith('Array<')) {
    if (!Array.isArray(v)) fail(path, `must be an array, not ${typeOf(v)} (${show(v)})`);
    const inner = type.slice(6, -1);
    if (isStructured(inner)) for (let i = 0; i < v.length; i++) decodable(v[i], inner, `${path}[${i}]`);
    return;
  }
  if (type.startsWith(MAP_PREFIX)) {
    const inner = type.slice(MAP_PREFIX.length, -3);
    if (!isObj(v)) fail(path, `must be an object, not ${typeOf(v)} (${show(v)})`);
    if (isStructured(inner)) for (const k in v) decodable(v[k], inner, `${path}[${k}]`);
    return;
  }
  const model = MODELS[type];
  if (!model || typeof model.getAttributeTypeMap !== 'function') return;
  if (!isObj(v)) fail(path, `must be an object, not ${typeOf(v)} (${show(v)})`);
  for (const a of model.getAttributeTypeMap()) decodable(v[a.baseName], a.type, join(path, a.baseName));
}

function isStructured(type: string): boolean {
  return PRIMITIVE[type] !== undefined || type.startsWith('Array<') || type.startsWith(MAP_PREFIX) || typeof MODELS[type]?.getAttributeTypeMap === 'function';
}
