/**
 * A node's netfilter state for the clean-up tests, in the shapes the tools
 * write: kube-proxy's iptables mode (bench/kube-proxy-rules.ts, and an older
 * release's KUBE-XLB-/KUBE-FW- chains), its IPVS mode (iptables rules and
 * ipsets) and its nftables mode (bench/kube-proxy-nft.ts), next to what
 * stays: kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
 * KUBE-IPTABLES-HINT, an older kubelet's KUBE-MARK-DROP), kube-router's
 * NetworkPolicy firewall (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-* with
 * the jumps from INPUT/FORWARD/OUTPUT, its KUBE-SRC-/KUBE-DST- ipsets),
 * kube-network-policies' `inet kube-network-policies` table and an
 * operator's own rules, chains, sets and tables. Addresses from
 * 198.18.0.0/15 and 2001:db8::/32.
 */
import { fullRestore, type KpService } from '../../bench/kube-proxy-rules.js';
import { fullTransaction } from '../../bench/kube-proxy-nft.js';

export const SERVICES: KpService[] = [
  {
    namespace: 'default',
    name: 'web',
    portName: 'http',
    clusterIP: '198.19.0.10',
    port: 80,
    protocol: 'TCP',
    endpoints: [
      { ip: '198.18.0.10', port: 8080 },
      { ip: '198.18.0.11', port: 8080 },
    ],
    nodePort: 30080,
  },
  {
    namespace: 'kube-system',
    name: 'kube-dns',
    portName: 'dns',
    clusterIP: '198.19.0.53',
    port: 53,
    protocol: 'UDP',
    endpoints: [{ ip: '198.18.0.20', port: 53 }],
  },
];

/** kube-router's NetworkPolicy ipsets (hash:ip), created before the rules that match on them. */
export const KUBE_ROUTER_SETS = {
  v4: ['KUBE-SRC-OJQ3UNQGDKUYP7D6', 'KUBE-DST-VNUYUEY4EMW4JZWB'],
  v6: ['inet6:KUBE-SRC-OJQ3UNQGDKUYP7D6', 'inet6:KUBE-DST-VNUYUEY4EMW4JZWB'],
};

const POD_FW = 'KUBE-POD-FW-5XGFEPNHMTB3RXWI';
const NWPLCY = 'KUBE-NWPLCY-PEMJ7TWPJEBAMPXA';

