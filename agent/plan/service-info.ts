/**
 * Service → per-port service info (kube-proxy's servicechangetracker +
 * newBaseServiceInfo, rules 3, 4, 7, 8 and 10 of the semantics reference).
 * kube-proxy runs one proxier per IP family; kpr plans both families at once,
 * so every family-dependent field is kept per family (FamilyInfo).
 * Pure: returns what it could read and, for every piece it could not use,
 * a SkippedObject saying why. Never throws on bad input.
 */
import type { V1Service, V1ServicePort } from '@kubernetes/client-node';
import { ipv4Canonical, parseCIDR, parseIP, type IPFamily } from './ip.js';
import { LABEL_SERVICE_PROXY_NAME } from './labels.js';
import type { Protocol, SkippedObject } from './types.js';
import { flatKey } from '../flat-key.js';

/** v1.DefaultClientIPServiceAffinitySeconds (rule 10). */
export const DEFAULT_AFFINITY_SECONDS = 10800;
/** MaxClientIPServiceAffinitySeconds of the API's validation (rule 10). */
export const MAX_AFFINITY_SECONDS = 86400;

/** One Service port, API defaults applied (rule 7: keyed by name and protocol). */
export interface ServicePortInfo {
  /** The port's name, "" when unnamed. */
  name: string;
  port: number;
  protocol: Protocol;
  /** 0 when none. */
  nodePort: number;
}

/** The addresses of one IP family a Service answers on (rule 8: each filtered to the family). */
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
  /** internalTrafficPolicy == Local (rule 8). */
  internalPolicyLocal: boolean;
  /**
   * externalTrafficPolicy == Local on a Service that is externally accessible
   * by type (LoadBalancer, NodePort, or ClusterIP with externalIPs; rule 8).
   */
  externalPolicyLocal: boolean;
  /** stickyMaxAgeSeconds: 0 without ClientIP affinity (rule 8). */
  affinityTimeoutSeconds: number;
  /** Set only for type LoadBalancer with eTP Local (NeedsHealthCheck, rule 8); 0 otherwise. */
  healthCheckNodePort: number;
}

export interface ServiceInfoResult {
  /** "namespace/name" (may contain empty parts when metadata is missing). */
  key: string;
  /** null when the whole Service is skipped. */
  info: ServiceInfo | null;
  skipped: SkippedObject[];
}

const KNOWN_TYPES = new Set(['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']);
const NONE: readonly never[] = Object.freeze([]);

/** "namespace/name" of a Service or slice owner. */
export function serviceKeyOf(service: V1Service): string {
  return flatKey('/', service.metadata?.namespace ?? '', service.metadata?.name ?? '');
}

/**
 * The clusterIP of each family (GetClusterIPByFamily, rule 4): the clusterIPs
 * entry at the index of the family in ipFamilies; with no ipFamilies,
 * spec.clusterIP alone, in its own family. clusterIPs defaults to [clusterIP]
 * as the API server would fill it.
 */
function clusterIPsByFamily(spec: NonNullable<V1Service['spec']>, object: string, skipped: SkippedObject[]): Array<{ family: IPFamily; ip: string }> {
  const families = Array.isArray(spec.ipFamilies) ? spec.ipFamilies : [];
  // The common single-stack IPv4 Service (no ipFamilies, or just IPv4, and a canonical address): nothing to parse or pick.
  const first = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length ? spec.clusterIPs[0] : spec.clusterIP;
  if ((families.length === 0 ? first === spec.clusterIP : families.length === 1 && families[0] === 'IPv4') && ipv4Canonical(first) >= 0) {
    return [{ family: 'IPv4', ip: first! }];
  }
  const out: Array<{ family: IPFamily; ip: string }> = [];
  const clusterIPs = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length ? spec.clusterIPs : [spec.clusterIP!];
  const candidates: Array<{ want?: string; raw: unknown }> =
    families.length === 0 ? [{ raw: spec.clusterIP }] : families.map((f, i) => ({ want: f, raw: clusterIPs[i] }));
  for (const { want, raw } of candidates) {
    const ip = parseIP(typeof raw === 'string' ? raw : undefined);
    if (!ip || (want !== undefined && ip.family !== want)) {
      skipped.push({ object, reason: `invalid clusterIP ${JSON.stringify(raw ?? null)}${want ? ` for family ${want}` : ''}` });
      continue;
    }
    if (!out.some((o) => o.family === ip.family)) out.push({ family: ip.family, ip: ip.text });
  }
  return out;
}

