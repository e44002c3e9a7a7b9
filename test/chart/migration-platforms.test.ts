/**
 * docs/platforms.md's node-by-node walks on EKS and k3s, forth and back, the
 * commands as written there, the way migration.test.ts runs kubeadm's:
 * kubectl commands that change objects run with the real kubectl on them
 * (`--local`), helm install/upgrade render charts/kpr with the real helm and
 * the page's values file, and after every command a node-affinity evaluator
 * (test/support/node-placement.ts, taints included) says which Service
 * proxies each node runs. Exactly one, always, but for the windows the page
 * names, which the tests list.
 *
 * EKS: the add-on is a model (delete-addon --preserve leaves the DaemonSet
 * self-managed, create-addon --resolve-conflicts OVERWRITE puts the add-on's
 * own DaemonSet back, test/fixtures/kube-proxy/eks-daemonset.yaml), and a
 * patch of the DaemonSet while EKS manages it fails the test. Nodes: two EC2
 * nodes, a Fargate node (its taint tolerated by the chart), an Auto Mode and a
 * hybrid node, and one that joins after each command. Fargate and Auto Mode
 * nodes bring their own proxy.
 *
 * k3s: kube-proxy runs inside k3s. Each node has a directory standing for its
 * /etc/rancher/k3s, where the page's `ssh NODE '…'` commands run for real
 * (sh, without sudo); `systemctl restart k3s|k3s-agent` is the model of a
 * start: the configuration files read as k3s reads them (config.yaml, then
 * config.yaml.d/*.yaml in name order; the last value wins, `key+` appends), a
 * server's kube-proxy from its own `disable-kube-proxy`, an agent's from the
 * servers' (which server answers is not known: servers that disagree give
 * "either"), and `node-label` set on the Node. Besides each node, every check
 * asks what an agent that joins, and every node if k3s restarted on it now,
 * would run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { labelsMatch, parseLabelSelector } from '../../sandbox/apiserver-selectors.js';
import { helmIn, kubectlIn } from './helm.js';
import { CHART, type K8sObject } from './render.js';
import { podFitsNode, type NodeModel } from '../support/node-placement.js';
import { commandsFrom, docs, platformsValues, shellWords, type DocCommand } from './doc-walk.js';

const fixture = (file: string) => YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', file), 'utf8')) as K8sObject;
const linux = (name: string, extra: Record<string, string> = {}): Record<string, string> => ({
  'kubernetes.io/os': 'linux',
  'kubernetes.io/arch': 'amd64',
  'kubernetes.io/hostname': name,
  ...extra,
});
const COMPUTE_TYPE = 'eks.amazonaws.com/compute-type';

/** What one node runs: each entry is one possible set of Service proxies (several when the model cannot know which). */
type ProxyOptions = string[][];

/** Objects and nodes as the commands change them, kubectl and helm for real. */
abstract class Walk {
  kprDs: K8sObject | undefined;
  abstract nodes: NodeModel[];

  constructor(
    readonly dir: string,
    readonly valuesFile: string,
  ) {}

