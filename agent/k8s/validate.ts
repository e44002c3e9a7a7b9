/**
 * Validation of each watched object on its own, on the raw JSON the API
 * server sent (before client-node's ObjectSerializer turns it into model
 * classes). An object that fails is treated by the watcher as absent: kpr
 * never plans from a half-understood object.
 *
 * The rules are the API server's own (pkg/apis/core/validation and
 * pkg/apis/discovery/validation) for every field kpr reads, so an object a
 * real API server stored always passes; docs/architecture.md ("Validation of
 * watched objects") lists them and where kpr deliberately checks less.
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
import { parseCIDR, parseIP, type ParsedIP } from '../net/ip.js';

export interface ObjectProblem {
  field: string;
  reason: string;
}

export type ValidatedKind = 'Service' | 'EndpointSlice' | 'Node';

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

// ---- the first problem ends the walk ---------------------------------------------------------

class Problem {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {}
}

function fail(field: string, reason: string): never {
  throw new Problem(field, reason);
}

const MAX_SHOWN = 64;

function truncate(s: string): string {
  return s.length <= MAX_SHOWN ? s : `${s.slice(0, MAX_SHOWN - 1)}…`;
}

/** The value as JSON, at most 64 characters; arrays and objects by their size only. */
export function show(v: unknown): string {
  if (Array.isArray(v)) return `an array of ${v.length}`;
  if (v !== null && typeof v === 'object') return 'an object';
  if (typeof v === 'string') {
    // Whole code points (no half of a surrogate pair), then quoted; "…" inside the quotes when cut.
    const head = v.length > MAX_SHOWN ? Array.from(v.slice(0, MAX_SHOWN + 1)).slice(0, MAX_SHOWN).join('') : v;
    const q = JSON.stringify(head);
    return q.length <= MAX_SHOWN && head === v ? q : `${q.slice(0, Math.min(q.length - 1, MAX_SHOWN - 2))}…"`;
  }
  if (v === undefined) return 'nothing';
  return truncate(String(v));
}

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

// ---- types -------------------------------------------------------------------------------------

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A JSON object; null and absence are "not set" (Go's zero value) unless `required`. */
function object(v: unknown, field: string, required = false): Obj | undefined {
  if (v === undefined || v === null) {
    if (required) fail(field, 'required');
    return undefined;
  }
  if (!isObj(v)) fail(field, `must be an object, not ${typeOf(v)} (${show(v)})`);
  return v;
}

function array(v: unknown, field: string, max?: number): unknown[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail(field, `must be an array, not ${typeOf(v)} (${show(v)})`);
  if (max !== undefined && v.length > max) fail(field, `must have at most ${max} entries, not ${v.length}`);
  return v;
}

function string(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') fail(field, `must be a string, not ${typeOf(v)} (${show(v)})`);
  return v;
}

function boolean(v: unknown, field: string): void {
  if (v !== undefined && v !== null && typeof v !== 'boolean') fail(field, `must be a boolean, not ${typeOf(v)} (${show(v)})`);
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

/** An int32 (what the API server's decoder accepts), within [min, max]. */
function integer(v: unknown, field: string, min: number, max: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < INT32_MIN || v > INT32_MAX) {
    fail(field, `must be an integer, not ${typeOf(v)} (${show(v)})`);
  }
  if (v < min || v > max) fail(field, `must be between ${min} and ${max}, not ${v}`);
  return v;
}

function oneOf(v: unknown, field: string, allowed: readonly string[]): string | undefined {
  const s = string(v, field);
  if (s !== undefined && s !== '' && !allowed.includes(s)) fail(field, `must be one of ${allowed.join(', ')}, not ${show(s)}`);
  return s;
}

/** A map of strings (labels, annotations). */
function stringMap(v: unknown, field: string): Obj | undefined {
  const m = object(v, field);
  if (m) for (const k in m) string(m[k], `${field}[${k}]`);
  return m;
}

// ---- names (k8s.io/apimachinery/pkg/util/validation) ---------------------------------------------

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
/** IANA_SVC_NAME: a named port (targetPort). */
const PORT_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

function dnsLabel(s: string, field: string): void {
  if (s.length > 63 || !DNS1123_LABEL.test(s)) fail(field, `must be a DNS-1123 label (at most 63 of a-z, 0-9, "-", starting and ending alphanumeric), not ${show(s)}`);
}

function dns1035Label(s: string, field: string): void {
  if (s.length > 63 || !DNS1035_LABEL.test(s)) fail(field, `must be a DNS-1035 label (at most 63 of a-z, 0-9, "-", starting with a letter), not ${show(s)}`);
}

function dnsSubdomain(s: string, field: string): void {
  if (s.length > 253 || !DNS1123_SUBDOMAIN.test(s)) fail(field, `must be a DNS-1123 subdomain (at most 253 of a-z, 0-9, "-", "."), not ${show(s)}`);
}

function fqdn(s: string, field: string): void {
  const t = s.endsWith('.') ? s.slice(0, -1) : s;
  if (t.length > 253 || !DNS1123_SUBDOMAIN.test(t) || !t.includes('.')) fail(field, `must be a fully qualified domain name, not ${show(s)}`);
}

function qualifiedName(s: string, field: string): void {
  const slash = s.indexOf('/');
  const name = slash < 0 ? s : s.slice(slash + 1);
  if (slash >= 0) {
    const prefix = s.slice(0, slash);
    if (prefix.length === 0 || prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) fail(field, `must have a DNS-1123 subdomain as prefix, not ${show(s)}`);
  }
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_PART.test(name)) fail(field, `must be a qualified name (at most 63 of A-Z, a-z, 0-9, "-", "_", "."), not ${show(s)}`);
}

