/**
 * kube-proxy's iptables-mode ruleset, generated in its exact shape, so the
 * benchmark can load "the same N services × M endpoints" into iptables and
 * compare kpr against the real thing.
 *
 * What is replicated from kube-proxy (pkg/proxy/iptables/proxier.go):
 *  - chain names: "KUBE-SVC-" + base32(sha256(servicePortName + protocol))[:16]
 *    and "KUBE-SEP-" + base32(sha256(servicePortName + protocol + endpoint))[:16],
 *    where servicePortName is "ns/name:portName" (":portName" only when the
 *    port is named), protocol is lower-case ("tcp") and endpoint is "ip:port";
 *  - KUBE-SERVICES: one "cluster IP" rule per service port, then the
 *    KUBE-NODEPORTS jump as the last rule;
 *  - KUBE-SVC-*: one rule per endpoint, "-m statistic --mode random
 *    --probability 1/(n-i)" formatted %0.10f, the last one unconditional;
 *  - KUBE-SEP-*: "-s ep/32 -j KUBE-MARK-MASQ" (hairpin) and the DNAT rule;
 *  - KUBE-MARK-MASQ, KUBE-POSTROUTING (mark 0x4000), KUBE-NODEPORTS, and the
 *    filter table's kube-proxy chains (no firewalls, no health checks);
 *  - NodePorts (a service with `nodePort`, externalTrafficPolicy=Cluster):
 *    "-A KUBE-NODEPORTS -p tcp -m comment --comment ns/name:port -m tcp
 *    --dport <nodePort> -j KUBE-EXT-<hash>" (the same hash as its KUBE-SVC
 *    chain), and KUBE-EXT-<hash> = mark for masquerade, then jump to the
 *    KUBE-SVC chain. KUBE-NODEPORTS is reached from the last KUBE-SERVICES
 *    rule ("--dst-type LOCAL"), so a NodePort connection first walks every
 *    cluster-IP rule, as with kube-proxy.
 *
 * Full syncs are a plain `iptables-restore` of fullRestore(); kube-proxy's
 * partial syncs (MinimizeIPTablesRestore) are `iptables-restore --noflush`
 * of partialRestore(): every chain written is redeclared (":CHAIN - [0:0]",
 * which flushes it) and refilled, stale endpoint chains are deleted (-X).
 */
import { createHash } from 'node:crypto';

export interface KpService {
  namespace: string;
  name: string;
  /** Port name ('' for an unnamed port, as kube-proxy's servicePortName omits it). */
  portName: string;
  clusterIP: string;
  port: number;
  protocol: 'TCP' | 'UDP';
  /** Ready endpoints, in the order kube-proxy writes them. */
  endpoints: { ip: string; port: number }[];
  /** type=NodePort (externalTrafficPolicy=Cluster): the node port; absent or 0 for a ClusterIP service. */
  nodePort?: number;
}

const MASQ_MARK = '0x4000';

/** RFC 4648 base32 with padding, like Go's base32.StdEncoding. */
export function base32Std(buf: Uint8Array): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let out = '';
  let bits = 0;
  let value = 0;
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    value &= (1 << bits) - 1;
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  while (out.length % 8 !== 0) out += '=';
  return out;
}

function hash16(text: string): string {
  return base32Std(createHash('sha256').update(text).digest()).slice(0, 16);
}

/** kube-proxy's ServicePortName.String(): "ns/name" plus ":port" when the port is named. */
export function servicePortName(svc: Pick<KpService, 'namespace' | 'name' | 'portName'>): string {
  return `${svc.namespace}/${svc.name}${svc.portName ? ':' + svc.portName : ''}`;
}

export function svcChainName(svc: KpService): string {
  return 'KUBE-SVC-' + hash16(servicePortName(svc) + svc.protocol.toLowerCase());
}

/** kube-proxy's externalTrafficChain: "KUBE-EXT-" + the same hash as the service's KUBE-SVC chain. */
export function extChainName(svc: KpService): string {
  return 'KUBE-EXT-' + hash16(servicePortName(svc) + svc.protocol.toLowerCase());
}

