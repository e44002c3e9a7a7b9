/**
 * Kernel features end to end, with the real agent in the sandbox:
 *  - the feature list it logs at start and exports as kpr_kernel_feature is
 *    what the kernel answers (SO_NETNS_COOKIE, tcx probed here directly);
 *  - with SO_NETNS_COOKIE treated as absent (KPR_DISABLE_KERNEL_FEATURES),
 *    the cgroup sock_create fallback finds the node namespace's cookie: the
 *    very value SO_NETNS_COOKIE gives where the kernel has it, and one that
 *    makes service-mesh mode serve the node's own processes;
 *  - with the netns cookie facility failing (KPR_FAIL_KERNEL_FEATURES) the
 *    agent stays up, logs, counts and retries the failure with backoff, and
 *    keeps programming endpoint changes.
 */
import { scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME, waitFor } from '../../sandbox/cluster.js';
import { nsPath } from '../../sandbox/netns.js';
import { BpfMap, currentNetnsCookie, withNetns } from '../../native/index.js';
import { linkPinPath, mapPinPath } from '../../agent/datapath/pins.js';
import { CFG_FLAG, MAP_NAMES, decodeConfig } from '../../agent/maps/layout.js';
import { KERNEL_FEATURE_NAMES } from '../../agent/datapath/kernel-features.js';
import { requireRoot } from '../support/preflight.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { parseProm, valueOf, type Sample } from '../metrics/prom-text.js';

const PODS = [
  { name: 'kf-a', ip: '198.18.0.10' },
  { name: 'kf-b', ip: '198.18.0.11' },
];
const CLUSTER_IP = '198.19.0.10';

const service = () => httpService('kf', 'web', CLUSTER_IP);
const slice = (ips: string[]) => httpSlice('kf', 'web-1', 'web', ips);

/** SO_NETNS_COOKIE of a namespace, or undefined on a kernel without it. */
function sockoptCookie(netns: string): bigint | undefined {
  try {
    return withNetns(netns, () => currentNetnsCookie());
  } catch {
    return undefined;
  }
}

async function scrape(url: string): Promise<Sample[]> {
  const r = await fetch(`${url}/metrics`);
  assert.equal(r.status, 200);
  return parseProm(await r.text());
}

function configCookie(box: BoxCluster): { cookie: bigint; flags: number } {
  const m = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAP_NAMES.config));
  try {
    const c = decodeConfig(m.lookup(Buffer.alloc(4))!);
    return { cookie: c.hostNetnsCookie, flags: c.flags };
  } finally {
    m.close();
  }
}

async function boxWithWeb(): Promise<BoxCluster> {
  const box = await BoxCluster.create({ pods: PODS });
  box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, spec: {} });
  box.api.create(service());
  box.api.create(slice(PODS.map((p) => p.ip)));
  return box;
}

