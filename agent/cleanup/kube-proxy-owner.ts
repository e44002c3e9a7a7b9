/**
 * Whose is it? kube-proxy's names, from its own sources, and the names of the
 * other node agents that share the KUBE- prefix (pure code, no I/O).
 *
 * `kpr cleanup-kube-proxy` removes only what kube-proxy itself creates: the
 * fixed chains of its iptables and IPVS modes (by table), its per-Service
 * chains (by prefix, in the nat table), the ipsets of its IPVS mode and the
 * tables of its nftables mode. Everything else is kept, KUBE-* or not, and
 * the dry run says why.
 */

export type Owner = 'kube-proxy' | 'kubelet' | 'kube-router' | 'kube-network-policies' | 'iptables-nft' | 'other';

export interface Ownership {
  owner: Owner;
  /** Why, for the report: "kubelet", "kube-router", "not kube-proxy's", … */
  reason: string;
}

const KUBE_PROXY: Ownership = { owner: 'kube-proxy', reason: "kube-proxy's" };
const NOT_KUBE_PROXY: Ownership = { owner: 'other', reason: "not kube-proxy's" };

/**
 * kube-proxy's fixed chains, by table. Mirrors (union over versions):
 * - pkg/proxy/iptables/proxier.go: the chains of iptablesJumpChains and
 *   iptablesCleanupOnlyChains (KUBE-SERVICES, KUBE-EXTERNAL-SERVICES,
 *   KUBE-NODEPORTS, KUBE-FORWARD, KUBE-PROXY-FIREWALL in filter;
 *   KUBE-SERVICES, KUBE-POSTROUTING in nat), the nat chains syncProxyRules
 *   writes (KUBE-NODEPORTS, KUBE-MARK-MASQ), and the canary of its iptables
 *   monitor (KUBE-PROXY-CANARY in mangle, nat and filter);
 * - pkg/proxy/ipvs/proxier.go: iptablesChains / iptablesCleanupChains
 *   (KUBE-SERVICES, KUBE-POSTROUTING, KUBE-NODE-PORT, KUBE-LOAD-BALANCER,
 *   KUBE-MARK-MASQ in nat; KUBE-FORWARD, KUBE-NODE-PORT, KUBE-PROXY-FIREWALL,
 *   KUBE-SOURCE-RANGES-FIREWALL, KUBE-IPVS-FILTER, KUBE-IPVS-OUT-FILTER in
 *   filter) and, in older releases, the nat table's KUBE-FIREWALL (its
 *   LoadBalancer source-range chain; filter's KUBE-FIREWALL is kubelet's).
 * KUBE-MARK-MASQ and KUBE-POSTROUTING were also created by kubelets before
 * IPTablesOwnershipCleanup (on by default from 1.27); such a kubelet
 * re-creates them on its own periodic sync.
 */
export const KUBE_PROXY_CHAINS: Readonly<Record<string, ReadonlySet<string>>> = {
  nat: new Set([
    'KUBE-SERVICES',
    'KUBE-NODEPORTS',
    'KUBE-POSTROUTING',
    'KUBE-MARK-MASQ',
    'KUBE-PROXY-CANARY',
    'KUBE-NODE-PORT',
    'KUBE-LOAD-BALANCER',
    'KUBE-FIREWALL',
  ]),
  filter: new Set([
    'KUBE-SERVICES',
    'KUBE-EXTERNAL-SERVICES',
    'KUBE-NODEPORTS',
    'KUBE-FORWARD',
    'KUBE-PROXY-FIREWALL',
    'KUBE-PROXY-CANARY',
    'KUBE-NODE-PORT',
    'KUBE-SOURCE-RANGES-FIREWALL',
    'KUBE-IPVS-FILTER',
    'KUBE-IPVS-OUT-FILTER',
  ]),
  mangle: new Set(['KUBE-PROXY-CANARY']),
};

/**
 * The per-Service chains of the iptables mode, all in the nat table. Mirrors
 * isServiceChainName in pkg/proxy/iptables/proxier.go (KUBE-SVC-, KUBE-SVL-,
 * KUBE-SEP-, KUBE-FW-, KUBE-EXT-) plus KUBE-XLB-, the Local-policy chain of
 * releases before KUBE-SVL- replaced it.
 */
export const KUBE_PROXY_NAT_PREFIXES = ['KUBE-SVC-', 'KUBE-SVL-', 'KUBE-SEP-', 'KUBE-FW-', 'KUBE-EXT-', 'KUBE-XLB-'] as const;

/**
 * kubelet's chains (pkg/kubelet/kubelet_network_linux.go): KUBE-FIREWALL in
 * filter (kube-proxy's iptablesKubeletJumpChains writes a duplicate of it and
 * leaves it in CleanupLeftovers), KUBE-KUBELET-CANARY in every table,
 * KUBE-IPTABLES-HINT in mangle (tells containers which iptables back end the
 * node uses), and KUBE-MARK-DROP, which older kubelets created in nat and
 * older kube-proxies only ensured.
 */
