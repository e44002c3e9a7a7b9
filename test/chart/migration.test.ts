/**
 * docs/install.md's migration from kube-proxy to kpr and its roll back, the
 * commands as written there, on a kubeadm cluster's objects: kubeadm's real
 * kube-proxy DaemonSet and ConfigMap (test/fixtures/kube-proxy/) and two nodes
 * in the sandbox API server, every kubectl command (pipes and `>` included)
 * run with the real kubectl against it, so a command the API server refuses
 * fails here; helm install/upgrade render charts/kpr with the real helm and
 * the same arguments (values-kubeadm.yaml is docs/platforms.md's). The
 * commands about pods (rollout, drain, exec, debug) are left out: no kubelet
 * runs them. After each command a node-affinity evaluator
 * (test/support/node-placement.ts) says which of the two DaemonSets every
 * node, and a node that has just joined, gets: exactly one, always, but for
 * the one case the docs name — a node registering between the two commands
 * that move the default for new nodes from one DaemonSet to the other gets
 * neither until the second lands. Also checked at every step: the ConfigMap
 * each DaemonSet mounts exists.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { startApiServer, type ApiServer } from '../../sandbox/apiserver.js';
import { helmIn, kubectlAt } from './helm.js';
import { CHART, type K8sObject } from './render.js';
import { podFitsNode, type NodeModel } from '../support/node-placement.js';
import { commandsFrom, docs, platformsValues, shellWords } from './doc-walk.js';

const fixture = (file: string) => YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', file), 'utf8')) as K8sObject;

type Proxy = 'kube-proxy' | 'kpr';

const NS = 'kube-system';

/** kubeadm's object as kubeadm sends it to the API server: without the fields the server set on the fixture. */
function asCreated(obj: K8sObject): K8sObject {
  const { resourceVersion: _rv, uid: _uid, ...metadata } = obj.metadata as K8sObject['metadata'] & { resourceVersion?: string; uid?: string };
  return { ...structuredClone(obj), metadata };
}

/** Whether a kubectl command line (its words after `kubectl`) only reads: get, or a change computed locally. */
function readsOnly(args: string[]): boolean {
  const verb = args.find((a, i) => !a.startsWith('-') && !(i > 0 && ['-n', '--namespace'].includes(args[i - 1])));
  return verb === 'get' || args.includes('--local') || args.includes('--dry-run=client');
}

/**
 * A kubeadm cluster's objects in the sandbox API server, which every kubectl
 * command of the docs acts on with the real kubectl; the kpr DaemonSet is the
 * chart as helm renders it for the documented install/upgrade.
 */
class Cluster {
  kubeProxyDs: K8sObject | undefined;
  configMaps = new Map<string, K8sObject>();
  kprDs: K8sObject | undefined;
  nodes: NodeModel[] = [];

  private constructor(
    readonly dir: string,
    readonly api: ApiServer,
    readonly kubeconfig: string,
  ) {}

  static async start(dir: string): Promise<Cluster> {
    const api = await startApiServer({ bookmarkIntervalMs: 0 });
    const cluster = new Cluster(dir, api, await api.writeKubeconfig(path.join(dir, 'kubeconfig')));
    api.create(asCreated(fixture('kubeadm-daemonset.yaml')));
    api.create(asCreated(fixture('kubeadm-configmap.yaml')));
    for (const name of ['node-1', 'node-2'])
      api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/hostname': name } } });
    cluster.refresh();
    return cluster;
  }

  close(): Promise<void> {
    return this.api.close();
  }

  /** The objects as the API server has them now. */
  private refresh(): void {
    this.kubeProxyDs = this.api.get('DaemonSet', NS, 'kube-proxy') as K8sObject | undefined;
    this.configMaps = new Map(this.api.list('ConfigMap', NS).map((c) => [c.metadata!.name!, c as K8sObject]));
    this.nodes = this.api.list('Node').map((n) => ({ name: n.metadata!.name!, labels: n.metadata!.labels ?? {} }));
  }

