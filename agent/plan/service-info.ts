/**
 * Service → per-port service info (kube-proxy's servicechangetracker +
 * newBaseServiceInfo, rules 3, 4, 7, 8 and 10 of docs/semantics.md).
 * kube-proxy runs one proxier per IP family; kpr plans both families at once,
 * so every family-dependent field is kept per family (FamilyInfo).
 * Pure: returns what it could read and, for every piece it could not use,
 * a SkippedObject saying why. Never throws on bad input.
 */
import type { V1Service, V1ServicePort } from '@kubernetes/client-node';
import { ipv4Canonical, parseCIDR, parseIP, type IPFamily } from '../net/ip.js';
import { LABEL_SERVICE_PROXY_NAME } from '../k8s/labels.js';
import type { Protocol, SkippedObject } from './types.js';
import { namespacedKey } from '../runtime/flat-key.js';

/** v1.DefaultClientIPServiceAffinitySeconds (rule 10 of docs/semantics.md). */
export const DEFAULT_AFFINITY_SECONDS = 10800;
/** MaxClientIPServiceAffinitySeconds of the API's validation (rule 10 of docs/semantics.md). */
export const MAX_AFFINITY_SECONDS = 86400;

/** One Service port, API defaults applied (rule 7 of docs/semantics.md: keyed by name and protocol). */
export interface ServicePortInfo {
  /** The port's name, "" when unnamed. */
  name: string;
  port: number;
  protocol: Protocol;
  /** 0 when none. */
  nodePort: number;
}

/** The addresses of one IP family a Service answers on (rule 8 of docs/semantics.md: each filtered to the family). */
export interface FamilyInfo {
  family: IPFamily;
  /** Canonical clusterIP of this family. */
  clusterIP: string;
  externalIPs: string[];
  /** status.loadBalancer.ingress IPs in VIP mode. */
  loadBalancerIPs: string[];
  /** loadBalancerSourceRanges of this family, canonical "addr/prefix". */
  sourceRanges: string[];
}

/** What the planner needs from one Service, defaults applied. */
export interface ServiceInfo {
  /** "namespace/name". */
  key: string;
  namespace: string;
  name: string;
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  /** One entry per family with a clusterIP, in spec.ipFamilies order (primary first). */
  families: FamilyInfo[];
  ports: ServicePortInfo[];
  /** internalTrafficPolicy == Local (rule 8 of docs/semantics.md). */
  internalPolicyLocal: boolean;
  /**
   * externalTrafficPolicy == Local on a Service that is externally accessible
   * by type (LoadBalancer, NodePort, or ClusterIP with externalIPs; rule 8 of docs/semantics.md).
   */
  externalPolicyLocal: boolean;
  /** stickyMaxAgeSeconds: 0 without ClientIP affinity (rule 8 of docs/semantics.md). */
  affinityTimeoutSeconds: number;
  /** Set only for type LoadBalancer with eTP Local (NeedsHealthCheck, rule 8 of docs/semantics.md); 0 otherwise. */
  healthCheckNodePort: number;
  /**
   * loadBalancerSourceRanges is set but cannot be read (not a list, or an
   * entry that is not a CIDR): the frontends it would restrict are not
   * programmed at all, never programmed open (the reason is in `skipped`).
   */
  sourceRangesUnreadable: boolean;
}

export interface ServiceInfoResult {
  /** "namespace/name" (may contain empty parts when metadata is missing). */
  key: string;
  /** null when the whole Service is skipped. */
  info: ServiceInfo | null;
  skipped: SkippedObject[];
}

const KNOWN_TYPES = new Set(['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']);
const POLICIES = ['Cluster', 'Local'] as const;
const AFFINITIES = ['None', 'ClientIP'] as const;
const NONE: readonly never[] = Object.freeze([]);

/** "namespace/name" of a Service or slice owner (unambiguous: see namespacedKey). */
export function serviceKeyOf(service: V1Service): string {
  return namespacedKey(service.metadata?.namespace ?? '', service.metadata?.name ?? '');
}