const KUBELET_CHAINS: Readonly<Record<string, ReadonlySet<string>>> = {
  filter: new Set(['KUBE-FIREWALL', 'KUBE-KUBELET-CANARY']),
  nat: new Set(['KUBE-MARK-DROP', 'KUBE-KUBELET-CANARY']),
  mangle: new Set(['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY']),
};

/** kube-router's NetworkPolicy firewall and service proxy (pkg/controllers/netpol, pkg/controllers/proxy). */
const KUBE_ROUTER_CHAIN_PREFIXES = ['KUBE-ROUTER-', 'KUBE-POD-FW-', 'KUBE-NWPLCY-'];

/** Whose chain `chain` of `table` is (user-defined chains; built-in chains are shared). */
export function chainOwner(table: string, chain: string): Ownership {
  if (KUBE_PROXY_CHAINS[table]?.has(chain)) return KUBE_PROXY;
  if (table === 'nat' && KUBE_PROXY_NAT_PREFIXES.some((p) => chain.startsWith(p))) return KUBE_PROXY;
  if (KUBELET_CHAINS[table]?.has(chain)) return { owner: 'kubelet', reason: 'kubelet' };
  if (KUBE_ROUTER_CHAIN_PREFIXES.some((p) => chain.startsWith(p))) return { owner: 'kube-router', reason: 'kube-router' };
  if (chain.startsWith('KUBE-')) return { owner: 'other', reason: "not one of kube-proxy's chains in the " + table + ' table' };
  return NOT_KUBE_PROXY;
}

/**
 * The IPVS mode's ipsets: the names of ipsetInfo in pkg/proxy/ipvs/proxier.go
 * (pkg/proxy/ipvs/ipset.go), the older SCTP names without "-HASH", and their
 * IPv6 twins: "KUBE-" becomes "KUBE-6-", cut to ipset's 31 characters as
 * NewIPSet does (the full name too, for releases that spelled it out).
 */
const KUBE_PROXY_IPSET_BASES = [
  'KUBE-LOOP-BACK',
  'KUBE-CLUSTER-IP',
  'KUBE-EXTERNAL-IP',
  'KUBE-EXTERNAL-IP-LOCAL',
  'KUBE-LOAD-BALANCER',
  'KUBE-LOAD-BALANCER-LOCAL',
  'KUBE-LOAD-BALANCER-FW',
  'KUBE-LOAD-BALANCER-SOURCE-IP',
  'KUBE-LOAD-BALANCER-SOURCE-CIDR',
  'KUBE-NODE-PORT-TCP',
  'KUBE-NODE-PORT-LOCAL-TCP',
  'KUBE-NODE-PORT-UDP',
  'KUBE-NODE-PORT-LOCAL-UDP',
  'KUBE-NODE-PORT-SCTP-HASH',
  'KUBE-NODE-PORT-LOCAL-SCTP-HASH',
  'KUBE-NODE-PORT-SCTP',
  'KUBE-NODE-PORT-LOCAL-SCTP',
  'KUBE-HEALTH-CHECK-NODE-PORT',
  'KUBE-IPVS-IPS',
];

export const KUBE_PROXY_IPSETS: ReadonlySet<string> = new Set(
  KUBE_PROXY_IPSET_BASES.flatMap((n) => {
    const v6 = n.replace(/^KUBE-/, 'KUBE-6-');
    return [n, v6, v6.slice(0, 31)];
  }),
);

export function ipsetOwner(name: string): Ownership {
  if (KUBE_PROXY_IPSETS.has(name)) return KUBE_PROXY;
  // kube-router: NetworkPolicy sets KUBE-SRC-*/KUBE-DST-* (inet6: for IPv6), its proxy's kube-router-*.
  if (/^(inet6:)?KUBE-(SRC|DST)-/.test(name) || name.startsWith('kube-router-')) return { owner: 'kube-router', reason: 'kube-router' };
  if (name.startsWith('KUBE-')) return { owner: 'other', reason: "not one of kube-proxy's IPVS ipsets" };
  return NOT_KUBE_PROXY;
}

/** The tables of the nftables mode (kubeProxyTable in pkg/proxy/nftables/proxier.go, families ip and ip6). */
export const KUBE_PROXY_NFT_TABLES: ReadonlySet<string> = new Set(['ip kube-proxy', 'ip6 kube-proxy']);

const IPTABLES_NFT_TABLES = new Set(['filter', 'nat', 'mangle', 'raw', 'security']);

/** Whose nftables table "family name" is. */
export function nftTableOwner(table: string): Ownership {
  if (KUBE_PROXY_NFT_TABLES.has(table)) return KUBE_PROXY;
  const [family, name] = table.split(' ');
  if (name === 'kube-network-policies') return { owner: 'kube-network-policies', reason: 'kube-network-policies (NetworkPolicy)' };
  if ((family === 'ip' || family === 'ip6') && IPTABLES_NFT_TABLES.has(name)) {
    return { owner: 'iptables-nft', reason: "an iptables-nft table: only kube-proxy's chains in it go, through the iptables-nft steps" };
  }
  return NOT_KUBE_PROXY;
}