function labelValue(s: string, field: string): void {
  if (s.length > 63 || !LABEL_VALUE.test(s)) fail(field, `must be a label value (at most 63 of A-Z, a-z, 0-9, "-", "_", "."), not ${show(s)}`);
}

function portName(s: string, field: string): void {
  if (s.length > 15 || !PORT_NAME.test(s) || s.includes('--') || !/[a-z]/.test(s)) fail(field, `must be an IANA service name (at most 15 of a-z, 0-9, "-", with a letter), not ${show(s)}`);
}

// ---- addresses ---------------------------------------------------------------------------------

/** An IP address as the API server parses it (ParseIPSloppy: IPv4 leading zeros allowed; no IPv6 zone). */
function ip(s: string, field: string): ParsedIP {
  const p = parseIP(s);
  if (!p) fail(field, `must be a valid IP address, not ${show(s)}`);
  return p;
}

/** ValidateNonSpecialIP / ValidateEndpointIP: no unspecified, loopback, link-local or link-local multicast address. */
function nonSpecialIP(p: ParsedIP, s: string, field: string): void {
  let what = '';
  if (typeof p.key === 'number') {
    const a = p.key;
    if (a === 0) what = 'unspecified';
    else if (a >>> 24 === 127) what = 'in the loopback range (127.0.0.0/8)';
    else if (a >>> 16 === 0xa9fe) what = 'in the link-local range (169.254.0.0/16)';
    else if (a >>> 8 === 0xe00000) what = 'in the link-local multicast range (224.0.0.0/24)';
  } else {
    const k = p.key;
    if (/^0{32}$/.test(k)) what = 'unspecified';
    else if (/^0{31}1$/.test(k)) what = 'the loopback address (::1)';
    else if (/^fe[89ab]/.test(k)) what = 'in the link-local range (fe80::/10)';
    else if (k.startsWith('ff') && k[3] === '2') what = 'in the link-local multicast range (ff02::/16)';
  }
  if (what) fail(field, `may not be ${what}: ${show(s)}`);
}

/** IsValidCIDR (ParseCIDRSloppy) on the trimmed value, as loadBalancerSourceRanges allows. */
function cidr(s: string, field: string): void {
  if (!parseCIDR(s)) fail(field, `must be a CIDR (e.g. 192.0.2.0/24 or 2001:db8::/64), not ${show(s)}`);
}

// ---- metadata ----------------------------------------------------------------------------------

