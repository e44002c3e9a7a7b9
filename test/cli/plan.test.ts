/**
 * `kpr plan` through the real bin/kpr (no root, no BPF): manifests from
 * test/fixtures/plan/ (a directory with multi-document YAML, a JSON List, a
 * second Node and objects kpr does not use), JSON compared whole, the table
 * readable, and unparseable input an error naming the file; hostile input
 * (alias bombs, FIFOs, devices, oversize files, deep nesting, symlink loops)
 * fails fast, naming the file and the limit.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import YAML from 'yaml';
import { cliBin, repoRoot } from '../support/paths.js';

const run = promisify(execFile);
const fixtures = path.join(repoRoot, 'test', 'fixtures', 'plan');

async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(cliBin, args, { cwd: repoRoot, timeout: 60_000, maxBuffer: 16 << 20 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const be = (address: string, port: number) => ({ address, port });
const fe = (
  service: string,
  portName: string,
  type: string,
  address: string,
  port: number,
  backends: Array<{ address: string; port: number }>,
  extra: Record<string, unknown> = {},
) => ({
  service,
  portName,
  type,
  address,
  port,
  protocol: 'TCP',
  backends,
  trafficPolicy: 'Cluster',
  affinityTimeoutSeconds: 0,
  sourceRanges: [],
  ...extra,
});

describe('kpr plan', () => {
  it('-o json: every frontend node-1 would program, and every object it skipped', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), {
      node: 'node-1',
      frontends: [
        fe('shop/api', 'http', 'ClusterIP', '10.96.0.20', 80, [be('10.0.2.1', 9090), be('10.0.2.2', 9090)]),
        // eTP=Local: outside traffic to the local endpoint only, in-node callers to all (rule 25 of docs/semantics.md).
        {
          ...fe('shop/api', 'http', 'NodePort', '192.168.1.10', 30080, [be('10.0.2.1', 9090)], { trafficPolicy: 'Local' }),
          internalBackends: [be('10.0.2.1', 9090), be('10.0.2.2', 9090)],
        },
        fe('shop/lb', 'https', 'ClusterIP', '10.96.0.30', 443, [be('10.0.3.1', 8443)]),
        // ipMode Proxy ingress skipped (rule 8 of docs/semantics.md); source ranges on the LB VIP (rule 28 of docs/semantics.md).
        fe('shop/lb', 'https', 'LoadBalancer', '203.0.113.7', 443, [be('10.0.3.1', 8443)], { sourceRanges: ['198.51.100.0/24'] }),
        // Ready endpoints only while there are some; affinity from the Service (rules 8, 19 of docs/semantics.md).
        fe('shop/web', 'http', 'ClusterIP', '10.96.0.10', 80, [be('10.0.1.1', 8080), be('10.0.1.2', 8080)], { affinityTimeoutSeconds: 600 }),
      ],
      skipped: [
        { object: 'Node node-2', reason: 'another node (planning for "node-1")' },
        { object: 'ConfigMap shop/settings', reason: 'kind "ConfigMap" is not used by kpr plan' },
        { object: 'EndpointSlice shop/orphan-abc', reason: 'no kubernetes.io/service-name label: not keyed to a Service (rule 6 of docs/semantics.md)' },
        { object: 'Service shop/db', reason: 'headless (no clusterIP) is not proxied' },
      ],
    });
  });

  it('another node sees other local endpoints: node-2 gets eTP=Local NodePorts on its own address', async () => {
    const r = await kpr(
      'plan',
      '--node',
      'node-2',
      '-f',
      path.join(fixtures, 'cluster', 'node.yaml'),
      '-f',
      path.join(fixtures, 'cluster', 'services.yaml'),
      '-f',
      path.join(fixtures, 'cluster', 'slices.json'),
      '-o',
      'json',
    );
    assert.equal(r.code, 0, r.stderr);
    const np = JSON.parse(r.stdout).frontends.find((f: { type: string }) => f.type === 'NodePort');
    assert.deepEqual([np.address, np.backends, np.internalBackends], ['192.168.1.20', [be('10.0.2.2', 9090)], [be('10.0.2.1', 9090), be('10.0.2.2', 9090)]]);
  });

  it('--node-port-addresses filters the node addresses NodePorts answer on', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-o', 'json', '--node-port-addresses', '10.0.0.0/8');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.frontends.filter((f: { type: string }) => f.type === 'NodePort').length, 0);
    assert.ok(out.skipped.some((s: { reason: string }) => /NodePorts: node "node-1" has no IPv4 address/.test(s.reason)));
  });

  it('table output: one readable line per frontend, then the skipped objects', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'));
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split('\n');
    assert.equal(lines[0], 'node node-1: 5 frontends');
    assert.match(lines[1], /^SERVICE\s+PORT\s+TYPE\s+FRONTEND\s+PROTO\s+POLICY\s+AFFINITY\s+BACKENDS$/);
    assert.match(
      r.stdout,
      /shop\/api\s+http\s+NodePort\s+192\.168\.1\.10:30080\s+TCP\s+Local\s+-\s+10\.0\.2\.1:9090 in-node: 10\.0\.2\.1:9090,10\.0\.2\.2:9090/,
    );
    assert.match(r.stdout, /shop\/web\s+http\s+ClusterIP\s+10\.96\.0\.10:80\s+TCP\s+Cluster\s+600s\s+10\.0\.1\.1:8080,10\.0\.1\.2:8080/);
    assert.match(r.stdout, /\nskipped:\n {2}Node node-2: another node/);
  });

  it('a file that is not valid YAML is an error naming the file (non-zero exit)', async () => {
    const bad = path.join(fixtures, 'bad', 'broken.yaml');
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-f', bad, '-o', 'json');
    assert.notEqual(r.code, 0);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: invalid YAML/JSON: .*line 6`));
  });

  it('a missing path is an error naming it', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'nope.yaml'));
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /nope\.yaml: no such file or directory/);
  });

  it('documents that are not objects, and Services without a name, are skipped with a reason', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(path.join(dir, 'odd.yaml'), '42\n---\n- a\n- b\n---\nkind: Service\nmetadata: {}\n---\n');
    const r = await kpr('plan', '--node', 'n', '-f', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual(out.frontends, []);
    assert.deepEqual(
      out.skipped.map((s: { reason: string }) => s.reason),
      ['not a Kubernetes object (number)', 'not a Kubernetes object (a list)', 'no metadata.name'],
    );
  });

  it('an SCTP port is planned like a TCP one: ClusterIP and NodePort frontends, nothing skipped (rule 39 of docs/semantics.md)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(
      path.join(dir, 'sctp.yaml'),
      [
        'apiVersion: v1\nkind: Service\nmetadata: {name: sig, namespace: default}',
        'spec: {type: NodePort, clusterIP: 198.19.0.40, ports: [{name: sctp, port: 2105, targetPort: 9132, protocol: SCTP, nodePort: 30105}]}',
        '---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: sig-a, namespace: default, labels: {kubernetes.io/service-name: sig}}',
        'addressType: IPv4\nports: [{name: sctp, port: 9132, protocol: SCTP}]\nendpoints: [{addresses: [198.18.10.10], conditions: {ready: true}}]',
        '---\napiVersion: v1\nkind: Node\nmetadata: {name: node-1}\nstatus: {addresses: [{type: InternalIP, address: 198.18.1.1}]}\n',
      ].join('\n'),
    );
    const r = await kpr('plan', '--node', 'node-1', '-f', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual(
      out.frontends.map((f: { type: string; address: string; port: number; protocol: string; backends: unknown[] }) => [
        f.type,
        f.address,
        f.port,
        f.protocol,
        f.backends,
      ]),
      [
        ['ClusterIP', '198.19.0.40', 2105, 'SCTP', [be('198.18.10.10', 9132)]],
        ['NodePort', '198.18.1.1', 30105, 'SCTP', [be('198.18.10.10', 9132)]],
      ],
    );
    assert.deepEqual(out.skipped, []);
  });

  it('--node is required', async () => {
    const r = await kpr('plan', '-f', fixtures);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--node NAME is required/);
  });

  describe('hostile input fails fast, naming the file', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-hostile-'));
    const file = (name: string, text: string) => {
      const p = path.join(dir, name);
      writeFileSync(p, text);
      return p;
    };
    const expectError = async (p: string, re: RegExp) => {
      const r = await kpr('plan', '--node', 'node-1', '-f', p, '-o', 'json');
      assert.notEqual(r.code, 0, r.stdout);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, re);
    };
    const esc = (p: string) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

    it('an alias bomb (billion laughs) is refused at 100 alias expansions', { timeout: 60_000 }, async () => {
      const bomb = file(
        'bomb.yaml',
        [
          'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
          ...'bcdefghi'.split('').map((c, i) => `${c}: &${c} [${Array(9).fill(`*${'abcdefghi'[i]}`).join(',')}]`),
          '',
        ].join('\n'),
      );
      await expectError(bomb, new RegExp(`${esc(bomb)}: invalid YAML/JSON: aliases expand beyond the limit of 100`));
      const cycle = file('cycle.yaml', '&x {kind: List, items: [*x]}\n');
      await expectError(cycle, new RegExp(`${esc(cycle)}: invalid YAML/JSON: alias \\*x at line 1, column 25 refers to a node that contains it`));
    });

    it(
      'a FIFO or /dev/zero given as a file, or a FIFO named *.yaml in a directory, is refused; other FIFOs in a directory are ignored',
      { timeout: 60_000 },
      async () => {
        const fifo = path.join(dir, 'pipe.yaml');
        execFileSync('mkfifo', [fifo]);
        await expectError(fifo, new RegExp(`${esc(fifo)}: cannot read: not a regular file \\(a FIFO\\)`));
        await expectError('/dev/zero', /\/dev\/zero: cannot read: not a regular file \(a character device\)/);
        const sub = mkdtempSync(path.join(dir, 'fifo-dir-'));
        writeFileSync(
          path.join(sub, 'svc.yaml'),
          'apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n',
        );
        execFileSync('mkfifo', [path.join(sub, 'notes')]);
        const ok = await kpr('plan', '--node', 'node-1', '-f', sub, '-o', 'json');
        assert.equal(ok.code, 0, ok.stderr);
        assert.deepEqual(
          JSON.parse(ok.stdout).frontends.map((f: { address: string }) => f.address),
          ['10.96.0.1'],
        );
        execFileSync('mkfifo', [path.join(sub, 'z.yml')]);
        await expectError(sub, new RegExp(`${esc(path.join(sub, 'z.yml'))}: cannot read: not a regular file \\(a FIFO\\)`));
      },
    );

    it('a file over 64 MiB is refused naming the limit (a sparse file: nothing is read)', async () => {
      const big = file('big.json', '');
      truncateSync(big, 64 * 1024 * 1024 + 1);
      await expectError(big, new RegExp(`${esc(big)}: cannot read: too large: 67108865 bytes, the limit is 64 MiB`));
    });

    it('nesting beyond 256 levels, in YAML or JSON, is an error naming the file and line, not a stack overflow', { timeout: 60_000 }, async () => {
      const yamlDeep = file('deep.yaml', `kind: Service\nspec: ${'['.repeat(100_000)}${']'.repeat(100_000)}\n`);
      await expectError(yamlDeep, new RegExp(`${esc(yamlDeep)}: invalid YAML/JSON: nesting deeper than the limit of 256 levels at line 2, column \\d+`));
      const jsonDeep = file('deep.json', `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`);
      await expectError(jsonDeep, new RegExp(`${esc(jsonDeep)}: invalid YAML/JSON: nesting deeper than the limit of 256 levels at line 1, column 1281`));
      const blockDeep = file('block.yaml', Array.from({ length: 300 }, (_, i) => `${' '.repeat(i)}a:`).join('\n'));
      await expectError(blockDeep, new RegExp(`${esc(blockDeep)}: invalid YAML/JSON: nesting deeper than the limit of 256 levels at line 257`));
      const viaAlias = file('alias-deep.yaml', `a: &a ${'['.repeat(200)}${']'.repeat(200)}\nb: ${'['.repeat(100)}*a${']'.repeat(100)}\n`);
      await expectError(viaAlias, new RegExp(`${esc(viaAlias)}: invalid YAML/JSON: nesting deeper than the limit of 256 levels \\(with aliases expanded\\)`));
    });

    it('a directory symlink loop is walked once', { timeout: 60_000 }, async () => {
      const sub = mkdtempSync(path.join(dir, 'loop-'));
      writeFileSync(
        path.join(sub, 'svc.yaml'),
        'apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n',
      );
      symlinkSync('.', path.join(sub, 'again'));
      const r = await kpr('plan', '--node', 'node-1', '-f', sub, '-o', 'json');
      assert.equal(r.code, 0, r.stderr);
      assert.equal(JSON.parse(r.stdout).frontends.length, 1);
    });

    it('JSON and YAML of the same objects plan the same (JSON goes through JSON.parse, YAML through the YAML parser)', async () => {
      const objs = [
        { apiVersion: 'v1', kind: 'Service', metadata: { name: 'a', namespace: 'x' }, spec: { clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80 }] } },
        {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: { name: 'a-1', namespace: 'x', labels: { 'kubernetes.io/service-name': 'a' } },
          addressType: 'IPv4',
          ports: [{ name: 'http', port: 8080 }],
          endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: true } }],
        },
      ];
      const asJson = file('same.json', JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs }, null, '\t'));
      const asYaml = file('same.yaml', objs.map((o) => JSON.stringify(o)).join('\n---\n'));
      const a = await kpr('plan', '--node', 'node-1', '-f', asJson, '-o', 'json');
      const b = await kpr('plan', '--node', 'node-1', '-f', asYaml, '-o', 'json');
      assert.equal(a.code, 0, a.stderr);
      assert.equal(a.stdout, b.stdout);
      assert.deepEqual(JSON.parse(a.stdout).frontends[0].backends, [be('10.0.0.1', 8080)]);
    });

    after(() => rmSync(dir, { recursive: true, force: true }));
  });
});

describe("kpr plan: the agent's settings, under the agent's names and from the agent's --config", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-config-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string) => {
    const p = path.join(dir, name);
    writeFileSync(p, text);
    return p;
  };
  // A LoadBalancer with source ranges and a NodePort, and an externalIP outside 203.0.113.0/24.
  const manifests = write(
    'lb.yaml',
    [
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'node-1' },
        status: {
          addresses: [
            { type: 'InternalIP', address: '192.168.1.10' },
            { type: 'ExternalIP', address: '198.51.100.10' },
          ],
        },
      },
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'lb', namespace: 'x' },
        spec: {
          type: 'LoadBalancer',
          clusterIP: '10.96.0.5',
          externalIPs: ['192.0.2.9'],
          loadBalancerSourceRanges: ['198.18.0.0/15'],
          ports: [{ name: 'https', port: 443, nodePort: 30443 }],
        },
        status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } },
      },
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: 'lb-1', namespace: 'x', labels: { 'kubernetes.io/service-name': 'lb' } },
        addressType: 'IPv4',
        ports: [{ name: 'https', port: 8443 }],
        endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: true } }],
      },
    ]
      .map((o) => JSON.stringify(o))
      .join('\n---\n'),
  );
  type Frontend = { type: string; address: string; sourceRanges: string[] };
  const plan = async (...args: string[]) => {
    const r = await kpr('plan', '-f', manifests, '-o', 'json', ...args);
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as { node: string; frontends: Frontend[] };
  };
  const summary = (p: { frontends: Frontend[] }) => p.frontends.map((f) => `${f.type} ${f.address} ${f.sourceRanges.join(',') || '-'}`);

  it("--source-ranges-all-external is the agent's spelling; --source-ranges-for-all-external still works and means the same", async () => {
    const off = summary(await plan('--node', 'node-1'));
    const on = summary(await plan('--node', 'node-1', '--source-ranges-all-external'));
    assert.deepEqual(on, summary(await plan('--node', 'node-1', '--source-ranges-for-all-external')));
    assert.ok(off.includes('NodePort 192.168.1.10 -'));
    assert.ok(on.includes('NodePort 192.168.1.10 198.18.0.0/15'));
    assert.notDeepEqual(on, off);
  });

  it("--config: the agent's kpr config file gives node-name, node-port-addresses, external-ip-cidrs and source-ranges-all-external; flags win", async () => {
    const config = write(
      'kpr.yaml',
      'node-name: node-1\nnode-port-addresses: 198.51.100.0/24\nexternal-ip-cidrs: 203.0.113.0/24\nsource-ranges-all-external: true\nsync-period: 1m30s\n',
    );
    const fromFile = await plan('--config', config);
    assert.equal(fromFile.node, 'node-1');
    assert.deepEqual(
      summary(fromFile),
      summary(
        await plan('--node', 'node-1', '--node-port-addresses', '198.51.100.0/24', '--external-ip-cidrs', '203.0.113.0/24', '--source-ranges-all-external'),
      ),
    );
    assert.ok(summary(fromFile).includes('NodePort 198.51.100.10 198.18.0.0/15'));
    assert.ok(!summary(fromFile).some((f) => f.includes('192.0.2.9')), 'externalIP outside --external-ip-cidrs');
    const overridden = await plan('--config', config, '--node-port-addresses', '192.168.1.0/24', '--node', 'node-1');
    assert.ok(summary(overridden).includes('NodePort 192.168.1.10 198.18.0.0/15'));
  });

  it("--config: a KubeProxyConfiguration with kube-proxy's --hostname-override, as kubeadm runs kube-proxy", async () => {
    const config = write(
      'config.conf',
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nclusterCIDR: 10.244.0.0/16\nnodePortAddresses: [198.51.100.0/24]\n',
    );
    const p = await plan('--config', config, '--hostname-override', 'node-1');
    assert.equal(p.node, 'node-1');
    assert.deepEqual(
      p.frontends.filter((f) => f.type === 'NodePort').map((f) => f.address),
      ['198.51.100.10'],
    );
    const bad = await kpr(
      'plan',
      '-f',
      manifests,
      '--config',
      write('bad.conf', 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nconntrack:\n  tcpEstablishedTimeout: 1\n'),
    );
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /conntrack\.tcpEstablishedTimeout: expected a duration string/);
  });

  it("--config: kubeadm's real config.conf with a field v1alpha1 lacks plans (exit 0) and warns on stderr naming it", async () => {
    const cm = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));
    const config = write('newer.conf', `${cm.data['config.conf']}\nnewKubeProxyField: true\n`.replace('conntrack:\n', 'conntrack:\n  tcpSynTimeout: 1m\n'));
    const r = await kpr('plan', '-f', manifests, '-o', 'json', '--config', config, '--hostname-override=node-1');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).node, 'node-1');
    assert.equal(
      r.stderr,
      `kpr: warning: ${config}: kube-proxy config fields not in kubeproxy.config.k8s.io/v1alpha1, ignored (lenient decoding, as kube-proxy): conntrack.tcpSynTimeout, newKubeProxyField\n`,
    );
  });

  it("--config with mode nftables and no nodePortAddresses: NodePorts on the primary (InternalIP) addresses only, not the ExternalIP, as kube-proxy's nftables mode", async () => {
    const nodePorts = (p: { frontends: Frontend[] }) => p.frontends.filter((f) => f.type === 'NodePort').map((f) => f.address);
    const doc = (mode: string) =>
      write(
        `${mode || 'unset'}.conf`,
        `apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: "${mode}"\nnodePortAddresses: null\n`,
      );
    assert.deepEqual(nodePorts(await plan('--config', doc('nftables'), '--node', 'node-1')), ['192.168.1.10']);
    for (const mode of ['iptables', 'ipvs', ''])
      assert.deepEqual(nodePorts(await plan('--config', doc(mode), '--node', 'node-1')), ['192.168.1.10', '198.51.100.10'], mode || 'unset');
    assert.deepEqual(
      nodePorts(await plan('--config', doc('nftables'), '--node', 'node-1', '--node-port-addresses', '198.51.100.0/24')),
      ['198.51.100.10'],
      'given addresses stay',
    );
    assert.deepEqual(nodePorts(await plan('--node', 'node-1', '--proxy-mode', 'nftables')), ['192.168.1.10'], "kube-proxy's --proxy-mode");
  });
});

describe("kpr plan: the agent's validation, ownership rules and limits (the reconciler's first sync, in memory)", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-admission-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const svc = (ns: string, name: string, clusterIP: string, spec: Record<string, unknown> = {}, created?: string) => ({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns, ...(created ? { creationTimestamp: created } : {}) },
    spec: { clusterIP, clusterIPs: [clusterIP], ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }], ...spec },
  });
  const slice = (ns: string, svcName: string, ips: string[]) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${svcName}-1`.slice(-63), namespace: ns, labels: { 'kubernetes.io/service-name': svcName } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
  });
  const write = (name: string, objs: object[]) => {
    const p = path.join(dir, name);
    writeFileSync(p, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs }));
    return p;
  };
  const plan = async (file: string, ...args: string[]) => {
    const r = await kpr('plan', '--node', 'node-1', '-f', file, '-o', 'json', ...args);
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as {
      frontends: Array<{ service: string; type: string; address: string; backends: unknown[] }>;
      skipped: Array<{ object: string; reason: string }>;
    };
  };
  const rows = (p: Awaited<ReturnType<typeof plan>>) => p.frontends.map((f) => `${f.service} ${f.type} ${f.address}`);

  it("an externalIP that is another Service's ClusterIP is skipped as the agent refuses it (CVE-2020-8554), the rest programmed", async () => {
    const p = await plan(write('own.json', [svc('x', 'a', '198.19.0.10'), svc('x', 'b', '198.19.0.11', { externalIPs: ['198.19.0.10', '198.19.100.1'] })]));
    assert.deepEqual(rows(p), ['x/a ClusterIP 198.19.0.10', 'x/b ClusterIP 198.19.0.11', 'x/b ExternalIP 198.19.100.1']);
    assert.deepEqual(p.skipped, [
      {
        object: 'Service x/b',
        reason: 'ExternalIP frontend 198.19.0.10:80/TCP is not programmed: its address is the ClusterIP of Service x/a, which owns the address on every port',
      },
    ]);
  });

  it('two LoadBalancers on one address: the older owns it, by creationTimestamp, whatever the key order', async () => {
    const lb = (name: string, ip: string, nodePort: number, created: string) => ({
      ...svc('x', name, ip, { type: 'LoadBalancer', ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP', nodePort }] }, created),
      status: { loadBalancer: { ingress: [{ ip: '198.19.200.1' }] } },
    });
    const p = await plan(
      write('lb.json', [lb('a-young', '198.19.0.20', 30020, '2026-02-01T00:00:00Z'), lb('b-old', '198.19.0.21', 30021, '2026-01-01T00:00:00Z')]),
    );
    assert.deepEqual(
      rows(p).filter((r) => r.includes('LoadBalancer')),
      ['x/b-old LoadBalancer 198.19.200.1'],
    );
    assert.ok(
      p.skipped.some((s) => s.object === 'Service x/a-young' && /LoadBalancer frontend 198\.19\.200\.1:80\/TCP/.test(s.reason)),
      JSON.stringify(p.skipped),
    );
  });

  it("a Service over a limit is skipped with the agent's reason, at the agent's --map-size-* (and kept at the defaults)", async () => {
    const ips = Array.from({ length: 30 }, (_, i) => `198.18.0.${i + 1}`);
    const file = write('big.json', [
      svc('a', 'small', '198.19.0.30'),
      slice('a', 'small', ips.slice(0, 2)),
      svc('z', 'big', '198.19.0.31'),
      slice('z', 'big', ips),
    ]);
    const small = await plan(file, '--map-size-services', '20', '--map-size-frontends', '8');
    assert.deepEqual(rows(small), ['a/small ClusterIP 198.19.0.30']);
    assert.deepEqual(small.skipped, [
      { object: 'Service z/big', reason: 'not programmed: over the limit of 20 kpr_svc entries (max_entries): needs 31 more, 17 free' },
    ]);
    assert.deepEqual(rows(await plan(file)), ['a/small ClusterIP 198.19.0.30', 'z/big ClusterIP 198.19.0.31']);
    const bad = await kpr('plan', '--node', 'node-1', '-f', file, '--map-size-services', 'lots');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /invalid --map-size-services "lots"/);
  });

  it("an object the agent's validation rejects is skipped as invalid, not planned", async () => {
    const p = await plan(
      write('invalid.json', [
        svc('x', 'ok', '198.19.0.40'),
        svc('x', 'bad', '198.19.0.41', { externalIPs: ['198.19.0.400'] }),
        svc('x', 'Bad_Name', '198.19.0.42'),
      ]),
    );
    assert.deepEqual(rows(p), ['x/ok ClusterIP 198.19.0.40']);
    assert.deepEqual(p.skipped.map((s) => s.object).sort(), ['Service x/Bad_Name', 'Service x/bad']);
    assert.ok(
      p.skipped.every((s) => /^invalid: \S+: .* \(the agent ignores the object\)$/.test(s.reason)),
      JSON.stringify(p.skipped),
    );
  });

  it("names at Kubernetes' limits, differing only at the end, are two Services", async () => {
    const ns = `ns-${'x'.repeat(60)}`;
    const names = ['a', 'b'].map((c) => `web-${'x'.repeat(58)}${c}`);
    const p = await plan(
      write(
        'long.json',
        names.map((n, i) => svc(ns, n, `198.19.0.${50 + i}`)),
      ),
    );
    assert.deepEqual(
      rows(p),
      names.map((n, i) => `${ns}/${n} ClusterIP 198.19.0.${50 + i}`),
    );
  });
});
