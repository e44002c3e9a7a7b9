/**
 * Fault injection against the real agent: the node taken apart under it
 * (pins removed and replaced, bpffs unmounted, the socket programs' cgroup
 * removed, a tc interface deleted, an incompatible map pinned before start),
 * the agent itself killed and stopped over and over, a second agent on the
 * same pins, and the embedded API server driven to misbehave (watches closed,
 * history compacted so resumes get 410, requests failing, watches held)
 * while Services churn and backends roll. Wherever the datapath is meant to
 * hold, a client connects to a ClusterIP in a loop and not one connection
 * may fail; after each fault the maps converge within a bound. Each fault
 * prints one line: fault=<name> connections=<n> failed=<n> convergeMs=<n>.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readdirSync, rmdirSync, rmSync } from 'node:fs';
import { BoxCluster, NODE_NAME, waitFor, type AgentProcess } from '../../sandbox/cluster.js';
import { inNs, ip, nsPath } from '../../sandbox/netns.js';
import { BPF_MAP_TYPE, BpfMap, queryTcxPrograms, TCX, withNetns } from '../../native/index.js';
import { BpfDatapathMaps } from '../../agent/maps/bpf-datapath-maps.js';
import { MAP_NAMES, SCOPE } from '../../agent/maps/layout.js';
import { linkPinDir, mapPinPath } from '../../agent/datapath/pins.js';
import type { ClientReport } from '../../sandbox/client.js';
import type { KubeObject } from '../../sandbox/apiserver-selectors.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { metricValue } from '../support/agent-metrics.js';
import { requireRoot } from '../support/preflight.js';
import { withPinnedMaps as withPinnedMapsUnder } from '../support/pinned-maps.js';

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
  { name: 'web-c', ip: '198.18.0.12' },
];
const WEB = '198.19.0.10';
const SYNC_PERIOD_MS = 3000;
/** The agent rescans interfaces, the cgroup and its pins every 2 s: a repair lands within two of those. */
const NODE_CHECK_BOUND_MS = 5000;

interface Ep {
  ip: string;
  ready: boolean;
  terminating?: boolean;
}

const service = (name: string, clusterIP: string, port = 80): KubeObject => httpService('e2e', name, clusterIP, {}, port);

function slice(name: string, svc: string, eps: Ep[]): KubeObject {
  const conditions = (e: Ep) => ({ ready: e.ready, serving: e.ready || e.terminating === true, terminating: e.terminating === true });
  return httpSlice(
    'e2e',
    name,
    svc,
    eps.map((e) => ({ ip: e.ip, conditions: conditions(e) })),
  );
}

/**
 * What the maps must hold, from the API objects alone: ClusterIP:port -> the
 * ready endpoints' ip:port (every endpoint here is ready or not ready, never
 * terminating, so kube-proxy's rule is just "the ready ones").
 */
function expectedFrontends(services: KubeObject[], slices: KubeObject[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const s of services) {
    const spec = s.spec as { clusterIP: string; ports: Array<{ name: string; port: number }> };
    const mine = slices.filter(
      (sl) => (sl.metadata as { labels?: Record<string, string> }).labels?.['kubernetes.io/service-name'] === (s.metadata as { name: string }).name,
    );
    for (const p of spec.ports) {
      const set = new Set<string>();
      for (const sl of mine) {
        const port = (sl.ports as Array<{ name: string; port: number }>).find((x) => x.name === p.name)?.port;
        if (port === undefined) continue;
        for (const e of sl.endpoints as Array<{ addresses: string[]; conditions: { ready?: boolean } }>) {
          if (e.conditions.ready !== false) for (const a of e.addresses) set.add(`${a}:${port}`);
        }
      }
      out.set(`${spec.clusterIP}:${p.port}`, [...set].sort());
    }
  }
  return out;
}