function validateMeta(raw: unknown, namespaced: boolean, name: (s: string, field: string) => void): Obj {
  const md = object(raw, 'metadata', true)!;
  const n = string(md.name, 'metadata.name');
  if (!n) fail('metadata.name', 'required');
  name(n, 'metadata.name');
  const ns = string(md.namespace, 'metadata.namespace');
  if (namespaced) {
    if (!ns) fail('metadata.namespace', 'required');
    dnsLabel(ns, 'metadata.namespace');
  } else if (ns) {
    fail('metadata.namespace', `not allowed on this kind, not ${show(ns)}`);
  }
  string(md.resourceVersion, 'metadata.resourceVersion');
  string(md.deletionTimestamp, 'metadata.deletionTimestamp');
  const labels = stringMap(md.labels, 'metadata.labels');
  if (labels) {
    for (const k in labels) {
      qualifiedName(k, `metadata.labels[${k}]`);
      labelValue(labels[k] as string, `metadata.labels[${k}]`);
    }
  }
  const annotations = stringMap(md.annotations, 'metadata.annotations');
  if (annotations) {
    let bytes = 0;
    for (const k in annotations) {
      qualifiedName(k.toLowerCase(), `metadata.annotations[${k}]`);
      bytes += Buffer.byteLength(k) + Buffer.byteLength(annotations[k] as string);
    }
    if (bytes > LIMITS.annotationBytes) fail('metadata.annotations', `must have at most ${LIMITS.annotationBytes} bytes, not ${bytes}`);
  }
  return md;
}

// ---- Service (ValidateService, ValidateServiceClusterIPsRelatedFields, ValidateLoadBalancerStatus) ----

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] as const;
const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
const AFFINITIES = ['None', 'ClientIP'] as const;
const POLICIES = ['Cluster', 'Local'] as const;
const FAMILIES = ['IPv4', 'IPv6'] as const;
const FAMILY_POLICIES = ['SingleStack', 'PreferDualStack', 'RequireDualStack'] as const;
const IP_MODES = ['VIP', 'Proxy'] as const;

function validateService(o: Obj): void {
  validateMeta(o.metadata, true, dns1035Label);
  const spec = object(o.spec, 'spec') ?? {};
  const type = oneOf(spec.type, 'spec.type', SERVICE_TYPES) || 'ClusterIP';

  const clusterIP = string(spec.clusterIP, 'spec.clusterIP') ?? '';
  const clusterIPs = (array(spec.clusterIPs, 'spec.clusterIPs', LIMITS.clusterIPs) ?? []).map((v, i) => string(v, `spec.clusterIPs[${i}]`) ?? '');
  const families = (array(spec.ipFamilies, 'spec.ipFamilies', LIMITS.ipFamilies) ?? []).map((v, i) => oneOf(v, `spec.ipFamilies[${i}]`, FAMILIES) ?? '');
  oneOf(spec.ipFamilyPolicy, 'spec.ipFamilyPolicy', FAMILY_POLICIES);
  const headless = clusterIP === 'None' || clusterIPs[0] === 'None';
  if (type !== 'ExternalName') validateClusterIPs(clusterIP, clusterIPs, families);

  const ports = array(spec.ports, 'spec.ports') ?? [];
  if (ports.length === 0 && !headless && type !== 'ExternalName') fail('spec.ports', 'required');
  const names = new Set<string>();
  const portKeys = new Set<string>();
  const nodePortKeys = new Set<string>();
  for (let i = 0; i < ports.length; i++) {
    const f = `spec.ports[${i}]`;
    const p = object(ports[i], f, true)!;
    const name = string(p.name, `${f}.name`) ?? '';
    if (name === '' && ports.length > 1) fail(`${f}.name`, 'required when there is more than one port');
    if (name !== '') {
      dnsLabel(name, `${f}.name`);
      if (names.has(name)) fail(`${f}.name`, `duplicate name ${show(name)}`);
      names.add(name);
    }
    const port = integer(p.port, `${f}.port`, 1, 65535);
    if (port === undefined) fail(`${f}.port`, 'required');
    const protocol = oneOf(p.protocol, `${f}.protocol`, PROTOCOLS) || 'TCP';
    const nodePort = integer(p.nodePort, `${f}.nodePort`, 0, 65535) ?? 0;
    const tp = p.targetPort;
    if (typeof tp === 'string') portName(tp, `${f}.targetPort`);
    else if (tp !== undefined && tp !== null && tp !== 0) integer(tp, `${f}.targetPort`, 1, 65535);
    string(p.appProtocol, `${f}.appProtocol`);
    const key = `${port}/${protocol}`;
    if (portKeys.has(key)) fail(f, `duplicate port ${key}`);
    portKeys.add(key);
    if (nodePort !== 0) {
      const nk = `${nodePort}/${protocol}`;
      if (nodePortKeys.has(nk)) fail(`${f}.nodePort`, `duplicate nodePort ${nk}`);
      nodePortKeys.add(nk);
    }
  }

  (array(spec.externalIPs, 'spec.externalIPs') ?? []).forEach((v, i) => {
    const f = `spec.externalIPs[${i}]`;
    const s = string(v, f) ?? '';
    nonSpecialIP(ip(s, f), s, f);
  });
  string(spec.loadBalancerIP, 'spec.loadBalancerIP');
  (array(spec.loadBalancerSourceRanges, 'spec.loadBalancerSourceRanges') ?? []).forEach((v, i) => {
    const f = `spec.loadBalancerSourceRanges[${i}]`;
    cidr(string(v, f) ?? '', f);
  });

  oneOf(spec.sessionAffinity, 'spec.sessionAffinity', AFFINITIES);
  const sac = object(spec.sessionAffinityConfig, 'spec.sessionAffinityConfig');
  const clientIP = sac && object(sac.clientIP, 'spec.sessionAffinityConfig.clientIP');
  if (clientIP) integer(clientIP.timeoutSeconds, 'spec.sessionAffinityConfig.clientIP.timeoutSeconds', 1, LIMITS.affinitySeconds);

  oneOf(spec.externalTrafficPolicy, 'spec.externalTrafficPolicy', POLICIES);
  oneOf(spec.internalTrafficPolicy, 'spec.internalTrafficPolicy', POLICIES);
  integer(spec.healthCheckNodePort, 'spec.healthCheckNodePort', 0, 65535);
  string(spec.externalName, 'spec.externalName');

  const status = object(o.status, 'status');
  const lb = status && object(status.loadBalancer, 'status.loadBalancer');
  (array(lb?.ingress, 'status.loadBalancer.ingress') ?? []).forEach((v, i) => {
    const f = `status.loadBalancer.ingress[${i}]`;
    const ing = object(v, f, true)!;
    const addr = string(ing.ip, `${f}.ip`) ?? '';
    if (addr !== '') ip(addr, `${f}.ip`);
    const host = string(ing.hostname, `${f}.hostname`) ?? '';
    if (host !== '') {
      dnsSubdomain(host, `${f}.hostname`);
      if (parseIP(host)) fail(`${f}.hostname`, `must be a DNS name, not an IP address (${show(host)})`);
    }
    const mode = oneOf(ing.ipMode, `${f}.ipMode`, IP_MODES);
    if (mode && addr === '') fail(`${f}.ipMode`, 'may not be set without ip');
  });
}

