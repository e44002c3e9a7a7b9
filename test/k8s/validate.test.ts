/**
 * validateObject (agent/k8s/validate.ts): every watched object checked on its
 * own, on raw JSON, with the API server's rules for the fields kpr reads
 * (docs/validation.md).
 *
 * Valid objects pass: what a real API server returns (defaulted fields,
 * managedFields, dual stack, load-balancer status, hints, a Node with images
 * and taints), minimal hand-written manifests, and every Service,
 * EndpointSlice and Node of test/fixtures/plan. Each hostile case changes one
 * field of a valid object and must be rejected with exactly that field's
 * path; reasons quote the value in at most 64 characters.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import YAML from 'yaml';
import * as allModels from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { validateObject, type ValidatedKind } from '../../agent/k8s/validate.js';
import { MODELS } from '../../agent/k8s/validate/decodable.js';
import { repoRoot } from '../support/paths.js';

type Json = any;

/** A Service as a current API server returns it (defaults filled, managedFields kept). */
function apiService(): Json {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: 'web',
      namespace: 'shop',
      uid: '7b1e3c1a-0000-4000-8000-000000000001',
      resourceVersion: '12345',
      creationTimestamp: '2024-05-01T10:00:00Z',
      labels: { app: 'web', 'app.kubernetes.io/part-of': 'shop' },
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{"apiVersion":"v1"}\n' },
      managedFields: [
        { manager: 'kubectl', operation: 'Update', apiVersion: 'v1', time: '2024-05-01T10:00:00Z', fieldsType: 'FieldsV1', fieldsV1: { 'f:spec': {} } },
      ],
      finalizers: ['service.kubernetes.io/load-balancer-cleanup'],
    },
    spec: {
      type: 'LoadBalancer',
      selector: { app: 'web' },
      clusterIP: '10.96.0.10',
      clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'PreferDualStack',
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 30080 },
        { name: 'https', protocol: 'TCP', port: 443, targetPort: 'https', nodePort: 30443, appProtocol: 'kubernetes.io/h2c' },
        { name: 'dns', protocol: 'UDP', port: 53, targetPort: 53, nodePort: 30080 },
      ],
      externalIPs: ['198.51.100.7', '2001:db8::7'],
      loadBalancerSourceRanges: ['203.0.113.0/24', ' 2001:db8:1::/48 '],
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Cluster',
      healthCheckNodePort: 32000,
      allocateLoadBalancerNodePorts: true,
    },
    status: {
      loadBalancer: {
        ingress: [{ ip: '203.0.113.7', ipMode: 'VIP' }, { ip: '203.0.113.8', ipMode: 'Proxy' }, { hostname: 'lb.example.com' }],
      },
      conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: '2024-05-01T10:00:00Z', reason: 'Ok', message: '' }],
    },
  };
}

function apiSlice(): Json {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'web-7x2kq',
      namespace: 'shop',
      generateName: 'web-',
      resourceVersion: '777',
      labels: { 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2024-05-01T10:00:00Z' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: 'web', uid: 'u', controller: true, blockOwnerDeletion: true }],
    },
    addressType: 'IPv4',
    endpoints: [
      {
        addresses: ['10.0.1.1'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node-1.example.com',
        zone: 'zone-a',
        hostname: 'web-0',
        targetRef: { kind: 'Pod', namespace: 'shop', name: 'web-0', uid: 'u2' },
        hints: { forZones: [{ name: 'zone-a' }], forNodes: [{ name: 'node-1.example.com' }] },
      },
      { addresses: ['010.0.1.2'], conditions: { ready: false, serving: true, terminating: true }, nodeName: 'node-2' },
      { addresses: ['::ffff:10.0.1.3'], conditions: {} },
    ],
    ports: [
      { name: 'http', protocol: 'TCP', port: 8080, appProtocol: 'http' },
      { name: '', protocol: 'UDP', port: 5353 },
    ],
  };
}