  protected kubectl(...args: string[]): string {
    const r = kubectlIn(this.dir, ...args);
    assert.equal(r.status, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  }

  protected kubectlLocal(object: K8sObject, args: string[]): K8sObject {
    const file = path.join(this.dir, `.object-${object.metadata.name}.json`);
    writeFileSync(file, JSON.stringify(object));
    return JSON.parse(this.kubectl(...args, '--local', '-f', file, '-o', 'json'));
  }

  protected kprFits(node: NodeModel): boolean {
    return this.kprDs !== undefined && podFitsNode(this.kprDs.spec.template.spec, node);
  }

  /** The Service proxies `node` runs (or may run). */
  abstract proxies(node: NodeModel): ProxyOptions;
  /** Nodes that are not in the cluster but could be after this command: one that joins, each node restarted now. */
  abstract hypotheticals(): Array<{ label: string; node: NodeModel; options: ProxyOptions }>;
  /** Commands of the platform; true when one changed something, false when it changes nothing a proxy depends on. */
  protected abstract runPlatform(w: string[], ns: string | undefined, line: string, node: string): boolean;

  run(line: string, node: string): boolean {
    if (/^POD=\$\(kubectl /.test(line)) return false;
    const w = shellWords(line.replaceAll('NODE', node));
    const ns = w[1] === '-n' ? w.splice(1, 2)[1] : undefined;
    const [tool, verb] = w;
    if (tool === 'kubectl' && ['rollout', 'drain', 'uncordon', 'exec', 'debug'].includes(verb)) return false;
    if (tool === 'helm' && (verb === 'install' || verb === 'upgrade')) {
      assert.equal(verb === 'upgrade', this.kprDs !== undefined, `${verb} with kpr ${this.kprDs ? '' : 'not '}installed`);
      assert.ok(w.includes(this.valuesFile), `${line}: the page's ${this.valuesFile}`);
      const r = helmIn(this.dir, 'template', ...w.slice(2).map((a) => (a === 'charts/kpr' ? CHART : a)));
      assert.equal(r.status, 0, `helm template ${w.slice(2).join(' ')}: ${r.stderr}`);
      const objs = YAML.parseAllDocuments(r.stdout)
        .map((d) => d.toJS())
        .filter(Boolean) as K8sObject[];
      this.kprDs = objs.find((o) => o.kind === 'DaemonSet' && o.metadata.name === 'kpr');
      assert.ok(this.kprDs);
      return true;
    }
    if (tool === 'helm' && verb === 'uninstall') {
      this.kprDs = undefined;
      return true;
    }
    if (tool === 'kubectl' && verb === 'label' && (w[2] === 'node' || w[2] === 'nodes')) {
      let targets: NodeModel[];
      let rest: string[];
      if (w[2] === 'node') {
        targets = this.nodes.filter((n) => n.name === w[3]);
        assert.equal(targets.length, 1, `${line}: no node ${w[3]}`);
        rest = w.slice(4);
      } else if (w[3] === '--all') {
        targets = this.nodes;
        rest = w.slice(4);
      } else {
        assert.equal(w[3], '-l', line);
        const sel = parseLabelSelector(w[4]);
        targets = this.nodes.filter((n) => labelsMatch(sel, { metadata: { labels: n.labels } }));
        rest = w.slice(5);
      }
      for (const n of targets)
        n.labels =
          this.kubectlLocal({ apiVersion: 'v1', kind: 'Node', metadata: { name: n.name, labels: n.labels } }, ['label', ...rest]).metadata.labels ?? {};
      return true;
    }
    return this.runPlatform(w, ns, line, node);
  }
}

function optionsOf(base: string[], kpr: boolean): ProxyOptions {
  return [[...base, ...(kpr ? ['kpr'] : [])]];
}

/** Runs a walk's blocks, each for the nodes it is meant for, and records every node that does not run exactly one proxy. */
function walkThrough(cluster: Walk, commands: DocCommand[], nodesFor: (c: DocCommand, index: number) => string[]): { gaps: string[]; steps: string[] } {
  const gaps: string[] = [];
  const steps: string[] = [];
  const check = (what: string) => {
    const seen = new Set<string>();
    const report = (label: string, options: ProxyOptions) => {
      for (const o of options) {
        if (o.length === 1) continue;
        const g = `${label}: ${o.length ? o.join('+') : 'nothing'} after: ${what}`;
        if (!seen.has(g)) gaps.push(g);
        seen.add(g);
      }
    };
    for (const n of cluster.nodes) report(n.name, cluster.proxies(n));
    for (const h of cluster.hypotheticals()) report(h.label, h.options);
    steps.push(what);
  };
  check('(as installed)');
  const blocks = [...new Set(commands.map((c) => c.block))];
  blocks.forEach((b, i) => {
    const lines = commands.filter((c) => c.block === b);
    for (const n of nodesFor(lines[0], i)) {
      for (const c of lines) if (cluster.run(c.line, n)) check(c.line.replaceAll('NODE', n));
    }
  });
  return { gaps, steps };
}

// ---------------------------------------------------------------- EKS

class Eks extends Walk {
  kubeProxyDs: K8sObject | undefined = fixture('eks-daemonset.yaml');
  addonManaged = true;
  configMaps = new Set(['kube-proxy', 'kube-proxy-config']);
  nodes: NodeModel[] = [
    { name: 'ec2-1', labels: linux('ec2-1') },
    { name: 'ec2-2', labels: linux('ec2-2') },
    { name: 'fargate-1', labels: linux('fargate-1', { [COMPUTE_TYPE]: 'fargate' }), taints: [{ key: COMPUTE_TYPE, value: 'fargate', effect: 'NoSchedule' }] },
    { name: 'auto-1', labels: linux('auto-1', { [COMPUTE_TYPE]: 'auto' }) },
    { name: 'hybrid-1', labels: linux('hybrid-1', { [COMPUTE_TYPE]: 'hybrid' }) },
  ];

  /** Fargate and Auto Mode nodes bring their own proxy; no DaemonSet may add one. */
  static builtIn(node: NodeModel): string[] {
    return ['fargate', 'auto'].includes(node.labels[COMPUTE_TYPE]) ? [`${node.labels[COMPUTE_TYPE]}'s own`] : [];
  }

  proxies(node: NodeModel): ProxyOptions {
    const kubeProxy = this.kubeProxyDs !== undefined && podFitsNode(this.kubeProxyDs.spec.template.spec, node);
    return optionsOf([...Eks.builtIn(node), ...(kubeProxy ? ['kube-proxy'] : [])], this.kprFits(node));
  }

  hypotheticals() {
    const node = { name: 'node-new', labels: linux('node-new') };
    return [{ label: 'node-new (EC2, joins)', node, options: this.proxies(node) }];
  }

  protected runPlatform(w: string[], ns: string | undefined, line: string): boolean {
    const is = (...prefix: string[]) => prefix.every((p, i) => w[i] === p);
    const flag = (name: string) => w[w.indexOf(name) + 1];
    if (is('aws', 'eks', 'delete-addon')) {
      assert.deepEqual([flag('--cluster-name'), flag('--addon-name')], ['CLUSTER', 'kube-proxy'], line);
      assert.ok(this.addonManaged, 'delete-addon: no kube-proxy add-on');
      this.addonManaged = false;
      if (!w.includes('--preserve')) {
        this.kubeProxyDs = undefined;
        this.configMaps.clear();
      }
      return true;
    }
    if (is('aws', 'eks', 'create-addon')) {
      assert.deepEqual([flag('--cluster-name'), flag('--addon-name'), flag('--resolve-conflicts')], ['CLUSTER', 'kube-proxy', 'OVERWRITE'], line);
      assert.ok(!this.addonManaged, 'create-addon: the add-on exists');
      this.addonManaged = true;
      this.kubeProxyDs = fixture('eks-daemonset.yaml'); // OVERWRITE: the add-on's own template
      this.configMaps = new Set(['kube-proxy', 'kube-proxy-config']);
      return true;
    }
    if (is('kubectl', 'patch', 'ds', 'kube-proxy')) {
      assert.equal(ns, 'kube-system');
      assert.ok(!this.addonManaged, `${line}: EKS manages this DaemonSet's template and may overwrite the patch`);
      assert.ok(this.kubeProxyDs, 'no kube-proxy DaemonSet');
      this.kubeProxyDs = this.kubectlLocal(this.kubeProxyDs, ['patch', ...w.slice(4)]);
      return true;
    }
    throw new Error(`a command this test does not know: ${line}`);
  }
}

test("docs/platforms.md's EKS walk and way back: every node (EC2, Fargate, Auto Mode, hybrid, one that joins) has exactly one Service proxy after every command", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-migration-eks-'));
  try {
    writeFileSync(path.join(dir, 'values-eks.yaml'), platformsValues('values-eks.yaml'));
    const eks = new Eks(dir, 'values-eks.yaml');
    const commands = commandsFrom(docs('platforms.md'), '### Node by node on EKS', { within: true });
    const perNode = [...new Set(commands.filter((c) => c.line.includes('NODE')).map((c) => c.block))];
    assert.equal(perNode.length, 2, 'one per-node block each way');
    const { gaps, steps } = walkThrough(eks, commands, (c) => {
      if (c.block === perNode[0]) return ['ec2-1']; // ec2-2 stands for a node that joined during the walk: the finish moves it
      if (c.block === perNode[1]) return ['ec2-1', 'ec2-2'];
      return ['NODE'];
    });
    // The end of the way back: the add-on's own kube-proxy, kpr gone, no label left.
    assert.equal(eks.kprDs, undefined);
    assert.equal(eks.addonManaged, true);
    assert.deepEqual(eks.kubeProxyDs!.spec, fixture('eks-daemonset.yaml').spec);
    for (const n of eks.nodes) assert.equal(n.labels['kpr.io/proxy'], undefined, n.name);
    for (const want of [
      'aws eks delete-addon --cluster-name CLUSTER --addon-name kube-proxy --preserve',
      'kubectl label node ec2-1 kpr.io/proxy=kpr',
      'kubectl label node ec2-2 kpr.io/proxy-',
      'helm uninstall kpr --namespace kube-system',
    ]) {
      assert.ok(steps.includes(want), `${want} ran:\n${steps.join('\n')}`);
    }
    // The two windows the page names: an EC2 node that registers while the default for new nodes moves.
    assert.equal(gaps.length, 2, gaps.join('\n'));
    assert.match(gaps[0], /^node-new \(EC2, joins\): nothing after: kubectl -n kube-system patch ds kube-proxy .*"In","values":\["hybrid"\]/);
    assert.match(
      gaps[1],
      /^node-new \(EC2, joins\): nothing after: helm upgrade kpr charts\/kpr --namespace kube-system -f values-eks.yaml --set migration.enabled=true$/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('EKS: the end of the walk: kpr on EC2 nodes only (its affinity from values-eks.yaml, no label logic), kube-proxy on hybrid nodes only', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-migration-eks-'));
  try {
    writeFileSync(path.join(dir, 'values-eks.yaml'), platformsValues('values-eks.yaml'));
    const eks = new Eks(dir, 'values-eks.yaml');
    const commands = commandsFrom(docs('platforms.md'), '### Node by node on EKS', { within: true });
    const firstWayBack = commands.find(
      (c) => c.line.startsWith('kubectl label nodes -l') && commands.indexOf(c) > commands.findIndex((x) => x.line.startsWith('helm upgrade')),
    )!;
    for (const c of commands.slice(0, commands.indexOf(firstWayBack))) for (const n of c.line.includes('NODE') ? ['ec2-1'] : ['NODE']) eks.run(c.line, n);
    const byNode = Object.fromEntries(eks.nodes.map((n) => [n.name, eks.proxies(n)[0].join('+')]));
    assert.deepEqual(byNode, { 'ec2-1': 'kpr', 'ec2-2': 'kpr', 'fargate-1': "fargate's own", 'auto-1': "auto's own", 'hybrid-1': 'kube-proxy' });
    const terms = eks.kprDs!.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms;
    assert.deepEqual(terms, [{ matchExpressions: [{ key: COMPUTE_TYPE, operator: 'NotIn', values: ['fargate', 'auto', 'hybrid'] }] }]);
    assert.deepEqual(
      eks.kprDs!.spec.template.spec.tolerations,
      [{ operator: 'Exists' }],
      "the chart's tolerations: only the affinity keeps kpr off a Fargate node",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('values-eks.yaml: a Fargate, Auto Mode or hybrid node gets no kpr pod, an EC2 node does; without the affinity the Fargate taint would not keep it out', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-values-eks-'));
  try {
    const values = platformsValues('values-eks.yaml');
    const render = (file: string, text: string) => {
      writeFileSync(path.join(dir, file), text);
      const r = helmIn(dir, 'template', 'kpr', CHART, '--namespace', 'kube-system', '-f', file);
      assert.equal(r.status, 0, r.stderr);
      return (YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()) as K8sObject[]).find((o) => o?.kind === 'DaemonSet' && o.metadata.name === 'kpr')!;
    };
    const eks = new Eks(dir, 'values-eks.yaml');
    const fits = (ds: K8sObject) => Object.fromEntries(eks.nodes.map((n) => [n.name, podFitsNode(ds.spec.template.spec, n)]));
    assert.deepEqual(fits(render('values-eks.yaml', values)), { 'ec2-1': true, 'ec2-2': true, 'fargate-1': false, 'auto-1': false, 'hybrid-1': false });
    const withoutAffinity = YAML.parse(values);
    delete withoutAffinity.affinity;
    assert.equal(fits(render('no-affinity.yaml', YAML.stringify(withoutAffinity)))['fargate-1'], true, 'tolerations: Exists tolerates the Fargate taint');
    assert.equal(
      podFitsNode(
        {},
        eks.nodes.find((n) => n.name === 'fargate-1')!,
      ),
      false,
      'a pod without that toleration stays off',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------- k3s

interface K3sNode extends NodeModel {
  role: 'server' | 'agent';
  /** Stands for the node's /etc/rancher/k3s. */
  etc: string;
  /** Whether k3s started kube-proxy at its last start ('either': it asked servers that disagree). */
  kubeProxy: boolean | 'either';
  /** A server's disable-kube-proxy as of its last start. */
  disabled?: boolean;
}

/** k3s's configuration: config.yaml, then config.yaml.d/*.yaml by name; the last value wins, `key+` appends. */
function k3sConfig(etc: string): Record<string, unknown> {
  const files = [path.join(etc, 'config.yaml')];
  const d = path.join(etc, 'config.yaml.d');
  if (existsSync(d))
    files.push(
      ...readdirSync(d)
        .filter((f) => f.endsWith('.yaml'))
        .sort()
        .map((f) => path.join(d, f)),
    );
  const out: Record<string, unknown> = {};
  for (const f of files) {
    if (!existsSync(f)) continue;
    for (const [k, v] of Object.entries((YAML.parse(readFileSync(f, 'utf8')) ?? {}) as Record<string, unknown>)) {
      if (k.endsWith('+')) {
        const key = k.slice(0, -1);
        const prev = out[key];
        out[key] = Array.isArray(prev) || Array.isArray(v) ? [...((prev as unknown[]) ?? []), ...(v as unknown[])] : `${(prev as string) ?? ''}${v as string}`;
      } else {
        out[k] = v;
      }
    }
  }
  return out;
}

class K3s extends Walk {
  nodes: K3sNode[];

  constructor(dir: string) {
    super(dir, 'values-k3s.yaml');
    this.nodes = (['server-1', 'server-2', 'agent-1', 'agent-2'] as const).map((name) => {
      const role = name.startsWith('server') ? 'server' : 'agent';
      const etc = path.join(dir, 'nodes', name, 'etc', 'rancher', 'k3s');
      mkdirSync(etc, { recursive: true });
      // Each node's own configuration, with a label of its own that the walk must keep.
      const own = role === 'server' ? 'write-kubeconfig-mode: "0644"\n' : 'server: https://198.18.0.2:6443\ntoken: K10example::server:secret\n';
      writeFileSync(path.join(etc, 'config.yaml'), `${own}node-label:\n  - site=lab-${name}\n`);
      return { name, role, etc, labels: linux(name, { [`site`]: `lab-${name}` }), kubeProxy: true, ...(role === 'server' ? { disabled: false } : {}) };
    });
  }

  private servers(): K3sNode[] {
    return this.nodes.filter((n) => n.role === 'server');
  }

  /** What an agent asking the servers now gets. */
  private agentKubeProxy(): boolean | 'either' {
    const d = new Set(this.servers().map((s) => s.disabled));
    return d.size === 2 ? 'either' : !d.has(true);
  }

  /** The node as k3s would leave it after a start now. */
  private started(n: K3sNode): K3sNode {
    const cfg = k3sConfig(n.etc);
    if (n.role === 'agent') assert.equal(cfg['disable-kube-proxy'], undefined, `${n.name}: k3s agent has no disable-kube-proxy`);
    const disabled = n.role === 'server' ? cfg['disable-kube-proxy'] === true : undefined;
    const labels = { ...n.labels };
    for (const l of (cfg['node-label'] as string[] | undefined) ?? []) {
      const [k, v = ''] = l.split('=');
      labels[k] = v; // k3s adds or overwrites its labels, never removes one
    }
    const kubeProxy = n.role === 'server' ? !disabled : this.agentKubeProxy();
    return { ...n, labels, kubeProxy, ...(n.role === 'server' ? { disabled } : {}) };
  }

  proxies(node: NodeModel): ProxyOptions {
    const kp = (node as K3sNode).kubeProxy;
    const kpr = this.kprFits(node);
    return kp === 'either' ? [...optionsOf(['kube-proxy'], kpr), ...optionsOf([], kpr)] : optionsOf(kp ? ['kube-proxy'] : [], kpr);
  }

  hypotheticals() {
    const out: Array<{ label: string; node: NodeModel; options: ProxyOptions }> = [];
    // A new agent joins as the page says: with the agents' drop-in (label kpr) while the servers disable kube-proxy.
    const kp = this.agentKubeProxy();
    const joined: K3sNode = {
      name: 'agent-new',
      role: 'agent',
      etc: '',
      labels: linux('agent-new', kp === true ? {} : { 'kpr.io/proxy': 'kpr' }),
      kubeProxy: kp,
    };
    out.push({ label: 'agent-new (joins)', node: joined, options: this.proxies(joined) });
    for (const n of this.nodes) {
      const r = this.started(n);
      out.push({ label: `${n.name} (if k3s restarted now)`, node: r, options: this.proxies(r) });
    }
    return out;
  }

  protected runPlatform(w: string[], _ns: string | undefined, line: string): boolean {
    assert.equal(w[0], 'ssh', `a command this test does not know: ${line}`);
    const n = this.nodes.find((x) => x.name === w[1]);
    assert.ok(n, `${line}: no node ${w[1]}`);
    const remote = w.slice(2).join(' ');
    const restart = /^sudo systemctl restart (k3s|k3s-agent)$/.exec(remote);
    if (restart) {
      assert.equal(restart[1], n.role === 'server' ? 'k3s' : 'k3s-agent', `${line}: the ${n.role}'s unit`);
      Object.assign(n, this.started(n));
      return true;
    }
    // Anything else runs for real, in the node's directory instead of /etc/rancher/k3s.
    assert.ok(!/systemctl|\bk3s\b(?!\/)/.test(remote.replaceAll('/etc/rancher/k3s', '')), `${line}: only file commands run for real`);
    const script = remote.replaceAll('sudo ', '').replaceAll('/etc/rancher/k3s', n.etc);
    execFileSync('sh', ['-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    return true;
  }
}

test("docs/platforms.md's k3s walk and way back: every node has exactly one Service proxy after every command, but for the windows the page names", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-migration-k3s-'));
  try {
    writeFileSync(path.join(dir, 'values-k3s.yaml'), platformsValues('values-k3s.yaml'));
    const k3s = new K3s(dir);
    const commands = commandsFrom(docs('platforms.md'), '### Node by node on k3s', { within: true });
    const of = (role: 'server' | 'agent' | 'node') => k3s.nodes.filter((n) => role === 'node' || n.role === role).map((n) => n.name);
    const { gaps, steps } = walkThrough(k3s, commands, (c) => {
      if (!c.line.includes('NODE') && !commands.some((x) => x.block === c.block && x.line.includes('NODE'))) return ['NODE'];
      const m = /^on each (server|agent|node)\b/.exec(c.note ?? '');
      assert.ok(m, `block ${c.block} names no nodes: ${c.line}`);
      return of(m[1] as 'server' | 'agent' | 'node');
    });

    // The end of the way back: kube-proxy on every node again, kpr gone, no drop-in, no kpr label, the nodes' own labels kept.
    assert.equal(k3s.kprDs, undefined);
    for (const n of k3s.nodes) {
      assert.equal(n.kubeProxy, true, n.name);
      assert.equal(existsSync(path.join(n.etc, 'config.yaml.d', '90-kpr.yaml')), false, n.name);
      assert.equal(n.labels['kpr.io/proxy'], undefined, n.name);
      assert.equal(n.labels.site, `lab-${n.name}`, `${n.name}: node-label+ added to the node's own labels`);
    }
    for (const want of [
      'ssh server-1 sudo systemctl restart k3s',
      'ssh agent-2 sudo systemctl restart k3s-agent',
      'helm upgrade kpr charts/kpr --namespace kube-system -f values-k3s.yaml',
      'helm uninstall kpr --namespace kube-system',
    ]) {
      assert.ok(steps.includes(want), `${want} ran:\n${steps.join('\n')}`);
    }

    // The windows the page names, and no other:
    // - while the servers are switched, an agent that starts or joins gets kube-proxy or not;
    // - after the last server and before an agent's drop-in, that agent, restarting, would come up with
    //   neither (forth) or both (back).
    const kinds = gaps.map((g) => {
      const [who, rest] = g.split(': ', 2);
      const after = g.slice(g.indexOf(' after: ') + ' after: '.length);
      return `${who} | ${rest.slice(0, rest.indexOf(' after'))} | ${after.replace(/ssh (\S+) .*restart.*/, 'restart $1').replace(/ssh (\S+) .*90-kpr.*/, 'drop-in $1')}`;
    });
    assert.deepEqual(
      kinds,
      [
        // forth: server-1 switched, server-2 not yet
        'agent-new (joins) | kube-proxy+kpr | restart server-1',
        'agent-1 (if k3s restarted now) | nothing | restart server-1',
        'agent-2 (if k3s restarted now) | nothing | restart server-1',
        'agent-new (joins) | kube-proxy+kpr | drop-in server-2',
        'agent-1 (if k3s restarted now) | nothing | drop-in server-2',
        'agent-2 (if k3s restarted now) | nothing | drop-in server-2',
        // forth: both servers switched, the agents' drop-ins being written
        'agent-1 (if k3s restarted now) | nothing | restart server-2',
        'agent-2 (if k3s restarted now) | nothing | restart server-2',
        'agent-2 (if k3s restarted now) | nothing | drop-in agent-1',
        // back: server-1 back, server-2 not yet
        'agent-new (joins) | kube-proxy+kpr | restart server-1',
        'agent-1 (if k3s restarted now) | kube-proxy+kpr | restart server-1',
        'agent-2 (if k3s restarted now) | kube-proxy+kpr | restart server-1',
        'agent-new (joins) | kube-proxy+kpr | drop-in server-2',
        'agent-1 (if k3s restarted now) | kube-proxy+kpr | drop-in server-2',
        'agent-2 (if k3s restarted now) | kube-proxy+kpr | drop-in server-2',
        // back: both servers back, the agents' drop-ins being written
        'agent-1 (if k3s restarted now) | kube-proxy+kpr | restart server-2',
        'agent-2 (if k3s restarted now) | kube-proxy+kpr | restart server-2',
        'agent-2 (if k3s restarted now) | kube-proxy+kpr | drop-in agent-1',
      ],
      gaps.join('\n'),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('k3s configuration files: config.yaml.d after config.yaml, by name; the last value wins, key+ appends', () => {
  const etc = mkdtempSync(path.join(os.tmpdir(), 'kpr-k3s-config-'));
  try {
    writeFileSync(path.join(etc, 'config.yaml'), 'node-label:\n  - a=1\ndisable-kube-proxy: false\n');
    mkdirSync(path.join(etc, 'config.yaml.d'));
    writeFileSync(path.join(etc, 'config.yaml.d', '90-kpr.yaml'), 'disable-kube-proxy: true\nnode-label+:\n  - kpr.io/proxy=kpr\n');
    writeFileSync(path.join(etc, 'config.yaml.d', '10-other.yaml'), 'node-label+:\n  - b=2\n');
    assert.deepEqual(k3sConfig(etc), { 'node-label': ['a=1', 'b=2', 'kpr.io/proxy=kpr'], 'disable-kube-proxy': true });
  } finally {
    rmSync(etc, { recursive: true, force: true });
  }
});