  /** Which DaemonSets a pod would run on `node` for. */
  proxiesOn(node: NodeModel): Proxy[] {
    const out: Proxy[] = [];
    if (this.kubeProxyDs && podFitsNode(this.kubeProxyDs.spec.template.spec, node)) out.push('kube-proxy');
    if (this.kprDs && podFitsNode(this.kprDs.spec.template.spec, node)) out.push('kpr');
    return out;
  }

  /** ConfigMaps a DaemonSet's pods mount that do not exist: its pods would not start. */
  missingConfigMaps(): string[] {
    const out: string[] = [];
    for (const ds of [this.kubeProxyDs, this.kprDs]) {
      if (!ds) continue;
      for (const v of ds.spec.template.spec.volumes ?? []) {
        // The chart's own kpr-config ConfigMap comes with the release.
        if (v.configMap && v.configMap.name !== 'kpr-config' && !this.configMaps.has(v.configMap.name))
          out.push(`${ds.metadata.name} mounts ConfigMap ${v.configMap.name}`);
      }
    }
    return out;
  }

  private helm(args: string[]): void {
    const r = helmIn(this.dir, 'template', ...args.map((a) => (a === 'charts/kpr' ? CHART : a)));
    assert.equal(r.status, 0, `helm template ${args.join(' ')}: ${r.stderr}`);
    const objs = YAML.parseAllDocuments(r.stdout)
      .map((d) => d.toJS())
      .filter(Boolean) as K8sObject[];
    this.kprDs = objs.find((o) => o.kind === 'DaemonSet' && o.metadata.name === 'kpr');
    assert.ok(this.kprDs);
  }

  /** A kubectl pipeline (`a | b > file`) with the real kubectl against the API server; stdout of the last to the file. */
  private async kubectl(line: string, words: string[]): Promise<boolean> {
    const redirect = words.indexOf('>');
    const stages: string[][] = [[]];
    for (const w of redirect >= 0 ? words.slice(0, redirect) : words) {
      if (w === '|') stages.push([]);
      else stages[stages.length - 1].push(w);
    }
    let text = '';
    for (const stage of stages) {
      assert.equal(stage[0], 'kubectl', `a command this test does not know: ${line}`);
      const r = await kubectlAt(this.dir, this.kubeconfig, stage.slice(1), text);
      assert.equal(r.status, 0, `${stage.join(' ')}: ${r.stderr}`);
      text = r.stdout;
    }
    if (redirect >= 0) writeFileSync(path.join(this.dir, words[redirect + 1]), text);
    this.refresh();
    return !stages.every((s) => readsOnly(s.slice(1)));
  }