/** At most this many invalid entries of one list field are named; the rest are counted. */
const MAX_NAMED = 3;

/** `raw` as JSON for a skip reason, at most 64 characters. */
export function quote(raw: unknown): string {
  let t: string;
  try {
    if (Array.isArray(raw)) t = `an array of ${raw.length}`;
    else t = JSON.stringify(typeof raw === 'string' && raw.length > 64 ? raw.slice(0, 64) : raw) ?? String(raw);
  } catch {
    t = String(raw);
  }
  return t.length <= 64 ? t : `${t.slice(0, 63)}…`;
}

/** "first, second, third (and 997 more)" for a list of invalid entries. */
function nameSome(bad: readonly unknown[], total: number): string {
  const shown = bad.slice(0, MAX_NAMED).map(quote).join(', ');
  return total > MAX_NAMED ? `${shown} (and ${total - MAX_NAMED} more)` : shown;
}

/**
 * The clusterIP of each family (GetClusterIPByFamily, rule 4 of docs/semantics.md): the clusterIPs
 * entry at the index of the family in ipFamilies; with no ipFamilies,
 * spec.clusterIP alone, in its own family. clusterIPs defaults to [clusterIP]
 * as the API server would fill it.
 */
function clusterIPsByFamily(spec: NonNullable<V1Service['spec']>, object: string, skipped: SkippedObject[]): Array<{ family: IPFamily; ip: string }> {
  const families = readFamilies(spec.ipFamilies, object, skipped);
  // The common single-stack IPv4 Service (no ipFamilies, or just IPv4, and a canonical address): nothing to parse or pick.
  const first = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length ? spec.clusterIPs[0] : spec.clusterIP;
  if ((families.length === 0 ? first === spec.clusterIP : families.length === 1 && families[0] === 'IPv4') && ipv4Canonical(first) >= 0) {
    return [{ family: 'IPv4', ip: first! }];
  }
  const out: Array<{ family: IPFamily; ip: string }> = [];
  const clusterIPs = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length ? spec.clusterIPs.slice(0, 2) : [spec.clusterIP!];
  const candidates: Array<{ want?: string; raw: unknown }> =
    families.length === 0 ? [{ raw: spec.clusterIP }] : families.map((f, i) => ({ want: f, raw: clusterIPs[i] }));
  for (const { want, raw } of candidates) {
    const ip = parseIP(typeof raw === 'string' ? raw : undefined);
    if (!ip || (want !== undefined && ip.family !== want)) {
      skipped.push({ object, reason: `invalid clusterIP ${quote(raw ?? null)}${want ? ` for family ${want}` : ''}` });
      continue;
    }
    if (!out.some((o) => o.family === ip.family)) out.push({ family: ip.family, ip: ip.text });
  }
  return out;
}

/**
 * spec.ipFamilies when it is what the API server allows (at most two, IPv4
 * or IPv6, no duplicate); anything else is reported once and ignored, so only
 * the primary clusterIP is used.
 */
function readFamilies(raw: unknown, object: string, skipped: SkippedObject[]): string[] {
  if (raw === undefined || raw === null) return [];
  const ok = Array.isArray(raw) && raw.length <= 2 && raw.every((f, i) => (f === 'IPv4' || f === 'IPv6') && raw.indexOf(f) === i);
  if (ok) return raw as string[];
  skipped.push({ object, reason: `invalid spec.ipFamilies ${quote(raw)} ignored (at most 2 of IPv4, IPv6, no duplicate): only the primary clusterIP is used` });
  return [];
}

function portLabel(name: string, port: unknown, protocol: string): string {
  return `port ${quote(name)} ${quote(port)}/${quote(protocol).replace(/^"|"$/g, '')}`;
}