function portLabel(name: string, port: unknown, protocol: string): string {
  return `port ${JSON.stringify(name)} ${String(port)}/${protocol}`;
}

/** Valid addresses of `family` among `raws`; invalid ones are reported once (by the first family). */
function addressesOf(raws: readonly unknown[], family: IPFamily, what: string, object: string, skipped: SkippedObject[] | null): string[] {
  if (raws.length === 0) return [];
  const out: string[] = [];
  for (const raw of raws) {
    const ip = parseIP(typeof raw === 'string' ? raw : undefined);
    if (!ip) skipped?.push({ object, reason: `invalid ${what} ${JSON.stringify(raw)} ignored` });
    else if (ip.family === family && !out.includes(ip.text)) out.push(ip.text);
  }
  return out;
}

/** The ClientIP affinity timeout (rules 8, 10): default 10800 s, at most 86400 s. */
function affinityTimeout(spec: NonNullable<V1Service['spec']>, object: string, skipped: SkippedObject[]): number {
  if (spec.sessionAffinity !== 'ClientIP') return 0;
  const t = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
  if (t === undefined || t === null) return DEFAULT_AFFINITY_SECONDS;
  if (!Number.isInteger(t) || t < 1) {
    skipped.push({ object, reason: `invalid sessionAffinityConfig.clientIP.timeoutSeconds ${JSON.stringify(t)}; using ${DEFAULT_AFFINITY_SECONDS}` });
    return DEFAULT_AFFINITY_SECONDS;
  }
  if (t > MAX_AFFINITY_SECONDS) {
    skipped.push({ object, reason: `sessionAffinityConfig.clientIP.timeoutSeconds ${t} is above the maximum; using ${MAX_AFFINITY_SECONDS}` });
    return MAX_AFFINITY_SECONDS;
  }
  return t;
}

/** The result for a Service skipped as a whole. */
function skipService(key: string, reason: string): ServiceInfoResult {
  return { key, info: null, skipped: [{ object: `Service ${key}`, reason }] };
}

/** One Service port, or the reason it cannot be used (null: usable, pushed to `ports`). */
function readPort(p: V1ServicePort | null | undefined, ports: ServicePortInfo[]): string | null {
  if (!p || typeof p !== 'object') return `invalid port entry ${JSON.stringify(p)}`;
  const portName = typeof p.name === 'string' ? p.name : '';
  const protoRaw = p.protocol || 'TCP'; // API default (rule 10)
  if (protoRaw === 'SCTP') return `SCTP is not supported by kpr yet (${portLabel(portName, p.port, protoRaw)})`;
  if (protoRaw !== 'TCP' && protoRaw !== 'UDP') return `unknown protocol ${JSON.stringify(protoRaw)} (${portLabel(portName, p.port, protoRaw)})`;
  if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535) return `invalid port ${JSON.stringify(p.port)} (${portLabel(portName, p.port, protoRaw)})`;
  for (let i = 0; i < ports.length; i++) {
    if (ports[i].port === p.port && ports[i].protocol === protoRaw) return `duplicate port ${p.port}/${protoRaw} (${portLabel(portName, p.port, protoRaw)})`;
  }
  const nodePort = Number.isInteger(p.nodePort) && (p.nodePort as number) > 0 && (p.nodePort as number) <= 65535 ? (p.nodePort as number) : 0;
  ports.push({ name: portName, port: p.port, protocol: protoRaw, nodePort });
  return null;
}

