/**
 * Service → per-port service info (kube-proxy's servicechangetracker +
 * newBaseServiceInfo, rules 3, 4, 7, 8 and 10 of the semantics reference).
 * kube-proxy runs one proxier per IP family; kpr plans both families at once,
 * so every family-dependent field is kept per family (FamilyInfo).
 * Pure: returns what it could read and, for every piece it could not use,
 * a SkippedObject saying why. Never throws on bad input.
 */
import type { V1Service } from '@kubernetes/client-node';
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

/** Reads one Service. `info` is null when nothing of it can be programmed. */
export function readServiceInfo(service: V1Service): ServiceInfoResult {
  const namespace = service.metadata?.namespace ?? '';
  const name = service.metadata?.name ?? '';
  const key = `${namespace}/${name}`;
  const object = `Service ${key}`;
  const skip = (reason: string): ServiceInfoResult => ({ key, info: null, skipped: [{ object, reason }] });

  if (!namespace || !name) return skip('missing metadata.namespace or metadata.name');
  const proxyName = service.metadata?.labels?.[LABEL_SERVICE_PROXY_NAME];
  if (proxyName !== undefined) {
    return skip(`handled by another proxy (label ${LABEL_SERVICE_PROXY_NAME}=${JSON.stringify(proxyName)})`);
  }
  const spec = service.spec;
  if (!spec) return skip('missing spec');

  const type = spec.type || 'ClusterIP'; // API default (rule 10)
  if (!KNOWN_TYPES.has(type)) return skip(`unknown type ${JSON.stringify(type)}`);
  if (type === 'ExternalName') return skip('type ExternalName is not proxied');
  if (!spec.clusterIP || spec.clusterIP === 'None') return skip('headless (no clusterIP) is not proxied');
  if (typeof spec.clusterIP !== 'string') return skip(`invalid clusterIP ${JSON.stringify(spec.clusterIP)}`);

  const skipped: SkippedObject[] = [];
  const byFamily = clusterIPsByFamily(spec, object, skipped);
  if (byFamily.length === 0) return { key, info: null, skipped };

  const ports: ServicePortInfo[] = [];
  const specPorts = Array.isArray(spec.ports) ? spec.ports : [];
  for (const p of specPorts) {
    if (!p || typeof p !== 'object') {
      skipped.push({ object, reason: `invalid port entry ${JSON.stringify(p)}` });
      continue;
    }
    const portName = typeof p.name === 'string' ? p.name : '';
    const protoRaw = p.protocol || 'TCP'; // API default (rule 10)
    const where = () => portLabel(portName, p.port, protoRaw);
    if (protoRaw === 'SCTP') {
      skipped.push({ object, reason: `SCTP is not supported by kpr yet (${where()})` });
      continue;
    }
    if (protoRaw !== 'TCP' && protoRaw !== 'UDP') {
      skipped.push({ object, reason: `unknown protocol ${JSON.stringify(protoRaw)} (${where()})` });
      continue;
    }
    if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535) {
      skipped.push({ object, reason: `invalid port ${JSON.stringify(p.port)} (${where()})` });
      continue;
    }
    if (ports.some((q) => q.port === p.port && q.protocol === protoRaw)) {
      skipped.push({ object, reason: `duplicate port ${p.port}/${protoRaw} (${where()})` });
      continue;
    }
    const nodePort = Number.isInteger(p.nodePort) && (p.nodePort as number) > 0 && (p.nodePort as number) <= 65535 ? (p.nodePort as number) : 0;
    ports.push({ name: portName, port: p.port, protocol: protoRaw, nodePort });
  }
  if (specPorts.length === 0) skipped.push({ object, reason: 'no ports' });

  const externalIPs = Array.isArray(spec.externalIPs) ? spec.externalIPs : [];
  // VIP-mode ingress IPs only: hostname-only and ipMode Proxy ingresses get no rules (rule 8).
  const ingress = Array.isArray(service.status?.loadBalancer?.ingress) ? service.status!.loadBalancer!.ingress! : [];
  const lbRaw = ingress.length === 0 ? NONE : ingress.filter((i) => i && typeof i.ip === 'string' && i.ip !== '' && (i.ipMode === undefined || i.ipMode === null || i.ipMode === 'VIP')).map((i) => i.ip);
  const rangesRaw = Array.isArray(spec.loadBalancerSourceRanges) ? spec.loadBalancerSourceRanges : [];
  const families: FamilyInfo[] = byFamily.map(({ family, ip }, i) => {
    const report = i === 0 ? skipped : null;
    const sourceRanges: string[] = [];
    for (const r of rangesRaw) {
      const c = parseCIDR(r);
      if (!c) report?.push({ object, reason: `invalid loadBalancerSourceRanges entry ${JSON.stringify(r)} ignored` });
      else if (c.family === family && !sourceRanges.includes(c.text)) sourceRanges.push(c.text);
    }
    return {
      family,
      clusterIP: ip,
      externalIPs: addressesOf(externalIPs, family, 'externalIP', object, report),
      loadBalancerIPs: addressesOf(lbRaw, family, 'load balancer ingress IP', object, report),
      sourceRanges,
    };
  });

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