/** Valid addresses of `family` among `raws`; invalid ones are reported in one line (by the first family). */
function addressesOf(raws: readonly unknown[], family: IPFamily, what: string, object: string, skipped: SkippedObject[] | null): string[] {
  if (raws.length === 0) return [];
  const out: string[] = [];
  let bad: unknown[] | null = null;
  let nBad = 0;
  for (const raw of raws) {
    const ip = parseIP(typeof raw === 'string' ? raw : undefined);
    if (!ip) {
      nBad++;
      if ((bad ??= []).length < MAX_NAMED) bad.push(raw);
    } else if (ip.family === family && !out.includes(ip.text)) out.push(ip.text);
  }
  if (bad) skipped?.push({ object, reason: `invalid ${what} ${nameSome(bad, nBad)} ignored` });
  return out;
}

/**
 * The list under `field` ([] when absent); a value that is not a list is
 * reported and read as [], which for every list but the source ranges means
 * "nothing to program" (fail closed).
 */
function listOf(raw: unknown, field: string, object: string, skipped: SkippedObject[]): readonly unknown[] {
  if (raw === undefined || raw === null) return NONE;
  if (Array.isArray(raw)) return raw;
  skipped.push({ object, reason: `spec.${field} is not a list (${quote(raw)}); ignored` });
  return NONE;
}

/**
 * Why loadBalancerSourceRanges cannot be read, or null when it can (or is
 * absent). Client-node decodes a string given for the list as its
 * characters, so a list of one-character strings is as unreadable as the
 * string itself.
 */
function sourceRangesProblem(raw: unknown): string | null {
  if (raw === undefined || raw === null) return null;
  if (!Array.isArray(raw)) return `not a list (${quote(raw)})`;
  let bad: unknown[] | null = null;
  let nBad = 0;
  for (const r of raw) {
    if (!parseCIDR(r)) {
      nBad++;
      if ((bad ??= []).length < MAX_NAMED) bad.push(r);
    }
  }
  return bad ? `not a CIDR: ${nameSome(bad, nBad)}` : null;
}

/** An optional enum field: its value, or the API default with a report when it is not one of `allowed`. */
function enumField<T extends string>(raw: unknown, field: string, allowed: readonly T[], fallback: T, object: string, skipped: SkippedObject[]): T {
  if (raw === undefined || raw === null || raw === '') return fallback;
  if ((allowed as readonly unknown[]).includes(raw)) return raw as T;
  skipped.push({ object, reason: `invalid spec.${field} ${quote(raw)} (one of ${allowed.join(', ')}); using ${fallback}` });
  return fallback;
}

/** An optional port number field (0 = unset): the number, or 0 with a report when it is not an integer in 0..65535. */
function portNumberField(raw: unknown, what: string, object: string, skipped: SkippedObject[], consequence: string): number {
  if (raw === undefined || raw === null || raw === 0) return 0;
  if (Number.isInteger(raw) && (raw as number) > 0 && (raw as number) <= 65535) return raw as number;
  skipped.push({ object, reason: `invalid ${what} ${quote(raw)} (an integer 1..65535): ${consequence}` });
  return 0;
}

/** The ClientIP affinity timeout (rules 8, 10 of docs/semantics.md): default 10800 s, at most 86400 s. */
function affinityTimeout(spec: NonNullable<V1Service['spec']>, object: string, skipped: SkippedObject[]): number {
  if (spec.sessionAffinity !== 'ClientIP') return 0;
  const cfg = spec.sessionAffinityConfig as unknown;
  const clientIP = cfg && typeof cfg === 'object' ? (cfg as { clientIP?: unknown }).clientIP : undefined;
  const t = clientIP && typeof clientIP === 'object' ? (clientIP as { timeoutSeconds?: unknown }).timeoutSeconds : undefined;
  if (t === undefined || t === null) return DEFAULT_AFFINITY_SECONDS;
  if (!Number.isInteger(t) || (t as number) < 1) {
    skipped.push({ object, reason: `invalid sessionAffinityConfig.clientIP.timeoutSeconds ${quote(t)}; using ${DEFAULT_AFFINITY_SECONDS}` });
    return DEFAULT_AFFINITY_SECONDS;
  }
  if ((t as number) > MAX_AFFINITY_SECONDS) {
    skipped.push({ object, reason: `sessionAffinityConfig.clientIP.timeoutSeconds ${t} is above the maximum; using ${MAX_AFFINITY_SECONDS}` });
    return MAX_AFFINITY_SECONDS;
  }
  return t as number;
}

