/**
 * kube-proxy's nftables-mode ruleset, generated in its exact shape (the
 * `nft -f` transactions kube-proxy's knftables writes), so the benchmark can
 * load "the same N services × M endpoints" into nftables beside iptables.
 *
 * What is replicated from kube-proxy (pkg/proxy/nftables/proxier.go, its
 * README.md, and knftables' writeOperation for the text form):
 *  - one table, `ip kube-proxy` ("rules for kube-proxy");
 *  - the base chains with their hooks and priorities (knftables turns the
 *    named priorities into numbers: dstnat = -100, srcnat = 100):
 *    filter-prerouting / filter-input / filter-forward / filter-output at
 *    dstnat-10, filter-output-post-dnat at dstnat+10, nat-prerouting and
 *    nat-output at dstnat, nat-postrouting at srcnat; and the jumps from them
 *    (nftablesJumpChains) to nodeport-endpoints-check,
 *    service-endpoints-check, firewall-check, services, masquerading and
 *    cluster-ips-check;
 *  - the dispatch: `services` = `ip daddr . meta l4proto . th dport vmap
 *    @ service-ips`, then `ip daddr @nodeport-ips meta l4proto . th dport
 *    vmap @ service-nodeports` (the default --nodeport-addresses of nftables
 *    mode is the node's primary IP: the nodeport-ips set holds it);
 *  - the sets and maps (cluster-ips, nodeport-ips, service-ips,
 *    service-nodeports, no-endpoint-services, no-endpoint-nodeports,
 *    firewall-ips), reject-chain, mark-for-masquerade (`mark set mark or
 *    0x004000`, Go's %#08x of 1 << 14) and masquerading;
 *  - chain names: hashAndTruncate(name) = base32(sha256(name))[:8] + "-" +
 *    name (truncated to 240 characters), with servicePortChainNameBase
 *    "ns/name/proto/portName" → `service-<hash>-ns/name/proto/portName`
 *    (`external-…` for NodePorts) and servicePortEndpointChainNameBase
 *    "ns/name/proto/portName__ip/port" → `endpoint-<hash>-…__ip/port`;
 *  - per service (externalTrafficPolicy=Cluster, no session affinity):
 *    `service-…` = `numgen random mod N vmap { 0 : goto endpoint-… , … }`;
 *    `endpoint-…` = `ip saddr <ep> jump mark-for-masquerade` (hairpin) then
 *    `meta l4proto tcp dnat to ip:port`; a NodePort's `external-…` = `jump
 *    mark-for-masquerade` then `goto service-…`; elements in cluster-ips,
 *    service-ips (`ip . tcp . port : goto service-…`) and service-nodeports
 *    (`tcp . nodePort : goto external-…`); a service without endpoints gets a
 *    no-endpoint-services element (`goto reject-chain`) and no chains;
 *  - a full sync (fullTransaction) is setupNFTables (on the first sync, an
 *    add + delete of every base chain first) with every set and map flushed,
 *    then every service's chains (each `add chain` + `flush chain`),
 *    elements and rules, in one `nft -f` transaction;
 *  - a partial sync (partialTransaction) writes only the changed services'
 *    chains (add + flush + rules; their elements only when they change, which
 *    an endpoint change does not) and flushes the endpoint chains no longer
 *    used; those are deleted (deleteChainsTransaction) in a transaction of
 *    their own at the first sync at least 1 s later (staleChains). Every sync
 *    also lists the table's chains (`nft -j list chains ip`) to find them.
 * Not replicated (the iptables generator, bench/kube-proxy-rules.ts, leaves
 * the same out): the local-traffic detector's masquerade rule in the
 * service chain (needs --cluster-cidr or similar), session affinity,
 * externalIPs / LoadBalancer / source ranges, eTP=Local, IPv6.
 */
import { createHash } from 'node:crypto';
import { base32Std, servicePortName, type KpService } from './kube-proxy-rules.js';

export const NFT_TABLE = 'ip kube-proxy';
/** Go's fmt.Sprintf("%#08x", 1<<14): kube-proxy's default --iptables-masquerade-bit 14. */
export const NFT_MASQ_MARK = '0x004000';
/** knftables.NameLengthMax (256) − chainNamePrefixLengthMax (16). */
const CHAIN_NAME_BASE_MAX = 240;