describe('kernel features: probed, reported, and their fallbacks used', { timeout: scaled(120_000) }, () => {
  let box: BoxCluster;

  before(async () => {
    requireRoot();
    box = await boxWithWeb();
  });

  after(async () => {
    await box?.close();
  });

  test('SO_NETNS_COOKIE, bpf_sock_destroy and tcx treated as absent: the sock_create fallback finds the node namespace cookie, service-mesh mode serves node processes; UDP sockets go through netlink; the tc programs attach as clsact filters', async () => {
    const agent = await box.startAgent(['--socket-lb-host-only'], { KPR_DISABLE_KERNEL_FEATURES: 'netns-cookie-sockopt,bpf-sock-destroy,tcx' });
    const line = await agent.waitForLog('kernel features');
    assert.match(String(line.summary), /netns-cookie-sockopt=fallback\(cgroup sock_create probe\)/);
    // --udp-termination auto without bpf_sock_destroy: netlink SOCK_DESTROY, and the registry says so.
    assert.match(String(line.summary), /bpf-sock-destroy=fallback\(netlink SOCK_DESTROY\)/);
    // One line holds every feature, each with the registry's words.
    assert.deepEqual(
      (line.features as string[]).map((f) => f.split(':')[0]),
      [...KERNEL_FEATURE_NAMES],
    );
    // Without tcx the tc programs attach as clsact filters (--tc-attach auto), the registry says so,
    // and the attacher does what the registry says (tcx disabled on a kernel that has it too).
    assert.match(String(line.summary), /tcx=fallback\(clsact\/cls_bpf\)/);
    const attach = await agent.waitForLog('tc attach mode');
    assert.equal(attach.mode, 'tc', JSON.stringify(attach));

    const metricsUrl = `http://${(await agent.waitForLog('metrics server listening')).address}`;
    const s = await scrape(metricsUrl);
    assert.equal(valueOf(s, 'kpr_kernel_feature', { feature: 'netns-cookie-sockopt', state: 'fallback', fallback: 'cgroup sock_create probe' }), 1);
    assert.equal(valueOf(s, 'kpr_kernel_feature', { feature: 'tcx', state: 'fallback', fallback: 'clsact/cls_bpf' }), 1);
    assert.equal(valueOf(s, 'kpr_kernel_feature', { feature: 'bpf-sock-destroy', state: 'fallback', fallback: 'netlink SOCK_DESTROY' }), 1);
    for (const f of KERNEL_FEATURE_NAMES) assert.equal(s.filter((x) => x.name === 'kpr_kernel_feature' && x.labels.feature === f).length, 1, f);

    // The cookie kpr_config holds is the node namespace's: the value SO_NETNS_COOKIE gives (where
    // the kernel has it) and, on any kernel, one the socket hooks match for a node process.
    const nodeNs = nsPath(box.topo.nodeNs);
    await waitFor('the node datapath settings', () => configCookie(box).cookie !== 0n, 10_000);
    const { cookie, flags } = configCookie(box);
    const expected = sockoptCookie(nodeNs);
    if (expected !== undefined) assert.equal(cookie, expected);
    assert.notEqual(cookie, sockoptCookie('/proc/self/ns/net') ?? 0n, "not the agent's own namespace");
    assert.equal(flags & CFG_FLAG.SOCK_HOST_ONLY, CFG_FLAG.SOCK_HOST_ONLY, 'host-only mode is on: the cookie is known');
    const rep = await box.client('http', `${CLUSTER_IP}:80`, ['--count', '10']);
    assert.equal(rep.ok, 10, JSON.stringify(rep.errors));
    // The probe's cgroup is gone again.
    assert.deepEqual(
      readdirSync(box.sandbox.cgroupPath).filter((n) => n.startsWith('kpr-netns-probe')),
      [],
    );
    await box.stopAgent();
  });

  test('a netns cookie facility that throws: the agent stays up, counts and retries it, and keeps programming endpoint changes', async () => {
    const agent = await box.startAgent(['--socket-lb-host-only'], { KPR_FAIL_KERNEL_FEATURES: 'netns-cookie-sockopt' });
    const metricsUrl = `http://${(await agent.waitForLog('metrics server listening')).address}`;
    const first = await agent.waitForLog((l) => l.msg === 'agent task failed, will retry' && l.task === 'node-datapath');
    assert.match(String(first.error), /netns-cookie-sockopt: failure injected by KPR_FAIL_KERNEL_FEATURES/);
    // Retried with a growing delay.
    const second = await agent.waitForLog((l) => l.msg === 'agent task failed, will retry' && l.task === 'node-datapath' && l.failures === 2, 10_000);
    assert.ok(Number(second.retryInMs) > Number(first.retryInMs), `backoff grows: ${first.retryInMs} then ${second.retryInMs}`);
    const s = await scrape(metricsUrl);
    assert.ok((valueOf(s, 'kpr_agent_task_failures_total', { task: 'node-datapath' }) ?? 0) >= 2);

    // Endpoint changes are still programmed: one pod leaves, then comes back.
    const syncs = agent.logs.length;
    box.api.apply(slice([PODS[1].ip]));
    await agent.waitForLog((l) => l.msg === 'sync' && l.trigger === 'event', 10_000, syncs);
    let rep = await box.client('http', `${CLUSTER_IP}:80`, ['--count', '20']);
    assert.equal(rep.ok, 20, JSON.stringify(rep.errors));
    assert.deepEqual(Object.keys(rep.byPod), [PODS[1].name]);
    const again = agent.logs.length;
    box.api.apply(slice(PODS.map((p) => p.ip)));
    await agent.waitForLog((l) => l.msg === 'sync' && l.trigger === 'event', 10_000, again);
    rep = await box.client('http', `${CLUSTER_IP}:80`, ['--count', '40']);
    assert.deepEqual(Object.keys(rep.byPod).sort(), PODS.map((p) => p.name).sort());
    assert.equal(agent.child.exitCode, null, 'the agent is still running');
    await box.stopAgent();
  });
  test('hooks treated as absent (getpeername, recvmsg): their programs are not loaded, pinned links detached, the rest still serves', async () => {
    const agent = await box.startAgent([], { KPR_DISABLE_KERNEL_FEATURES: 'cgroup-getpeername,cgroup-recvmsg' });
    const line = await agent.waitForLog('kernel features');
    assert.match(String(line.summary), /cgroup-recvmsg=off cgroup-getpeername=off/);
    for (const prog of ['kpr_recvmsg4', 'kpr_recvmsg6', 'kpr_getpeername4', 'kpr_getpeername6']) {
      assert.equal(existsSync(linkPinPath(box.sandbox.bpffsDir, prog)), false, `${prog} link detached`);
    }
    assert.equal(agent.logs.filter((l) => l.msg === 'detached the pinned link of a socket program this kernel cannot run').length, 4);
    const rep = await box.client('http', `${CLUSTER_IP}:80`, ['--count', '10']);
    assert.equal(rep.ok, 10, JSON.stringify(rep.errors));
    // What is lost, as the registry says: getpeername() now shows the pod.
    const peers = Object.keys(rep.peers);
    assert.ok(peers.length > 0 && peers.every((k) => PODS.some((p) => k === `${p.ip}:8080`)), `peers: ${peers}`);
    await box.stopAgent();
  });
});