describe('fault injection end to end', { timeout: scaled(600_000) }, () => {
  let box: BoxCluster;
  let bpffsMounted = false;
  const summaries: string[] = [];
  /** Agents this test started besides box.agent (the two-agent handover). */
  const extraAgents: AgentProcess[] = [];

  const summary = (fault: string, rep: { ok: number; failed: number }, convergeMs: number) => {
    const line = `fault=${fault} connections=${rep.ok + rep.failed} failed=${rep.failed} convergeMs=${Math.round(convergeMs)}`;
    summaries.push(line);
    console.log(line);
  };

  const urlOf = async (agent: AgentProcess, what: 'metrics' | 'health') => `http://${(await agent.waitForLog(`${what} server listening`)).address}`;

  const metric = async (name: string, labels: Record<string, string> = {}) => metricValue(await urlOf(box.agent!, 'metrics'), name, labels);

  const withPinnedMaps = <T>(fn: (m: BpfDatapathMaps) => T): T => withPinnedMapsUnder(box.sandbox.bpffsDir, fn);

  /** ClusterIP:port -> backend ip:port, as the pinned maps hold it (external scope, the slots of each master). */
  function programmedFrontends(): Map<string, string[]> {
    return withPinnedMaps((m) => {
      const backends = new Map(m.dumpBackends().map(([id, b]) => [id, `${b.addr}:${b.port}`]));
      const out = new Map<string, Set<string>>();
      for (const [k, v] of m.dumpServices()) {
        if (k.scope !== SCOPE.EXTERNAL) continue;
        const fe = `${k.addr}:${k.port}`;
        if (!out.has(fe)) out.set(fe, new Set());
        if (k.slot > 0) out.get(fe)!.add(backends.get(v.backendId) ?? `missing backend ${v.backendId}`);
      }
      return new Map([...out].map(([fe, s]) => [fe, [...s].sort()]));
    });
  }

  const backendsOf = (fe: string) => programmedFrontends().get(fe) ?? [];

  /** A ClusterIP connect loop from the node (through the socket hooks) that runs until stopped. */
  function connectLoop() {
    const run = box.startClient('loop', `${WEB}:80`, ['--duration-ms', String(scaled(300_000)), '--timeout-ms', '2000']);
    return {
      async stop(): Promise<ClientReport> {
        run.child.kill('SIGTERM');
        return run.report;
      },
    };
  }

  const pause = (ms: number) => new Promise((r) => setTimeout(r, scaled(ms)));
  const alive = (a: AgentProcess) => a.child.exitCode === null && a.child.signalCode === null;

  /** The agent logged no failure nobody caught (main.ts's last line of defence). */
  function assertNoUncaught(agent: AgentProcess): void {
    const bad = agent.logs.filter((l) => l.msg === 'unexpected failure; the agent keeps running');
    assert.deepEqual(bad, [], 'an uncaught exception in the agent');
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    // kpr's bpffs directory is a bpf filesystem of its own, so this test may unmount it.
    mkdirSync(box.sandbox.bpffsDir, { recursive: true });
    execFileSync('mount', ['-t', 'bpf', 'bpf', box.sandbox.bpffsDir]);
    bpffsMounted = true;
    // The Node object (healthz answers 503 for a node the API server does not know, like kube-proxy).
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
    box.api.create(service('web', WEB));
    box.api.create(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`]);
  });

  after(async () => {
    for (const a of extraAgents) if (alive(a)) a.child.kill('SIGKILL');
    await box?.stopAgent('SIGKILL').catch(() => undefined);
    // Unmounted before the sandbox removes the directory (what the unmount test may have
    // pinned on the parent bpffs lies under the mount point, removed with it).
    for (let i = 0; i < 3 && bpffsMounted; i++) {
      try {
        execFileSync('umount', [box.sandbox.bpffsDir], { stdio: 'ignore' });
      } catch {
        bpffsMounted = false;
      }
    }
    await box?.close();
    if (summaries.length) console.log(`fault summary:\n${summaries.join('\n')}`);
  });

  test('pins removed and a pinned map replaced by one of another type while the agent runs: the agent pins its own objects again, no connection fails', async () => {
    const agent = box.agent!;
    const loop = connectLoop();
    await pause(500);
    const from = agent.logs.length;
    const t0 = performance.now();
    // Every link pin and most map pins removed, as `rm -r` would.
    rmSync(linkPinDir(box.sandbox.bpffsDir), { recursive: true, force: true });
    for (const name of [MAP_NAMES.backend, MAP_NAMES.vip]) rmSync(mapPinPath(box.sandbox.bpffsDir, name));
    // kpr_svc replaced by a map of another type and size.
    const foreign = BpfMap.create(BPF_MAP_TYPE.ARRAY, 4, 8, 4, 'not_kpr');
    try {
      rmSync(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.svc));
      foreign.pin(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.svc));
      const line = await agent.waitForLog((l) => l.msg === "pinned objects replaced by others; pinned the agent's own again", NODE_CHECK_BOUND_MS, from);
      const convergeMs = performance.now() - t0;
      const pins = line.pins as Array<{ pin: string; object: string; reason: string; found?: string }>;
      const svcRepair = pins.find((p) => p.pin === mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.svc))!;
      assert.equal(svcRepair.reason, 'replaced');
      assert.match(svcRepair.found ?? '', /array, key 4 B, value 8 B/);
      assert.ok(pins.filter((p) => p.object === 'link' && p.reason === 'missing').length >= 6, JSON.stringify(pins));
      const pinned = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.svc));
      try {
        assert.notEqual(pinned.id, foreign.id);
      } finally {
        pinned.close();
      }
      // Through the restored pins the maps are the agent's: the Service is there, whole.
      assert.deepEqual(
        backendsOf(`${WEB}:80`),
        PODS.map((p) => `${p.ip}:8080`),
      );
      await pause(500);
      const rep = await loop.stop();
      summary('pins-removed-and-replaced', rep, convergeMs);
      assert.ok(rep.ok > 20, `only ${rep.ok} connections`);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.equal(await metric('kpr_pins_restored_total', { object: 'map', reason: 'replaced' }), 1);
      assert.equal(await metric('kpr_pins_restored_total', { object: 'map', reason: 'missing' }), 2);
      assert.ok((await metric('kpr_pins_restored_total', { object: 'link', reason: 'missing' })) >= 6);
      // A restart adopts the restored pins: nothing rewritten.
      await box.stopAgent('SIGTERM');
      const restarted = await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`]);
      const initial = restarted.logs.find((l) => l.msg === 'initial sync complete')!;
      assert.equal(initial.written, 0, JSON.stringify(initial));
    } finally {
      foreign.close();
    }
  });

  test('bpffs unmounted under the running agent: connections keep working on its open maps and links, Service changes are still programmed, one log line per distinct error, and everything is pinned again when bpffs is back', async () => {
    const agent = box.agent!;
    const dir = box.sandbox.bpffsDir;
    const loop = connectLoop();
    await pause(500);
    const from = agent.logs.length;
    // The bpffs goes; what is left at the path is not a bpf filesystem.
    execFileSync('sh', ['-c', `umount "$0" && mount -t tmpfs kpr-not-bpffs "$0"`, dir]);
    const failed = await agent.waitForLog(
      (l) => l.msg === 'node datapath timer failed; retrying every tick' && l.op === 'pin_check',
      NODE_CHECK_BOUND_MS,
      from,
    );
    assert.match(String(failed.error), /is not on a bpf filesystem/);
    // A change while bpffs is gone: programmed through the agent's open map fds.
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.slice(0, 2).map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await pause(5000);
    const mid = await box.client('http', `${WEB}:80`, ['--count', '60']);
    assert.equal(mid.failed, 0, JSON.stringify(mid.errors));
    assert.deepEqual(Object.keys(mid.byPod).sort(), ['web-a', 'web-b'], 'the change was programmed with bpffs gone');
    assert.ok(alive(agent));
    const failures = agent.logs.slice(from).filter((l) => l.msg === 'node datapath timer failed; retrying every tick' && l.op === 'pin_check');
    assert.equal(failures.length, 1, 'logged once, not per tick');
    assert.ok((await metric('kpr_node_datapath_errors_total', { op: 'pin_check' })) >= 2);

    const back = agent.logs.length;
    const t0 = performance.now();
    execFileSync('sh', ['-c', `umount "$0" && mount -t bpf bpf "$0"`, dir]);
    await agent.waitForLog((l) => l.msg === 'node datapath timer recovered' && l.op === 'pin_check', NODE_CHECK_BOUND_MS, back);
    const convergeMs = performance.now() - t0;
    assert.ok(existsSync(mapPinPath(dir, MAP_NAMES.svc)));
    assert.ok(readdirSync(linkPinDir(dir)).length >= 6, 'the cgroup links are pinned again');
    assert.deepEqual(
      backendsOf(`${WEB}:80`),
      PODS.slice(0, 2).map((p) => `${p.ip}:8080`),
    );
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await waitFor('web-c back', () => backendsOf(`${WEB}:80`).length === 3, 5000);
    const rep = await loop.stop();
    summary('bpffs-unmounted', { ok: rep.ok + mid.ok, failed: rep.failed + mid.failed }, convergeMs);
    assert.ok(rep.ok > 50, `only ${rep.ok} connections`);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assertNoUncaught(agent);
  });

  test("the socket programs' cgroup removed and created again: logged once, counted, and the programs are attached to the new cgroup", async () => {
    const agent = box.agent!;
    const cg = box.sandbox.cgroupPath;
    const from = agent.logs.length;
    // A cgroup can only be removed empty: no client runs during this step.
    await waitFor(
      'the cgroup to be removed',
      () => {
        rmdirSync(cg);
        return true;
      },
      3000,
      50,
    );
    const failed = await agent.waitForLog(
      (l) => l.msg === 'node datapath timer failed; retrying every tick' && l.op === 'cgroup_check',
      NODE_CHECK_BOUND_MS,
      from,
    );
    assert.match(String(failed.error), /is gone/);
    await pause(4500);
    assert.equal(agent.logs.slice(from).filter((l) => l.op === 'cgroup_check' && l.msg === 'node datapath timer failed; retrying every tick').length, 1);
    assert.ok((await metric('kpr_node_datapath_errors_total', { op: 'cgroup_check' })) >= 2);
    const t0 = performance.now();
    mkdirSync(cg);
    await agent.waitForLog('socket programs attached to the re-created cgroup', NODE_CHECK_BOUND_MS, from);
    const convergeMs = performance.now() - t0;
    const rep = await box.client('http', `${WEB}:80`, ['--count', '100']);
    summary('cgroup-recreated', rep, convergeMs);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.equal(Object.keys(rep.byPod).length, 3);
    assert.equal(await metric('kpr_cgroup_reattached_total'), 1);
    assertNoUncaught(agent);
  });

  test('a tc-attached interface deleted and created again: the program is attached to the new interface and a pod behind it reaches the ClusterIP through tc', async () => {
    const agent = box.agent!;
    const pod = box.topo.pods.get('web-a')!;
    const nodeNs = box.topo.nodeNs;
    // sandbox/topology.ts names the host side of the first pod's veth so.
    const hostSide = `v0${box.sandbox.runId.slice(-6)}`.slice(0, 15);
    const tcxOn = (ifname: string) => withNetns(nsPath(nodeNs), () => queryTcxPrograms(ifname, TCX.INGRESS));
    assert.equal(tcxOn(hostSide).length, 1, "kpr's tc program on web-a's veth");
    const from = agent.logs.length;
    ip('-n', nodeNs, 'link', 'del', hostSide);
    const t0 = performance.now();
    ip('link', 'add', hostSide, 'netns', nodeNs, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.ns);
    inNs(nodeNs, 'ip', 'link', 'set', hostSide, 'master', 'br0');
    inNs(nodeNs, 'ip', 'link', 'set', hostSide, 'up');
    inNs(pod.ns, 'ip', 'addr', 'add', `${pod.ip}/24`, 'dev', 'eth0');
    inNs(pod.ns, 'ip', 'link', 'set', 'eth0', 'up');
    // The node still holds the old veth's MAC for the pod's address: a re-created pod gets a new MAC
    // (as a CNI's does), and waiting for the stale neighbour to fail is the test's delay, not kpr's.
    inNs(nodeNs, 'ip', 'neigh', 'flush', 'to', pod.ip);
    const attached = await agent.waitForLog((l) => l.msg === 'tc program attached' && l.interface === hostSide, NODE_CHECK_BOUND_MS, from);
    const convergeMs = performance.now() - t0;
    // The kernel has kpr's program on the new interface.
    assert.deepEqual(tcxOn(hostSide), [attached.progId]);
    assert.equal(await metric('kpr_tc_attached_interfaces', { mode: 'tcx' }), 3);
    // The pod behind the new interface is a backend again.
    const rep = await box.client('http', `${WEB}:80`, ['--count', '90']);
    summary('interface-recreated', rep, convergeMs);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.ok(rep.byPod['web-a'] > 0, JSON.stringify(rep.byPod));
    assertNoUncaught(agent);
  });

  test("a map of another size pinned at one of kpr's paths before the agent starts: the agent replaces it, fills the new map, and the previous programs serve until then", async () => {
    const loop = connectLoop();
    await pause(500);
    await box.stopAgent('SIGTERM');
    const pin = mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.backend);
    const foreign = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 16, 'not_kpr');
    try {
      rmSync(pin);
      foreign.pin(pin);
      const t0 = performance.now();
      const agent = await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`]);
      // The set migrates (agent/datapath/migration.ts): the new kpr_backend is pinned in place once it ends.
      await agent.waitForLog('map migration done: the old maps are released');
      const convergeMs = performance.now() - t0;
      const line = agent.logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('pinned maps are not the maps kpr defines'))!;
      assert.ok(line, 'the replacement is logged');
      const bad = line.maps as Array<{ name: string; why: string }>;
      assert.deepEqual(
        bad.map((b) => b.name),
        [MAP_NAMES.backend],
      );
      assert.match(bad[0].why, /value_size 4 != /);
      const pinned = BpfMap.openPinned(pin);
      try {
        assert.notEqual(pinned.id, foreign.id);
        assert.notEqual(pinned.valueSize, 4);
      } finally {
        pinned.close();
      }
      assert.deepEqual(
        backendsOf(`${WEB}:80`),
        PODS.map((p) => `${p.ip}:8080`),
      );
      await pause(500);
      const rep = await loop.stop();
      summary('map-incompatible-at-start', rep, convergeMs);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.equal(await metric('kpr_pins_restored_total', { object: 'map', reason: 'incompatible' }), 1);
    } finally {
      foreign.close();
    }
  });

  test('the agent killed (SIGKILL) and stopped (SIGTERM) over and over under a connect loop: not one connection fails', async () => {
    const loop = connectLoop();
    let worstMs = 0;
    for (let i = 0; i < 6; i++) {
      await pause(300);
      await box.stopAgent(i % 2 === 0 ? 'SIGKILL' : 'SIGTERM');
      await pause(200);
      const t0 = performance.now();
      await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`]);
      worstMs = Math.max(worstMs, performance.now() - t0);
    }
    await pause(300);
    const rep = await loop.stop();
    summary('restarts-sigkill-sigterm', rep, worstMs);
    assert.ok(rep.ok > 50, `only ${rep.ok} connections`);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.equal(Object.keys(rep.byPod).length, 3);
  });

  test('Service and endpoint churn while watches are closed and history compacted (410 on resume): the maps end equal to what the API objects say', async () => {
    const agent = box.agent!;
    const loop = connectLoop();
    const N = 12;
    const epIp = (i: number, j: number) => `198.18.${1 + i}.${10 + j}`;
    let seed = 17;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    let faults = 0;
    const injector = setInterval(() => {
      faults++;
      if (faults % 2) box.api.dropWatches();
      else box.api.compactHistory();
      if (faults % 3 === 0) box.api.dropWatches();
    }, scaled(100));
    try {
      for (let step = 0; step < 240; step++) {
        const i = rand(N);
        const name = `churn-${i}`;
        const exists = box.api.get('Service', 'e2e', name) !== undefined;
        const op = rand(10);
        if (!exists) {
          box.api.apply(service(name, `198.19.1.${10 + i}`, 80 + rand(3)));
        } else if (op === 0) {
          box.api.remove('Service', 'e2e', name);
          if (box.api.get('EndpointSlice', 'e2e', `${name}-1`)) box.api.remove('EndpointSlice', 'e2e', `${name}-1`);
        } else {
          const eps = Array.from({ length: 1 + rand(5) }, (_, j) => ({ ip: epIp(i, j), ready: rand(4) !== 0 }));
          box.api.apply(slice(`${name}-1`, name, eps));
        }
        if (step % 8 === 0) await pause(40);
      }
    } finally {
      clearInterval(injector);
    }
    const t0 = performance.now();
    const isChurn = (o: KubeObject) => String((o.metadata as { name: string }).name).startsWith('churn-');
    const expected = () => expectedFrontends(box.api.list('Service', 'e2e').filter(isChurn), box.api.list('EndpointSlice', 'e2e').filter(isChurn));
    const actual = () => new Map([...programmedFrontends()].filter(([fe]) => fe.startsWith('198.19.1.')));
    const show = (m: Map<string, string[]>) => JSON.stringify([...m].sort(([a], [b]) => a.localeCompare(b)));
    await waitFor('the maps to equal the API objects', () => show(actual()) === show(expected()), 15_000, 100).catch((err) => {
      assert.fail(`${(err as Error).message}\nexpected ${show(expected())}\nactual   ${show(actual())}`);
    });
    const convergeMs = performance.now() - t0;
    const rep = await loop.stop();
    summary('churn-watch-drops-410', rep, convergeMs);
    assert.ok(expected().size > 3, 'the churn left Services behind');
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.ok(faults >= 6, `${faults} watch faults injected`);
    assert.ok(alive(agent));
    assertNoUncaught(agent);
  });

  test('API server outage (every request fails and watches are held): connections keep working, /healthz stays 200, and the agent converges after', async () => {
    const agent = box.agent!;
    const healthUrl = `${await urlOf(agent, 'health')}/healthz`;
    const loop = connectLoop();
    await pause(300);
    const codes = new Map<number, number>();
    let t0: number;
    try {
      box.api.failRequests(1_000_000, { code: 503 });
      box.api.pauseWatches();
      // A change the agent cannot see until the outage ends.
      box.api.apply(
        slice(
          'web-1',
          'web',
          PODS.slice(1).map((p) => ({ ip: p.ip, ready: true })),
        ),
      );
      const end = Date.now() + scaled(6000);
      while (Date.now() < end) {
        const res = await fetch(healthUrl);
        codes.set(res.status, (codes.get(res.status) ?? 0) + 1);
        if (res.status !== 200) console.log(`healthz ${res.status}: ${await res.text()}`);
        await pause(250);
      }
      assert.deepEqual(backendsOf(`${WEB}:80`).length, 3, 'nothing flushed during the outage');
    } finally {
      t0 = performance.now();
      box.api.failRequests(0);
      box.api.resumeWatches();
    }
    assert.deepEqual([...codes.keys()], [200], `healthz during the outage: ${JSON.stringify([...codes])}`);
    await waitFor('the change made during the outage to be programmed', () => backendsOf(`${WEB}:80`).length === 2, 30_000, 50);
    const convergeMs = performance.now() - t0;
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await waitFor('web-a back', () => backendsOf(`${WEB}:80`).length === 3, 10_000);
    const rep = await loop.stop();
    summary('api-outage-6s', rep, convergeMs);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.equal((await fetch(healthUrl)).status, 200);
    assertNoUncaught(agent);
  });

  test('a second agent started on the same pins while the first runs (a rolling update with maxSurge), then the first stopped: not one connection fails', async () => {
    const loop = connectLoop();
    await pause(300);
    const first = box.agent!;
    const t0 = performance.now();
    const second = await box.startAgent(['--sync-period', `${SYNC_PERIOD_MS}ms`]);
    extraAgents.push(first);
    const convergeMs = performance.now() - t0;
    await pause(1000);
    first.child.kill('SIGTERM');
    await once(first.child, 'exit');
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.slice(0, 2).map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await waitFor('the second agent programs changes alone', () => backendsOf(`${WEB}:80`).length === 2, 5000);
    box.api.apply(
      slice(
        'web-1',
        'web',
        PODS.map((p) => ({ ip: p.ip, ready: true })),
      ),
    );
    await waitFor('and back', () => backendsOf(`${WEB}:80`).length === 3, 5000);
    const rep = await loop.stop();
    summary('two-agents-handover', rep, convergeMs);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.ok(alive(second));
    assertNoUncaught(second);
    assertNoUncaught(first);
  });

  test('every backend replaced one by one (new pod ready, old one terminating, then gone): not one connection fails and none goes to a terminating pod', async () => {
    const loop = connectLoop();
    let current = PODS.map((p) => ({ ...p }));
    let worstMs = 0;
    for (let i = 0; i < PODS.length; i++) {
      const old = current[i];
      const fresh = { name: `web-new-${i}`, ip: `198.18.0.${20 + i}` };
      await box.addPod(fresh.name, fresh.ip);
      const eps = (terminating: string | undefined, extra: Ep[]): Ep[] => [
        ...current.map((p) => ({ ip: p.ip, ready: p.ip !== terminating, terminating: p.ip === terminating })),
        ...extra,
      ];
      box.api.apply(slice('web-1', 'web', eps(undefined, [{ ip: fresh.ip, ready: false }])));
      box.api.apply(slice('web-1', 'web', eps(undefined, [{ ip: fresh.ip, ready: true }])));
      const t0 = performance.now();
      box.api.apply(slice('web-1', 'web', eps(old.ip, [{ ip: fresh.ip, ready: true }])));
      await waitFor(
        `${old.name} out of rotation while terminating`,
        () => {
          const b = backendsOf(`${WEB}:80`);
          return !b.includes(`${old.ip}:8080`) && b.includes(`${fresh.ip}:8080`);
        },
        5000,
        20,
      );
      worstMs = Math.max(worstMs, performance.now() - t0);
      const burst = await box.client('http', `${WEB}:80`, ['--count', '60']);
      assert.equal(burst.failed, 0, JSON.stringify(burst.errors));
      assert.equal(burst.byPod[old.name], undefined, `a new connection reached terminating ${old.name}: ${JSON.stringify(burst.byPod)}`);
      assert.ok(burst.byPod[fresh.name] > 0, `the new pod ${fresh.name} is served`);
      current = current.map((p, j) => (j === i ? fresh : p));
      box.api.apply(
        slice(
          'web-1',
          'web',
          current.map((p) => ({ ip: p.ip, ready: true })),
        ),
      );
      await waitFor('the terminated pod gone from the slice', () => backendsOf(`${WEB}:80`).length === 3, 5000);
    }
    const rep = await loop.stop();
    summary('rolling-backends', rep, worstMs);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.deepEqual(backendsOf(`${WEB}:80`), current.map((p) => `${p.ip}:8080`).sort());
    assertNoUncaught(box.agent!);
  });
});