function apiNode(): Json {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'node-1.example.com',
      resourceVersion: '9',
      labels: { 'kubernetes.io/hostname': 'node-1', 'topology.kubernetes.io/zone': 'zone-a', 'node-role.kubernetes.io/control-plane': '' },
      annotations: { 'node.alpha.kubernetes.io/ttl': '0' },
    },
    spec: {
      podCIDR: '10.244.0.0/24',
      podCIDRs: ['10.244.0.0/24'],
      taints: [{ key: 'ToBeDeletedByClusterAutoscaler', value: '1714557600', effect: 'NoSchedule' }],
    },
    status: {
      addresses: [
        { type: 'InternalIP', address: '192.168.1.10' },
        { type: 'InternalIP', address: 'fd00:1::10' },
        { type: 'Hostname', address: 'node-1' },
      ],
      capacity: { cpu: '4', memory: '8Gi' },
      conditions: [{ type: 'Ready', status: 'True', lastHeartbeatTime: '2024-05-01T10:00:00Z' }],
      images: [{ names: ['registry.k8s.io/pause:3.9'], sizeBytes: 1 }],
      nodeInfo: { kubeletVersion: 'v1.31.0' },
    },
  };
}

/** A deep copy of `o` with the value at `p` (dotted, [n] for indices) set; undefined deletes it. */
function withField(o: Json, p: string, v: unknown): Json {
  const copy = structuredClone(o);
  const parts = p.replace(/\[(\d+)\]/g, '.$1').split('.');
  let cur = copy;
  for (const k of parts.slice(0, -1)) cur = cur[k] ??= {};
  const last = parts[parts.length - 1];
  if (v === undefined) delete cur[last];
  else cur[last] = v;
  return copy;
}

const BASE: Record<ValidatedKind, () => Json> = { Service: apiService, EndpointSlice: apiSlice, Node: apiNode };

interface Hostile {
  kind: ValidatedKind;
  /** The field to change (and, unless `field` says otherwise, the path reported). */
  set: string;
  value: unknown;
  /** The path validateObject must report, when not `set`. */
  field?: string;
  /** A substring of the reason. */
  reason?: string;
  /** Build the object another way than one field change. */
  object?: Json;
}

const long = (n: number, c = 'a') => c.repeat(n);
const many = <T>(n: number, f: (i: number) => T) => Array.from({ length: n }, (_, i) => f(i));