export function sepChainName(svc: KpService, ep: { ip: string; port: number }): string {
  return 'KUBE-SEP-' + hash16(servicePortName(svc) + svc.protocol.toLowerCase() + `${ep.ip}:${ep.port}`);
}

/** Go's fmt.Sprintf("%0.10f", 1.0/float64(n-i)). */
export function probability(n: number, i: number): string {
  return (1 / (n - i)).toFixed(10);
}

/** The KUBE-SERVICES rule for one service port. */
export function servicesRule(svc: KpService): string {
  const proto = svc.protocol.toLowerCase();
  return `-A KUBE-SERVICES -d ${svc.clusterIP}/32 -p ${proto} -m comment --comment "${servicePortName(svc)} cluster IP" -m ${proto} --dport ${svc.port} -j ${svcChainName(svc)}`;
}

/**
 * The KUBE-NODEPORTS rule of a NodePort service (written only while the
 * service has endpoints; without, kube-proxy rejects in the filter table).
 */
export function nodePortRule(svc: KpService): string | undefined {
  if (!svc.nodePort || svc.endpoints.length === 0) return undefined;
  const proto = svc.protocol.toLowerCase();
  return `-A KUBE-NODEPORTS -p ${proto} -m comment --comment "${servicePortName(svc)}" -m ${proto} --dport ${svc.nodePort} -j ${extChainName(svc)}`;
}

/** The service's own chains: declarations and rules (KUBE-SVC-*, its KUBE-SEP-*, and KUBE-EXT-* for a NodePort). */
export function serviceChains(svc: KpService): { chains: string[]; rules: string[] } {
  const proto = svc.protocol.toLowerCase();
  const spn = servicePortName(svc);
  const svcChain = svcChainName(svc);
  const chains = [`:${svcChain} - [0:0]`];
  const rules: string[] = [];
  if (svc.nodePort) {
    // externalTrafficPolicy=Cluster: masquerade (the endpoint may be on another node), then the cluster chain.
    const ext = extChainName(svc);
    chains.push(`:${ext} - [0:0]`);
    rules.push(`-A ${ext} -m comment --comment "masquerade traffic for ${spn} external destinations" -j KUBE-MARK-MASQ`);
    rules.push(`-A ${ext} -j ${svcChain}`);
  }
  const n = svc.endpoints.length;
  const sepRules: string[] = [];
  svc.endpoints.forEach((ep, i) => {
    const sep = sepChainName(svc, ep);
    chains.push(`:${sep} - [0:0]`);
    const stat = i < n - 1 ? ` -m statistic --mode random --probability ${probability(n, i)}` : '';
    rules.push(`-A ${svcChain} -m comment --comment "${spn} -> ${ep.ip}:${ep.port}"${stat} -j ${sep}`);
    sepRules.push(`-A ${sep} -s ${ep.ip}/32 -m comment --comment "${spn}" -j KUBE-MARK-MASQ`);
    sepRules.push(`-A ${sep} -p ${proto} -m comment --comment "${spn}" -m ${proto} -j DNAT --to-destination ${ep.ip}:${ep.port}`);
  });
  return { chains, rules: [...rules, ...sepRules] };
}

const FILTER_CHAINS = ['KUBE-EXTERNAL-SERVICES', 'KUBE-FORWARD', 'KUBE-NODEPORTS', 'KUBE-PROXY-FIREWALL', 'KUBE-SERVICES'];

function filterTable(): string[] {
  return [
    '*filter',
    ...FILTER_CHAINS.map((c) => `:${c} - [0:0]`),
    '-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP',
    `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark ${MASQ_MARK}/${MASQ_MARK} -j ACCEPT`,
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    'COMMIT',
  ];
}

/** The nat table's fixed chains (always written by kube-proxy, full or partial sync). */
function natFixedChains(): string[] {
  return [':KUBE-MARK-MASQ - [0:0]', ':KUBE-NODEPORTS - [0:0]', ':KUBE-POSTROUTING - [0:0]', ':KUBE-SERVICES - [0:0]'];
}