  /** Runs one documented command; returns false for one that changes nothing. */
  async run(line: string, node: string): Promise<boolean> {
    if (/^POD=\$\(kubectl /.test(line)) return false;
    const w = shellWords(line.replaceAll('NODE', node));
    const args = w[1] === '-n' ? w.slice(3) : w.slice(1);
    const [tool, verb] = [w[0], args[0]];
    // Commands about pods, which no kubelet here runs.
    if (tool === 'kubectl' && ['rollout', 'drain', 'uncordon', 'exec', 'debug'].includes(verb)) return false;
    if (tool === 'helm' && (verb === 'install' || verb === 'upgrade')) {
      assert.equal(verb === 'upgrade', this.kprDs !== undefined, `${verb} with kpr ${this.kprDs ? '' : 'not '}installed`);
      this.helm(w.slice(2));
      return true;
    }
    if (tool === 'helm' && verb === 'uninstall' && w[2] === 'kpr') {
      this.kprDs = undefined;
      return true;
    }
    return this.kubectl(line, w);
  }
}

test("docs/install.md's migration and roll back: every node, a new one too, has exactly one Service proxy after every command", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-migration-'));
  const cluster = await Cluster.start(dir);
  try {
    writeFileSync(path.join(dir, 'values-kubeadm.yaml'), platformsValues('values-kubeadm.yaml'));
    const commands = commandsFrom(docs('install.md'), '## Migrating a running cluster, node by node');
    const perNode = (section: string) => new Set(commands.filter((c) => c.section === section && c.line.includes('NODE')).map((c) => c.block));
    const migrationPerNode = perNode('## Migrating a running cluster, node by node');
    const rollbackPerNode = perNode('## Rolling back');
    assert.equal(migrationPerNode.size, 1, 'one per-node block in the migration');
    assert.equal(rollbackPerNode.size, 1, 'one per-node block in the roll back');

    const steps: string[] = [];
    const gaps: string[] = [];
    const check = (what: string) => {
      const joined: NodeModel = { name: 'node-new', labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/hostname': 'node-new' } };
      for (const node of [...cluster.nodes, joined]) {
        const p = cluster.proxiesOn(node);
        if (p.length !== 1) gaps.push(`${node.name} ${p.length ? p.join('+') : 'nothing'} after: ${what}`);
      }
      assert.deepEqual(cluster.missingConfigMaps(), [], `after: ${what}`);
      steps.push(what);
    };
    check('(kubeadm as installed)');
    // The migration moves node-1 by the per-node block; node-2 stands for a node that joined
    // during the migration and is moved by the finish. The roll back moves both back one by one.
    const runBlock = async (section: string, block: number, node: string) => {
      for (const c of commands.filter((x) => x.section === section && x.block === block))
        if (await cluster.run(c.line, node)) check(c.line.replaceAll('NODE', node));
    };
    for (const section of ['## Migrating a running cluster, node by node', '## Rolling back']) {
      const blocks = [...new Set(commands.filter((c) => c.section === section).map((c) => c.block))];
      for (const b of blocks) {
        const nodes = migrationPerNode.has(b) ? ['node-1'] : rollbackPerNode.has(b) ? ['node-1', 'node-2'] : ['NODE'];
        for (const n of nodes) await runBlock(section, b, n);
      }
      if (section.startsWith('## Migrating')) {
        // The end of the migration: kube-proxy gone, kpr everywhere without any label logic.
        assert.equal(cluster.kubeProxyDs, undefined);
        assert.deepEqual([...cluster.configMaps.keys()], ['kpr-kube-proxy']);
        assert.equal(cluster.kprDs!.spec.template.spec.affinity, undefined, 'no label logic left');
        for (const n of cluster.nodes) assert.equal(n.labels['kpr.io/proxy'], undefined);
        const pod = cluster.kprDs!.spec.template.spec;
        assert.equal(pod.volumes.find((v: { name: string }) => v.name === 'kube-proxy').configMap.name, 'kpr-kube-proxy');
        // kube-proxy's command line, reading the copy, on the agent and on the conntrack sysctls' init container.
        const kubeadmArgs: string[] = fixture('kubeadm-daemonset.yaml').spec.template.spec.containers[0].command.slice(1);
        for (const c of [...pod.containers, ...pod.initContainers].filter((x: { name: string }) => x.name === 'agent' || x.name === 'conntrack-sysctls')) {
          assert.deepEqual(c.args.slice(0, 2), kubeadmArgs, c.name);
        }
        assert.equal(pod.initContainers.filter((x: { name: string }) => x.name === 'conntrack-sysctls').length, 1);
        for (const key of ['config.conf', 'kubeconfig.conf']) {
          assert.equal(cluster.configMaps.get('kpr-kube-proxy')!.data[key], fixture('kubeadm-configmap.yaml').data[key], `the copy is kubeadm's ${key}`);
        }
      }
    }
    // The end of the roll back: kubeadm's kube-proxy as it was, kpr gone.
    assert.equal(cluster.kprDs, undefined);
    assert.deepEqual(cluster.kubeProxyDs!.spec, fixture('kubeadm-daemonset.yaml').spec);
    assert.deepEqual([...cluster.configMaps.keys()], ['kube-proxy']);
    for (const want of [
      'kubectl label node node-1 kpr.io/proxy=kpr',
      'kubectl label nodes --all kpr.io/proxy=kpr --overwrite',
      'kubectl label node node-2 kpr.io/proxy-',
      'helm uninstall kpr --namespace kube-system',
    ]) {
      assert.ok(steps.includes(want), `${want} ran:\n${steps.join('\n')}`);
    }
    // The one gap, named in the docs: the default for new nodes moves in two commands.
    assert.deepEqual(gaps, [
      'node-new nothing after: kubectl -n kube-system delete ds kube-proxy',
      'node-new nothing after: helm upgrade kpr charts/kpr --namespace kube-system -f values-kubeadm.yaml --set kubeProxyConfigMap.name=kpr-kube-proxy --set migration.enabled=true',
    ]);
  } finally {
    await cluster.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('shellWords splits as sh does', () => {
  assert.deepEqual(shellWords(`kubectl patch -p '{"a":"b c"}' x\\ y "q\\"r" # comment`), ['kubectl', 'patch', '-p', '{"a":"b c"}', 'x y', 'q"r']);
  assert.deepEqual(shellWords(`get -o jsonpath='{.data.kubeconfig\\.conf}' > f`), ['get', '-o', 'jsonpath={.data.kubeconfig\\.conf}', '>', 'f']);
});

test("the roll back's copy is `kubectl get -o yaml` as is: kubectl create leaves out the resourceVersion that the API server refuses on create", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-migration-'));
  const api = await startApiServer({ bookmarkIntervalMs: 0 });
  try {
    const kubeconfig = await api.writeKubeconfig(path.join(dir, 'kubeconfig'));
    const kubectl = async (...args: string[]) => {
      const r = await kubectlAt(dir, kubeconfig, args);
      assert.equal(r.status, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
      return r.stdout;
    };
    const ds = api.create(asCreated(fixture('kubeadm-daemonset.yaml')));
    api.create(asCreated(fixture('kubeadm-configmap.yaml')));
    writeFileSync(path.join(dir, 'kube-proxy-backup.yaml'), await kubectl('-n', NS, 'get', 'ds,cm', 'kube-proxy', '-o', 'yaml'));
    const copy = YAML.parse(readFileSync(path.join(dir, 'kube-proxy-backup.yaml'), 'utf8')) as { kind: string; items: K8sObject[] };
    assert.equal(copy.kind, 'List');
    assert.deepEqual(
      copy.items.map((o) => [o.kind, typeof (o.metadata as { resourceVersion?: string }).resourceVersion]),
      [
        ['DaemonSet', 'string'],
        ['ConfigMap', 'string'],
      ],
    );
    await kubectl('-n', NS, 'delete', 'ds', 'kube-proxy');
    await kubectl('-n', NS, 'delete', 'cm', 'kube-proxy');
    // The copy as it is, sent by a client that keeps its resourceVersion: refused, as kube-apiserver's storage does.
    const raw = await fetch(`${api.url}/apis/apps/v1/namespaces/${NS}/daemonsets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(copy.items[0]),
    });
    assert.equal(raw.status, 500);
    assert.equal(((await raw.json()) as { message: string }).message, 'resourceVersion should not be set on objects to be created');
    // kubectl create clears it before it sends the object: both are back, as new objects.
    await kubectl('create', '-f', 'kube-proxy-backup.yaml');
    const restored = api.get('DaemonSet', NS, 'kube-proxy')!;
    assert.deepEqual(restored.spec, ds.spec);
    assert.notEqual(restored.metadata!.uid, ds.metadata!.uid);
    assert.deepEqual(api.get('ConfigMap', NS, 'kube-proxy')!.data, fixture('kubeadm-configmap.yaml').data);
  } finally {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