/** clusterIP, clusterIPs and ipFamilies agree: clusterIPs[0] is clusterIP, "None" alone, one IP per family, families as listed. */
function validateClusterIPs(clusterIP: string, clusterIPs: string[], families: string[]): void {
  for (let i = 0; i < families.length; i++) {
    if (families.indexOf(families[i]) !== i) fail(`spec.ipFamilies[${i}]`, `duplicate ${show(families[i])}`);
  }
  if (clusterIP !== '' && clusterIP !== 'None') ip(clusterIP, 'spec.clusterIP');
  if (clusterIP !== '' && clusterIPs.length > 0 && clusterIPs[0] !== clusterIP) {
    fail('spec.clusterIPs', `must start with clusterIP ${show(clusterIP)}, not ${show(clusterIPs[0])}`);
  }
  if (clusterIP === '' && clusterIPs.length > 0) fail('spec.clusterIPs', 'must be empty when clusterIP is not set');
  const parsed: ParsedIP[] = [];
  for (let i = 0; i < clusterIPs.length; i++) {
    const f = `spec.clusterIPs[${i}]`;
    if (clusterIPs[i] === 'None') {
      if (i > 0 || clusterIPs.length > 1) fail(f, '"None" must be the first and only value');
      return;
    }
    const p = ip(clusterIPs[i], f);
    if (i < families.length && p.family !== families[i]) fail(f, `must be an ${families[i]} address as spec.ipFamilies[${i}] says, not ${show(clusterIPs[i])}`);
    if (parsed.some((q) => q.family === p.family)) fail(f, `may hold at most one IP of each family (${show(clusterIPs[i])})`);
    parsed.push(p);
  }
}

// ---- EndpointSlice (ValidateEndpointSlice) -------------------------------------------------------

const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'] as const;