/** One family's addresses (rule 8); invalid entries are reported to `report` (the first family's pass only). */
function familyInfo(
  family: IPFamily,
  clusterIP: string,
  externalIPs: readonly unknown[],
  lbRaw: readonly unknown[],
  rangesRaw: readonly unknown[],
  object: string,
  report: SkippedObject[] | null,
): FamilyInfo {
  const sourceRanges: string[] = [];
  for (const r of rangesRaw) {
    const c = parseCIDR(r as string);
    if (!c) report?.push({ object, reason: `invalid loadBalancerSourceRanges entry ${JSON.stringify(r)} ignored` });
    else if (c.family === family && !sourceRanges.includes(c.text)) sourceRanges.push(c.text);
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
  const key = `${namespace}/${name}`;

  if (!namespace || !name) return skipService(key, 'missing metadata.namespace or metadata.name');
  const proxyName = service.metadata?.labels?.[LABEL_SERVICE_PROXY_NAME];
  if (proxyName !== undefined) {
    return skipService(key, `handled by another proxy (label ${LABEL_SERVICE_PROXY_NAME}=${JSON.stringify(proxyName)})`);
  }
  const spec = service.spec;
  if (!spec) return skipService(key, 'missing spec');

  const type = spec.type || 'ClusterIP'; // API default (rule 10)
  if (!KNOWN_TYPES.has(type)) return skipService(key, `unknown type ${JSON.stringify(type)}`);
  if (type === 'ExternalName') return skipService(key, 'type ExternalName is not proxied');
  if (!spec.clusterIP || spec.clusterIP === 'None') return skipService(key, 'headless (no clusterIP) is not proxied');
  if (typeof spec.clusterIP !== 'string') return skipService(key, `invalid clusterIP ${JSON.stringify(spec.clusterIP)}`);

  const object = `Service ${key}`;
  const skipped: SkippedObject[] = [];
  const byFamily = clusterIPsByFamily(spec, object, skipped);
  if (byFamily.length === 0) return { key, info: null, skipped };

  const ports: ServicePortInfo[] = [];
  const specPorts = Array.isArray(spec.ports) ? spec.ports : NONE;
  for (let i = 0; i < specPorts.length; i++) {
    const reason = readPort(specPorts[i], ports);
    if (reason !== null) skipped.push({ object, reason });
  }
  if (specPorts.length === 0) skipped.push({ object, reason: 'no ports' });

  const externalIPs = Array.isArray(spec.externalIPs) ? spec.externalIPs : NONE;
  // VIP-mode ingress IPs only: hostname-only and ipMode Proxy ingresses get no rules (rule 8).
  const ingress = Array.isArray(service.status?.loadBalancer?.ingress) ? service.status!.loadBalancer!.ingress! : NONE;
  const lbRaw = ingress.length === 0 ? NONE : ingress.filter((i) => i && typeof i.ip === 'string' && i.ip !== '' && (i.ipMode === undefined || i.ipMode === null || i.ipMode === 'VIP')).map((i) => i.ip);
  const rangesRaw = Array.isArray(spec.loadBalancerSourceRanges) ? spec.loadBalancerSourceRanges : NONE;
  const families: FamilyInfo[] = new Array(byFamily.length);
  for (let i = 0; i < byFamily.length; i++) {
    families[i] = familyInfo(byFamily[i].family, byFamily[i].ip, externalIPs, lbRaw, rangesRaw, object, i === 0 ? skipped : null);
  }

  const externallyAccessibleType = type === 'LoadBalancer' || type === 'NodePort' || externalIPs.length > 0;
  const externalPolicyLocal = externallyAccessibleType && spec.externalTrafficPolicy === 'Local';
  const hc = spec.healthCheckNodePort;
  const healthCheckNodePort = type === 'LoadBalancer' && externalPolicyLocal && Number.isInteger(hc) && (hc as number) > 0 ? (hc as number) : 0;

  return {
    key,
    info: {
      key,
      namespace,
      name,
      type: type as ServiceInfo['type'],
      families,
      ports,
      internalPolicyLocal: spec.internalTrafficPolicy === 'Local',
      externalPolicyLocal,
      affinityTimeoutSeconds: affinityTimeout(spec, object, skipped),
      healthCheckNodePort,
    },
    skipped,
  };
}