export interface NftOptions {
  /** The node's addresses that accept NodePort traffic (the nodeport-ips set). */
  nodeIPs: string[];
  /** ServiceCIDRs (the "drop traffic to unallocated ClusterIPs" rule; none: no rule). */
  serviceCIDRs: string[];
  /** The proxier's first sync: base chains are added and deleted once before being created. Default true. */
  firstSync?: boolean;
}

/** kube-proxy's hashAndTruncate. */
export function hashAndTruncate(name: string): string {
  const out = base32Std(createHash('sha256').update(name).digest()).slice(0, 8) + '-' + name;
  return out.length > CHAIN_NAME_BASE_MAX ? out.slice(0, CHAIN_NAME_BASE_MAX - 3) + '...' : out;
}

/** servicePortChainNameBase: "HASH-namespace/name/protocol/portName". */
export function servicePortChainNameBase(svc: Pick<KpService, 'namespace' | 'name' | 'portName' | 'protocol'>): string {
  return hashAndTruncate(`${svc.namespace}/${svc.name}/${svc.protocol.toLowerCase()}/${svc.portName}`);
}

export function nftServiceChain(svc: KpService): string {
  return 'service-' + servicePortChainNameBase(svc);
}

export function nftExternalChain(svc: KpService): string {
  return 'external-' + servicePortChainNameBase(svc);
}

/** servicePortEndpointChainNameBase with the "endpoint-" prefix (IPv6 colons become dots, as upstream). */
export function nftEndpointChain(svc: KpService, ep: { ip: string; port: number }): string {
  const ip = ep.ip.replaceAll(':', '.');
  return 'endpoint-' + hashAndTruncate(`${svc.namespace}/${svc.name}/${svc.protocol.toLowerCase()}/${svc.portName}__${ip}/${ep.port}`);
}

const T = NFT_TABLE;

/** knftables' ensureChain: add (a no-op when it exists) then flush. */
function ensureChain(out: string[], chain: string): void {
  out.push(`add chain ${T} ${chain}`, `flush chain ${T} ${chain}`);
}

function rule(out: string[], chain: string, text: string, comment?: string): void {
  out.push(`add rule ${T} ${chain} ${text}${comment ? ` comment ${JSON.stringify(comment)}` : ''}`);
}

const BASE_CHAINS: Array<[name: string, type: string, hook: string, priority: number]> = [
  ['filter-prerouting', 'filter', 'prerouting', -110],
  ['filter-input', 'filter', 'input', -110],
  ['filter-forward', 'filter', 'forward', -110],
  ['filter-output', 'filter', 'output', -110],
  ['filter-output-post-dnat', 'filter', 'output', -90],
  ['nat-prerouting', 'nat', 'prerouting', -100],
  ['nat-output', 'nat', 'output', -100],
  ['nat-postrouting', 'nat', 'postrouting', 100],
];

const JUMP_CHAINS: Array<[dst: string, src: string, extra: string]> = [
  ['nodeport-endpoints-check', 'filter-input', 'ct state new'],
  ['service-endpoints-check', 'filter-input', 'ct state new'],
  ['service-endpoints-check', 'filter-forward', 'ct state new'],
  ['service-endpoints-check', 'filter-output', 'ct state new'],
  ['firewall-check', 'filter-prerouting', 'ct state new'],
  ['firewall-check', 'filter-output', 'ct state new'],
  ['services', 'nat-output', ''],
  ['services', 'nat-prerouting', ''],
  ['masquerading', 'nat-postrouting', ''],
  ['cluster-ips-check', 'filter-forward', 'ct state new'],
  ['cluster-ips-check', 'filter-output-post-dnat', 'ct state new'],
];

const VERDICT_MAP_3 = 'ipv4_addr . inet_proto . inet_service : verdict';
const VERDICT_MAP_2 = 'inet_proto . inet_service : verdict';

