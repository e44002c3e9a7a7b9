/**
 * `kpr cleanup-kube-proxy` against kube-proxy's own shapes, inside a throwaway
 * network namespace (the CLI runs under nsenter, so every iptables/nft call
 * acts there, never on the host): the iptables ruleset of its iptables mode
 * (bench/kube-proxy-rules.ts, loaded with iptables-restore) in both the nft
 * and the legacy back end, IPv6 too, and the nftables tables of its nftables
 * mode. Afterwards none of it is left, a user's own rules and tables are
 * untouched, a second run is a no-op and --dry-run changes nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { fullRestore, type KpService } from '../../bench/kube-proxy-rules.js';
import { inNs, nsPath, Sandbox } from '../../sandbox/netns.js';
import { kubeProxyDelta, parseIptablesSave, restoreInput, splitRule } from '../../agent/cleanup/iptables-ruleset.js';
import { parseIpvsSave } from '../../agent/cleanup/kube-proxy.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const SERVICES: KpService[] = [
  { namespace: 'default', name: 'web', portName: 'http', clusterIP: '198.19.0.10', port: 80, protocol: 'TCP', endpoints: [{ ip: '198.18.0.10', port: 8080 }, { ip: '198.18.0.11', port: 8080 }] },
  { namespace: 'kube-system', name: 'kube-dns', portName: 'dns', clusterIP: '198.19.0.53', port: 53, protocol: 'UDP', endpoints: [{ ip: '198.18.0.20', port: 53 }] },
];

/** A user's own rules next to kube-proxy's, plus kubelet's KUBE-FIREWALL (not kube-proxy's: it stays). */
const USER_RULES = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:MY-CHAIN - [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -s 198.18.5.0/24 -p tcp -m tcp --dport 22 -m comment --comment "user ssh" -j ACCEPT
-A INPUT -j KUBE-FIREWALL
-A INPUT -j MY-CHAIN
-A MY-CHAIN -d 198.18.6.1/32 -j DROP
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:USER-NAT - [0:0]
-A POSTROUTING -s 198.18.7.0/24 -m comment --comment "user masquerade" -j MASQUERADE
-A USER-NAT -d 198.18.8.1/32 -j RETURN
COMMIT
`;

/** The jumps kube-proxy's iptables mode adds to the filter table's built-in chains (outside its restore). */
const KUBE_PROXY_FILTER_JUMPS = `*filter
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
`;

const IPV6_RULES = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-SEP-ABCDEFGHIJKLMNOP - [0:0]
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 2001:db8:1::10/128 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-SVC-ABCDEFGHIJKLMNOP -j KUBE-SEP-ABCDEFGHIJKLMNOP
-A KUBE-SEP-ABCDEFGHIJKLMNOP -p tcp -m tcp -j DNAT --to-destination [2001:db8:2::10]:8080
-A POSTROUTING -s 2001:db8:3::/64 -m comment --comment "user v6 masquerade" -j MASQUERADE
COMMIT
`;

/** kube-proxy's nftables mode (pkg/proxy/nftables), trimmed to its shape: base chains, a services map, per-service chains. */
const NFT_KUBE_PROXY = `
table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 198.19.0.10 }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
	}
	chain mark-for-masquerade {
		mark set mark or 0x4000
	}
	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain service-ULMVA6XW-default/web/tcp/http {
		ip daddr 198.19.0.10 tcp dport 80 numgen random mod 2 vmap { 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__198.18.0.10/8080, 1 : goto endpoint-5OJB2KTY-default/web/tcp/http__198.18.0.10/8080 }
	}
	chain endpoint-5OJB2KTY-default/web/tcp/http__198.18.0.10/8080 {
		ip saddr 198.18.0.10 jump mark-for-masquerade
		meta l4proto tcp dnat to 198.18.0.10:8080
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}
}
table ip6 kube-proxy {
	comment "rules for kube-proxy"
	chain services {
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
}
table inet user-firewall {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport 2222 drop
	}
}
`;

function nsRun(ns: string, cmd: string, args: string[], input?: string): string {
  return execFileSync('nsenter', [`--net=${nsPath(ns)}`, cmd, ...args], { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** The kpr CLI inside the namespace; returns stdout and the exit status. */
function kpr(ns: string, ...args: string[]): { out: string; status: number | null; err: string } {
  const r = spawnSync('nsenter', [`--net=${nsPath(ns)}`, cliBin, ...args], { encoding: 'utf8' });
  return { out: r.stdout, status: r.status, err: r.stderr };
}

function snapshot(ns: string) {
  return {
    nft4: nsRun(ns, 'iptables-nft-save', []).replace(/^#.*\n/gm, ''),
    nft6: nsRun(ns, 'ip6tables-nft-save', []).replace(/^#.*\n/gm, ''),
    legacy4: nsRun(ns, 'iptables-legacy-save', []).replace(/^#.*\n/gm, ''),
    nftables: nsRun(ns, 'nft', ['list', 'ruleset']),
  };
}

describe('ruleset delta (pure)', () => {
  test('kube-proxy chains and only the jumps into them are removed; kubelet and user chains stay', () => {
    const tables = parseIptablesSave(fullRestore(SERVICES) + USER_RULES.replace(/\*filter[\s\S]*?COMMIT\n/, '') + KUBE_PROXY_FILTER_JUMPS);
    const deltas = kubeProxyDelta(tables);
    const nat = deltas.find((d) => d.table === 'nat')!;
    assert.ok(nat.chains.includes('KUBE-SERVICES') && nat.chains.includes('KUBE-MARK-MASQ'));
    assert.ok(nat.chains.every((c) => c.startsWith('KUBE-')));
    assert.deepEqual(nat.jumps.map((j) => j.chain).sort(), ['OUTPUT', 'POSTROUTING', 'PREROUTING']);
    assert.ok(!deltas.some((d) => d.chains.includes('KUBE-KUBELET-CANARY') || d.chains.includes('KUBE-FIREWALL')), 'kubelet\'s chains stay');
    const input = restoreInput(deltas);
    assert.match(input, /^-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES$/m);
    assert.doesNotMatch(input, /USER-NAT|MASQUERADE/);
  });

  test('quoted comments are one token', () => {
    assert.deepEqual(splitRule('-m comment --comment "a b -j X" -j KUBE-SVC-1'), ['-m', 'comment', '--comment', 'a b -j X', '-j', 'KUBE-SVC-1']);
  });

  test('ipvsadm -S output is parsed into virtual servers', () => {
    const out = parseIpvsSave('-A -t 198.19.0.10:80 -s rr\n-a -t 198.19.0.10:80 -r 198.18.0.10:8080 -m -w 1\n-A -u [2001:db8::a]:53 -s rr\n-A -f 100 -s rr\n');
    assert.deepEqual(out, [
      { flag: '-t', service: '198.19.0.10:80', addr: '198.19.0.10' },
      { flag: '-u', service: '[2001:db8::a]:53', addr: '2001:db8::a' },
      { flag: '-f', service: '100' },
    ]);
  });
});

describe('kpr cleanup-kube-proxy in a network namespace', { timeout: 120_000 }, () => {
  let sandbox: Sandbox;
  let ns: string;

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
    ns = sandbox.addNamespace('kp');
    // iptables mode, nft back end: kube-proxy's exact shape plus the user's rules.
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], fullRestore(SERVICES));
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], KUBE_PROXY_FILTER_JUMPS);
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], USER_RULES);
    nsRun(ns, 'ip6tables-nft-restore', ['--noflush'], IPV6_RULES);
    // A node that once ran the legacy back end.
    nsRun(ns, 'iptables-legacy-restore', [], fullRestore(SERVICES.slice(0, 1)));
    // nftables mode, and a user's own table.
    nsRun(ns, 'nft', ['-f', '-'], NFT_KUBE_PROXY);
    // IPVS mode's dummy interface with a ClusterIP on it.
    // kube-proxy makes it a dummy device; a kernel without the dummy driver gets a bridge (same name, same role).
    try {
      inNs(ns, 'ip', 'link', 'add', 'kube-ipvs0', 'type', 'dummy');
    } catch {
      inNs(ns, 'ip', 'link', 'add', 'kube-ipvs0', 'type', 'bridge');
    }
    inNs(ns, 'ip', 'addr', 'add', '198.19.0.10/32', 'dev', 'kube-ipvs0');
  });

  after(async () => {
    await sandbox?.teardown();
  });

  test('--dry-run lists every item and changes nothing', () => {
    const before = snapshot(ns);
    const r = kpr(ns, 'cleanup-kube-proxy', '--dry-run');
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /would remove: iptables-nft \(IPv4\): iptables-chain nat KUBE-SERVICES/);
    assert.match(r.out, /would remove: iptables-nft \(IPv4\): iptables-rule nat -A PREROUTING .*-j KUBE-SERVICES/);
    assert.match(r.out, /would remove: iptables-nft \(IPv4\): iptables-chain filter KUBE-PROXY-FIREWALL/);
    assert.match(r.out, /would remove: ip6tables-nft \(IPv6\): iptables-chain nat KUBE-SVC-ABCDEFGHIJKLMNOP/);
    assert.match(r.out, /would remove: iptables-legacy \(IPv4\): iptables-chain nat KUBE-SERVICES/);
    assert.match(r.out, /would remove: nftables: nft-table ip kube-proxy/);
    assert.match(r.out, /would remove: nftables: nft-table ip6 kube-proxy/);
    assert.match(r.out, /would remove: kube-ipvs0: interface kube-ipvs0/);
    assert.match(r.out, /ipvs: (ipvsadm not installed|.*)/);
    assert.doesNotMatch(r.out, /KUBE-FIREWALL|KUBE-KUBELET-CANARY|MY-CHAIN|USER-NAT|user-firewall/);
    const json = JSON.parse(kpr(ns, 'cleanup-kube-proxy', '--dry-run', '-o', 'json').out);
    assert.equal(json.dryRun, true);
    assert.ok(json.total > 20, `total ${json.total}`);
    assert.deepEqual(snapshot(ns), before, 'a dry run changes nothing');
  });

  test('removes every kube-proxy leftover and leaves the user\'s rules, kubelet\'s chains and other tables alone', () => {
    const r = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(r.status, 0, r.out + r.err);
    assert.match(r.out, /removed: nftables: nft-table ip kube-proxy/);
    const after = snapshot(ns);
    for (const [what, text] of Object.entries({ nft4: after.nft4, nft6: after.nft6, legacy4: after.legacy4 })) {
      const kubeProxyLeft = text.split('\n').filter((l) => /KUBE-/.test(l) && !/KUBE-FIREWALL|KUBE-KUBELET-CANARY/.test(l));
      assert.deepEqual(kubeProxyLeft, [], `${what} still has kube-proxy rules`);
    }
    // The user's rules and kubelet's chain, exactly as they were.
    assert.match(after.nft4, /^-A INPUT -s 198\.18\.5\.0\/24 -p tcp -m tcp --dport 22 -m comment --comment "user ssh" -j ACCEPT$/m);
    assert.match(after.nft4, /^-A INPUT -j KUBE-FIREWALL$/m);
    assert.match(after.nft4, /^-A INPUT -j MY-CHAIN$/m);
    assert.match(after.nft4, /^-A MY-CHAIN -d 198\.18\.6\.1\/32 -j DROP$/m);
    assert.match(after.nft4, /^-A KUBE-FIREWALL .*-j DROP$/m);
    assert.match(after.nft4, /^:KUBE-KUBELET-CANARY/m);
    assert.match(after.nft4, /^-A POSTROUTING -s 198\.18\.7\.0\/24 .*-j MASQUERADE$/m);
    assert.match(after.nft4, /^-A USER-NAT -d 198\.18\.8\.1\/32 -j RETURN$/m);
    assert.match(after.nft6, /^-A POSTROUTING -s 2001:db8:3::\/64 .*-j MASQUERADE$/m);
    assert.doesNotMatch(after.nftables, /table ip6? kube-proxy/);
    assert.match(after.nftables, /table inet user-firewall/);
    assert.match(after.nftables, /tcp dport 2222 drop/);
    assert.throws(() => inNs(ns, 'ip', 'link', 'show', 'kube-ipvs0'), 'kube-ipvs0 is gone');
  });

  test('a second run is a no-op', () => {
    const before = snapshot(ns);
    const r = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(r.status, 0, r.err);
    assert.match(r.out, /nothing to remove/);
    assert.deepEqual(snapshot(ns), before);
  });
});
