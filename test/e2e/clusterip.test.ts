/**
 * ClusterIP end to end: real agent process, embedded API server reached
 * through a kubeconfig, real BPF programs on a sandbox cgroup, real sockets
 * between network namespaces. Each test states what a user would observe.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { BoxCluster, waitFor } from '../../sandbox/cluster.js';
import { listInterfaces, withNetns } from '../../native/index.js';
import { withPinnedMaps } from '../support/pinned-maps.js';
import { inNs, nsPath } from '../../sandbox/netns.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { IPPROTO } from '../../agent/maps/layout.js';
import { endpointSlice, type SlicePort } from '../support/e2e-objects.js';
import { anyIngressPrograms, assertAgentMode, kprIngressPrograms, tcModeCases, type TcMode } from '../support/tc-modes.js';
import { expectedRefusal } from '../support/kernel.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
  { name: 'web-c', ip: '198.18.0.12' },
];

function service(
  name: string,
  clusterIP: string,
  ports: Array<{ name: string; port: number; targetPort: number; protocol?: string }>,
  extra: Record<string, unknown> = {},
) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'e2e' },
    spec: { type: 'ClusterIP', clusterIP, clusterIPs: [clusterIP], ports: ports.map((p) => ({ protocol: 'TCP', ...p })), ...extra },
  };
}

interface Ep {
  ip: string;
  ready?: boolean;
}

function slice(name: string, svc: string, endpoints: Ep[], ports: SlicePort[]) {
  return endpointSlice(
    'e2e',
    name,
    svc,
    endpoints.map((e) => ({ ip: e.ip, conditions: { ready: e.ready ?? true } })),
    ports,
  );
}

const WEB_PORTS = [
  { name: 'http', port: 80, targetPort: 8080 },
  { name: 'echo', port: 53, targetPort: 5353, protocol: 'UDP' },
];
const WEB_SLICE_PORTS = [
  { name: 'http', port: 8080 },
  { name: 'echo', port: 5353, protocol: 'UDP' },
];

describe('ClusterIP end to end', { timeout: scaled(180_000) }, () => {
  let box: BoxCluster;

  /** What the kernel maps hold right now, read through the pins. */
  function kernelState() {
    return withPinnedMaps(box.sandbox.bpffsDir, (maps) => ({ services: maps.dumpServices(), backends: maps.dumpBackends() }));
  }

  function masterCount(addr: string, port: number): number | undefined {
    return kernelState().services.find(([k]) => k.addr === addr && k.port === port && k.slot === 0)?.[1].count;
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    box.api.create(service('web', '198.19.0.10', WEB_PORTS));
    box.api.create(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip })),
        WEB_SLICE_PORTS,
      ),
    );
    await box.startAgent();
  });

  after(async () => {
    await box?.close();
  });

  test('300 TCP connections to the ClusterIP spread over the 3 ready pods, and the app sees the ClusterIP as its peer', async () => {
    const rep = await box.client('http', '198.19.0.10:80', ['--count', '300']);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.deepEqual(Object.keys(rep.byPod).sort(), ['web-a', 'web-b', 'web-c']);
    // Fair share: 100 each expected; 60 is more than 4.5 standard deviations away.
    for (const [pod, n] of Object.entries(rep.byPod)) assert.ok(n >= 60, `${pod} got only ${n} of 300`);
    assert.deepEqual(Object.keys(rep.peers), ['198.19.0.10:80'], 'getpeername() shows the ClusterIP, not the pod');
  });

  test('300 UDP requests spread over the pods and every reply appears to come from the ClusterIP', async () => {
    for (const connected of [false, true]) {
      const rep = await box.client('udp', '198.19.0.10:53', ['--count', '300', ...(connected ? ['--connected'] : [])]);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      for (const pod of PODS) assert.ok((rep.byPod[pod.name] ?? 0) >= 60, `${pod.name}: ${JSON.stringify(rep.byPod)} (connected=${connected})`);
      assert.deepEqual(Object.keys(rep.peers), ['198.19.0.10:53'], `reply source (connected=${connected})`);
    }
  });

  test('an endpoint removed from the EndpointSlice gets no new connections', async () => {
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.slice(1).map((p) => ({ ip: p.ip })),
        WEB_SLICE_PORTS,
      ),
    );
    await waitFor('the service to shrink to 2 backends', () => masterCount('198.19.0.10', 80) === 2);
    const rep = await box.client('http', '198.19.0.10:80', ['--count', '100']);
    assert.equal(rep.failed, 0);
    assert.equal(rep.byPod['web-a'], undefined, 'web-a was removed');
    assert.equal(rep.ok, 100);
  });

  test('a not-ready endpoint gets no connections', async () => {
    box.api.apply(slice('web-1', 'web', [{ ip: PODS[0].ip, ready: false }, { ip: PODS[1].ip }, { ip: PODS[2].ip, ready: false }], WEB_SLICE_PORTS));
    await waitFor('only web-b to remain', () => masterCount('198.19.0.10', 80) === 1);
    const rep = await box.client('http', '198.19.0.10:80', ['--count', '50']);
    assert.deepEqual(rep.byPod, { 'web-b': 50 });
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip })),
        WEB_SLICE_PORTS,
      ),
    );
    await waitFor('all three back', () => masterCount('198.19.0.10', 80) === 3);
  });

  test('a service with no endpoints refuses a new connection at once, TCP and UDP', async () => {
    box.api.create(
      service('empty', '198.19.0.20', [
        { name: 'http', port: 80, targetPort: 8080 },
        { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' },
      ]),
    );
    await waitFor('the empty service to be programmed', () => masterCount('198.19.0.20', 80) === 0);
    const tcp = await box.client('once', '198.19.0.20:80', ['--timeout-ms', '3000']);
    assert.deepEqual(tcp.errors, { [REFUSED]: 1 });
    assert.ok(tcp.elapsedMs < scaled(1000), `refused after ${tcp.elapsedMs} ms`);
    const udp = await box.client('udp', '198.19.0.20:53', ['--count', '1', '--timeout-ms', '3000']);
    assert.deepEqual(udp.errors, { [REFUSED]: 1 });
    assert.ok(udp.elapsedMs < scaled(1000), `refused after ${udp.elapsedMs} ms`);
  });

  test('a deleted service is removed from the maps and its ClusterIP no longer reaches a pod', async () => {
    box.api.create(service('gone', '198.19.0.30', [{ name: 'http', port: 80, targetPort: 8080 }]));
    box.api.create(slice('gone-1', 'gone', [{ ip: PODS[0].ip }], [{ name: 'http', port: 8080 }]));
    await waitFor('gone to be programmed', () => masterCount('198.19.0.30', 80) === 1);
    assert.equal((await box.client('http', '198.19.0.30:80', ['--count', '3'])).ok, 3);
    box.api.remove('Service', 'e2e', 'gone');
    await waitFor('gone to leave the maps', () => !kernelState().services.some(([k]) => k.addr === '198.19.0.30'));
    const rep = await box.client('once', '198.19.0.30:80', ['--timeout-ms', '3000']);
    assert.equal(rep.ok, 0);
    assert.ok(rep.elapsedMs < scaled(1000), `failed after ${rep.elapsedMs} ms: ${JSON.stringify(rep.errors)}`);
  });

  test('a slice created before its service, and several ports matched by name, work', async () => {
    box.api.create(
      slice(
        'multi-1',
        'multi',
        [{ ip: PODS[2].ip }],
        [
          { name: 'b', port: 5353, protocol: 'UDP' },
          { name: 'a', port: 8080 },
        ],
      ),
    );
    box.api.create(
      service('multi', '198.19.0.40', [
        { name: 'a', port: 8000, targetPort: 1 },
        { name: 'b', port: 9000, targetPort: 2, protocol: 'UDP' },
      ]),
    );
    await waitFor('multi to be programmed', () => masterCount('198.19.0.40', 8000) === 1 && masterCount('198.19.0.40', 9000) === 1);
    assert.deepEqual((await box.client('http', '198.19.0.40:8000', ['--count', '5'])).byPod, { 'web-c': 5 });
    assert.deepEqual((await box.client('udp', '198.19.0.40:9000', ['--count', '5'])).byPod, { 'web-c': 5 });
  });

  test('bad input is skipped with a log line naming the object; the agent and programmed services are not disturbed', async () => {
    const before = kernelState();
    const from = box.agent!.logs.length;
    box.api.create({ ...service('bad-ip', '198.19.0.50', [{ name: 'http', port: 80, targetPort: 8080 }]) });
    // A slice the API server would refuse (an invalid address) is rejected whole by the watch layer;
    // the Service's other slice still serves.
    box.api.create(slice('bad-ip-1', 'bad-ip', [{ ip: '300.1.2.3' }, { ip: PODS[1].ip }], [{ name: 'http', port: 8080 }]));
    box.api.create(slice('bad-ip-2', 'bad-ip', [{ ip: PODS[0].ip }], [{ name: 'http', port: 8080 }]));
    box.api.create(slice('noports-1', 'web', [{ ip: '198.18.0.99' }], []));
    const dup = service('dup', '198.19.0.51', [{ name: 'http', port: 80, targetPort: 8080 }]);
    box.api.create({ ...dup, spec: { ...dup.spec, externalIPs: ['198.19.0.51'] } });
    // An SCTP port is programmed like a TCP one (its traffic is the tc path's to drop: rule 39 of docs/semantics.md).
    box.api.create(service('sctp', '198.19.0.52', [{ name: 's', port: 80, targetPort: 80, protocol: 'SCTP' }]));
    const rejected = await box.agent!.waitForLog('k8s object rejected; treated as absent', 5000, from);
    assert.equal(rejected.kind, 'EndpointSlice');
    assert.equal(rejected.object, 'e2e/bad-ip-1');
    assert.match(String(rejected.field), /^endpoints\[0\]\.addresses\[0\]$/);
    assert.match(String(rejected.reason), /300\.1\.2\.3/);
    await waitFor("bad-ip to be programmed with the valid slice's one endpoint", () => masterCount('198.19.0.50', 80) === 1);
    // The maps can be read before the agent's log line about them has come through the pipe: wait for the line.
    const reasons = () =>
      box
        .agent!.logs.slice(from)
        .filter((l) => l.msg === 'skipped invalid or unsupported input')
        .map((l) => `${l.object}: ${l.reason}`);
    await waitFor('the duplicate externalIP frontend to be reported', () =>
      reasons().some((r) => r.startsWith('Service e2e/dup') && /duplicates another frontend/.test(r)),
    ).catch((e: Error) => {
      throw new Error(`${e.message}; reported:\n${reasons().join('\n')}`);
    });
    await waitFor('the SCTP frontend to be programmed', () =>
      kernelState().services.some(([k]) => k.addr === '198.19.0.52' && k.port === 80 && k.proto === IPPROTO.SCTP && k.slot === 0),
    );
    assert.ok(!reasons().some((r) => r.startsWith('Service e2e/sctp')), `SCTP not reported as skipped: ${reasons().join('\n')}`);
    assert.equal(box.agent!.child.exitCode, null, 'the agent keeps running');
    // web's entries are unchanged: the port-less slice adds nothing.
    const webNow = kernelState().services.filter(([k]) => k.addr === '198.19.0.10');
    const webBefore = before.services.filter(([k]) => k.addr === '198.19.0.10');
    assert.deepEqual(sortEntries(webNow), sortEntries(webBefore));
    assert.equal((await box.client('http', '198.19.0.10:80', ['--count', '30'])).failed, 0);
  });

  test('headless and ExternalName services are ignored', async () => {
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'headless', namespace: 'e2e' },
      spec: { clusterIP: 'None', ports: [{ name: 'http', port: 80 }] },
    });
    box.api.create({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'ext', namespace: 'e2e' },
      spec: { type: 'ExternalName', externalName: 'example.invalid', clusterIP: '198.19.0.61', ports: [{ name: 'http', port: 80 }] },
    });
    box.api.create(slice('headless-1', 'headless', [{ ip: PODS[0].ip }], [{ name: 'http', port: 8080 }]));
    box.api.create(slice('ext-1', 'ext', [{ ip: PODS[0].ip }], [{ name: 'http', port: 8080 }]));
    // A later change that is programmed proves the agent processed the earlier ones.
    box.api.create(service('marker', '198.19.0.62', [{ name: 'http', port: 80, targetPort: 8080 }]));
    await waitFor('marker', () => masterCount('198.19.0.62', 80) === 0);
    assert.equal(masterCount('198.19.0.61', 80), undefined);
  });

  test('kpr service list prints what the maps hold', () => {
    const out = JSON.parse(execFileSync(cliBin, ['service', 'list', '--bpffs', box.sandbox.bpffsDir, '-o', 'json'], { encoding: 'utf8' }));
    const web = out.find((s: { address: string; port: number }) => s.address === '198.19.0.10' && s.port === 80);
    assert.equal(web.protocol, 'TCP');
    assert.deepEqual(
      web.backends.map((b: { address: string; port: number }) => `${b.address}:${b.port}`).sort(),
      PODS.map((p) => `${p.ip}:8080`),
    );
    const table = execFileSync(cliBin, ['service', 'list', '--bpffs', box.sandbox.bpffsDir], { encoding: 'utf8' });
    assert.match(table, /^TCP  198\.19\.0\.10:80 .*3 backends/m);
    assert.match(table, /-> 198\.18\.0\.10:8080/);
  });

  test('the agent killed and restarted while a client connects in a loop: not one connection fails, nothing is flushed', async () => {
    const stateBefore = kernelState();
    const loop = box.startClient('loop', '198.19.0.10:80', ['--duration-ms', String(scaled(6000)), '--timeout-ms', '2000']);
    await new Promise((r) => setTimeout(r, 800));
    await box.stopAgent('SIGKILL');
    await new Promise((r) => setTimeout(r, 800));
    const restarted = await box.startAgent();
    const initial = restarted.logs.find((l) => l.msg === 'initial sync complete')!;
    assert.equal(initial.written, 0, 'adopted maps already hold the desired state: nothing rewritten');
    assert.equal(initial.deleted, 0);
    const noWriter = restarted.logs.find((l) => /batch writer thread unavailable/.test(String(l.msg)));
    assert.equal(noWriter, undefined, 'the agent runs its large map batches on the writer thread (build/libkpr_batch_writer.so)');
    const rep = await loop.report;
    assert.ok(rep.ok > 50, `only ${rep.ok} connections made`);
    assert.equal(rep.failed, 0, `failures during restart: ${JSON.stringify(rep.errors)}`);
    assert.equal(Object.keys(rep.byPod).length, 3);
    assert.deepEqual(sortEntries(kernelState().services), sortEntries(stateBefore.services));
  });

  test('deleting every service returns the maps to empty (ids and entries do not leak)', async () => {
    for (const s of box.api.list('Service')) box.api.remove('Service', s.metadata!.namespace, s.metadata!.name!);
    await waitFor('empty maps', () => {
      const k = kernelState();
      return k.services.length === 0 && k.backends.length === 0;
    });
    box.api.create(service('again', '198.19.0.70', [{ name: 'http', port: 80, targetPort: 8080 }]));
    box.api.create(slice('again-1', 'again', [{ ip: PODS[0].ip }], [{ name: 'http', port: 8080 }]));
    await waitFor('again', () => masterCount('198.19.0.70', 80) === 1);
    const k = kernelState();
    assert.deepEqual(
      k.backends.map(([id]) => id),
      [1],
      'backend ids are reused from 1',
    );
    assert.equal(k.services.find(([key]) => key.slot === 0)![1].frontendId, 1, 'service ids are reused from 1');
  });

  test("kpr attaches its tc programs to the sandbox's interfaces only, never to one of the host's, in every tc attach mode (switching mode leaves nothing of the other)", async () => {
    /** kpr's programs on the node namespace's interfaces in `mode`, by interface. */
    const inNode = (mode: TcMode) =>
      withNetns(nsPath(box.topo.nodeNs), () =>
        Object.fromEntries(
          listInterfaces()
            .map((i) => [i.name, kprIngressPrograms(mode, i.name)])
            .filter(([, ids]) => ids.length > 0),
        ),
      );
    const check = (mode: TcMode, what: string) => {
      const attached = inNode(mode);
      const podIfs = Object.keys(attached);
      assert.ok(
        podIfs.length > 0 && podIfs.every((n) => n.startsWith('v')),
        `${what}: the pod-facing veths of the sandbox carry kpr_tc_pod, nothing else: ${JSON.stringify(attached)}`,
      );
      const other: TcMode = mode === 'tcx' ? 'tc' : 'tcx';
      if (other === 'tc' || tcModeCases().length > 1) assert.deepEqual(inNode(other), {}, `${what}: nothing left in ${other} mode`);
      const kprProgs = new Set(Object.values(attached).flat());
      for (const { name } of listInterfaces()) {
        const on = anyIngressPrograms(name);
        assert.deepEqual(
          on.tcx.filter((id) => kprProgs.has(id)),
          [],
          `${what}: host interface ${name} (tcx)`,
        );
        assert.deepEqual(on.tc, [], `${what}: host interface ${name} has a filter at kpr's handle/priority`);
      }
    };
    const cases = tcModeCases();
    assertAgentMode(box.agent!.logs, cases[0].mode, 'the agent');
    check(cases[0].mode, cases[0].label);
    if (cases.length < 2) return;
    // The other mode, then back: each agent replaces the other's attachments.
    for (const c of [cases[1], cases[0]]) {
      await box.stopAgent('SIGTERM');
      const agent = await box.startAgent(c.args);
      assertAgentMode(agent.logs, c.mode, c.label);
      await waitFor(`${c.label}: kpr_tc_pod on the veths`, () => Object.keys(inNode(c.mode)).length > 0);
      check(c.mode, c.label);
    }
  });

  test('kpr adds no iptables or nftables rule, in the node namespace or on the host', () => {
    const node = box.topo.nodeNs;
    const rules = (out: string) => out.split('\n').filter((l) => l.startsWith('-A') || /^\s*(chain|rule|table)\b/.test(l));
    assert.deepEqual(rules(inNs(node, 'iptables-save')), []);
    assert.deepEqual(rules(inNs(node, 'nft', 'list', 'ruleset')), []);
    const hostRules = execFileSync('iptables-save', { encoding: 'utf8' }) + execFileSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
    assert.doesNotMatch(hostRules, /kpr|198\.19\./i);
  });
});

function sortEntries<K, V>(entries: Array<[K, V]>): string[] {
  return entries.map((e) => JSON.stringify(e)).sort();
}
