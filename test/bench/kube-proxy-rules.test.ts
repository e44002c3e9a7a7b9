/**
 * The benchmark's kube-proxy ruleset generator: chain names, probabilities and
 * rule shapes as kube-proxy writes them, and iptables-restore accepting the
 * result (checked with --test inside a throwaway network namespace).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  base32Std,
  extChainName,
  fullRestore,
  nodePortRule,
  partialRestore,
  probability,
  sepChainName,
  servicePortName,
  svcChainName,
  type KpService,
} from '../../bench/kube-proxy-rules.js';
import { makeScenario } from '../../bench/scenario.js';
import { requireRoot } from '../support/preflight.js';
import { kpService } from './support/kp-service.js';
import { Sandbox } from '../../sandbox/netns.js';
import { natRuleCount, restoreIn } from '../../bench/iptables.js';
import { makeNodePortScenario, NODEPORT_BASE, NP_ECHO_SERVICE } from '../../bench/nodeport-scenario.js';
import { NP_POD_IP } from '../../bench/nodeport-topology.js';

const svc = (name: string, n: number) => kpService(name, n);

test('base32 matches RFC 4648 test vectors (Go base32.StdEncoding)', () => {
  const vectors: [string, string][] = [
    ['', ''],
    ['f', 'MY======'],
    ['fo', 'MZXQ===='],
    ['foo', 'MZXW6==='],
    ['foob', 'MZXW6YQ='],
    ['fooba', 'MZXW6YTB'],
    ['foobar', 'MZXW6YTBOI======'],
  ];
  for (const [plain, enc] of vectors) assert.equal(base32Std(Buffer.from(plain)), enc);
});

test('chain names are deterministic, kube-proxy-shaped and distinct', () => {
  const a = svc('svc1', 3);
  assert.equal(servicePortName(a), 'ns1/svc1:p80');
  assert.equal(servicePortName({ ...a, portName: '' }), 'ns1/svc1');
  const name = svcChainName(a);
  assert.match(name, /^KUBE-SVC-[A-Z2-7]{16}$/);
  assert.equal(svcChainName({ ...a }), name);
  assert.ok(name.length <= 28);
  assert.notEqual(svcChainName(svc('svc2', 3)), name);
  assert.notEqual(svcChainName({ ...a, protocol: 'UDP' }), name);
  const seps = a.endpoints.map((ep) => sepChainName(a, ep));
  for (const s of seps) assert.match(s, /^KUBE-SEP-[A-Z2-7]{16}$/);
  assert.equal(new Set(seps).size, seps.length);
  assert.equal(sepChainName(a, a.endpoints[0]), seps[0]);
});

test('probabilities are 1/(n-i) formatted %0.10f and the last rule is unconditional', () => {
  assert.equal(probability(10, 0), '0.1000000000');
  assert.equal(probability(10, 1), '0.1111111111');
  assert.equal(probability(10, 8), '0.5000000000');
  assert.equal(probability(3, 0), '0.3333333333');
  const s = svc('svc1', 3);
  const text = fullRestore([s]);
  const chain = svcChainName(s);
  const rules = text.split('\n').filter((l) => l.startsWith(`-A ${chain} `));
  assert.equal(rules.length, 3);
  assert.match(rules[0], /--probability 0\.3333333333 -j KUBE-SEP-/);
  assert.match(rules[1], /--probability 0\.5000000000 -j KUBE-SEP-/);
  assert.doesNotMatch(rules[2], /statistic/);
  assert.match(rules[2], new RegExp(`-j ${sepChainName(s, s.endpoints[2])}$`));
});

test('full restore has the kube-proxy chains and rule shapes', () => {
  const s = svc('svc1', 2);
  const text = fullRestore([s]);
  for (const c of ['KUBE-SERVICES', 'KUBE-MARK-MASQ', 'KUBE-POSTROUTING', 'KUBE-NODEPORTS']) assert.ok(text.includes(`:${c} - [0:0]`), c);
  assert.ok(text.includes(`-A KUBE-SERVICES -d 198.19.0.1/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j ${svcChainName(s)}`));
  const sep = sepChainName(s, s.endpoints[0]);
  assert.ok(text.includes(`-A ${sep} -s 198.18.128.1/32 -m comment --comment "ns1/svc1:p80" -j KUBE-MARK-MASQ`));
  assert.ok(text.includes(`-A ${sep} -p tcp -m comment --comment "ns1/svc1:p80" -m tcp -j DNAT --to-destination 198.18.128.1:8080`));
  // The nodeports jump is the last KUBE-SERVICES rule.
  const svcRules = text.split('\n').filter((l) => l.startsWith('-A KUBE-SERVICES '));
  assert.match(svcRules[svcRules.length - 1], /-j KUBE-NODEPORTS$/);
  assert.equal(fullRestore([s]), text);
});

test('partial restore redeclares only the changed chains (minimal) or also KUBE-SERVICES (exact)', () => {
  const all = [svc('svc1', 3), { ...svc('svc2', 3), clusterIP: '198.19.0.2' }];
  const changed = { ...all[0], endpoints: all[0].endpoints.slice(1) };
  const stale = sepChainName(all[0], all[0].endpoints[0]);
  const minimal = partialRestore([changed], { mode: 'minimal', staleSepChains: [stale] });
  assert.ok(!minimal.includes(':KUBE-SERVICES'));
  assert.ok(minimal.includes(`:${svcChainName(changed)} - [0:0]`));
  assert.ok(minimal.includes(`-X ${stale}`));
  assert.ok(!minimal.includes(svcChainName(all[1])));
  const exact = partialRestore([changed], { mode: 'exact', all: [changed, all[1]], staleSepChains: [stale] });
  assert.ok(exact.includes(':KUBE-SERVICES - [0:0]'));
  assert.ok(exact.includes(`-j ${svcChainName(all[1])}`)); // KUBE-SERVICES is rewritten in full
  assert.ok(!exact.includes(`:${svcChainName(all[1])}`)); // but unchanged service chains are not
});

test('iptables-restore accepts the ruleset and a partial sync (throwaway netns)', async () => {
  requireRoot();
  execFileSync('iptables-restore', ['--version'], { stdio: 'ignore' }); // fails clearly when iptables is missing
  const sandbox = new Sandbox();
  try {
    const ns = sandbox.addNamespace('ipt');
    const { services } = makeScenario(3, 3);
    const full = fullRestore(services);
    await restoreIn(ns, full, ['--test']);
    await restoreIn(ns, full);
    const target = services[1];
    const changed = { ...target, endpoints: target.endpoints.slice(1) };
    const stale = [sepChainName(target, target.endpoints[0])];
    await restoreIn(ns, partialRestore([changed], { mode: 'minimal', staleSepChains: stale }), ['--noflush']);
    await restoreIn(ns, partialRestore([target], { mode: 'exact', all: services }), ['--noflush']);
  } finally {
    await sandbox.teardown();
  }
});

test('NodePort services get KUBE-NODEPORTS → KUBE-EXT (masquerade, then KUBE-SVC), reached from the last KUBE-SERVICES rule', () => {
  const s = { ...svc('svc1', 2), nodePort: 30080 };
  const plain = svc('svc2', 1);
  const text = fullRestore([s, { ...plain, clusterIP: '198.19.0.2' }]);
  const ext = extChainName(s);
  assert.match(ext, /^KUBE-EXT-[A-Z2-7]{16}$/);
  assert.equal(ext.slice('KUBE-EXT-'.length), svcChainName(s).slice('KUBE-SVC-'.length)); // the same hash as its KUBE-SVC chain
  assert.ok(text.includes(`:${ext} - [0:0]`));
  assert.equal(nodePortRule(s), `-A KUBE-NODEPORTS -p tcp -m comment --comment "ns1/svc1:p80" -m tcp --dport 30080 -j ${ext}`);
  const lines = text.split('\n');
  assert.deepEqual(
    lines.filter((l) => l.startsWith(`-A ${ext} `)),
    [`-A ${ext} -m comment --comment "masquerade traffic for ns1/svc1:p80 external destinations" -j KUBE-MARK-MASQ`, `-A ${ext} -j ${svcChainName(s)}`],
  );
  assert.deepEqual(
    lines.filter((l) => l.startsWith('-A KUBE-NODEPORTS ')),
    [nodePortRule(s)],
  );
  // ClusterIP-only services get no external chain; the nodeports jump stays the last KUBE-SERVICES rule.
  assert.ok(!text.includes(extChainName(plain)));
  const svcRules = lines.filter((l) => l.startsWith('-A KUBE-SERVICES '));
  assert.equal(svcRules.length, 3);
  assert.match(svcRules[2], /-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS$/);
  for (const c of ['PREROUTING', 'OUTPUT']) assert.ok(text.includes(`-A ${c} -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`), c);
  assert.ok(text.includes('-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully'));
  // Without endpoints there is no NodePort rule (kube-proxy rejects in the filter table instead).
  assert.equal(nodePortRule({ ...s, endpoints: [] }), undefined);
});

test('a partial sync rewrites KUBE-NODEPORTS in full (exact) and the changed KUBE-EXT chain', () => {
  const all = [
    { ...svc('svc1', 3), nodePort: 30001 },
    { ...svc('svc2', 3), clusterIP: '198.19.0.2', nodePort: 30002 },
  ];
  const exact = partialRestore([all[0]], { mode: 'exact', all });
  assert.ok(exact.includes(':KUBE-NODEPORTS - [0:0]'));
  assert.equal(exact.split('\n').filter((l) => l.startsWith('-A KUBE-NODEPORTS ')).length, 2);
  assert.ok(exact.includes(`:${extChainName(all[0])} - [0:0]`));
  assert.ok(!exact.includes(`:${extChainName(all[1])}`));
  const minimal = partialRestore([all[0]], { mode: 'minimal' });
  assert.ok(!minimal.includes('KUBE-NODEPORTS'));
  assert.ok(minimal.includes(`:${extChainName(all[0])} - [0:0]`));
});

test('the NodePort scenario: unique node ports, the echo service in the middle pointing at the pod', () => {
  for (const n of [1, 2, 101]) {
    const { services, echo } = makeNodePortScenario(n, 3);
    assert.equal(services.length, n);
    assert.equal(echo.name, NP_ECHO_SERVICE);
    assert.equal(services[Math.floor((n - 1) / 2)], echo);
    assert.deepEqual(echo.endpoints, [{ ip: NP_POD_IP, port: 9000 }]);
    assert.deepEqual(
      services.map((s) => s.nodePort),
      services.map((_, i) => NODEPORT_BASE + i),
    );
    assert.equal(new Set(services.map((s) => s.clusterIP)).size, n);
  }
});

test('iptables-restore accepts the NodePort ruleset (throwaway netns)', async () => {
  requireRoot();
  execFileSync('iptables-restore', ['--version'], { stdio: 'ignore' });
  const sandbox = new Sandbox();
  try {
    const ns = sandbox.addNamespace('iptnp');
    const { services } = makeNodePortScenario(5, 3);
    const full = fullRestore(services);
    await restoreIn(ns, full, ['--test']);
    await restoreIn(ns, full);
    // 3 jumps + 4 fixed + per service: 1 cluster IP + 1 nodeport + 2 ext + 1 svc/ep + 2 sep/ep, + the nodeports jump.
    const perSvc = (s: KpService) => 4 + s.endpoints.length * 3;
    assert.equal(natRuleCount(ns), 3 + 4 + 1 + services.reduce((a, s) => a + perSvc(s), 0));
    await restoreIn(ns, partialRestore([services[2]], { mode: 'exact', all: services }), ['--noflush']);
  } finally {
    await sandbox.teardown();
  }
});
