/**
 * Service defaulting and allocation, as the real apiserver's REST strategy does
 * it: the defaulted fields, a ClusterIP from the service range and node ports
 * from 30000-32767, both unique among the stored Services, and the allocated
 * values an update omits kept from the old object.
 */
import type { KubeObject } from './apiserver-selectors.js';
import { ApiError } from './apiserver-status.js';

export class ServiceDefaults {
  private readonly svcBase: number;
  private readonly svcSize: number;

  /** `serviceCIDR`: the ClusterIP range (IPv4), default 198.19.0.0/16; `services`: the stored Services, for what is in use. */
  constructor(
    serviceCIDR: string | undefined,
    private readonly services: () => Iterable<KubeObject>,
  ) {
    const [ip, bits] = (serviceCIDR ?? '198.19.0.0/16').split('/');
    const o = ip.split('.').map(Number);
    this.svcBase = ((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]) >>> 0;
    this.svcSize = 2 ** (32 - Number(bits));
  }

  /** Defaults `svc` in place and allocates what it lacks; `old` is its stored state on an update. */
  apply(svc: KubeObject, old: KubeObject | undefined): void {
    const spec = (svc.spec = svc.spec ?? {});
    spec.type = spec.type ?? 'ClusterIP';
    spec.sessionAffinity = spec.sessionAffinity ?? 'None';
    // Anything but an array (a malformed object a test stores) is kept as it is, undefaulted.
    if (spec.ports === undefined) spec.ports = [];
    const ports: any[] = Array.isArray(spec.ports) ? spec.ports : [];
    for (const p of ports) {
      if (p === null || typeof p !== 'object') continue; // an entry that is not an object (test/e2e/fuzz.test.ts): stored as sent
      p.protocol = p.protocol ?? 'TCP';
      if (spec.type !== 'ExternalName') p.targetPort = p.targetPort ?? p.port;
    }
    if (spec.type === 'ExternalName') return;
    spec.internalTrafficPolicy = spec.internalTrafficPolicy ?? 'Cluster';
    if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') spec.externalTrafficPolicy = spec.externalTrafficPolicy ?? 'Cluster';
    // Allocated values the caller omitted are kept from the old object (patchAllocatedValues).
    if (old && !spec.clusterIP && old.spec?.clusterIP) {
      spec.clusterIP = old.spec.clusterIP;
      spec.clusterIPs = old.spec.clusterIPs;
    }
    if (old && old.spec?.clusterIP && spec.clusterIP !== old.spec.clusterIP) {
      throw new ApiError(422, 'Invalid', `Service "${svc.metadata?.name}" is invalid: spec.clusterIP: Invalid value: "${spec.clusterIP}": field is immutable`);
    }
    if (!spec.clusterIP && spec.clusterIPs?.length) spec.clusterIP = spec.clusterIPs[0];
    if (!spec.clusterIP) spec.clusterIP = this.allocateClusterIP();
    if (spec.clusterIP !== 'None') {
      spec.clusterIPs = spec.clusterIPs?.length ? spec.clusterIPs : [spec.clusterIP];
      spec.ipFamilies = spec.ipFamilies ?? [spec.clusterIP.includes(':') ? 'IPv6' : 'IPv4'];
      spec.ipFamilyPolicy = spec.ipFamilyPolicy ?? 'SingleStack';
    } else {
      spec.clusterIPs = ['None'];
    }
    if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') {
      const oldPorts: any[] = Array.isArray(old?.spec?.ports) ? old!.spec.ports : [];
      for (const p of ports) {
        if (p.nodePort) continue;
        const prev = oldPorts.find((q) => q.port === p.port && (q.protocol ?? 'TCP') === p.protocol && q.nodePort);
        p.nodePort = prev ? prev.nodePort : this.allocateNodePort(ports);
      }
    }
  }

  private allocateClusterIP(): string {
    const used = new Set<string>();
    for (const s of this.services()) if (s.spec?.clusterIP) used.add(s.spec.clusterIP);
    for (let i = 10; i < this.svcSize - 1; i++) {
      const n = (this.svcBase + i) >>> 0;
      const ip = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
      if (!used.has(ip)) return ip;
    }
    throw new ApiError(500, 'InternalError', 'Internal error occurred: failed to allocate a serviceIP: range is full');
  }

  private allocateNodePort(current: any[]): number {
    const used = new Set<number>(current.map((p) => p.nodePort).filter(Boolean));
    for (const s of this.services()) for (const p of Array.isArray(s.spec?.ports) ? s.spec.ports : []) if (p?.nodePort) used.add(p.nodePort);
    for (let port = 30000; port <= 32767; port++) if (!used.has(port)) return port;
    throw new ApiError(500, 'InternalError', 'Internal error occurred: failed to allocate a nodePort: range is full');
  }
}