function natFixedRules(): string[] {
  return [
    `-A KUBE-POSTROUTING -m mark ! --mark ${MASQ_MARK}/${MASQ_MARK} -j RETURN`,
    `-A KUBE-POSTROUTING -j MARK --xor-mark ${MASQ_MARK}`,
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    `-A KUBE-MARK-MASQ -j MARK --or-mark ${MASQ_MARK}`,
  ];
}

/** KUBE-NODEPORTS, in service order (a fixed chain: rewritten in full by every sync). */
function nodePortRules(services: KpService[]): string[] {
  const out: string[] = [];
  for (const svc of services) {
    const r = nodePortRule(svc);
    if (r) out.push(r);
  }
  return out;
}

const NODEPORTS_LAST =
  '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS';

/**
 * The jumps kube-proxy installs once (with iptables -I, outside restore) from
 * the built-in chains. Included in the cold load so the table is usable; the
 * built-in chains are not flushed by a --noflush restore.
 */
function natJumps(): string[] {
  return [
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
  ];
}

/**
 * The whole ruleset for a cold start (plain iptables-restore, no --noflush),
 * in chunks of `chunk` services (at 100,000 Services the text comes close to
 * the longest string JavaScript allows). Declarations first, then
 * KUBE-SERVICES, then the service chains' rules, as fullRestore().
 */
export function* fullRestoreChunks(services: KpService[], chunk = 500): Generator<string> {
  const lines = (l: string[]) => (l.length ? l.join('\n') + '\n' : '');
  const slices = function* () {
    for (let i = 0; i < services.length; i += chunk) yield services.slice(i, i + chunk);
  };
  yield lines([
    ...filterTable(),
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ...natFixedChains(),
  ]);
  for (const part of slices()) yield lines(part.flatMap((svc) => serviceChains(svc).chains));
  yield lines(natJumps());
  for (const part of slices()) yield lines(part.filter((svc) => svc.endpoints.length > 0).map(servicesRule));
  yield lines([NODEPORTS_LAST, ...nodePortRules(services), ...natFixedRules()]);
  for (const part of slices()) yield lines(part.flatMap((svc) => serviceChains(svc).rules));
  yield 'COMMIT\n';
}

export function fullRestore(services: KpService[]): string {
  return [...fullRestoreChunks(services)].join('');
}

export interface PartialOptions {
  /**
   * 'exact': what kube-proxy's partial sync really writes — the fixed chains
   * including the whole KUBE-SERVICES chain (one rule per service) and the
   * whole KUBE-NODEPORTS chain, plus the changed services' chains. 'minimal': only the changed services' chains.
   */
  mode: 'exact' | 'minimal';
  /** All services (needed for 'exact': KUBE-SERVICES is rewritten in full). */
  all?: KpService[];
  /** Endpoint chains of the changed services that no longer exist (deleted with -X). */
  staleSepChains?: string[];
}

/** A kube-proxy partial sync for the changed services (iptables-restore --noflush). */
export function partialRestore(changed: KpService[], opts: PartialOptions): string {
  const chains: string[] = [];
  const rules: string[] = [];
  if (opts.mode === 'exact') {
    if (!opts.all) throw new Error("partialRestore: mode 'exact' needs all services");
    chains.push(...natFixedChains());
    rules.push(...natFixedRules());
    for (const svc of opts.all) if (svc.endpoints.length > 0) rules.push(servicesRule(svc));
    rules.push(NODEPORTS_LAST);
    rules.push(...nodePortRules(opts.all));
  }
  for (const svc of changed) {
    const c = serviceChains(svc);
    chains.push(...c.chains);
    rules.push(...c.rules);
  }
  // kube-proxy declares (flushes) stale chains, then deletes them.
  for (const stale of opts.staleSepChains ?? []) {
    chains.push(`:${stale} - [0:0]`);
    rules.push(`-X ${stale}`);
  }
  const out = opts.mode === 'exact' ? [...filterTable()] : [];
  out.push('*nat', ...chains, ...rules, 'COMMIT', '');
  return out.join('\n');
}

/** u32 → dotted quad. */
export function ipFromInt(n: number): string {
  return [(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export function ipToInt(ip: string): number {
  return ip.split('.').reduce((acc, o) => ((acc << 8) | Number(o)) >>> 0, 0) >>> 0;
}