/** The result for a Service skipped as a whole. */
function skipService(key: string, reason: string): ServiceInfoResult {
  return { key, info: null, skipped: [{ object: `Service ${key}`, reason }] };
}

/**
 * One Service port, or the reason it cannot be used (null: usable, pushed to
 * `ports`). An invalid nodePort is reported to `skipped` and the port kept
 * without one: its NodePort frontends are not programmed.
 */
function readPort(p: V1ServicePort | null | undefined, ports: ServicePortInfo[], object: string, skipped: SkippedObject[]): string | null {
  if (!p || typeof p !== 'object') return `invalid port entry ${quote(p)}`;
  const portName = typeof p.name === 'string' ? p.name : '';
  const protoRaw = p.protocol || 'TCP'; // API default (rule 10 of docs/semantics.md)
  // SCTP frontends are programmed like TCP ones; the datapath drops and counts their traffic (rule 39 of docs/semantics.md).
  if (protoRaw !== 'TCP' && protoRaw !== 'UDP' && protoRaw !== 'SCTP') return `unknown protocol ${quote(protoRaw)} (${portLabel(portName, p.port, protoRaw)})`;
  if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535) return `invalid port ${quote(p.port)} (${portLabel(portName, p.port, protoRaw)})`;
  for (let i = 0; i < ports.length; i++) {
    if (ports[i].port === p.port && ports[i].protocol === protoRaw) return `duplicate port ${p.port}/${protoRaw} (${portLabel(portName, p.port, protoRaw)})`;
  }
  const nodePort = portNumberField(p.nodePort, `nodePort (${portLabel(portName, p.port, protoRaw)})`, object, skipped, 'no NodePort frontend');
  ports.push({ name: portName, port: p.port, protocol: protoRaw, nodePort });
  return null;
}

/** One family's addresses (rule 8 of docs/semantics.md); invalid entries are reported to `report` (the first family's pass only). */
function familyInfo(
  family: IPFamily,
  clusterIP: string,
  externalIPs: readonly unknown[],
  lbRaw: readonly unknown[],
  rangesRaw: readonly unknown[],
  object: string,
  report: SkippedObject[] | null,
): FamilyInfo {
  // Unreadable ranges were reported by the caller, which drops the frontends they restrict.
  const sourceRanges: string[] = [];
  for (const r of rangesRaw) {
    const c = parseCIDR(r);
    if (c && c.family === family && !sourceRanges.includes(c.text)) sourceRanges.push(c.text);
  }
  return {
    family,
    clusterIP,
    externalIPs: addressesOf(externalIPs, family, 'externalIP', object, report),
    loadBalancerIPs: addressesOf(lbRaw, family, 'load balancer ingress IP', object, report),
    sourceRanges,
  };
}

/**
 * Reads one Service. `info` is null when nothing of it can be programmed.
 * Every Service is read again by each full sync, so the common one (valid,
 * no external addresses) allocates little: no closure per call or port, the
 * skip messages' texts built only when there is something to skip.
 */
