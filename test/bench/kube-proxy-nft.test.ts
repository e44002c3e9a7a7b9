/**
 * The benchmark's kube-proxy nftables-mode generator: chain names as
 * kube-proxy's hashAndTruncate makes them, the transaction's shape, and nft
 * accepting the result (checked with `nft -c`, then loaded, inside a
 * throwaway network namespace), including the partial syncs of bench/nftables.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  deleteChainsTransaction,
  fullTransaction,
  fullTransactionChunks,
  hashAndTruncate,
  nftEndpointChain,
  nftExternalChain,
  nftServiceChain,
  partialTransaction,
  serviceChainCount,
  type NftOptions,
} from '../../bench/kube-proxy-nft.js';
import { fullRestore, fullRestoreChunks } from '../../bench/kube-proxy-rules.js';
import { listChainsIn, nftIn, NftChanger, NotFinishedError } from '../../bench/nftables.js';
import { makeScenario, MAX_SERVICES, serviceCIDRs } from '../../bench/scenario.js';
import { makeNodePortScenario } from '../../bench/nodeport-scenario.js';
import { requireRoot } from '../support/preflight.js';
import { kpService } from './support/kp-service.js';
import { inNs, Sandbox } from '../../sandbox/netns.js';

const OPTS: NftOptions = { nodeIPs: ['198.18.0.1'], serviceCIDRs: ['198.19.0.0/16'] };
/** The fixed chains: 8 base chains, 6 jump targets, mark-for-masquerade, reject-chain. */
const FIXED_CHAINS = 16;

const svc = kpService;

test("chain names are kube-proxy's: hash prefix from base32(sha256(name)), the names upstream documents", () => {
  // pkg/proxy/nftables/proxier.go documents these two for servicePortChainNameBase / servicePortEndpointChainNameBase.
  assert.equal(hashAndTruncate('ns1/svc1/tcp/p80'), 'ULMVA6XW-ns1/svc1/tcp/p80');
  assert.equal(hashAndTruncate('ns1/svc1/tcp/p80__10.180.0.1/80'), '5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80');
  const s = svc('svc1', 1);
  assert.equal(nftServiceChain(s), 'service-ULMVA6XW-ns1/svc1/tcp/p80');
  assert.equal(nftExternalChain(s), 'external-ULMVA6XW-ns1/svc1/tcp/p80');
  assert.equal(nftEndpointChain(s, { ip: '10.180.0.1', port: 80 }), 'endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80');
  assert.match(nftEndpointChain(s, { ip: '2001:db8::1', port: 80 }), /__2001\.db8\.\.1\/80$/);
  assert.notEqual(nftServiceChain({ ...s, protocol: 'UDP' }), nftServiceChain(s));
  const long = hashAndTruncate('x'.repeat(300));
  assert.equal(long.length, 240);
  assert.ok(long.endsWith('...'));
});

