/**
 * kube-proxy's own config as `--config`: kubeadm's real kube-proxy ConfigMap
 * (test/fixtures/kube-proxy/kubeadm-configmap.yaml) with kubeadm's
 * DaemonSet flags starts the agent with kpr's defaults; every field kpr maps
 * reaches its setting; the fields that do not apply are named in one info
 * line; fields v1alpha1 does not have are decoded leniently, as kube-proxy
 * does (named in one warning line, the agent starts), while wrong types
 * are errors naming their path; `mode: nftables` makes NodePorts default to
 * the primary addresses; kube-proxy's file and kpr's are read together, kpr's
 * keys winning; and kube-proxy's flag spellings work on the agent.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import YAML from 'yaml';
import { AGENT_FLAGS, parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import {
  IGNORED_KUBE_PROXY_SETTINGS_MESSAGE,
  kubeProxyConfigLeaves,
  logIgnoredKubeProxySettings,
  logUnknownKubeProxyFields,
  mapsToFlag,
  UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE,
} from '../../agent/config/kube-proxy-config.js';
import { loadKubeConfig } from '../../agent/k8s/kubeconfig.js';
import { translateKubeProxyFlags } from '../../agent/config/kube-proxy-flags.js';
import { loggerTo } from '../../agent/log/log.js';
import { repoRoot } from '../support/paths.js';

const BASE = ['--cgroup-path', '/sys/fs/cgroup'];
const configMap = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));

function withDir<T>(files: Record<string, string>, fn: (dir: string) => T): T {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-kpconfig-'));
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const agent = (args: string[]) => parseAgentArgs([...BASE, ...args], {}) as AgentConfig;
const withConfig = <T>(text: string, fn: (file: string) => T): T => withDir({ 'config.conf': text }, (dir) => fn(path.join(dir, 'config.conf')));
const kubeProxyDoc = (fields: string) => `apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n${fields}`;

test("kubeadm's kube-proxy ConfigMap and DaemonSet flags: kpr's defaults, its kubeconfig, the node name; what is set and ignored is listed", () => {
  withDir({ 'config.conf': configMap.data['config.conf'], 'kubeconfig.conf': configMap.data['kubeconfig.conf'] }, (dir) => {
    // kubeadm's DaemonSet: kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)
    const cfg = agent([`--config=${path.join(dir, 'config.conf')}`, '--hostname-override=node-1']);
    const defaults = agent([]);
    assert.equal(cfg.nodeName, 'node-1');
    assert.equal(cfg.kubeconfig, '/var/lib/kube-proxy/kubeconfig.conf');
    for (const key of [
      'syncPeriodMs',
      'minSyncPeriodMs',
      'healthzBindAddress',
      'metricsBindAddress',
      'nodePortAddresses',
      'ctTcpTimeoutS',
      'ctTcpClosingTimeoutS',
      'ctUdpTimeoutS',
    ] as const) {
      assert.deepEqual(cfg[key], defaults[key], `${key}: zero values are the defaults`);
    }
    assert.deepEqual(cfg.ignoredKubeProxySettings, ['bindAddress', 'clusterCIDR']);
    // The ConfigMap's kubeconfig.conf (mounted beside config.conf) reads, and --k8s-service-host still overrides its server.
    const kc = loadKubeConfig({ kubeconfig: path.join(dir, 'kubeconfig.conf') });
    assert.equal(kc.getCurrentCluster()?.server, 'https://198.18.0.2:6443');
    assert.equal(
      loadKubeConfig({ kubeconfig: path.join(dir, 'kubeconfig.conf'), serviceHost: '2001:db8::2' }).getCurrentCluster()?.server,
      'https://[2001:db8::2]:6443',
    );
  });
});

test('every field kpr maps reaches its setting; the command line still wins', () => {
  const text = kubeProxyDoc(`clientConnection:
  kubeconfig: /etc/kubernetes/proxy.conf
hostnameOverride: worker-7
healthzBindAddress: 0.0.0.0
metricsBindAddress: "::1"
nodePortAddresses: [primary, 10.0.0.0/8]
iptables:
  syncPeriod: 1m30s
  minSyncPeriod: 300ms
conntrack:
  tcpEstablishedTimeout: 24h0m0s
  udpTimeout: 1m
`);
  withConfig(text, (file) => {
    const cfg = agent(['--config', file]);
    assert.equal(cfg.kubeconfig, '/etc/kubernetes/proxy.conf');
    assert.equal(cfg.nodeName, 'worker-7');
    assert.equal(cfg.healthzBindAddress, '0.0.0.0:10256', "kube-proxy's default port appended");
    assert.equal(cfg.metricsBindAddress, '[::1]:10249');
    assert.deepEqual(cfg.nodePortAddresses, ['primary', '10.0.0.0/8']);
    assert.equal(cfg.syncPeriodMs, 90_000);
    assert.equal(cfg.minSyncPeriodMs, 300);
    assert.equal(cfg.ctTcpTimeoutS, 86_400);
    assert.equal(cfg.ctUdpTimeoutS, 60);
    assert.deepEqual(cfg.ignoredKubeProxySettings, []);
    const over = agent(['--config', file, '--sync-period', '5s', '--node-name', 'from-flag', '--healthz-bind-address', '127.0.0.1:20256']);
    assert.deepEqual([over.syncPeriodMs, over.nodeName, over.healthzBindAddress, over.minSyncPeriodMs], [5000, 'from-flag', '127.0.0.1:20256', 300]);
  });
});

test("the sync periods are those of the section of `mode`, as kube-proxy's conversion reads them; the others are ignored", () => {
  const sections = 'iptables:\n  syncPeriod: 10s\nipvs:\n  syncPeriod: 20s\n  minSyncPeriod: 2s\nnftables:\n  syncPeriod: 40s\n';
  withConfig(kubeProxyDoc(`mode: ipvs\n${sections}`), (file) => {
    const cfg = agent(['--config', file]);
    assert.deepEqual([cfg.syncPeriodMs, cfg.minSyncPeriodMs], [20_000, 2000]);
    assert.deepEqual(cfg.ignoredKubeProxySettings, ['mode', 'iptables.syncPeriod', 'nftables.syncPeriod']);
  });
  withConfig(kubeProxyDoc(`mode: nftables\n${sections}`), (file) => assert.equal(agent(['--config', file]).syncPeriodMs, 40_000));
  withConfig(kubeProxyDoc(sections), (file) => assert.equal(agent(['--config', file]).syncPeriodMs, 10_000, 'no mode: iptables'));
});

test('nodePortAddresses keywords: "all" is every address, "localhost" (not served by kpr) is refused', () => {
  withConfig(kubeProxyDoc('nodePortAddresses: [all]\n'), (file) => assert.deepEqual(agent(['--config', file]).nodePortAddresses, ['0.0.0.0/0', '::/0']));
  withConfig(kubeProxyDoc('nodePortAddresses: [localhost, primary]\n'), (file) => {
    assert.throws(() => agent(['--config', file]), /nodePortAddresses: "localhost" \(NodePorts on loopback addresses\) is not served by kpr/);
  });
});

test('a field v1alpha1 does not have is decoded leniently, as kube-proxy does: the agent starts, one warning line names the fields', () => {
  // kubeadm's ConfigMap as a newer kube-proxy writes it, with fields this v1alpha1 does not have, at the top and in a section.
  const text = `${configMap.data['config.conf']}\nnewTopLevelField: {a: 1}\n`.replace('conntrack:\n', 'conntrack:\n  tcpSynTimeout: 1m\n');
  withConfig(text, (file) => {
    const cfg = agent([`--config=${file}`, '--hostname-override=node-1']);
    assert.equal(cfg.nodeName, 'node-1');
    assert.equal(cfg.kubeconfig, '/var/lib/kube-proxy/kubeconfig.conf', 'the known fields still apply');
    assert.deepEqual(cfg.unknownKubeProxyFields, [{ file, fields: ['conntrack.tcpSynTimeout', 'newTopLevelField'] }]);
    assert.deepEqual(cfg.ignoredKubeProxySettings, ['bindAddress', 'clusterCIDR'], 'unknown fields are not among the ignored ones');
    const stream = new PassThrough();
    const lines: string[] = [];
    stream.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
    const log = loggerTo(stream, 'info');
    logUnknownKubeProxyFields(cfg.unknownKubeProxyFields, log);
    logUnknownKubeProxyFields(agent([]).unknownKubeProxyFields, log);
    assert.equal(lines.length, 1);
    const line = JSON.parse(lines[0]);
    assert.deepEqual(
      [line.level, line.msg, line.file, line.fields],
      [40, UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE, file, 'conntrack.tcpSynTimeout, newTopLevelField'],
    );
  });
  withConfig(kubeProxyDoc('hostnameOverrid: n1\n'), (file) => {
    assert.deepEqual(agent(['--config', file]).unknownKubeProxyFields, [{ file, fields: ['hostnameOverrid'] }], 'a typo is named, not applied');
  });
});

test('a value of the wrong type for a known field stays an error naming its path and the file', () => {
  const cases: Array<[string, RegExp]> = [
    ['iptables:\n  syncPeriod: 30\n', /iptables\.syncPeriod: expected a duration string such as 30s or 24h0m0s, not 30/],
    ['iptables:\n  syncPeriod: 1d\n', /iptables\.syncPeriod: time: unknown unit "d" in duration "1d"/],
    ['conntrack:\n  udpTimeout: -5s\n', /conntrack\.udpTimeout: "-5s" is negative/],
    ['conntrack:\n  maxPerCore: lots\n  tcpSynTimeout: 1m\n', /conntrack\.maxPerCore: expected an integer, not "lots"/],
    ['nodePortAddresses: 10.0.0.0/8\n', /nodePortAddresses: expected a list of strings/],
    ['featureGates:\n  Foo: "yes"\n', /featureGates: expected a mapping of names to true\/false/],
    ['ipvs: fast\n', /ipvs: expected a mapping, not "fast"/],
  ];
  for (const [fields, want] of cases) {
    withConfig(kubeProxyDoc(fields), (file) => {
      assert.throws(
        () => agent(['--config', file]),
        (err: Error) => err.message.startsWith(`${file}: `) && want.test(err.message),
        fields,
      );
    });
  }
  withConfig('apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n', (file) => {
    assert.throws(
      () => agent(['--config', file]),
      /apiVersion "kubeproxy\.config\.k8s\.io\/v1beta1" is not supported \(kpr reads kubeproxy\.config\.k8s\.io\/v1alpha1\)/,
    );
  });
});

test("mode nftables: NodePorts default to the primary addresses, as kube-proxy's nftables mode; iptables, ipvs and unset keep every address", () => {
  withConfig(kubeProxyDoc('mode: nftables\n'), (file) => {
    assert.deepEqual(agent(['--config', file]).nodePortAddresses, ['primary']);
    assert.deepEqual(agent(['--config', file, '--node-port-addresses', '10.0.0.0/8']).nodePortAddresses, ['10.0.0.0/8'], 'given addresses stay');
    assert.deepEqual(agent(['--config', file, '--proxy-mode', 'iptables']).nodePortAddresses, [], 'the command line mode wins');
  });
  withConfig(kubeProxyDoc('mode: nftables\nnodePortAddresses: [all]\n'), (file) =>
    assert.deepEqual(agent(['--config', file]).nodePortAddresses, ['0.0.0.0/0', '::/0']),
  );
  for (const mode of ['iptables', 'ipvs', '""']) {
    withConfig(kubeProxyDoc(`mode: ${mode}\n`), (file) => assert.deepEqual(agent(['--config', file]).nodePortAddresses, [], mode));
  }
  assert.deepEqual(agent(['--proxy-mode=nftables']).nodePortAddresses, ['primary'], "kube-proxy's --proxy-mode flag");
});

test("kube-proxy's config file and kpr's together (--config twice, either order): kpr's keys win, the command line wins over both", () => {
  const kubeProxy = kubeProxyDoc('hostnameOverride: from-kube-proxy\nmetricsBindAddress: 0.0.0.0:10249\niptables:\n  syncPeriod: 1m\n  minSyncPeriod: 2s\n');
  withDir({ 'config.conf': kubeProxy, 'kpr.yaml': 'sync-period: 45s\nhealthz-bind-address: 0.0.0.0:10256\n' }, (dir) => {
    const kp = path.join(dir, 'config.conf');
    const kpr = path.join(dir, 'kpr.yaml');
    for (const order of [
      [kp, kpr],
      [kpr, kp],
    ]) {
      const cfg = agent([...order.map((f) => `--config=${f}`), '--min-sync-period=3s']);
      assert.deepEqual(
        [cfg.nodeName, cfg.metricsBindAddress, cfg.syncPeriodMs, cfg.minSyncPeriodMs, cfg.healthzBindAddress],
        ['from-kube-proxy', '0.0.0.0:10249', 45_000, 3000, '0.0.0.0:10256'],
      );
    }
  });
});

test('ignored settings, flags and file fields, are named in one info line; none, no line', () => {
  const text = kubeProxyDoc(
    'mode: nftables\nclusterCIDR: 10.244.0.0/16\nfeatureGates:\n  NFTablesProxyMode: true\nconntrack:\n  maxPerCore: 0\n  tcpCloseWaitTimeout: 1h\niptables:\n  masqueradeAll: true\nlogging:\n  verbosity: 2\n',
  );
  withConfig(text, (file) => {
    const cfg = agent(['--config', file, '--cluster-cidr', '10.244.0.0/16', '--proxy-mode=nftables', '--masquerade-all', '--proxy-mode', 'ipvs']);
    // Flags first, each once; then the file's fields in file order.
    assert.deepEqual(cfg.ignoredKubeProxySettings, [
      '--cluster-cidr',
      '--proxy-mode',
      '--masquerade-all',
      'mode',
      'clusterCIDR',
      'featureGates',
      'conntrack.tcpCloseWaitTimeout',
      'iptables.masqueradeAll',
      'logging',
    ]);
    const stream = new PassThrough();
    const lines: string[] = [];
    stream.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
    const log = loggerTo(stream, 'info');
    logIgnoredKubeProxySettings(cfg.ignoredKubeProxySettings, log);
    logIgnoredKubeProxySettings(agent([]).ignoredKubeProxySettings, log);
    assert.equal(lines.length, 1);
    const line = JSON.parse(lines[0]);
    assert.equal(line.msg, IGNORED_KUBE_PROXY_SETTINGS_MESSAGE);
    assert.equal(line.level, 30);
    assert.equal(
      line.settings,
      '--cluster-cidr, --proxy-mode, --masquerade-all, mode, clusterCIDR, featureGates, conntrack.tcpCloseWaitTimeout, iptables.masqueradeAll, logging',
    );
  });
});

test("kube-proxy's flag spellings: aliases of kpr's flags, ignored ones dropped with their value, refused ones explained", () => {
  const cfg = agent([
    '--hostname-override',
    'n1',
    '--nodeport-addresses',
    '10.0.0.0/8',
    '--nodeport-addresses=primary',
    '--conntrack-tcp-timeout-established=2h',
    '--conntrack-udp-timeout',
    '45s',
    '--iptables-sync-period',
    '1m',
    '--iptables-min-sync-period=1s',
    '--kubeconfig',
    '/k.conf',
    '--healthz-bind-address',
    '0.0.0.0:10256',
    '--v=2',
    '--oom-score-adj',
    '-999',
    '--bind-address-hard-fail',
  ]);
  assert.deepEqual(
    [cfg.nodeName, cfg.nodePortAddresses, cfg.ctTcpTimeoutS, cfg.ctUdpTimeoutS, cfg.syncPeriodMs, cfg.minSyncPeriodMs, cfg.kubeconfig, cfg.logLevel],
    ['n1', ['10.0.0.0/8', 'primary'], 7200, 45, 60_000, 1000, '/k.conf', 'debug'],
  );
  assert.deepEqual(cfg.ignoredKubeProxySettings, ['--oom-score-adj', '--bind-address-hard-fail']);
  // conntrack.maxPerCore/min map to kpr's --conntrack-max-per-core/--conntrack-min where the agent has them, else are ignored.
  withConfig(kubeProxyDoc('conntrack:\n  maxPerCore: 65536\n  min: 0\n'), (file) => {
    assert.deepEqual(agent(['--config', file]).ignoredKubeProxySettings, Object.hasOwn(AGENT_FLAGS, 'conntrack-max-per-core') ? [] : ['conntrack.maxPerCore']);
  });
  // A value of one of kpr's flags is never read as a kube-proxy flag.
  assert.equal(agent(['--node-name=--cluster-cidr']).nodeName, '--cluster-cidr');
  assert.equal(agent(['--external-interfaces', 'eth0', '--pod-interfaces', 'veth*']).ignoredKubeProxySettings.length, 0);
  assert.throws(
    () => agent(['--master', 'https://198.18.0.2:6443']),
    /--master: kpr-agent has no --master: use --k8s-service-host\/--k8s-service-port or --kubeconfig/,
  );
  assert.throws(() => agent(['--cleanup']), /run `kpr cleanup-kube-proxy`/);
  assert.throws(() => agent(['--masquerade-all=yes']), /--masquerade-all \(a kube-proxy flag\) is true or false, not "yes"/);
  assert.throws(() => agent(['--cluster-cidr']), /--cluster-cidr \(a kube-proxy flag\) needs a value/);
  assert.throws(() => agent(['--no-such-flag']), /Unknown option '--no-such-flag'/);
});

test("docs/configuration.md's kube-proxy config table lists every v1alpha1 field with what kpr does with it", () => {
  const readme = readFileSync(path.join(repoRoot, 'docs', 'configuration.md'), 'utf8');
  for (const [field, leaf] of kubeProxyConfigLeaves()) {
    const row = readme.split('\n').find(
      (l) =>
        l.startsWith('| ') &&
        l
          .split('|')[1]
          .split(',')
          .map((c) => c.trim())
          .includes(`\`${field}\``),
    );
    assert.ok(row, `docs/configuration.md has a row for ${field}`);
    // A field whose flag the agent has maps to it (conntrack.maxPerCore/min: once the agent has --conntrack-max-per-core/--conntrack-min).
    if (mapsToFlag(leaf, (f) => Object.hasOwn(AGENT_FLAGS, f.slice(2)))) assert.ok(row.includes(`\`${leaf.flag}\``), `${field} → ${leaf.flag}: ${row}`);
    else assert.match(row, /ignored/, `${field} is ignored`);
  }
});

test("a kube-proxy flag kpr has itself (as --conntrack-min with run-time map sizes) is kpr's, not dropped", () => {
  const kpr = (has: string[]) => (name: string) => (has.includes(name) ? 'value' : undefined) as 'value' | undefined;
  const argv = ['--conntrack-min', '131072', '--conntrack-max-per-core=0', '--cluster-cidr', '10.244.0.0/16'];
  assert.deepEqual(translateKubeProxyFlags(argv, kpr([])), { argv: [], ignored: ['--conntrack-min', '--conntrack-max-per-core', '--cluster-cidr'] });
  assert.deepEqual(translateKubeProxyFlags(argv, kpr(['conntrack-min', 'conntrack-max-per-core'])), {
    argv: ['--conntrack-min', '131072', '--conntrack-max-per-core=0'],
    ignored: ['--cluster-cidr'],
  });
  assert.deepEqual(translateKubeProxyFlags(['--node-name', 'a', '--', '--hostname-override', 'b'], kpr(['node-name'])).argv, [
    '--node-name',
    'a',
    '--',
    '--hostname-override',
    'b',
  ]);
});