/** kube-router's firewall for one pod with one policy (pkg/controllers/netpol), in the filter table. */
function kubeRouterFilter(family: 4 | 6): { chains: string[]; rules: string[] } {
  const v6 = family === 6;
  const pod = v6 ? '2001:db8:1::5/128' : '198.18.1.5/32';
  const [src, dst] = v6 ? KUBE_ROUTER_SETS.v6 : KUBE_ROUTER_SETS.v4;
  const reject = v6 ? 'icmp6-port-unreachable' : 'icmp-port-unreachable';
  return {
    chains: ['KUBE-ROUTER-INPUT', 'KUBE-ROUTER-FORWARD', 'KUBE-ROUTER-OUTPUT', POD_FW, 'KUBE-NWPLCY-DEFAULT', NWPLCY],
    rules: [
      '-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT',
      '-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD',
      '-A OUTPUT -m comment --comment "kube-router netpol - VEAAIY32XVBHCSCY" -j KUBE-ROUTER-OUTPUT',
      `-A KUBE-ROUTER-INPUT -d ${v6 ? '2001:db8:19::/112' : '198.19.0.0/16'} -m comment --comment "allow traffic to primary cluster IP range - TZZOAXOCHPHEHX7M" -j RETURN`,
      '-A KUBE-ROUTER-INPUT -p tcp -m comment --comment "allow LOCAL TCP traffic to node ports - LR7XO7NXDBGQJD2M" -m addrtype --dst-type LOCAL -m multiport --dports 30000:32767 -j RETURN',
      `-A KUBE-ROUTER-INPUT -s ${pod} -m comment --comment "rule to jump traffic from POD name:web-0 namespace: default to chain ${POD_FW}" -j ${POD_FW}`,
      `-A KUBE-ROUTER-FORWARD -d ${pod} -m comment --comment "rule to jump traffic destined to POD name:web-0 namespace: default to chain ${POD_FW}" -j ${POD_FW}`,
      '-A KUBE-ROUTER-FORWARD -m comment --comment "rule to explicitly ACCEPT traffic that comply to network policies" -m mark --mark 0x20000/0x20000 -j ACCEPT',
      `-A KUBE-ROUTER-OUTPUT -d ${pod} -m comment --comment "rule to jump traffic destined to POD name:web-0 namespace: default to chain ${POD_FW}" -j ${POD_FW}`,
      `-A ${POD_FW} -m comment --comment "rule for stateful firewall for pod" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
      `-A ${POD_FW} -d ${pod} -m comment --comment "run through nw policy allow-web" -j ${NWPLCY}`,
      `-A ${POD_FW} -m comment --comment "rule to mark traffic matching a network policy" -j KUBE-NWPLCY-DEFAULT`,
      `-A ${POD_FW} -m comment --comment "rule to REJECT traffic destined for POD name:web-0 namespace: default" -m mark ! --mark 0x10000/0x10000 -j REJECT --reject-with ${reject}`,
      `-A ${POD_FW} -j MARK --set-xmark 0x0/0x10000`,
      `-A ${POD_FW} -m comment --comment "set mark to ACCEPT traffic that comply to network policies" -j MARK --set-xmark 0x20000/0x20000`,
      '-A KUBE-NWPLCY-DEFAULT -m comment --comment "rule to mark traffic matching a network policy" -j MARK --set-xmark 0x10000/0x10000',
      `-A ${NWPLCY} -p tcp -m comment --comment "rule to ACCEPT traffic from source pods to dest pods selected by policy name allow-web namespace default" -m set --match-set ${src} src -m set --match-set ${dst} dst -m tcp --dport 8080 -j MARK --set-xmark 0x10000/0x10000`,
    ],
  };
}

const BUILTINS: Record<string, string[]> = {
  mangle: ['PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING'],
  nat: ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING'],
  filter: ['INPUT', 'FORWARD', 'OUTPUT'],
};

function table(name: string, chains: string[], rules: string[]): string {
  return [`*${name}`, ...BUILTINS[name].map((c) => `:${c} ACCEPT [0:0]`), ...chains.map((c) => `:${c} - [0:0]`), ...rules, 'COMMIT', ''].join('\n');
}

/**
 * What stays on the node, for one family: kubelet's chains, kube-router's
 * firewall, the operator's rules and chains (operatorSet: an ipset the
 * operator's chain matches on, when the test created one).
 */
export function baselineRules(family: 4 | 6, operatorSet?: string): string {
  const v6 = family === 6;
  const kr = kubeRouterFilter(family);
  const mangle = table('mangle', ['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY'], []);
  const nat = table(
    'nat',
    ['KUBE-KUBELET-CANARY', 'KUBE-MARK-DROP', 'USER-NAT'],
    [
      '-A PREROUTING -m comment --comment "user port forward" -j USER-NAT',
      `-A POSTROUTING -s ${v6 ? '2001:db8:7::/64' : '198.18.7.0/24'} -m comment --comment "user masquerade" -j MASQUERADE`,
      '-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000',
      v6
        ? '-A USER-NAT -d 2001:db8:8::1/128 -p tcp -m tcp --dport 80 -j DNAT --to-destination [2001:db8:8::2]:8080'
        : '-A USER-NAT -d 198.18.8.1/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 198.18.8.2:8080',
    ],
  );
  const filterRules = [
    ...kr.rules.filter((r) => r.startsWith('-A INPUT')),
    // kubelet: the localnet guard is IPv4 only; the chain and its jumps exist for both.
    '-A INPUT -j KUBE-FIREWALL',
    `-A INPUT -s ${v6 ? '2001:db8:5::/64' : '198.18.5.0/24'} -p tcp -m tcp --dport 22 -m comment --comment "user ssh" -j ACCEPT`,
    '-A INPUT -j MY-CHAIN',
    ...kr.rules.filter((r) => r.startsWith('-A FORWARD') || r.startsWith('-A OUTPUT')),
    '-A OUTPUT -j KUBE-FIREWALL',
    ...(v6
      ? []
      : [
          '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
        ]),
    ...kr.rules.filter((r) => !/^-A (INPUT|FORWARD|OUTPUT) /.test(r)),
    `-A MY-CHAIN -d ${v6 ? '2001:db8:6::1/128' : '198.18.6.1/32'} -j DROP`,
    ...(operatorSet ? [`-A MY-CHAIN -m set --match-set ${operatorSet} src -j ACCEPT`] : []),
  ];
  const filter = table('filter', ['KUBE-FIREWALL', 'KUBE-KUBELET-CANARY', ...kr.chains, 'MY-CHAIN'], filterRules);
  return mangle + nat + filter;
}

/** kube-proxy inserts its jumps at the top of the built-in chains (EnsureRule Prepend), not with its restore. */
function prepend(rules: string[]): string[] {
  return rules.map((r) => r.replace(/^-A (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) /, '-I $1 1 '));
}

/** The jumps of iptablesJumpChains into the filter table (pkg/proxy/iptables/proxier.go). */
const IPTABLES_FILTER_JUMPS = [
  '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
  '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
  '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
  '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
  '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
  '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
  '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
  '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
  '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
];

/** The canary chains of kube-proxy's iptables monitor, in mangle, nat and filter. */
const CANARIES = ['mangle', 'nat', 'filter'].map((t) => `*${t}\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n`).join('');

/** kube-proxy's iptables mode, IPv4: the full restore, a Service without endpoints (rejected in filter), its jumps and canaries. */
export function kubeProxyIptablesV4(): string {
  const restore = fullRestore(SERVICES)
    .split('\n')
    .map((l) => (/^-A (PREROUTING|OUTPUT|POSTROUTING) /.test(l) ? prepend([l])[0] : l))
    .join('\n')
    .replace(
      /(\*filter\n(?::.*\n)*)/,
      '$1-A KUBE-SERVICES -d 198.19.0.99/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable\n',
    );
  return restore + `*filter\n${prepend(IPTABLES_FILTER_JUMPS).join('\n')}\nCOMMIT\n` + CANARIES;
}

/** kube-proxy's iptables mode, IPv6 (one ClusterIP Service, a NodePort with eTP=Local). */
export function kubeProxyIptablesV6(): string {
  return (
    `*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-SVL-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-EXT-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-SEP-QRSTUVWXYZ234567 - [0:0]
-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I OUTPUT 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I POSTROUTING 1 -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -d 2001:db8:19::10/128 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-ABCDEFGHIJKLMNOP
-A KUBE-EXT-ABCDEFGHIJKLMNOP -s ::1/128 -m comment --comment "route LOCAL traffic for default/web:http external destinations" -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-EXT-ABCDEFGHIJKLMNOP -j KUBE-SVL-ABCDEFGHIJKLMNOP
-A KUBE-SVC-ABCDEFGHIJKLMNOP -m comment --comment "default/web:http -> [2001:db8:1::10]:8080" -j KUBE-SEP-QRSTUVWXYZ234567
-A KUBE-SVL-ABCDEFGHIJKLMNOP -m comment --comment "default/web:http -> [2001:db8:1::10]:8080" -j KUBE-SEP-QRSTUVWXYZ234567
-A KUBE-SEP-QRSTUVWXYZ234567 -s 2001:db8:1::10/128 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-QRSTUVWXYZ234567 -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination [2001:db8:1::10]:8080
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
${prepend(IPTABLES_FILTER_JUMPS).join('\n')}
COMMIT
` + CANARIES
  );
}

/**
 * An older kube-proxy's iptables mode (before KUBE-SVL-/KUBE-EXT-): a
 * LoadBalancer Service with source ranges and eTP=Local, its KUBE-FW- chain
 * dropping through kubelet's KUBE-MARK-DROP and its KUBE-XLB- chain.
 */
export function kubeProxyIptablesOldV4(): string {
  return `*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-OLDLBSERVICEAAAA - [0:0]
:KUBE-XLB-OLDLBSERVICEAAAA - [0:0]
:KUBE-FW-OLDLBSERVICEAAAA - [0:0]
:KUBE-SEP-OLDLBENDPOINTAAA - [0:0]
-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I OUTPUT 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I POSTROUTING 1 -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -d 198.19.0.20/32 -p tcp -m comment --comment "default/lb: cluster IP" -m tcp --dport 80 -j KUBE-SVC-OLDLBSERVICEAAAA
-A KUBE-SERVICES -d 198.18.200.1/32 -p tcp -m comment --comment "default/lb: loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-OLDLBSERVICEAAAA
-A KUBE-FW-OLDLBSERVICEAAAA -s 198.18.100.0/24 -m comment --comment "default/lb: loadbalancer IP" -j KUBE-XLB-OLDLBSERVICEAAAA
-A KUBE-FW-OLDLBSERVICEAAAA -m comment --comment "default/lb: loadbalancer IP" -j KUBE-MARK-DROP
-A KUBE-XLB-OLDLBSERVICEAAAA -m comment --comment "Balancing rule 0 for default/lb:" -j KUBE-SEP-OLDLBENDPOINTAAA
-A KUBE-SVC-OLDLBSERVICEAAAA -j KUBE-SEP-OLDLBENDPOINTAAA
-A KUBE-SEP-OLDLBENDPOINTAAA -s 198.18.0.30/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-OLDLBENDPOINTAAA -p tcp -m tcp -j DNAT --to-destination 198.18.0.30:8080
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -m mark --mark 0x4000/0x4000 -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
COMMIT
*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-I FORWARD 1 -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-I OUTPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
`;
}

/**
 * kube-proxy's IPVS mode, IPv4 (pkg/proxy/ipvs/proxier.go: iptablesJumpChain,
 * iptablesChains and the rules writeIptablesRules builds over its ipsets).
 */
export function kubeProxyIpvsV4(): string {
  return (
    `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I OUTPUT 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-I POSTROUTING 1 -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES ! -s 198.18.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
-I INPUT 1 -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-I INPUT 1 -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-I INPUT 1 -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-I FORWARD 1 -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-I FORWARD 1 -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-I OUTPUT 1 -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port for load balancer with sourceRange" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
-A KUBE-IPVS-OUT-FILTER -m set --match-set KUBE-IPVS-IPS dst -j RETURN
COMMIT
` + CANARIES
  );
}

/** The IPVS mode's ipsets (`ipset restore` input): IPv4, and two IPv6 ones (one with its name cut to 31 characters). */
export const KUBE_PROXY_IPSETS_RESTORE = `create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536 comment
create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment
add KUBE-CLUSTER-IP 198.19.0.10,tcp:80 comment "default/web:http"
create KUBE-EXTERNAL-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment
create KUBE-EXTERNAL-IP-LOCAL hash:ip,port family inet hashsize 1024 maxelem 65536 comment
create KUBE-LOAD-BALANCER hash:ip,port family inet hashsize 1024 maxelem 65536 comment
create KUBE-LOAD-BALANCER-FW hash:ip,port family inet hashsize 1024 maxelem 65536 comment
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 comment
add KUBE-NODE-PORT-TCP 30080 comment "default/web:http"
create KUBE-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535 comment
create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536 comment
add KUBE-IPVS-IPS 198.19.0.10 comment "default/web:http"
create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536 comment
create KUBE-6-LOAD-BALANCER-SOURCE-CID hash:ip,port,net family inet6 hashsize 1024 maxelem 65536 comment
`;

/** The ipsets that stay: kube-router's (IPv4 and IPv6 and its proxy's), an operator's. */
export const OTHER_IPSETS_RESTORE = `create ${KUBE_ROUTER_SETS.v4[0]} hash:ip family inet hashsize 1024 maxelem 65536 timeout 0
add ${KUBE_ROUTER_SETS.v4[0]} 198.18.1.9 timeout 0
create ${KUBE_ROUTER_SETS.v4[1]} hash:ip family inet hashsize 1024 maxelem 65536 timeout 0
add ${KUBE_ROUTER_SETS.v4[1]} 198.18.1.5 timeout 0
create ${KUBE_ROUTER_SETS.v6[0]} hash:ip family inet6 hashsize 1024 maxelem 65536 timeout 0
create ${KUBE_ROUTER_SETS.v6[1]} hash:ip family inet6 hashsize 1024 maxelem 65536 timeout 0
create kube-router-pod-subnets hash:net family inet hashsize 1024 maxelem 65536 timeout 0
create my-allowlist hash:net family inet hashsize 1024 maxelem 65536
add my-allowlist 198.18.9.0/24
`;

/** kube-proxy's nftables mode: the IPv4 table from its full sync, and an IPv6 one in the same shape. */
export function kubeProxyNftables(): string {
  return (
    fullTransaction(SERVICES, { nodeIPs: ['198.18.0.1'], serviceCIDRs: ['198.19.0.0/16'] }) +
    `
add table ip6 kube-proxy { comment "rules for kube-proxy" ; }
add chain ip6 kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip6 kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip6 kube-proxy services
add chain ip6 kube-proxy mark-for-masquerade
add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add rule ip6 kube-proxy nat-output jump services
add rule ip6 kube-proxy nat-prerouting jump services
add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips
add rule ip6 kube-proxy mark-for-masquerade mark set mark or 0x004000
`
  );
}

/**
 * kube-network-policies' table (sigs.k8s.io/kube-network-policies) in its
 * shape; its nfqueue verdicts are accept here (this kernel may lack
 * nft_queue). And an operator's own table.
 */
export const OTHER_NFT_TABLES = `
table inet kube-network-policies {
	comment "rules for kubernetes NetworkPolicy"
	set podips-v4 {
		type ipv4_addr
		elements = { 198.18.1.5 }
	}
	set podips-v6 {
		type ipv6_addr
	}
	chain postrouting {
		type filter hook postrouting priority srcnat - 5; policy accept;
		icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept
		meta skuid 0 accept
		ct state established,related accept
		ip saddr @podips-v4 accept
		ip daddr @podips-v4 accept
		ip6 saddr @podips-v6 accept
		ip6 daddr @podips-v6 accept
	}
}
table inet user-firewall {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport 2222 drop
	}
}
`;

/** An operator's chain and a CNI portmap chain (externalSetMarkChain KUBE-MARK-MASQ) that jump into kube-proxy's nat chains. */
export const FOREIGN_JUMPS_V4 = `*nat
:MY-SVC-HOOK - [0:0]
:CNI-DN-0a1b2c3d4e5f60718293a - [0:0]
-A PREROUTING -j MY-SVC-HOOK
-A MY-SVC-HOOK -d 198.19.0.0/16 -m comment --comment "operator: service traffic through kube-proxy" -j KUBE-SERVICES
-A CNI-DN-0a1b2c3d4e5f60718293a -s 198.18.9.0/24 -p tcp -m tcp --dport 8080 -j KUBE-MARK-MASQ
-A CNI-DN-0a1b2c3d4e5f60718293a -p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.18.9.10:80
COMMIT
`;