/** setupNFTables: the table, base chains, top-level chains, sets and maps, all flushed (a full sync's first part). */
export function setupLines(opts: NftOptions): string[] {
  const out: string[] = [`add table ${T} { comment "rules for kube-proxy" ; }`];
  if (opts.firstSync ?? true) {
    for (const [name] of BASE_CHAINS) out.push(`add chain ${T} ${name}`, `delete chain ${T} ${name}`);
  }
  for (const [name, type, hook, prio] of BASE_CHAINS) {
    out.push(`add chain ${T} ${name} { type ${type} hook ${hook} priority ${prio} ; }`, `flush chain ${T} ${name}`);
  }
  const created = new Set<string>();
  const ensureOnce = (c: string) => {
    if (!created.has(c)) {
      created.add(c);
      ensureChain(out, c);
    }
  };
  for (const [dst, src, extra] of JUMP_CHAINS) {
    ensureOnce(dst);
    rule(out, src, `${extra ? extra + ' ' : ''}jump ${dst}`);
  }
  for (const c of ['services', 'cluster-ips-check', 'masquerading', 'mark-for-masquerade']) ensureOnce(c);
  rule(out, 'mark-for-masquerade', `mark set mark or ${NFT_MASQ_MARK}`);
  rule(out, 'masquerading', `mark and ${NFT_MASQ_MARK} == 0 return`);
  rule(out, 'masquerading', `mark set mark xor ${NFT_MASQ_MARK}`);
  rule(out, 'masquerading', 'masquerade fully-random');
  out.push(`add set ${T} cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }`);
  rule(out, 'cluster-ips-check', 'ip daddr @ cluster-ips reject', 'Reject traffic to invalid ports of ClusterIPs');
  if (opts.serviceCIDRs.length) rule(out, 'cluster-ips-check', `ip daddr { ${opts.serviceCIDRs.join(',')} } drop`, 'Drop traffic to unallocated ClusterIPs');
  out.push(`add set ${T} nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }`);
  out.push(`flush set ${T} nodeport-ips`);
  for (const ip of opts.nodeIPs) out.push(`add element ${T} nodeport-ips { ${ip} }`);
  out.push(`add map ${T} no-endpoint-services { type ${VERDICT_MAP_3} ; comment "vmap to drop or reject packets to services with no endpoints" ; }`);
  out.push(`add map ${T} no-endpoint-nodeports { type ${VERDICT_MAP_2} ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }`);
  out.push(`add chain ${T} reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }`, `flush chain ${T} reject-chain`);
  rule(out, 'reject-chain', 'reject');
  rule(out, 'service-endpoints-check', 'ip daddr . meta l4proto . th dport vmap @ no-endpoint-services');
  rule(out, 'nodeport-endpoints-check', 'ip daddr @ nodeport-ips meta l4proto . th dport vmap @ no-endpoint-nodeports');
  out.push(`add map ${T} firewall-ips { type ${VERDICT_MAP_3} ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }`);
  rule(out, 'firewall-check', 'ip daddr . meta l4proto . th dport vmap @ firewall-ips');
  out.push(`add map ${T} service-ips { type ${VERDICT_MAP_3} ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`);
  out.push(`add map ${T} service-nodeports { type ${VERDICT_MAP_2} ; comment "NodePort traffic" ; }`);
  rule(out, 'services', 'ip daddr . meta l4proto . th dport vmap @ service-ips');
  rule(out, 'services', 'ip daddr @nodeport-ips meta l4proto . th dport vmap @ service-nodeports');
  out.push(`flush set ${T} cluster-ips`);
  for (const m of ['service-ips', 'firewall-ips', 'no-endpoint-services', 'no-endpoint-nodeports', 'service-nodeports']) out.push(`flush map ${T} ${m}`);
  return out;
}

