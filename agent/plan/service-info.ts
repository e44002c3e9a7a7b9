/**
 * Service → per-port service info (kube-proxy's servicechangetracker +
 * newBaseServiceInfo, rules 3, 4, 7, 8 and 10 of the semantics reference).
 * Pure: returns what it could read and, for every piece it could not use,
 * a SkippedObject saying why. Never throws on bad input.
 */
import type { V1Service } from '@kubernetes/client-node';
import { parseIPv4, looksLikeIPv6 } from './ip.js';
import { LABEL_SERVICE_PROXY_NAME } from './labels.js';
import type { Protocol, SkippedObject } from './types.js';

/** One Service port, API defaults applied (rule 7: keyed by name and protocol). */
export interface ServicePortInfo {
  /** The port's name, "" when unnamed. */
  name: string;
  port: number;
  protocol: Protocol;
  /** 0 when none. Not programmed yet. */
  nodePort: number;
}

/** What the planner needs from one Service, defaults applied. */
export interface ServiceInfo {
  /** "namespace/name". */
  key: string;
  namespace: string;
  name: string;
  /** Normalised IPv4 clusterIP. */
  clusterIP: string;
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  ports: ServicePortInfo[];
  /** internalTrafficPolicy == Local (rule 8). Not honoured yet. */
  internalPolicyLocal: boolean;
}

export interface ServiceInfoResult {
  /** "namespace/name" (may contain empty parts when metadata is missing). */
  key: string;
  /** null when the whole Service is skipped. */
  info: ServiceInfo | null;
  skipped: SkippedObject[];
}

const KNOWN_TYPES = new Set(['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']);

/** "namespace/name" of a Service or slice owner. */
export function serviceKeyOf(service: V1Service): string {
  return `${service.metadata?.namespace ?? ''}/${service.metadata?.name ?? ''}`;
}

/**
 * Picks the Service's IPv4 clusterIP (GetClusterIPByFamily, rule 4): the
 * clusterIPs entry at the index of "IPv4" in ipFamilies; with no ipFamilies,
 * spec.clusterIP if it is not IPv6. clusterIPs defaults to [clusterIP] as the
 * API server would fill it. Returns the raw string (validated by the caller).
 */
function ipv4ClusterIPString(spec: NonNullable<V1Service['spec']>): string | undefined {
  const clusterIPs = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  const families = Array.isArray(spec.ipFamilies) ? spec.ipFamilies : [];
  if (families.length === 0) {
    const ip = spec.clusterIP ?? clusterIPs[0];
    return ip && !looksLikeIPv6(ip) ? ip : undefined;
  }
  const idx = families.indexOf('IPv4');
  return idx >= 0 ? clusterIPs[idx] : undefined;
}

function portLabel(name: string, port: unknown, protocol: string): string {
  return `port ${JSON.stringify(name)} ${String(port)}/${protocol}`;
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

  const raw = ipv4ClusterIPString(spec);
  if (raw === undefined) {
    return skip(`no IPv4 clusterIP (clusterIPs ${JSON.stringify(spec.clusterIPs ?? [spec.clusterIP])}); kpr's datapath is IPv4 only`);
  }
  const ip = parseIPv4(raw);
  if (!ip) {
    return skip(
      looksLikeIPv6(raw)
        ? `IPv6 clusterIP ${JSON.stringify(raw)} is not supported by kpr yet`
        : `invalid clusterIP ${JSON.stringify(raw)}`,
    );
  }

  const skipped: SkippedObject[] = [];
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
    const nodePort = Number.isInteger(p.nodePort) && (p.nodePort as number) > 0 ? (p.nodePort as number) : 0;
    ports.push({ name: portName, port: p.port, protocol: protoRaw, nodePort });
  }
  if (specPorts.length === 0) skipped.push({ object, reason: 'no ports' });

  // Parts of the Service this milestone does not program: say so, never silently.
  if (type !== 'ClusterIP') {
    skipped.push({ object, reason: `type ${type}: only the clusterIP frontends are programmed; ${type} is not supported by kpr yet` });
  }
  if (Array.isArray(spec.externalIPs) && spec.externalIPs.length) {
    skipped.push({ object, reason: `externalIPs ${JSON.stringify(spec.externalIPs)} are not supported by kpr yet` });
  }
  if (spec.sessionAffinity === 'ClientIP') {
    skipped.push({ object, reason: 'sessionAffinity ClientIP is not supported by kpr yet; connections are balanced without affinity' });
  }
  const internalPolicyLocal = spec.internalTrafficPolicy === 'Local';
  if (internalPolicyLocal) {
    skipped.push({ object, reason: 'internalTrafficPolicy Local is not supported by kpr yet; all ready endpoints are used' });
  }

  return {
    key,
    info: { key, namespace, name, clusterIP: ip.text, type: type as ServiceInfo['type'], ports, internalPolicyLocal },
    skipped,
  };
}