export function readServiceInfo(service: V1Service): ServiceInfoResult {
  const namespace = service.metadata?.namespace ?? '';
  const name = service.metadata?.name ?? '';
  const key = namespacedKey(String(namespace), String(name));

  if (!namespace || !name) return skipService(key, 'missing metadata.namespace or metadata.name');
  if (typeof namespace !== 'string' || typeof name !== 'string') return skipService(key, 'metadata.namespace and metadata.name must be strings');
  const proxyName = service.metadata?.labels?.[LABEL_SERVICE_PROXY_NAME];
  if (proxyName !== undefined) {
    return skipService(key, `handled by another proxy (label ${LABEL_SERVICE_PROXY_NAME}=${quote(proxyName)})`);
  }
  const spec = service.spec;
  if (!spec) return skipService(key, 'missing spec');

  const type = spec.type || 'ClusterIP'; // API default (rule 10 of docs/semantics.md)
  if (!KNOWN_TYPES.has(type)) return skipService(key, `unknown type ${quote(type)}`);
  if (type === 'ExternalName') return skipService(key, 'type ExternalName is not proxied');
  if (!spec.clusterIP || spec.clusterIP === 'None') return skipService(key, 'headless (no clusterIP) is not proxied');
  if (typeof spec.clusterIP !== 'string') return skipService(key, `invalid clusterIP ${quote(spec.clusterIP)}`);

  const object = `Service ${key}`;
  const skipped: SkippedObject[] = [];
  const byFamily = clusterIPsByFamily(spec, object, skipped);
  if (byFamily.length === 0) return { key, info: null, skipped };

  const ports: ServicePortInfo[] = [];
  const specPorts = listOf(spec.ports, 'ports', object, skipped) as readonly V1ServicePort[];
  for (let i = 0; i < specPorts.length; i++) {
    const reason = readPort(specPorts[i], ports, object, skipped);
    if (reason !== null) skipped.push({ object, reason });
  }
  if (specPorts.length === 0) skipped.push({ object, reason: 'no ports' });

  const externalIPs = listOf(spec.externalIPs, 'externalIPs', object, skipped);
  // VIP-mode ingress IPs only: hostname-only and ipMode Proxy ingresses get no rules (rule 8 of docs/semantics.md).
  const ingressRaw: unknown = service.status?.loadBalancer?.ingress;
  const ingress = Array.isArray(ingressRaw) ? (ingressRaw as Array<{ ip?: unknown; ipMode?: unknown } | null>) : NONE;
  const lbRaw =
    ingress.length === 0
      ? NONE
      : ingress
          .filter((i) => i && typeof i.ip === 'string' && i.ip !== '' && (i.ipMode === undefined || i.ipMode === null || i.ipMode === 'VIP'))
          .map((i) => i!.ip);
  const rangesProblem = sourceRangesProblem(spec.loadBalancerSourceRanges);
  if (rangesProblem !== null) {
    skipped.push({ object, reason: `spec.loadBalancerSourceRanges cannot be read (${rangesProblem}): the frontends it restricts are not programmed` });
  }
  const rangesRaw = rangesProblem === null && Array.isArray(spec.loadBalancerSourceRanges) ? spec.loadBalancerSourceRanges : NONE;
  const families: FamilyInfo[] = new Array(byFamily.length);
  for (let i = 0; i < byFamily.length; i++) {
    families[i] = familyInfo(byFamily[i].family, byFamily[i].ip, externalIPs, lbRaw, rangesRaw, object, i === 0 ? skipped : null);
  }

  const externallyAccessibleType = type === 'LoadBalancer' || type === 'NodePort' || externalIPs.length > 0;
  const etp = enumField(spec.externalTrafficPolicy, 'externalTrafficPolicy', POLICIES, 'Cluster', object, skipped);
  const itp = enumField(spec.internalTrafficPolicy, 'internalTrafficPolicy', POLICIES, 'Cluster', object, skipped);
  enumField(spec.sessionAffinity, 'sessionAffinity', AFFINITIES, 'None', object, skipped);
  const externalPolicyLocal = externallyAccessibleType && etp === 'Local';
  const hc = portNumberField(spec.healthCheckNodePort, 'spec.healthCheckNodePort', object, skipped, 'no health check server');
  const healthCheckNodePort = type === 'LoadBalancer' && externalPolicyLocal ? hc : 0;

  return {
    key,
    info: {
      key,
      namespace,
      name,
      type: type as ServiceInfo['type'],
      families,
      ports,
      internalPolicyLocal: itp === 'Local',
      externalPolicyLocal,
      affinityTimeoutSeconds: affinityTimeout(spec, object, skipped),
      healthCheckNodePort,
      sourceRangesUnreadable: rangesProblem !== null,
    },
    skipped,
  };
}