test('the full transaction: table, base chains and priorities, dispatch maps, service and endpoint chains', () => {
  const s = svc('svc1', 3, { nodePort: 30080 });
  const text = fullTransaction([s], OPTS);
  const lines = text.split('\n');
  assert.equal(lines[0], 'add table ip kube-proxy { comment "rules for kube-proxy" ; }');
  for (const bc of [
    'nat-prerouting { type nat hook prerouting priority -100 ; }',
    'nat-output { type nat hook output priority -100 ; }',
    'nat-postrouting { type nat hook postrouting priority 100 ; }',
    'filter-prerouting { type filter hook prerouting priority -110 ; }',
    'filter-output-post-dnat { type filter hook output priority -90 ; }',
  ]) {
    assert.ok(lines.includes(`add chain ip kube-proxy ${bc}`), bc);
  }
  assert.ok(lines.includes('add rule ip kube-proxy nat-prerouting jump services'));
  assert.ok(lines.includes('add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @ service-ips'));
  assert.ok(lines.includes('add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @ service-nodeports'));
  assert.ok(lines.includes('add rule ip kube-proxy mark-for-masquerade mark set mark or 0x004000'));
  const sc = nftServiceChain(s);
  const eps = s.endpoints.map((ep) => nftEndpointChain(s, ep));
  assert.ok(lines.includes(`add element ip kube-proxy service-ips { 198.19.0.1 . tcp . 80 : goto ${sc} }`));
  assert.ok(lines.includes(`add element ip kube-proxy service-nodeports { tcp . 30080 : goto ${nftExternalChain(s)} }`));
  assert.ok(lines.includes(`add rule ip kube-proxy ${sc} numgen random mod 3 vmap { 0 : goto ${eps[0]} , 1 : goto ${eps[1]} , 2 : goto ${eps[2]} }`));
  assert.ok(lines.includes(`add rule ip kube-proxy ${eps[1]} ip saddr 198.18.128.2 jump mark-for-masquerade`));
  assert.ok(lines.includes(`add rule ip kube-proxy ${eps[1]} meta l4proto tcp dnat to 198.18.128.2:8080`));
  assert.deepEqual(
    lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${nftExternalChain(s)} `)),
    [`add rule ip kube-proxy ${nftExternalChain(s)} jump mark-for-masquerade`, `add rule ip kube-proxy ${nftExternalChain(s)} goto ${sc}`],
  );
  // Every service chain is ensured (add, then flush) before its rules.
  for (const c of [sc, ...eps]) {
    const add = lines.indexOf(`add chain ip kube-proxy ${c}`);
    assert.ok(add >= 0 && lines[add + 1] === `flush chain ip kube-proxy ${c}`, c);
    assert.ok(add < lines.findIndex((l) => l.startsWith(`add rule ip kube-proxy ${c} `)), c);
  }
  // Without endpoints: a reject element, no chains.
  const empty = fullTransaction([svc('none', 0)], OPTS);
  assert.ok(empty.includes('add element ip kube-proxy no-endpoint-services { 198.19.0.1 . tcp . 80 comment "ns1/none:p80" : goto reject-chain }'));
  assert.ok(!empty.includes('service-'.concat(hashAndTruncate('ns1/none/tcp/p80'))));
  assert.equal([...fullTransactionChunks([s, svc('b', 2)], OPTS, 1)].join(''), fullTransaction([s, svc('b', 2)], OPTS));
});

test("a partial sync rewrites only the changed service's chains and flushes the stale endpoint chain", () => {
  const a = svc('svc1', 3);
  const b = svc('svc2', 3, { clusterIP: '198.19.0.2' });
  const gone = { ...a, endpoints: a.endpoints.slice(1) };
  const stale = nftEndpointChain(a, a.endpoints[0]);
  const text = partialTransaction([gone], [stale]);
  assert.ok(!text.includes('add table'));
  assert.ok(!text.includes(nftServiceChain(b)));
  assert.ok(!text.includes('add element'));
  assert.ok(text.includes(`add rule ip kube-proxy ${nftServiceChain(a)} numgen random mod 2 vmap`));
  assert.ok(text.trimEnd().endsWith(`flush chain ip kube-proxy ${stale}`));
  assert.ok(!text.includes(`add chain ip kube-proxy ${stale}`));
  assert.equal(deleteChainsTransaction([stale]), `delete chain ip kube-proxy ${stale}\n`);
});

test('the iptables ruleset in chunks is the same text as in one piece', () => {
  const { services } = makeNodePortScenario(7, 3);
  assert.equal([...fullRestoreChunks(services, 2)].join(''), fullRestore(services));
});

test('the scenario goes past 65,000 Services: distinct ClusterIPs in the service CIDRs, clear of the topologies', () => {
  const { services } = makeScenario(100_000, 10);
  assert.equal(services.length, 100_001);
  const ips = new Set(services.map((s) => s.clusterIP));
  assert.equal(ips.size, services.length);
  const eps = new Set<string>();
  for (const s of services) for (const ep of s.endpoints) eps.add(`${ep.ip}:${ep.port}`);
  assert.equal(eps.size, 100_000 * 10 + 1);
  const cidrs = serviceCIDRs(100_000).map((c) => {
    const [a, bits] = c.split('/');
    const n = a.split('.').reduce((x, o) => ((x << 8) | Number(o)) >>> 0, 0);
    return [n, 2 ** (32 - Number(bits))];
  });
  const inCidrs = (ip: string) => {
    const n = ip.split('.').reduce((x, o) => ((x << 8) | Number(o)) >>> 0, 0);
    return cidrs.some(([b, size]) => n >= b && n < b + size);
  };
  for (const ip of ips) {
    assert.ok(inCidrs(ip), ip);
    assert.doesNotMatch(ip, /^198\.18\.(\d|[12]\d|3[01]|10[01])\./, ip); // the topologies' 198.18.0–31.x and 198.18.100–101.x
  }
  for (const s of services) for (const ep of s.endpoints) if (s.name !== 'echo') assert.ok(!ips.has(ep.ip), ep.ip);
  assert.throws(() => makeScenario(MAX_SERVICES + 1, 1), /at most/);
  assert.deepEqual(serviceCIDRs(10_000), ['198.19.0.0/16']);
});

test('nft accepts the ruleset (nft -c, then loaded) and the partial syncs (throwaway netns)', async () => {
  requireRoot();
  execFileSync('nft', ['--version'], { stdio: 'ignore' }); // fails clearly when nft is missing
  const sandbox = new Sandbox();
  try {
    const ns = sandbox.addNamespace('nft');
    const { services } = makeScenario(4, 3);
    const np = makeNodePortScenario(3, 2).services.map((s, i) => ({ ...s, name: `np-${i}`, clusterIP: `198.19.1.${i + 1}` }));
    const all = [...services, ...np, svc('none', 0, { clusterIP: '198.19.2.1', nodePort: 31000 })];
    const chunks = [...fullTransactionChunks(all, OPTS, 2)];
    await nftIn(ns, chunks, ['-c']);
    assert.equal((await listChainsIn(ns)).chains, 0, 'nft -c loaded nothing');
    await nftIn(ns, chunks);
    assert.equal((await listChainsIn(ns)).chains, FIXED_CHAINS + serviceChainCount(all));
    // Packets take the DNAT path: the map holds the service, its chain the endpoints.
    const target = services[1];
    const sc = nftServiceChain(target);
    assert.match(
      inNs(ns, 'nft', 'list', 'map', 'ip', 'kube-proxy', 'service-ips'),
      new RegExp(`${target.clusterIP} \\. tcp \\. 80 : goto ${sc.replaceAll('/', '\\/')}`),
    );

    const changer = new NftChanger(ns, target, 30_000);
    await changer.change('minimal'); // endpoint 0 leaves: its chain is flushed, kept
    assert.match(inNs(ns, 'nft', 'list', 'chain', 'ip', 'kube-proxy', sc), /numgen random mod 2 vmap/);
    assert.equal((await listChainsIn(ns)).chains, FIXED_CHAINS + serviceChainCount(all));
    assert.doesNotMatch(inNs(ns, 'nft', 'list', 'chain', 'ip', 'kube-proxy', changer.staleChain()), /dnat/);
    await new Promise((r) => setTimeout(r, 1100));
    await changer.change('exact'); // rejoins: the stale chain (> 1 s) is deleted first, then recreated
    assert.equal(changer.staleDeletes, 1);
    assert.equal(changer.listMs.length, 1);
    assert.match(inNs(ns, 'nft', 'list', 'chain', 'ip', 'kube-proxy', sc), /numgen random mod 3 vmap/);
    assert.match(inNs(ns, 'nft', 'list', 'chain', 'ip', 'kube-proxy', changer.staleChain()), /dnat to 198\.18\.128\.3:8080/);
    await changer.change('exact'); // leaves again, well within the second: nothing to delete
    assert.equal(changer.staleDeletes, 1);
    assert.deepEqual([changer.exactMs.length, changer.minimalMs.length], [2, 1]);

    // A bounded run that cannot finish reports so.
    await assert.rejects(
      nftIn(
        ns,
        (function* () {
          yield 'add table ip slow\n';
          for (let i = 0; i < 200_000; i++) yield `add chain ip slow c${i}\n`;
        })(),
        ['-c'],
        1,
      ),
      (err: unknown) => err instanceof NotFinishedError && /not finished within/.test(err.message),
    );
  } finally {
    await sandbox.teardown();
  }
});
