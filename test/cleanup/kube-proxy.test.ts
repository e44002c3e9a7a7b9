/**
 * `kpr cleanup-kube-proxy` removes kube-proxy's state and nothing else. The
 * real CLI runs under nsenter in network namespaces the test creates, on
 * rulesets loaded with the real tools (iptables-restore of the nft and the
 * legacy back end, IPv4 and IPv6; nft -f; ipset restore): kube-proxy's
 * iptables, IPVS and nftables modes next to kubelet's chains, kube-router's
 * NetworkPolicy firewall, kube-network-policies' table and an operator's own
 * rules, chains, sets and tables (node-rulesets.ts). Afterwards every
 * iptables-save, `nft list ruleset` and `ipset save` is byte for byte what
 * it was before kube-proxy's state was loaded; the dry run changed nothing
 * and said what stays and why; a second run finds nothing. Also: a chain of
 * another owner that jumps into kube-proxy's keeps what it reaches, and the
 * legacy back end's xtables lock is the one iptables itself would take.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fullRestore } from '../../bench/kube-proxy-rules.js';
import { inNs, nsPath, Sandbox } from '../../sandbox/netns.js';
import { kubeProxyDelta, parseIptablesSave, restoreInput, ruleSets, splitRule } from '../../agent/cleanup/iptables-ruleset.js';
import { chainOwner, ipsetOwner, nftTableOwner, KUBE_PROXY_IPSETS } from '../../agent/cleanup/kube-proxy-owner.js';
import { parseIpvsSave } from '../../agent/cleanup/kube-proxy.js';
import { xtablesLockPath, xtablesLockProblem } from '../../agent/cleanup/xtables-lock.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import {
  baselineRules,
  FOREIGN_JUMPS_V4,
  KUBE_PROXY_IPSETS_RESTORE,
  kubeProxyIptablesOldV4,
  kubeProxyIptablesV4,
  kubeProxyIptablesV6,
  kubeProxyIpvsV4,
  kubeProxyNftables,
  OTHER_IPSETS_RESTORE,
  OTHER_NFT_TABLES,
  SERVICES,
} from './node-rulesets.js';

function nsRun(ns: string, cmd: string, args: string[], input?: string): string {
  return execFileSync('nsenter', [`--net=${nsPath(ns)}`, cmd, ...args], { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

interface Run {
  out: string;
  err: string;
  status: number | null;
}

/** The kpr CLI inside the namespace. */
function kpr(ns: string, ...args: string[]): Run {
  const r = spawnSync('nsenter', [`--net=${nsPath(ns)}`, cliBin, ...args], { encoding: 'utf8' });
  return { out: r.stdout, status: r.status, err: r.stderr };
}

/** A command inside the namespace and a private mount namespace, after `setup` (sh) changed the mounts there. */
function inMounts(ns: string, setup: string, env: NodeJS.ProcessEnv, cmd: string, args: string[], input?: string): Run {
  const r = spawnSync(
    'nsenter',
    [`--net=${nsPath(ns)}`, 'unshare', '--mount', '--propagation', 'private', 'sh', '-c', `${setup} && exec "$@"`, 'sh', cmd, ...args],
    {
      encoding: 'utf8',
      env,
      input,
    },
  );
  return { out: r.stdout, status: r.status, err: r.stderr };
}

const SAVES = {
  'iptables-nft': 'iptables-nft-save',
  'ip6tables-nft': 'ip6tables-nft-save',
  'iptables-legacy': 'iptables-legacy-save',
  'ip6tables-legacy': 'ip6tables-legacy-save',
} as const;

/** Everything the clean-up may touch, as text: the comment lines (times) and counters aside, byte for byte. */
function snapshot(ns: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, save] of Object.entries(SAVES))
    out[name] = nsRun(ns, save, [])
      .replace(/^#.*\n/gm, '')
      .replace(/\[\d+:\d+\]/g, '[0:0]');
  out.nftables = nsRun(ns, 'nft', ['list', 'ruleset']);
  out.ipset = nsRun(ns, 'ipset', ['save']);
  out.links = nsRun(ns, 'ip', ['-o', 'link', 'show'])
    .split('\n')
    .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
    .filter(Boolean)
    .join(' ');
  return out;
}

function assertSame(actual: Record<string, string>, expected: Record<string, string>, what: string): void {
  for (const k of Object.keys(expected)) assert.equal(actual[k], expected[k], `${what}: ${k}`);
}