const hostile: Hostile[] = [
  // ---- the object itself
  { kind: 'Service', set: '(root)', value: null, object: 5, reason: 'must be an object' },
  { kind: 'Service', set: '(root)', value: null, object: [apiService()], reason: 'must be an object' },
  { kind: 'Service', set: 'metadata', value: 'web' },
  { kind: 'Service', set: 'metadata', value: undefined, reason: 'required' },
  // ---- metadata
  { kind: 'Service', set: 'metadata.name', value: undefined, reason: 'required' },
  { kind: 'Service', set: 'metadata.name', value: '', reason: 'required' },
  { kind: 'Service', set: 'metadata.name', value: 5, reason: 'must be a string' },
  { kind: 'Service', set: 'metadata.name', value: 'a/b', reason: 'DNS-1035' },
  { kind: 'Service', set: 'metadata.name', value: '1web', reason: 'DNS-1035' },
  { kind: 'Service', set: 'metadata.name', value: 'Web' },
  { kind: 'Service', set: 'metadata.name', value: 'wéb' },
  { kind: 'Service', set: 'metadata.name', value: 'web\u0000' },
  { kind: 'Service', set: 'metadata.name', value: long(64) },
  { kind: 'Service', set: 'metadata.name', value: 'web.shop', reason: 'DNS-1035' },
  { kind: 'Service', set: 'metadata.namespace', value: undefined, reason: 'required' },
  { kind: 'Service', set: 'metadata.namespace', value: 'a/b' },
  { kind: 'Service', set: 'metadata.namespace', value: ['shop'], reason: 'must be a string' },
  { kind: 'Service', set: 'metadata.namespace', value: long(64) },
  { kind: 'Service', set: 'metadata.namespace', value: '🙂' },
  { kind: 'Service', set: 'metadata.resourceVersion', value: 12345 },
  { kind: 'Service', set: 'metadata.labels', value: 'app=web', reason: 'must be an object' },
  { kind: 'Service', set: 'metadata.labels', value: ['app'] },
  { kind: 'Service', set: 'metadata.labels', value: { app: 5 }, field: 'metadata.labels[app]', reason: 'must be a string' },
  { kind: 'Service', set: 'metadata.labels', value: { app: long(64) }, field: 'metadata.labels[app]', reason: 'label value' },
  { kind: 'Service', set: 'metadata.labels', value: { 'a b': 'x' }, field: 'metadata.labels[a b]', reason: 'qualified name' },
  { kind: 'Service', set: 'metadata.labels', value: { 'Bad_Prefix/x': 'y' }, field: 'metadata.labels[Bad_Prefix/x]', reason: 'prefix' },
  {
    kind: 'Service',
    set: 'metadata.labels',
    value: { 'service.kubernetes.io/service-proxy-name': { x: 1 } },
    field: 'metadata.labels[service.kubernetes.io/service-proxy-name]',
  },
  { kind: 'Service', set: 'metadata.annotations', value: 5 },
  { kind: 'Service', set: 'metadata.annotations', value: { a: 1 }, field: 'metadata.annotations[a]' },
  { kind: 'Service', set: 'metadata.annotations', value: { big: long(256 * 1024) }, reason: 'at most 262144 bytes' },
  { kind: 'Service', set: 'metadata.managedFields', value: 5, reason: 'must be an array' },
  { kind: 'Service', set: 'metadata.managedFields', value: 'x', reason: 'must be an array' },
  { kind: 'Service', set: 'metadata.ownerReferences', value: {} },
  { kind: 'Service', set: 'metadata.finalizers', value: 'x' },
  { kind: 'Service', set: 'metadata.deletionTimestamp', value: 5 },
  // ---- spec: type, ports
  { kind: 'Service', set: 'spec', value: 'x', reason: 'must be an object' },
  { kind: 'Service', set: 'spec.type', value: 'Magic', reason: 'must be one of ClusterIP, NodePort, LoadBalancer, ExternalName' },
  { kind: 'Service', set: 'spec.type', value: 1 },
  { kind: 'Service', set: 'spec.ports', value: 5, reason: 'must be an array' },
  { kind: 'Service', set: 'spec.ports', value: 'http', reason: 'must be an array' },
  { kind: 'Service', set: 'spec.ports', value: [], reason: 'required' },
  { kind: 'Service', set: 'spec.ports', value: undefined, reason: 'required' },
  { kind: 'Service', set: 'spec.ports[1]', value: 5, reason: 'must be an object' },
  { kind: 'Service', set: 'spec.ports[1]', value: null, reason: 'required' },
  { kind: 'Service', set: 'spec.ports[0].port', value: 0, reason: 'between 1 and 65535' },
  { kind: 'Service', set: 'spec.ports[0].port', value: -1 },
  { kind: 'Service', set: 'spec.ports[0].port', value: 65536 },
  { kind: 'Service', set: 'spec.ports[0].port', value: '80', reason: 'must be an integer' },
  { kind: 'Service', set: 'spec.ports[0].port', value: 80.5, reason: 'must be an integer' },
  { kind: 'Service', set: 'spec.ports[0].port', value: 2 ** 40, reason: 'must be an integer' },
  { kind: 'Service', set: 'spec.ports[0].port', value: undefined, reason: 'required' },
  { kind: 'Service', set: 'spec.ports[2].nodePort', value: -1, reason: 'between 0 and 65535' },
  { kind: 'Service', set: 'spec.ports[2].nodePort', value: 70000 },
  { kind: 'Service', set: 'spec.ports[2].nodePort', value: '30080', reason: 'must be an integer, not a string ("30080")' },
  { kind: 'Service', set: 'spec.ports[2].nodePort', value: 30080.5 },
  { kind: 'Service', set: 'spec.ports[1].nodePort', value: 30080, reason: 'duplicate nodePort 30080/TCP' },
  { kind: 'Service', set: 'spec.ports[1].protocol', value: 'ICMP', reason: 'must be one of TCP, UDP, SCTP' },
  { kind: 'Service', set: 'spec.ports[1].protocol', value: 'tcp' },
  { kind: 'Service', set: 'spec.ports[1].port', value: 80, field: 'spec.ports[1]', reason: 'duplicate port 80/TCP' },
  { kind: 'Service', set: 'spec.ports[1].name', value: 'http', reason: 'duplicate name' },
  { kind: 'Service', set: 'spec.ports[1].name', value: undefined, reason: 'required when there is more than one port' },
  { kind: 'Service', set: 'spec.ports[1].name', value: 'HTTPS', reason: 'DNS-1123 label' },
  { kind: 'Service', set: 'spec.ports[1].name', value: long(64) },
  { kind: 'Service', set: 'spec.ports[1].name', value: 7 },
  { kind: 'Service', set: 'spec.ports[1].targetPort', value: 'no_such_port!', reason: 'IANA service name' },
  { kind: 'Service', set: 'spec.ports[1].targetPort', value: 70000 },
  { kind: 'Service', set: 'spec.ports[1].targetPort', value: { x: 1 }, reason: 'must be an integer' },
  // ---- clusterIP(s), families
  { kind: 'Service', set: 'spec.clusterIP', value: '10.96.0.300', reason: 'valid IP' },
  { kind: 'Service', set: 'spec.clusterIP', value: 10, reason: 'must be a string' },
  { kind: 'Service', set: 'spec.clusterIPs', value: '10.96.0.10', reason: 'must be an array' },
  { kind: 'Service', set: 'spec.clusterIPs', value: ['10.96.0.10', 'fd00::1', '10.96.0.11'], reason: 'at most 2' },
  { kind: 'Service', set: 'spec.clusterIPs', value: ['10.96.0.11', 'fd00:10:96::a'], reason: 'must start with clusterIP' },
  { kind: 'Service', set: 'spec.clusterIPs[1]', value: '10.96.0.11', reason: 'IPv6 address as spec.ipFamilies[1] says' },
  { kind: 'Service', set: 'spec.clusterIPs[1]', value: 'fe80::1%eth0', reason: 'valid IP' },
  { kind: 'Service', set: 'spec.clusterIPs[1]', value: 7 },
  { kind: 'Service', set: 'spec.ipFamilies', value: 'IPv4', reason: 'must be an array' },
  { kind: 'Service', set: 'spec.ipFamilies', value: many(1000, () => 'IPv4'), reason: 'at most 2 entries, not 1000' },
  { kind: 'Service', set: 'spec.ipFamilies[1]', value: 'IPv4', reason: 'duplicate' },
  { kind: 'Service', set: 'spec.ipFamilies[1]', value: 'IPv5', reason: 'must be one of IPv4, IPv6' },
  { kind: 'Service', set: 'spec.ipFamilyPolicy', value: 'DualStackPlease' },
  // ---- external addresses, ranges
  { kind: 'Service', set: 'spec.externalIPs', value: '198.51.100.7', reason: 'must be an array' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: 'nope', reason: 'valid IP' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '127.0.0.1', reason: 'loopback' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '0.0.0.0', reason: 'unspecified' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '169.254.169.254', reason: 'link-local' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '224.0.0.251', reason: 'link-local multicast' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '::1', reason: 'loopback' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '::', reason: 'unspecified' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: 'fe80::1', reason: 'link-local' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: 'ff02::fb', reason: 'link-local multicast' },
  { kind: 'Service', set: 'spec.externalIPs[1]', value: '::ffff:127.0.0.1', reason: 'loopback' },
  { kind: 'Service', set: 'spec.loadBalancerIP', value: 7 },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges', value: '10.0.0.0/8', reason: 'must be an array, not a string ("10.0.0.0/8")' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: '10.0.0.0', reason: 'must be a CIDR' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: '10.0.0.0/33' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: '10.0.0.0/-1' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: 'fe80::%eth0/64' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: '' },
  { kind: 'Service', set: 'spec.loadBalancerSourceRanges[0]', value: 10 },
  // ---- affinity, policies, health check
  { kind: 'Service', set: 'spec.sessionAffinity', value: 'Sticky', reason: 'must be one of None, ClientIP' },
  { kind: 'Service', set: 'spec.sessionAffinityConfig', value: 'x' },
  { kind: 'Service', set: 'spec.sessionAffinityConfig.clientIP', value: 3 },
  { kind: 'Service', set: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds', value: 0, reason: 'between 1 and 86400' },
  { kind: 'Service', set: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds', value: 86401 },
  { kind: 'Service', set: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds', value: '600', reason: 'must be an integer' },
  { kind: 'Service', set: 'spec.externalTrafficPolicy', value: 'local', reason: 'must be one of Cluster, Local' },
  { kind: 'Service', set: 'spec.externalTrafficPolicy', value: true },
  { kind: 'Service', set: 'spec.internalTrafficPolicy', value: 'Node' },
  { kind: 'Service', set: 'spec.healthCheckNodePort', value: -1, reason: 'between 0 and 65535' },
  { kind: 'Service', set: 'spec.healthCheckNodePort', value: 70000 },
  { kind: 'Service', set: 'spec.healthCheckNodePort', value: 'x', reason: 'must be an integer' },
  // ---- status
  { kind: 'Service', set: 'status', value: 5 },
  { kind: 'Service', set: 'status.loadBalancer', value: [] },
  { kind: 'Service', set: 'status.loadBalancer.ingress', value: 5, reason: 'must be an array' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[0]', value: '203.0.113.7', reason: 'must be an object' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[0].ip', value: '203.0.113', reason: 'valid IP' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[0].ip', value: ['203.0.113.7'] },
  { kind: 'Service', set: 'status.loadBalancer.ingress[0].ipMode', value: 'Direct', reason: 'must be one of VIP, Proxy' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[2].ipMode', value: 'VIP', reason: 'may not be set without ip' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[2].hostname', value: '203.0.113.9', reason: 'not an IP address' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[2].hostname', value: 'LB.example.com', reason: 'DNS-1123 subdomain' },
  { kind: 'Service', set: 'status.loadBalancer.ingress[0].ports', value: 5, reason: 'must be an array' },
  { kind: 'Service', set: 'status.conditions', value: 'Ready', reason: 'must be an array' },

  // ---- EndpointSlice
  { kind: 'EndpointSlice', set: 'metadata.name', value: 'Web_1', reason: 'DNS-1123 subdomain' },
  { kind: 'EndpointSlice', set: 'metadata.name', value: 'web/1' },
  { kind: 'EndpointSlice', set: 'metadata.name', value: long(254) },
  { kind: 'EndpointSlice', set: 'metadata.namespace', value: undefined, reason: 'required' },
  {
    kind: 'EndpointSlice',
    set: 'metadata.labels',
    value: { 'kubernetes.io/service-name': 'a/b' },
    field: 'metadata.labels[kubernetes.io/service-name]',
    reason: 'label value',
  },
  { kind: 'EndpointSlice', set: 'metadata.labels', value: { 'kubernetes.io/service-name': 5 }, field: 'metadata.labels[kubernetes.io/service-name]' },
  {
    kind: 'EndpointSlice',
    set: 'metadata.annotations',
    value: { 'endpoints.kubernetes.io/last-change-trigger-time': 5 },
    field: 'metadata.annotations[endpoints.kubernetes.io/last-change-trigger-time]',
  },
  { kind: 'EndpointSlice', set: 'metadata.managedFields', value: 5 },
  { kind: 'EndpointSlice', set: 'addressType', value: undefined, reason: 'required' },
  { kind: 'EndpointSlice', set: 'addressType', value: 'IP', reason: 'must be one of IPv4, IPv6, FQDN' },
  { kind: 'EndpointSlice', set: 'addressType', value: 4 },
  { kind: 'EndpointSlice', set: 'endpoints', value: 5, reason: 'must be an array' },
  { kind: 'EndpointSlice', set: 'endpoints', value: { 0: {} } },
  {
    kind: 'EndpointSlice',
    set: 'endpoints',
    value: many(1001, (i) => ({ addresses: [`10.1.${i >> 8}.${i & 255}`] })),
    reason: 'at most 1000 entries, not 1001',
  },
  { kind: 'EndpointSlice', set: 'endpoints[1]', value: 5, reason: 'must be an object' },
  { kind: 'EndpointSlice', set: 'endpoints[1]', value: null, reason: 'required' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses', value: [], reason: 'at least 1 address' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses', value: undefined, reason: 'at least 1 address' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses', value: '10.0.1.2', reason: 'must be an array' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses', value: many(101, (i) => `10.2.0.${i}`), reason: 'at most 100 entries' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: 'fe80::1%eth0', reason: 'valid IPv4' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: '2001:db8::1', reason: 'valid IPv4' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: '10.0.1', reason: 'valid IPv4' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: 10 },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: '127.0.0.1', reason: 'loopback' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: '169.254.169.254', reason: 'link-local' },
  { kind: 'EndpointSlice', set: 'endpoints[1].addresses[0]', value: '0.0.0.0', reason: 'unspecified' },
  { kind: 'EndpointSlice', set: 'endpoints[0].conditions', value: 'ready' },
  { kind: 'EndpointSlice', set: 'endpoints[0].conditions.ready', value: 'false', reason: 'must be a boolean' },
  { kind: 'EndpointSlice', set: 'endpoints[0].conditions.serving', value: 1 },
  { kind: 'EndpointSlice', set: 'endpoints[0].conditions.terminating', value: 'no' },
  { kind: 'EndpointSlice', set: 'endpoints[0].nodeName', value: 'Node_1', reason: 'DNS-1123 subdomain' },
  { kind: 'EndpointSlice', set: 'endpoints[0].nodeName', value: 7 },
  { kind: 'EndpointSlice', set: 'endpoints[0].zone', value: 7 },
  { kind: 'EndpointSlice', set: 'endpoints[0].hostname', value: 'web.0', reason: 'DNS-1123 label' },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints', value: 'zone-a' },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forZones', value: 'zone-a', reason: 'must be an array' },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forZones', value: many(9, (i) => ({ name: `z${i}` })), reason: 'at most 8' },
  {
    kind: 'EndpointSlice',
    set: 'endpoints[0].hints.forZones',
    value: [{ name: 'a' }, { name: 'a' }],
    field: 'endpoints[0].hints.forZones[1].name',
    reason: 'duplicate',
  },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forZones[0].name', value: 'zone a', reason: 'label value' },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forZones[0].name', value: 5 },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forNodes', value: many(9, (i) => ({ name: `n${i}` })), reason: 'at most 8' },
  { kind: 'EndpointSlice', set: 'endpoints[0].hints.forNodes[0].name', value: 'Node 1', reason: 'DNS-1123 subdomain' },
  { kind: 'EndpointSlice', set: 'endpoints[0].targetRef', value: 'pod' },
  { kind: 'EndpointSlice', set: 'ports', value: 5, reason: 'must be an array' },
  { kind: 'EndpointSlice', set: 'ports', value: many(20001, (i) => ({ name: `p${i}`, port: 80 })), reason: 'at most 20000' },
  { kind: 'EndpointSlice', set: 'ports[1]', value: 'udp', reason: 'must be an object' },
  { kind: 'EndpointSlice', set: 'ports[1].name', value: 'http', reason: 'duplicate' },
  { kind: 'EndpointSlice', set: 'ports[1].name', value: 'DNS', reason: 'DNS-1123 label' },
  { kind: 'EndpointSlice', set: 'ports[1].port', value: '5353', reason: 'must be an integer' },
  { kind: 'EndpointSlice', set: 'ports[1].port', value: 5353.5 },
  { kind: 'EndpointSlice', set: 'ports[1].protocol', value: 'QUIC', reason: 'must be one of TCP, UDP, SCTP' },
  { kind: 'EndpointSlice', set: 'ports[1].appProtocol', value: 1 },

  // ---- Node
  { kind: 'Node', set: 'metadata.name', value: 'Node_1', reason: 'DNS-1123 subdomain' },
  { kind: 'Node', set: 'metadata.name', value: undefined, reason: 'required' },
  { kind: 'Node', set: 'metadata.namespace', value: 'default', reason: 'not allowed' },
  {
    kind: 'Node',
    set: 'metadata.labels',
    value: { 'topology.kubernetes.io/zone': 'zone a' },
    field: 'metadata.labels[topology.kubernetes.io/zone]',
    reason: 'label value',
  },
  { kind: 'Node', set: 'metadata.labels', value: { 'topology.kubernetes.io/zone': ['a'] }, field: 'metadata.labels[topology.kubernetes.io/zone]' },
  { kind: 'Node', set: 'metadata.deletionTimestamp', value: {} },
  { kind: 'Node', set: 'spec', value: [] },
  { kind: 'Node', set: 'spec.taints', value: 'x', reason: 'must be an array' },
  { kind: 'Node', set: 'spec.taints[0]', value: 'ToBeDeletedByClusterAutoscaler' },
  { kind: 'Node', set: 'spec.taints[0].key', value: 5 },
  { kind: 'Node', set: 'spec.taints[0].key', value: '', reason: 'qualified name' },
  { kind: 'Node', set: 'spec.taints[0].effect', value: 'Maybe' },
  { kind: 'Node', set: 'spec.taints[0].effect', value: undefined, reason: 'required' },
  { kind: 'Node', set: 'spec.podCIDRs', value: '10.244.0.0/24', reason: 'must be an array' },
  { kind: 'Node', set: 'status.addresses', value: 5, reason: 'must be an array' },
  { kind: 'Node', set: 'status.addresses[0]', value: '192.168.1.10' },
  { kind: 'Node', set: 'status.addresses[0].address', value: 192 },
  { kind: 'Node', set: 'status.addresses[0].type', value: ['InternalIP'] },
  { kind: 'Node', set: 'status.images', value: 5, reason: 'must be an array' },
  { kind: 'Node', set: 'status.images[0].names', value: 'pause', reason: 'must be an array' },
  { kind: 'Node', set: 'status.conditions', value: {} },
];

describe('validateObject: valid objects pass', () => {
  for (const kind of ['Service', 'EndpointSlice', 'Node'] as const) {
    it(`${kind} as the API server returns it`, () => {
      assert.equal(validateObject(kind, BASE[kind]()), undefined);
    });
  }

  it('minimal hand-written objects (defaults absent) and the special Service shapes', () => {
    const ok: Array<[ValidatedKind, Json]> = [
      ['Service', { metadata: { name: 'a', namespace: 'b' }, spec: { clusterIP: '10.0.0.1', ports: [{ port: 80 }] } }],
      ['Service', { metadata: { name: 'a', namespace: 'b' }, spec: { ports: [{ port: 80 }] } }], // not yet allocated
      ['Service', { metadata: { name: 'db', namespace: 'b' }, spec: { clusterIP: 'None', clusterIPs: ['None'] } }], // headless, no ports
      ['Service', { metadata: { name: 'ext', namespace: 'b' }, spec: { type: 'ExternalName', externalName: 'db.example.com' } }],
      [
        'Service',
        {
          metadata: { name: 'v6', namespace: 'b' },
          spec: { clusterIP: 'fd00::a', clusterIPs: ['fd00::a'], ipFamilies: ['IPv6'], ports: [{ port: 53, protocol: 'UDP' }] },
        },
      ],
      ['Service', { metadata: { name: 'z', namespace: 'b' }, spec: { clusterIP: '010.096.000.010', ports: [{ port: 80, nodePort: 0, targetPort: 0 }] } }], // leading zeros: ParseIPSloppy
      [
        'Service',
        {
          metadata: { name: 'n', namespace: 'b', labels: null },
          spec: {
            clusterIP: '10.0.0.1',
            ports: [
              { name: 'a', port: 1 },
              { name: 'b', port: 65535 },
            ],
            sessionAffinityConfig: null,
          },
        },
      ],
      ['EndpointSlice', { metadata: { name: 's', namespace: 'b' }, addressType: 'IPv4' }],
      ['EndpointSlice', { metadata: { name: 's', namespace: 'b' }, addressType: 'IPv6', endpoints: [{ addresses: ['2001:db8::1'] }], ports: [{ port: 80 }] }],
      ['EndpointSlice', { metadata: { name: 's', namespace: 'b' }, addressType: 'FQDN', endpoints: [{ addresses: ['db.example.com'] }] }],
      ['EndpointSlice', { metadata: { name: 's', namespace: 'b' }, addressType: 'IPv4', endpoints: null, ports: null }],
      // The API server does not range-check a slice port; the planner skips it alone (as kube-proxy does port 0).
      [
        'EndpointSlice',
        {
          metadata: { name: 's', namespace: 'b' },
          addressType: 'IPv4',
          ports: [
            { name: 'p', port: 0 },
            { name: 'q', port: 70000 },
          ],
        },
      ],
      ['Node', { metadata: { name: 'n' } }],
      ['Node', { metadata: { name: 'n', namespace: '' }, status: { addresses: [{ type: 'InternalIP', address: 'not-an-ip' }] } }],
    ];
    for (const [kind, o] of ok) assert.equal(validateObject(kind, o), undefined, JSON.stringify(o));
  });

  it('every Service, EndpointSlice and Node of test/fixtures/plan', () => {
    const dir = path.join(repoRoot, 'test', 'fixtures', 'plan', 'cluster');
    const objects: Json[] = [
      ...YAML.parseAllDocuments(readFileSync(path.join(dir, 'services.yaml'), 'utf8')).map((d) => d.toJS()),
      ...(JSON.parse(readFileSync(path.join(dir, 'slices.json'), 'utf8')) as Json).items,
      ...YAML.parseAllDocuments(readFileSync(path.join(dir, 'node.yaml'), 'utf8')).map((d) => d.toJS()),
    ];
    const checked = objects.filter((o) => o.kind === 'Service' || o.kind === 'EndpointSlice' || o.kind === 'Node');
    assert.ok(checked.length >= 8);
    for (const o of checked) assert.equal(validateObject(o.kind, o), undefined, `${o.kind} ${o.metadata.name}`);
  });

  it('does not change the object it checks', () => {
    const o = apiService();
    const before = JSON.stringify(o);
    validateObject('Service', o);
    assert.equal(JSON.stringify(o), before);
  });
});

describe('validateObject: hostile objects are rejected at the field', () => {
  for (const h of hostile) {
    const object = h.object ?? withField(BASE[h.kind](), h.set, h.value);
    const field = h.field ?? h.set;
    const label = `${h.kind} ${field} = ${JSON.stringify(h.value)?.slice(0, 40)}`;
    it(label, () => {
      const p = validateObject(h.kind, object);
      assert.ok(p, 'accepted');
      assert.equal(p.field, field, p.reason);
      if (h.reason) assert.ok(p.reason.includes(h.reason), `${p.reason} ∌ ${h.reason}`);
    });
  }

  it('reasons quote at most 64 characters of the value', () => {
    const name = `x${'🙂'.repeat(5000)}`;
    const p = validateObject('Service', withField(apiService(), 'metadata.name', name))!;
    assert.equal(p.field, 'metadata.name');
    const quoted = /not (".*")$/.exec(p.reason)?.[1] ?? '';
    assert.ok(quoted.length > 10 && quoted.length <= 64, p.reason);
    const big = validateObject(
      'Service',
      withField(
        apiService(),
        'spec.ipFamilies',
        many(100000, () => 'IPv4'),
      ),
    )!;
    assert.ok(big.reason.length < 200, big.reason);
  });

  it('an object that passes decodes; the ones rejected for their type are the ones that would not', () => {
    // ObjectSerializer.deserialize iterates every array-typed field: a number throws, a string becomes its characters.
    const bad = withField(apiSlice(), 'endpoints', 5);
    assert.throws(() => ObjectSerializer.deserialize(bad, 'V1EndpointSlice', ''));
    assert.equal(validateObject('EndpointSlice', bad)?.field, 'endpoints');
    const split = ObjectSerializer.deserialize(withField(apiService(), 'spec.loadBalancerSourceRanges', '10.0.0.0/8'), 'V1Service', '');
    assert.deepEqual(split.spec.loadBalancerSourceRanges.slice(0, 3), ['1', '0', '.']);
    for (const kind of ['Service', 'EndpointSlice', 'Node'] as const) {
      const o = BASE[kind]();
      assert.equal(validateObject(kind, o), undefined);
      assert.doesNotThrow(() => ObjectSerializer.deserialize(o, `V1${kind}`, ''));
    }
  });

  it('walks every client-node model a Service, an EndpointSlice or a Node holds', () => {
    const all = allModels as unknown as Record<string, { getAttributeTypeMap?: () => Array<{ type: string }> }>;
    const inner = (t: string): string => (t.startsWith('Array<') ? inner(t.slice(6, -1)) : t.startsWith('{ [key: string]: ') ? inner(t.slice(17, -3)) : t);
    const reachable = new Set<string>();
    const walk = (t: string) => {
      const name = inner(t);
      if (reachable.has(name) || typeof all[name]?.getAttributeTypeMap !== 'function') return;
      reachable.add(name);
      for (const a of all[name].getAttributeTypeMap!()) walk(a.type);
    };
    ['V1Service', 'V1EndpointSlice', 'V1Node'].forEach(walk);
    assert.deepEqual(
      [...reachable].filter((n) => MODELS[n] !== all[n]),
      [],
    );
  });
});