function validateSlice(o: Obj): void {
  validateMeta(o.metadata, true, dnsSubdomain);
  const addressType = oneOf(o.addressType, 'addressType', ADDRESS_TYPES);
  if (!addressType) fail('addressType', 'required');

  const endpoints = array(o.endpoints, 'endpoints', LIMITS.sliceEndpoints) ?? [];
  for (let i = 0; i < endpoints.length; i++) {
    const f = `endpoints[${i}]`;
    const e = object(endpoints[i], f, true)!;
    const addresses = array(e.addresses, `${f}.addresses`, LIMITS.endpointAddresses) ?? [];
    if (addresses.length === 0) fail(`${f}.addresses`, 'must contain at least 1 address');
    for (let j = 0; j < addresses.length; j++) {
      const af = `${f}.addresses[${j}]`;
      const s = string(addresses[j], af) ?? '';
      if (addressType === 'FQDN') {
        fqdn(s, af);
        continue;
      }
      const p = parseIP(s);
      if (!p || p.family !== addressType) fail(af, `must be a valid ${addressType} address, not ${show(s)}`);
      nonSpecialIP(p, s, af);
    }
    const c = object(e.conditions, `${f}.conditions`);
    if (c) {
      boolean(c.ready, `${f}.conditions.ready`);
      boolean(c.serving, `${f}.conditions.serving`);
      boolean(c.terminating, `${f}.conditions.terminating`);
    }
    const nodeName = string(e.nodeName, `${f}.nodeName`);
    if (nodeName !== undefined) dnsSubdomain(nodeName, `${f}.nodeName`);
    string(e.zone, `${f}.zone`);
    const hostname = string(e.hostname, `${f}.hostname`);
    if (hostname !== undefined) dnsLabel(hostname, `${f}.hostname`);
    const hints = object(e.hints, `${f}.hints`);
    if (hints) {
      hintNames(hints.forZones, `${f}.hints.forZones`, LIMITS.zoneHints, labelValue);
      hintNames(hints.forNodes, `${f}.hints.forNodes`, LIMITS.nodeHints, dnsSubdomain);
    }
  }

  const ports = array(o.ports, 'ports', LIMITS.slicePorts) ?? [];
  const names = new Set<string>();
  for (let i = 0; i < ports.length; i++) {
    const f = `ports[${i}]`;
    const p = object(ports[i], f, true)!;
    const name = string(p.name, `${f}.name`) ?? '';
    if (name !== '') dnsLabel(name, `${f}.name`);
    if (names.has(name)) fail(`${f}.name`, `duplicate name ${show(name)}`);
    names.add(name);
    // The API server checks only the type (int32); kube-proxy and the planner skip a port outside 1..65535 alone.
    integer(p.port, `${f}.port`, INT32_MIN, INT32_MAX);
    oneOf(p.protocol, `${f}.protocol`, PROTOCOLS);
    string(p.appProtocol, `${f}.appProtocol`);
  }
}

function hintNames(v: unknown, field: string, max: number, rule: (s: string, field: string) => void): void {
  const list = array(v, field, max) ?? [];
  const seen = new Set<string>();
  for (let i = 0; i < list.length; i++) {
    const h = object(list[i], `${field}[${i}]`, true)!;
    const f = `${field}[${i}].name`;
    const name = string(h.name, f) ?? '';
    rule(name, f);
    if (seen.has(name)) fail(f, `duplicate ${show(name)}`);
    seen.add(name);
  }
}

// ---- Node (what kpr reads: name, labels, deletionTimestamp, spec.taints, status.addresses) -------

const TAINT_EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'] as const;

function validateNode(o: Obj): void {
  validateMeta(o.metadata, false, dnsSubdomain);
  const spec = object(o.spec, 'spec');
  (array(spec?.taints, 'spec.taints') ?? []).forEach((v, i) => {
    const f = `spec.taints[${i}]`;
    const t = object(v, f, true)!;
    const key = string(t.key, `${f}.key`) ?? '';
    qualifiedName(key, `${f}.key`);
    const value = string(t.value, `${f}.value`);
    if (value !== undefined) labelValue(value, `${f}.value`);
    if (!oneOf(t.effect, `${f}.effect`, TAINT_EFFECTS)) fail(`${f}.effect`, 'required');
  });
  const status = object(o.status, 'status');
  (array(status?.addresses, 'status.addresses') ?? []).forEach((v, i) => {
    const f = `status.addresses[${i}]`;
    const a = object(v, f, true)!;
    string(a.type, `${f}.type`);
    string(a.address, `${f}.address`);
  });
}

// ---- decodability: every array-typed field of the client-node model is an array ---------------

const MODEL_OF: Record<ValidatedKind, string> = { Service: 'V1Service', EndpointSlice: 'V1EndpointSlice', Node: 'V1Node' };

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
function decodable(v: unknown, type: string, path: string): void {
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
