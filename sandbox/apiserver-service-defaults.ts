/**
 * Service defaulting and allocation, as the real apiserver's REST strategy does
 * it: the defaulted fields, ClusterIPs from the service ranges (one per IP
 * family, dual-stack as ipFamilyPolicy asks) and node ports from 30000-32767,
 * all unique among the stored Services, and the allocated values an update
 * omits kept from the old object.
 */
import type { KubeObject } from './apiserver-selectors.js';
import { ApiError } from './apiserver-status.js';
import { familyOf, ServiceRange, type IPFamily } from './apiserver-service-range.js';

const POLICIES = ['SingleStack', 'PreferDualStack', 'RequireDualStack'];
const other = (f: IPFamily): IPFamily => (f === 'IPv4' ? 'IPv6' : 'IPv4');
const invalid = (svc: KubeObject, field: string, value: unknown, why: string) =>
  new ApiError(422, 'Invalid', `Service "${svc.metadata?.name}" is invalid: ${field}: Invalid value: ${JSON.stringify(value)}: ${why}`);

export class ServiceDefaults {
  /** The cluster's ranges, primary first (at most one per family). */
  private readonly ranges: ServiceRange[];

  /**
   * `serviceCIDR`: the ClusterIP ranges as kube-apiserver's --service-cluster-ip-range takes them
   * ("primary[,secondary]", one per family), default 198.19.0.0/16; `services`: the stored Services,
   * for what is in use.
   */
  constructor(
    serviceCIDR: string | undefined,
    private readonly services: () => Iterable<KubeObject>,
  ) {
    this.ranges = (serviceCIDR ?? '198.19.0.0/16').split(',').map((c) => new ServiceRange(c));
    if (this.ranges.length > 2 || (this.ranges.length === 2 && this.ranges[0].family === this.ranges[1].family)) {
      throw new Error(`service ranges ${serviceCIDR}: at most two, one per family`);
    }
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
      spec.clusterIPs = spec.clusterIPs ?? old.spec.clusterIPs;
    }
    if (old && old.spec?.clusterIP && spec.clusterIP !== old.spec.clusterIP) {
      throw new ApiError(422, 'Invalid', `Service "${svc.metadata?.name}" is invalid: spec.clusterIP: Invalid value: "${spec.clusterIP}": field is immutable`);
    }
    if (!spec.clusterIP && Array.isArray(spec.clusterIPs) && spec.clusterIPs.length) spec.clusterIP = spec.clusterIPs[0];
    if (spec.clusterIP && !spec.clusterIPs?.length) spec.clusterIPs = [spec.clusterIP];
    if (spec.clusterIP === 'None')
      spec.clusterIPs = ['None']; // headless: family fields as sent
    else if (wellFormed(spec)) this.families(svc, old);
    else {
      if (!spec.clusterIP) spec.clusterIP = this.allocateClusterIP(this.ranges[0]);
      spec.clusterIPs = spec.clusterIPs?.length ? spec.clusterIPs : [spec.clusterIP];
      spec.ipFamilies = spec.ipFamilies ?? [String(spec.clusterIP).includes(':') ? 'IPv6' : 'IPv4'];
      spec.ipFamilyPolicy = spec.ipFamilyPolicy ?? 'SingleStack';
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

  /**
   * ipFamilyPolicy, ipFamilies and clusterIPs, as the real allocator's initIPFamilyFields and
   * allocation do them: the policy inferred when unset (the old one on an update; RequireDualStack
   * when two families or IPs are given; else SingleStack), the families from the IPs given, then
   * the primary range's; a dual-stack policy gets the other family (PreferDualStack only on a
   * dual-stack cluster); an IP allocated per family that has none. Refused (422) as the real one
   * refuses them: RequireDualStack on a single-stack cluster, SingleStack with two families or IPs,
   * the same family twice, a family with no range to allocate from, a secondary IP or family
   * dropped without SingleStack. IPs or families that disagree are stored as sent: the hostile-input
   * suites (test/e2e/fuzz.test.ts) store such objects for the agent to refuse.
   */
  private families(svc: KubeObject, old: KubeObject | undefined): void {
    const spec = svc.spec;
    const ips: string[] = [...(spec.clusterIPs ?? [])];
    const fams: IPFamily[] = [...(spec.ipFamilies ?? [])];
    if (!spec.ipFamilyPolicy) {
      if (old?.spec?.ipFamilyPolicy) spec.ipFamilyPolicy = old.spec.ipFamilyPolicy;
      else spec.ipFamilyPolicy = ips.length === 2 || fams.length === 2 ? 'RequireDualStack' : 'SingleStack';
    }
    const policy = spec.ipFamilyPolicy as string;
    if (
      old &&
      Array.isArray(old.spec?.clusterIPs) &&
      old.spec.clusterIPs.length === 2 &&
      ips.length === 2 &&
      ips[1] === old.spec.clusterIPs[1] &&
      policy === 'SingleStack'
    ) {
      ips.length = 1; // a downgrade: SingleStack releases the secondary IP
      if (fams.length === 2) fams.length = 1;
    } else if (old && policy !== 'SingleStack' && Array.isArray(old.spec?.clusterIPs) && old.spec.clusterIPs.length === 2 && ips.length < 2) {
      throw invalid(svc, 'spec.ipFamilyPolicy', policy, "must be 'SingleStack' to release the secondary cluster IP");
    }
    if (policy === 'SingleStack' && (ips.length > 1 || fams.length > 1)) {
      throw invalid(svc, 'spec.ipFamilyPolicy', policy, 'must be RequireDualStack or PreferDualStack when multiple IP families are specified');
    }
    if (fams.length === 2 && fams[0] === fams[1]) {
      throw new ApiError(422, 'Invalid', `Service "${svc.metadata?.name}" is invalid: spec.ipFamilies[1]: Duplicate value: "${fams[1]}"`);
    }
    // Families the IPs say and the request did not.
    for (let i = fams.length; i < ips.length; i++) {
      const f = familyOf(ips[i]);
      if (f) fams.push(f);
    }
    if (policy === 'RequireDualStack' && this.ranges.length < 2) {
      throw invalid(svc, 'spec.ipFamilyPolicy', policy, 'this cluster is not configured for dual-stack services');
    }
    if (fams.length === 0) fams.push(this.ranges[0].family);
    if (fams.length === 1 && (policy === 'RequireDualStack' || (policy === 'PreferDualStack' && this.ranges.length === 2))) fams.push(other(fams[0]));
    for (let i = ips.length; i < fams.length; i++) {
      const range = this.ranges.find((r) => r.family === fams[i]);
      if (!range) throw invalid(svc, `spec.ipFamilies[${i}]`, fams[i], 'not configured on this cluster');
      ips.push(this.allocateClusterIP(range));
    }
    spec.clusterIP = ips[0];
    spec.clusterIPs = ips;
    spec.ipFamilies = fams;
  }

  private allocateClusterIP(range: ServiceRange): string {
    const used = new Set<string>();
    for (const s of this.services())
      for (const ip of Array.isArray(s.spec?.clusterIPs) ? s.spec.clusterIPs : [s.spec?.clusterIP]) if (typeof ip === 'string') used.add(ip);
    const last = range.size - 1n < 65536n ? range.size - 1n : 65536n;
    for (let i = 10n; i < last; i++) {
      const ip = range.at(i);
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

/** Whether the family fields are what a client can send (else they are stored as sent, undefaulted). */
function wellFormed(spec: any): boolean {
  const ipsOk =
    spec.clusterIPs === undefined ||
    (Array.isArray(spec.clusterIPs) &&
      spec.clusterIPs.length <= 2 &&
      spec.clusterIPs.every((ip: unknown) => typeof ip === 'string' && (ip === 'None' || familyOf(ip))));
  const famsOk =
    spec.ipFamilies === undefined ||
    (Array.isArray(spec.ipFamilies) && spec.ipFamilies.length <= 2 && spec.ipFamilies.every((f: unknown) => f === 'IPv4' || f === 'IPv6'));
  const policyOk = spec.ipFamilyPolicy === undefined || POLICIES.includes(spec.ipFamilyPolicy);
  return ipsOk && famsOk && policyOk && (spec.clusterIP === undefined || typeof spec.clusterIP === 'string');
}