/** The service's map/set elements (what ensureElem adds on a full sync, or when they change). */
export function serviceElements(svc: KpService): string[] {
  const proto = svc.protocol.toLowerCase();
  const out = [`add element ${T} cluster-ips { ${svc.clusterIP} }`];
  if (svc.endpoints.length > 0) {
    out.push(`add element ${T} service-ips { ${svc.clusterIP} . ${proto} . ${svc.port} : goto ${nftServiceChain(svc)} }`);
    if (svc.nodePort) out.push(`add element ${T} service-nodeports { ${proto} . ${svc.nodePort} : goto ${nftExternalChain(svc)} }`);
  } else {
    const c = JSON.stringify(servicePortName(svc));
    out.push(`add element ${T} no-endpoint-services { ${svc.clusterIP} . ${proto} . ${svc.port} comment ${c} : goto reject-chain }`);
    if (svc.nodePort) out.push(`add element ${T} no-endpoint-nodeports { ${proto} . ${svc.nodePort} comment ${c} : goto reject-chain }`);
  }
  return out;
}

/** The service's own chains, in syncProxyRules' order: ensureChain for them all, then their rules. */
export function serviceChainLines(svc: KpService): { ensure: string[]; rules: string[] } {
  const ensure: string[] = [];
  const rules: string[] = [];
  if (svc.endpoints.length === 0) return { ensure, rules };
  const proto = svc.protocol.toLowerCase();
  const svcChain = nftServiceChain(svc);
  const epChains = svc.endpoints.map((ep) => nftEndpointChain(svc, ep));
  for (const c of epChains) ensureChain(ensure, c);
  ensureChain(ensure, svcChain);
  if (svc.nodePort) {
    const ext = nftExternalChain(svc);
    ensureChain(ensure, ext);
    rule(rules, ext, 'jump mark-for-masquerade');
    rule(rules, ext, `goto ${svcChain}`);
  }
  const vmap = epChains.map((c, i) => `${i} : goto ${c}`).join(' , ');
  rule(rules, svcChain, `numgen random mod ${epChains.length} vmap { ${vmap} }`);
  svc.endpoints.forEach((ep, i) => {
    rule(rules, epChains[i], `ip saddr ${ep.ip} jump mark-for-masquerade`);
    rule(rules, epChains[i], `meta l4proto ${proto} dnat to ${ep.ip}:${ep.port}`);
  });
  return { ensure, rules };
}

/** One service's part of a full sync: its chains (ensured), elements, rules. */
function serviceFullLines(svc: KpService): string[] {
  const c = serviceChainLines(svc);
  return [...c.ensure, ...serviceElements(svc), ...c.rules];
}

/**
 * The full sync transaction, in chunks of `chunk` services (a 100,000-Service
 * transaction is longer than a JavaScript string may be).
 */
export function* fullTransactionChunks(services: KpService[], opts: NftOptions, chunk = 500): Generator<string> {
  yield setupLines(opts).join('\n') + '\n';
  for (let i = 0; i < services.length; i += chunk) {
    const lines: string[] = [];
    for (const svc of services.slice(i, i + chunk)) lines.push(...serviceFullLines(svc));
    yield lines.join('\n') + '\n';
  }
}

export function fullTransaction(services: KpService[], opts: NftOptions): string {
  return [...fullTransactionChunks(services, opts)].join('');
}

/**
 * A partial sync for the changed services: their chains rewritten, the given
 * elements changes (none for an endpoint change), and the endpoint chains no
 * longer used flushed (deleted later by deleteChainsTransaction).
 */
export function partialTransaction(changed: KpService[], staleChains: string[] = [], elements: string[] = []): string {
  const ensure: string[] = [];
  const rules: string[] = [];
  for (const svc of changed) {
    const c = serviceChainLines(svc);
    ensure.push(...c.ensure);
    rules.push(...c.rules);
  }
  const stale = staleChains.map((c) => `flush chain ${T} ${c}`);
  return [...ensure, ...elements, ...rules, ...stale, ''].join('\n');
}

/** The stale-chain clean-up kube-proxy runs (its own transaction) at a sync ≥ 1 s after they went stale. */
export function deleteChainsTransaction(chains: string[]): string {
  return [...chains.map((c) => `delete chain ${T} ${c}`), ''].join('\n');
}

/** Chains and rules a full sync creates for `services` beyond the fixed ones (for checking a load). */
export function serviceChainCount(services: KpService[]): number {
  let n = 0;
  for (const s of services) if (s.endpoints.length) n += s.endpoints.length + 1 + (s.nodePort ? 1 : 0);
  return n;
}