describe('ownership and the ruleset delta (pure)', () => {
  test("a chain is kube-proxy's by its table and name, never by the KUBE- prefix", () => {
    const owner = (t: string, c: string) => chainOwner(t, c).owner;
    for (const c of [
      'KUBE-SERVICES',
      'KUBE-NODEPORTS',
      'KUBE-POSTROUTING',
      'KUBE-MARK-MASQ',
      'KUBE-PROXY-CANARY',
      'KUBE-NODE-PORT',
      'KUBE-LOAD-BALANCER',
      'KUBE-SVC-ABC',
      'KUBE-SVL-ABC',
      'KUBE-SEP-ABC',
      'KUBE-EXT-ABC',
      'KUBE-FW-ABC',
      'KUBE-XLB-ABC',
    ]) {
      assert.equal(owner('nat', c), 'kube-proxy', c);
    }
    for (const c of [
      'KUBE-SERVICES',
      'KUBE-EXTERNAL-SERVICES',
      'KUBE-NODEPORTS',
      'KUBE-FORWARD',
      'KUBE-PROXY-FIREWALL',
      'KUBE-NODE-PORT',
      'KUBE-SOURCE-RANGES-FIREWALL',
      'KUBE-IPVS-FILTER',
      'KUBE-IPVS-OUT-FILTER',
    ]) {
      assert.equal(owner('filter', c), 'kube-proxy', c);
    }
    // kubelet's: filter's KUBE-FIREWALL (nat's was the old IPVS mode's), the canary, the hint, KUBE-MARK-DROP.
    assert.equal(owner('filter', 'KUBE-FIREWALL'), 'kubelet');
    assert.equal(owner('nat', 'KUBE-FIREWALL'), 'kube-proxy');
    assert.equal(owner('mangle', 'KUBE-IPTABLES-HINT'), 'kubelet');
    assert.equal(owner('nat', 'KUBE-MARK-DROP'), 'kubelet');
    for (const t of ['mangle', 'nat', 'filter']) assert.equal(owner(t, 'KUBE-KUBELET-CANARY'), 'kubelet');
    for (const c of ['KUBE-ROUTER-INPUT', 'KUBE-ROUTER-FORWARD', 'KUBE-POD-FW-5XGFEPNHMTB3RXWI', 'KUBE-NWPLCY-DEFAULT'])
      assert.equal(owner('filter', c), 'kube-router', c);
    // Per-Service prefixes count only in nat; an unknown KUBE-* chain is someone else's.
    assert.equal(owner('filter', 'KUBE-SVC-ABC'), 'other');
    assert.equal(owner('filter', 'KUBE-SOMETHING-ELSE'), 'other');
    assert.equal(owner('nat', 'MY-CHAIN'), 'other');
  });

  test("ipsets: only the IPVS mode's names (IPv6 ones as NewIPSet cuts them to 31 characters); nftables: only ip/ip6 kube-proxy", () => {
    for (const s of [
      'KUBE-CLUSTER-IP',
      'KUBE-LOOP-BACK',
      'KUBE-NODE-PORT-TCP',
      'KUBE-HEALTH-CHECK-NODE-PORT',
      'KUBE-IPVS-IPS',
      'KUBE-6-CLUSTER-IP',
      'KUBE-6-LOAD-BALANCER-SOURCE-CID',
      'KUBE-6-NODE-PORT-LOCAL-SCTP-HAS',
    ]) {
      assert.equal(ipsetOwner(s).owner, 'kube-proxy', s);
    }
    assert.ok([...KUBE_PROXY_IPSETS].every((s) => s.length <= 32));
    assert.equal(ipsetOwner('KUBE-SRC-OJQ3UNQGDKUYP7D6').owner, 'kube-router');
    assert.equal(ipsetOwner('inet6:KUBE-DST-VNUYUEY4EMW4JZWB').owner, 'kube-router');
    assert.equal(ipsetOwner('KUBE-SOMETHING').owner, 'other');
    assert.equal(nftTableOwner('ip kube-proxy').owner, 'kube-proxy');
    assert.equal(nftTableOwner('ip6 kube-proxy').owner, 'kube-proxy');
    assert.equal(nftTableOwner('inet kube-network-policies').owner, 'kube-network-policies');
    assert.equal(nftTableOwner('inet kube-proxy').owner, 'other');
    assert.equal(nftTableOwner('ip filter').owner, 'iptables-nft');
  });

  test("a chain of another owner that jumps into kube-proxy's keeps its target and what that reaches; the built-in jumps go", () => {
    const tables = parseIptablesSave(fullRestore(SERVICES) + FOREIGN_JUMPS_V4.replace('*nat\n', '*nat\n:PREROUTING ACCEPT [0:0]\n'));
    const nat = kubeProxyDelta(tables).find((d) => d.table === 'nat')!;
    const kept = new Map(nat.kept.map((k) => [k.chain, k.reason]));
    assert.match(kept.get('KUBE-SERVICES')!, /MY-SVC-HOOK \(not kube-proxy's\) jumps to it/);
    assert.match(kept.get('KUBE-MARK-MASQ')!, /CNI-DN-0a1b2c3d4e5f60718293a .* jumps to it/);
    for (const c of ['KUBE-NODEPORTS', 'KUBE-SVC-CDGGSHYLG3RE2FKL', 'KUBE-SEP-3NECGWKNF566U6RE']) assert.match(kept.get(c)!, /reached from KUBE-/, c);
    assert.deepEqual(nat.chains, ['KUBE-POSTROUTING'], 'only what no other chain reaches goes');
    assert.deepEqual(nat.jumps.map((j) => `${j.chain} ${j.target}`).sort(), [
      'OUTPUT KUBE-SERVICES',
      'POSTROUTING KUBE-POSTROUTING',
      'PREROUTING KUBE-SERVICES',
    ]);
    const input = restoreInput([nat]);
    assert.doesNotMatch(input, /MY-SVC-HOOK|CNI-DN|:KUBE-SERVICES/);
  });

  test('rules are split like a shell; ipset references and ipvsadm -S are read', () => {
    assert.deepEqual(splitRule('-m comment --comment "a b -j X" -j KUBE-SVC-1'), ['-m', 'comment', '--comment', 'a b -j X', '-j', 'KUBE-SVC-1']);
    assert.deepEqual(ruleSets('-m set --match-set KUBE-CLUSTER-IP dst,dst -m set ! --match-set my-set src -j SET --add-set other src'), [
      'KUBE-CLUSTER-IP',
      'my-set',
      'other',
    ]);
    const out = parseIpvsSave('-A -t 198.19.0.10:80 -s rr\n-a -t 198.19.0.10:80 -r 198.18.0.10:8080 -m -w 1\n-A -u [2001:db8::a]:53 -s rr\n-A -f 100 -s rr\n');
    assert.deepEqual(out, [
      { flag: '-t', service: '198.19.0.10:80', addr: '198.19.0.10' },
      { flag: '-u', service: '[2001:db8::a]:53', addr: '2001:db8::a' },
      { flag: '-f', service: '100' },
    ]);
  });

  test('the xtables lock: XTABLES_LOCKFILE, else /run/xtables.lock; a missing one needs a writable directory', () => {
    assert.deepEqual(xtablesLockPath({}), { path: '/run/xtables.lock', from: 'the default; XTABLES_LOCKFILE is not set' });
    assert.equal(xtablesLockPath({ XTABLES_LOCKFILE: '/var/lock/x.lock' }).path, '/var/lock/x.lock');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-xtlock-'));
    try {
      assert.equal(xtablesLockProblem(path.join(dir, 'missing.lock')), undefined);
      assert.match(xtablesLockProblem(path.join(dir, 'no-such-dir', 'x.lock'))!, /does not exist and .* is not writable \(ENOENT\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('kpr cleanup-kube-proxy on nodes, in network namespaces', { timeout: 180_000 }, () => {
  let sandbox: Sandbox;

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
  });

  after(async () => {
    await sandbox?.teardown();
  });

  test("iptables and nftables modes: exactly kube-proxy's chains, jumps and tables go, in both back ends and families; a second run finds nothing", () => {
    const ns = sandbox.addNamespace('ipt');
    nsRun(ns, 'ipset', ['restore'], OTHER_IPSETS_RESTORE);
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], baselineRules(4, 'my-allowlist'));
    nsRun(ns, 'ip6tables-nft-restore', ['--noflush'], baselineRules(6));
    nsRun(ns, 'iptables-legacy-restore', ['--noflush'], baselineRules(4));
    nsRun(ns, 'ip6tables-legacy-restore', ['--noflush'], baselineRules(6));
    nsRun(ns, 'nft', ['-f', '-'], OTHER_NFT_TABLES);
    const baseline = snapshot(ns);

    nsRun(ns, 'iptables-nft-restore', ['--noflush'], kubeProxyIptablesV4());
    nsRun(ns, 'ip6tables-nft-restore', ['--noflush'], kubeProxyIptablesV6());
    nsRun(ns, 'iptables-legacy-restore', ['--noflush'], kubeProxyIptablesOldV4()); // a node that ran an older kube-proxy on legacy
    nsRun(ns, 'ip6tables-legacy-restore', ['--noflush'], kubeProxyIptablesV6());
    nsRun(ns, 'nft', ['-f', '-'], kubeProxyNftables());
    const loaded = snapshot(ns);
    for (const k of ['iptables-nft', 'ip6tables-nft', 'iptables-legacy', 'ip6tables-legacy', 'nftables'])
      assert.notEqual(loaded[k], baseline[k], `${k}: kube-proxy's state loaded`);

    const dry = kpr(ns, 'cleanup-kube-proxy', '--dry-run');
    assert.equal(dry.status, 0, dry.err);
    const o = dry.out;
    assert.match(
      o,
      /^would remove: iptables-nft \(IPv4\): iptables-rule filter -A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL$/m,
    );
    assert.match(o, /^would remove: iptables-nft \(IPv4\): iptables-chain nat KUBE-SVC-CDGGSHYLG3RE2FKL$/m);
    assert.match(o, /^would remove: ip6tables-nft \(IPv6\): iptables-chain nat KUBE-SVL-ABCDEFGHIJKLMNOP$/m);
    assert.match(o, /^would remove: iptables-legacy \(IPv4\): iptables-chain nat KUBE-XLB-OLDLBSERVICEAAAA$/m);
    assert.match(o, /^would remove: ip6tables-legacy \(IPv6\): iptables-chain mangle KUBE-PROXY-CANARY$/m);
    assert.match(o, /^would remove: nftables: nft-table ip kube-proxy$/m);
    assert.match(o, /^would remove: nftables: nft-table ip6 kube-proxy$/m);
    assert.match(o, /^would keep: iptables-nft \(IPv4\): iptables-chain filter KUBE-ROUTER-INPUT: kube-router$/m);
    assert.match(o, /^would keep: iptables-nft \(IPv4\): iptables-chain filter KUBE-POD-FW-5XGFEPNHMTB3RXWI: kube-router$/m);
    assert.match(o, /^would keep: iptables-nft \(IPv4\): iptables-chain filter KUBE-FIREWALL: kubelet$/m);
    assert.match(o, /^would keep: iptables-nft \(IPv4\): iptables-chain mangle KUBE-IPTABLES-HINT: kubelet$/m);
    assert.match(o, /^would keep: iptables-legacy \(IPv4\): iptables-chain nat KUBE-MARK-DROP: kubelet$/m);
    assert.match(o, /^would keep: iptables-nft \(IPv4\): iptables-chain filter MY-CHAIN: not kube-proxy's$/m);
    assert.match(o, /^would keep: nftables: nft-table inet kube-network-policies: kube-network-policies/m);
    assert.match(o, /^would keep: nftables: nft-table inet user-firewall: not kube-proxy's$/m);
    assert.match(o, /^would keep: ipset: ipset KUBE-SRC-OJQ3UNQGDKUYP7D6: kube-router$/m);
    assert.match(o, /^iptables-legacy \(IPv4\): xtables lock \/run\/xtables\.lock \(the default; XTABLES_LOCKFILE is not set\)/m);
    assert.doesNotMatch(
      o,
      /would remove: .*(KUBE-ROUTER|KUBE-POD-FW|KUBE-NWPLCY|KUBE-FIREWALL|KUBE-KUBELET-CANARY|KUBE-IPTABLES-HINT|KUBE-MARK-DROP|MY-CHAIN|USER-NAT|kube-network-policies|user-firewall|KUBE-SRC|my-allowlist)/,
    );
    const json = JSON.parse(kpr(ns, 'cleanup-kube-proxy', '--dry-run', '-o', 'json').out);
    assert.equal(json.dryRun, true);
    assert.ok(
      json.steps.some((s: { kept: Array<{ what: string; reason: string }> }) =>
        s.kept.some((k) => k.what === 'filter KUBE-ROUTER-FORWARD' && k.reason === 'kube-router'),
      ),
    );
    assert.equal(json.total, o.split('\n').filter((l) => l.startsWith('would remove: ')).length);
    assertSame(snapshot(ns), loaded, 'a dry run changes nothing');

    const r = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(r.status, 0, r.out + r.err);
    assert.match(r.out, /^removed: nftables: nft-table ip kube-proxy$/m);
    assert.match(r.out, /^kept: iptables-nft \(IPv4\): iptables-chain filter KUBE-ROUTER-INPUT: kube-router$/m);
    assertSame(snapshot(ns), baseline, 'after the clean-up, the node is as before kube-proxy');

    const again = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(again.status, 0, again.err);
    assert.match(again.out, /^nothing to remove; \d+ kept/m);
    assertSame(snapshot(ns), baseline, 'a second run changes nothing');
  });

  test("IPVS mode: kube-proxy's chains, jumps, ipsets and kube-ipvs0 go; kube-router's and the operator's sets stay", () => {
    const ns = sandbox.addNamespace('ipvs');
    nsRun(ns, 'ipset', ['restore'], OTHER_IPSETS_RESTORE);
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], baselineRules(4, 'my-allowlist'));
    nsRun(ns, 'ip6tables-nft-restore', ['--noflush'], baselineRules(6));
    nsRun(ns, 'nft', ['-f', '-'], OTHER_NFT_TABLES);
    const baseline = snapshot(ns);

    nsRun(ns, 'ipset', ['restore'], KUBE_PROXY_IPSETS_RESTORE);
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], kubeProxyIpvsV4());
    // kube-proxy makes kube-ipvs0 a dummy device; a kernel without the dummy driver gets a bridge (same name, same role).
    try {
      inNs(ns, 'ip', 'link', 'add', 'kube-ipvs0', 'type', 'dummy');
    } catch {
      inNs(ns, 'ip', 'link', 'add', 'kube-ipvs0', 'type', 'bridge');
    }
    inNs(ns, 'ip', 'addr', 'add', '198.19.0.10/32', 'dev', 'kube-ipvs0');
    const loaded = snapshot(ns);
    assert.match(loaded.ipset, /^create KUBE-CLUSTER-IP /m);

    const dry = kpr(ns, 'cleanup-kube-proxy', '--dry-run');
    assert.equal(dry.status, 0, dry.err);
    assert.match(dry.out, /^would remove: iptables-nft \(IPv4\): iptables-chain filter KUBE-IPVS-FILTER$/m);
    assert.match(dry.out, /^would remove: iptables-nft \(IPv4\): iptables-chain nat KUBE-LOAD-BALANCER$/m);
    assert.match(
      dry.out,
      /^would remove: iptables-nft \(IPv4\): iptables-rule filter -A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT$/m,
    );
    for (const s of ['KUBE-CLUSTER-IP', 'KUBE-LOOP-BACK', 'KUBE-NODE-PORT-TCP', 'KUBE-IPVS-IPS', 'KUBE-6-CLUSTER-IP', 'KUBE-6-LOAD-BALANCER-SOURCE-CID']) {
      assert.match(dry.out, new RegExp(`^would remove: ipset: ipset ${s}$`, 'm'), s);
    }
    assert.match(dry.out, /^would keep: ipset: ipset inet6:KUBE-DST-VNUYUEY4EMW4JZWB: kube-router$/m);
    assert.match(dry.out, /^would keep: ipset: ipset my-allowlist: not kube-proxy's$/m);
    assert.match(dry.out, /^would remove: kube-ipvs0: interface kube-ipvs0$/m);
    assertSame(snapshot(ns), loaded, 'a dry run changes nothing');

    const r = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(r.status, 0, r.out + r.err);
    assertSame(snapshot(ns), baseline, 'after the clean-up, the node is as before kube-proxy');
    const again = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(again.status, 0, again.err);
    assert.match(again.out, /^nothing to remove/m);
    assertSame(snapshot(ns), baseline, 'a second run changes nothing');
  });

  test("a chain of another owner that jumps into kube-proxy's: that chain, its targets and what they reach stay intact, with the reason; the set a kept rule uses stays", () => {
    const ns = sandbox.addNamespace('foreign');
    nsRun(
      ns,
      'ipset',
      ['restore'],
      'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\ncreate KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536\n',
    );
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], kubeProxyIptablesV4());
    nsRun(ns, 'iptables-nft-restore', ['--noflush'], FOREIGN_JUMPS_V4);
    nsRun(
      ns,
      'iptables-nft-restore',
      ['--noflush'],
      '*filter\n:MY-CHAIN - [0:0]\n-A INPUT -j MY-CHAIN\n-A MY-CHAIN -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n',
    );
    const natBefore = nsRun(ns, 'iptables-nft-save', ['-t', 'nat']).replace(/^#.*\n/gm, '');
    const dry = kpr(ns, 'cleanup-kube-proxy', '--dry-run');
    assert.equal(dry.status, 0, dry.err);
    assert.match(
      dry.out,
      /^would keep: iptables-nft \(IPv4\): iptables-chain nat KUBE-SERVICES: kube-proxy's, kept: MY-SVC-HOOK \(not kube-proxy's\) jumps to it$/m,
    );
    assert.match(
      dry.out,
      /^would keep: iptables-nft \(IPv4\): iptables-chain nat KUBE-MARK-MASQ: kube-proxy's, kept: CNI-DN-0a1b2c3d4e5f60718293a \(not kube-proxy's\) jumps to it$/m,
    );
    assert.match(
      dry.out,
      /^would keep: iptables-nft \(IPv4\): iptables-chain nat KUBE-SVC-CDGGSHYLG3RE2FKL: kube-proxy's, kept: reached from KUBE-SERVICES, which stays$/m,
    );
    assert.match(
      dry.out,
      /^would keep: ipset: ipset KUBE-CLUSTER-IP: kube-proxy's, kept: a rule that stays uses it \(iptables-nft \(IPv4\) filter MY-CHAIN\)$/m,
    );
    assert.match(dry.out, /^would remove: ipset: ipset KUBE-LOOP-BACK$/m);

    const r = kpr(ns, 'cleanup-kube-proxy');
    assert.equal(r.status, 0, r.out + r.err);
    const natAfter = nsRun(ns, 'iptables-nft-save', ['-t', 'nat']).replace(/^#.*\n/gm, '');
    // Every rule outside the built-in chains is as it was, but KUBE-POSTROUTING's (which nothing else reaches).
    const userRules = (s: string) => s.split('\n').filter((l) => l.startsWith('-A ') && !/^-A (PREROUTING|INPUT|OUTPUT|POSTROUTING) /.test(l));
    assert.deepEqual(
      userRules(natAfter),
      userRules(natBefore).filter((l) => !l.startsWith('-A KUBE-POSTROUTING ')),
    );
    assert.match(natAfter, /^-A PREROUTING -j MY-SVC-HOOK$/m);
    assert.doesNotMatch(natAfter, /^-A (PREROUTING|OUTPUT|POSTROUTING) .*-j KUBE-/m, "kube-proxy's jumps from the built-in chains are gone");
    assert.doesNotMatch(natAfter, /KUBE-POSTROUTING/);
    assert.match(nsRun(ns, 'ipset', ['list', '-n']), /^KUBE-CLUSTER-IP$/m);
    assert.doesNotMatch(nsRun(ns, 'ipset', ['list', '-n']), /KUBE-LOOP-BACK/);
    const again = kpr(ns, 'cleanup-kube-proxy');
    assert.match(again.out, /^nothing to remove/m);
  });

  describe('the legacy back end takes the xtables lock iptables itself would', () => {
    let ns: string;
    let dir: string;
    let holder: ChildProcess | undefined;
    const kprBin = cliBin;
    const roRun = 'mount -t tmpfs -o ro,size=64k tmpfs /run'; // a container's read-only /run without the node's lock

    /** Holds `file`'s flock (as kubelet or kube-proxy would during a change) until released. */
    async function hold(file: string): Promise<void> {
      // One process holds it: the shell's fd 9 carries the lock into sleep, so killing that pid frees it.
      holder = spawn('sh', ['-c', 'exec 9<>"$0" && flock -x 9 && echo locked && exec sleep 120', file], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve, reject) => {
        holder!.stdout!.once('data', () => resolve());
        holder!.once('exit', (code) => reject(new Error(`flock exited ${code}`)));
      });
    }

    function release(): void {
      holder?.kill('SIGKILL');
      holder = undefined;
    }

    const legacy = () =>
      nsRun(ns, 'iptables-legacy-save', [])
        .replace(/^#.*\n/gm, '')
        .replace(/\[\d+:\d+\]/g, '[0:0]');

    before(() => {
      ns = sandbox.addNamespace('lock');
      dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-xtlock-'));
      writeFileSync(path.join(dir, 'node.lock'), '');
      nsRun(ns, 'ipset', ['restore'], OTHER_IPSETS_RESTORE);
      nsRun(ns, 'iptables-legacy-restore', ['--noflush'], baselineRules(4));
      nsRun(ns, 'iptables-legacy-restore', ['--noflush'], kubeProxyIptablesOldV4());
    });

    after(() => {
      release();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    test('read-only /run without the lock: iptables-legacy-restore exits 4; the clean-up says why and leaves the legacy tables alone', () => {
      const raw = inMounts(ns, roRun, process.env, 'iptables-legacy-restore', ['--noflush', '-w', '5'], '*filter\nCOMMIT\n');
      assert.equal(raw.status, 4);
      assert.match(raw.err, /can't open lock file \/run\/xtables\.lock/);
      const before = legacy();
      const env = { ...process.env };
      delete env.XTABLES_LOCKFILE;
      const r = inMounts(ns, roRun, env, kprBin, ['cleanup-kube-proxy']);
      assert.equal(r.status, 1, r.out + r.err);
      assert.match(r.out, /^iptables-legacy \(IPv4\): error: the xtables lock \/run\/xtables\.lock does not exist and \/run is not writable \(EROFS\)/m);
      assert.match(r.out, /^FAILED to remove: iptables-legacy \(IPv4\): iptables-chain nat KUBE-SERVICES$/m);
      assert.equal(legacy(), before);
    });

    test('XTABLES_LOCKFILE names the lock: the clean-up waits on it (-w) while another holder has it', async () => {
      const lock = path.join(dir, 'env.lock');
      writeFileSync(lock, '');
      const env = { ...process.env, XTABLES_LOCKFILE: lock };
      const dry = inMounts(ns, roRun, env, kprBin, ['cleanup-kube-proxy', '--dry-run']);
      assert.match(dry.out, new RegExp(`^iptables-legacy \\(IPv4\\): xtables lock ${lock} \\(XTABLES_LOCKFILE\\)$`, 'm'));
      const before = legacy();
      await hold(lock);
      try {
        const r = inMounts(ns, roRun, env, kprBin, ['cleanup-kube-proxy']);
        assert.equal(r.status, 1, r.out + r.err);
        assert.match(
          r.out,
          new RegExp(`^iptables-legacy \\(IPv4\\): error: iptables-legacy-restore --noflush -w 5 failed \\(exit 4\\): Can't lock ${lock}:`, 'm'),
        );
        assert.equal(legacy(), before, 'nothing changed while the lock was held');
      } finally {
        release();
      }
    });

    test("the node's lock mounted at /run/xtables.lock on a read-only /run (the chart's hostPath): held, the clean-up waits; free, it removes kube-proxy's legacy chains", async () => {
      const nodeLock = path.join(dir, 'node.lock');
      const mounted = `mount -t tmpfs -o size=64k tmpfs /run && touch /run/xtables.lock && mount --bind ${nodeLock} /run/xtables.lock && mount -o remount,ro /run`;
      const env = { ...process.env };
      delete env.XTABLES_LOCKFILE;
      const before = legacy();
      await hold(nodeLock);
      try {
        const r = inMounts(ns, mounted, env, kprBin, ['cleanup-kube-proxy']);
        assert.equal(r.status, 1, r.out + r.err);
        assert.match(r.out, /^iptables-legacy \(IPv4\): error: iptables-legacy-restore --noflush -w 5 failed \(exit 4\): Can't lock \/run\/xtables\.lock:/m);
        assert.equal(legacy(), before);
      } finally {
        release();
      }
      const r = inMounts(ns, mounted, env, kprBin, ['cleanup-kube-proxy']);
      assert.equal(r.status, 0, r.out + r.err);
      assert.match(r.out, /^removed: iptables-legacy \(IPv4\): iptables-chain nat KUBE-XLB-OLDLBSERVICEAAAA$/m);
      assert.doesNotMatch(legacy(), /KUBE-(SERVICES|SVC-|SEP-|XLB-|FW-|POSTROUTING|MARK-MASQ|NODEPORTS|FORWARD|EXTERNAL-SERVICES)/);
      assert.match(legacy(), /^:KUBE-MARK-DROP - /m);
    });
  });
});
