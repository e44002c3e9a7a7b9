/**
 * `kpr trace` against a running agent's real maps on the two-node box: each
 * case the command distinguishes (a match, no match, a refusal, a
 * source-range drop, an affinity hit, a conntrack hit), its verdict checked
 * against what a real client got from the datapath in the same state. Then
 * the per-Service counters those same clients moved (kpr_svc_stats):
 * kpr_service_*_total on /metrics and `kpr service list`.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { scaled } from '../../sandbox/time-scale.js';
import { CLIENTS, NODE1_UPLINK, TwoNodeCluster, type NodeName } from '../../sandbox/two-node.js';
import type { Trace } from '../../agent/cli/trace-model.js';
import { requireRoot } from '../support/preflight.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';
import type { ServiceView } from '../../agent/cli/service-view.js';
import { cliBin } from '../support/paths.js';
import { e2eService as service, e2eSlice } from '../support/e2e-objects.js';
import { expectedRefusal } from '../support/kernel.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName },
  { name: 'web-1b', ip: '198.18.10.11', node: 'node-1' as NodeName },
];
const POD_IP = Object.fromEntries(PODS.map((p) => [p.name, p.ip]));
const slice = (svc: string, pods: string[]) =>
  e2eSlice(
    svc,
    pods.map((p) => POD_IP[p]),
  );
const CLIENT_A = CLIENTS['client-a'].ip;

describe('kpr trace on the real maps of a running agent', { timeout: scaled(120_000) }, () => {
  let box: TwoNodeCluster;

  function trace(args: string[]): Trace {
    const r = spawnSync(cliBin, ['trace', '--bpffs', box.nodes['node-1'].bpffsDir, ...args, '-o', 'json'], { encoding: 'utf8' });
    assert.equal(r.status, 0, `kpr trace ${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as Trace;
  }

  function traceTable(args: string[]): string {
    const r = spawnSync(cliBin, ['trace', '--bpffs', box.nodes['node-1'].bpffsDir, ...args], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  }

  const step = (t: Trace, name: string) => t.steps.find((s) => s.step === name);

  before(async () => {
    requireRoot();
    box = await TwoNodeCluster.create({ pods: PODS });
    box.api.create(service('web', 'ClusterIP', '198.19.0.20', undefined));
    box.api.create(slice('web', ['web-1a', 'web-1b']));
    box.api.create(service('empty', 'NodePort', '198.19.0.21', 30121));
    box.api.create(
      service(
        'ranged',
        'LoadBalancer',
        '198.19.0.22',
        30122,
        { loadBalancerSourceRanges: ['198.18.101.0/24'] },
        { loadBalancer: { ingress: [{ ip: '198.19.200.22' }] } },
      ),
    );
    box.api.create(slice('ranged', ['web-1a']));
    box.api.create(
      service('sticky', 'NodePort', '198.19.0.23', 30123, { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } } }),
    );
    box.api.create(slice('sticky', ['web-1a', 'web-1b']));
    await box.startAgents(['--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0']);
  });

  after(async () => {
    await box?.close();
  });

  test('a ClusterIP frontend: named, both backends listed, a new connection balanced over them', () => {
    const t = trace(['--to', '198.19.0.20:80']);
    assert.equal(t.query.path, 'socket');
    assert.equal(t.frontend?.service, 'e2e/web');
    assert.equal(t.frontend?.type, 'ClusterIP');
    assert.equal(t.verdict.action, 'translated');
    assert.deepEqual([...t.verdict.backends!].sort(), ['198.18.10.10:8080', '198.18.10.11:8080']);
    const table = traceTable(['--to', '198.19.0.20:80']);
    assert.match(table, /frontend +ClusterIP e2e\/web:http/);
    assert.match(table, /=> translated: a new connection goes to one of 2 backends at random/);
  });

  test('no match: an address no Service uses passes; a Service address on an undefined port is refused, as a real connect is', async () => {
    assert.equal(trace(['--to', '198.19.9.9:80']).verdict.action, 'passed');
    const t = trace(['--to', '198.19.0.20:81']);
    assert.equal(t.verdict.action, 'refused');
    assert.equal(step(t, 'address')?.detail?.refuseUnknownPort, true);
  });

  test('no endpoints: refused on the socket path, dropped on the tc path, and a real external client is dropped', async () => {
    assert.equal(trace(['--to', '198.19.0.21:80']).verdict.action, 'refused');
    const t = trace(['--from', CLIENT_A, '--to', `${NODE1_UPLINK}:30121`]);
    assert.equal(t.query.path, 'tc');
    assert.equal(t.verdict.action, 'dropped');
    const rep = await box.external('client-a', 'http', `${NODE1_UPLINK}:30121`, ['--count', '1', '--timeout-ms', '800']);
    assert.equal(rep.ok, 0);
  });

  test('source ranges: a client outside them is dropped (as the real client is), one inside is translated', async () => {
    const out = trace(['--from', CLIENT_A, '--to', '198.19.200.22:80']);
    assert.equal(out.verdict.action, 'dropped');
    assert.equal(step(out, 'source-ranges')?.detail?.allowed, false);
    const rep = await box.external('client-a', 'http', '198.19.200.22:80', ['--count', '1', '--timeout-ms', '800']);
    assert.equal(rep.ok, 0, 'client-a is outside the ranges');
    const inside = trace(['--from', CLIENTS['client-b'].ip, '--to', '198.19.200.22:80']);
    assert.equal(inside.verdict.action, 'translated');
    assert.equal(step(inside, 'source-ranges')?.detail?.allowed, true);
    // On the socket path the ranges are not applied (documented).
    assert.equal(step(trace(['--to', '198.19.200.22:80']), 'source-ranges')?.detail?.applied, false);
  });

  test("affinity and conntrack: after a real connection the trace names the remembered backend, and the flow's own port continues to it", async () => {
    const before = trace(['--from', CLIENT_A, '--to', `${NODE1_UPLINK}:30123`]);
    assert.equal(step(before, 'affinity')?.detail?.hit, false);
    const rep = await box.external('client-a', 'http', `${NODE1_UPLINK}:30123`, ['--count', '1']);
    assert.equal(rep.ok, 1, JSON.stringify(rep.errors));
    const pod = Object.keys(rep.byPod)[0];
    const backend = `${POD_IP[pod]}:8080`;

    const after = trace(['--from', CLIENT_A, '--to', `${NODE1_UPLINK}:30123`]);
    assert.equal(step(after, 'affinity')?.detail?.hit, true);
    assert.equal(after.verdict.action, 'translated');
    assert.equal(after.verdict.backend, backend, `affinity names the backend that served (${pod})`);

    const flows = (step(after, 'conntrack')?.detail?.flows ?? []) as Array<{ clientPort: number; backend: string }>;
    assert.ok(flows.length >= 1, 'the connection left a conntrack entry');
    const flow = flows.find((f) => f.backend === backend)!;
    assert.ok(flow, `a flow to ${backend}: ${JSON.stringify(flows)}`);
    const hit = trace(['--from', `${CLIENT_A}:${flow.clientPort}`, '--to', `${NODE1_UPLINK}:30123`]);
    assert.equal(hit.verdict.action, 'continues');
    assert.equal(hit.verdict.backend, backend);
    assert.match(hit.verdict.summary, /NodePort e2e\/sticky:http/);
    // The table forms, as docs/cli.md (kpr trace) shows them.
    console.log(traceTable(['--from', CLIENT_A, '--to', `${NODE1_UPLINK}:30123`]));
    console.log(traceTable(['--from', `${CLIENT_A}:${flow.clientPort}`, '--to', `${NODE1_UPLINK}:30123`]));
    console.log(traceTable(['--from', CLIENT_A, '--to', '198.19.200.22:80']));
  });

  test('bad input is a usage error naming the flag; another node is refused with what to do', () => {
    for (const [args, re] of [
      [['--to', '198.19.0.20'], /invalid --to "198.19.0.20"/],
      [['--to', '198.19.0.20:80', '--proto', 'icmp'], /invalid --proto/],
      [['--to', '198.19.0.20:80', '--path', 'tc'], /--path tc needs --from/],
      [['--to', '198.19.0.20:80', '--node', 'some-other-node'], /reads the maps of the node it runs on .*run it there/],
    ] as Array<[string[], RegExp]>) {
      const r = spawnSync(cliBin, ['trace', '--bpffs', box.nodes['node-1'].bpffsDir, ...args], { encoding: 'utf8' });
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stdout}`);
      assert.match(r.stderr, re);
    }
  });

  test('per-Service counters: what the clients above met is counted per Service port, on /metrics and in kpr service list', async () => {
    // A socket-path refusal too: a process of the node (in its cgroup) calls the Service without endpoints.
    const refusedRep = await box.client(box.nodes['node-1'].ns, 'once', '198.19.0.21:80', { cgroupOf: 'node-1', extra: ['--timeout-ms', '2000'] });
    assert.deepEqual(refusedRep.errors, { [REFUSED]: 1 });
    const served = await box.client(box.nodes['node-1'].ns, 'http', '198.19.0.20:80', { cgroupOf: 'node-1', extra: ['--count', '5'] });
    assert.equal(served.ok, 5);

    const agent = box.agents.get('node-1')!;
    const url = `http://${(await agent.waitForLog('metrics server listening')).address}/metrics`;
    const prom = parseProm(await (await fetch(url)).text());
    const port = (service: string) => ({ namespace: 'e2e', service, port_name: 'http', protocol: 'TCP' });
    assert.equal(valueOf(prom, 'kpr_service_balanced_total', port('web')), 5, 'five connections to the ClusterIP');
    assert.equal(valueOf(prom, 'kpr_service_refused_total', { ...port('empty'), reason: 'no_endpoint' }), 1);
    assert.ok(
      (valueOf(prom, 'kpr_service_dropped_total', { ...port('empty'), reason: 'no_endpoint' }) ?? 0) >= 1,
      'the external client of the NodePort without endpoints',
    );
    assert.ok((valueOf(prom, 'kpr_service_dropped_total', { ...port('ranged'), reason: 'source_range' }) ?? 0) >= 1, 'client-a outside the source ranges');
    assert.ok((valueOf(prom, 'kpr_service_balanced_total', port('sticky')) ?? 0) >= 1, "the affinity test's connection");

    const r = spawnSync(cliBin, ['service', 'list', '--bpffs', box.nodes['node-1'].bpffsDir, '-o', 'json'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const views = JSON.parse(r.stdout) as ServiceView[];
    const web = views.find((v) => v.service === 'e2e/web' && v.address === '198.19.0.20')!;
    assert.equal(web.counters?.balanced, 5);
    const table = spawnSync(cliBin, ['service', 'list', '--bpffs', box.nodes['node-1'].bpffsDir], { encoding: 'utf8' }).stdout;
    assert.match(table, /198\.19\.0\.20:80 .*\n  counters: balanced 5\n/);
  });
});
