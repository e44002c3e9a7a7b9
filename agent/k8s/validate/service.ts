/** A Service: ValidateService, ValidateServiceClusterIPsRelatedFields and ValidateLoadBalancerStatus, for the fields kpr reads. */
import { parseIP, type ParsedIP } from '../../net/ip.js';
import { cidr, ip, nonSpecialIP } from './addresses.js';
import { array, fail, integer, object, oneOf, show, string, type Obj } from './json-checks.js';
import { LIMITS } from './limits.js';
import { validateMeta } from './metadata.js';
import { dns1035Label, dnsLabel, dnsSubdomain, portName } from './names.js';

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] as const;
export const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
const AFFINITIES = ['None', 'ClientIP'] as const;
const POLICIES = ['Cluster', 'Local'] as const;
const FAMILIES = ['IPv4', 'IPv6'] as const;
const FAMILY_POLICIES = ['SingleStack', 'PreferDualStack', 'RequireDualStack'] as const;
const IP_MODES = ['VIP', 'Proxy'] as const;

export function validateService(o: Obj): void {
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
