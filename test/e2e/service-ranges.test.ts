/**
 * Service ranges and the implicit loadBalancerSourceRanges allow, end to end
 * on the two-node box (rules 33 and 34 of docs/semantics.md), with real
 * connections:
 *  - an address inside a service range that no Service holds is refused on
 *    the socket path (ECONNREFUSED, EPERM before 5.18, KPR_STAT_UNALLOCATED_REFUSED) and dropped on the
 *    tc path (silence, KPR_STAT_TC_DROP_UNALLOCATED), while the ClusterIPs in
 *    the range are served and an allocated ClusterIP on an undefined port
 *    keeps its own refusal (unknown_port);
 *  - the ranges come from --service-cluster-ip-range until a ServiceCIDR
 *    object exists, follow ServiceCIDR objects added and removed at run time
 *    (kpr_svc_cidr read back), are repaired when changed behind the agent,
 *    and show in /configz and `kpr status`; a bad flag entry is a log line
 *    and a metric;
 *  - an API server that does not serve ServiceCIDR (before 1.33): the agent
 *    starts all the same and uses the flag, and follows the objects once the
 *    kind is served;
 *  - a packet from an LB IP to that LB IP (a hairpinning cloud load
 *    balancer) passes loadBalancerSourceRanges when a range holds the node's
 *    IP, while an outsider is dropped.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { MAP_NAMES, STAT, decodeSvcCidrKey } from '../../agent/maps/layout.js';
import { readStat } from '../../agent/datapath/datapath-stats.js';
import { scaled } from '../../sandbox/time-scale.js';
import { inNs } from '../../sandbox/netns.js';
import { waitFor } from '../../sandbox/cluster.js';
import { CLIENTS, TwoNodeCluster, UNDERLAY, type NodeName } from '../../sandbox/two-node.js';
import type { ClientReport } from '../../sandbox/client.js';
import { requireRoot } from '../support/preflight.js';
import { cliBin } from '../support/paths.js';
import { metricValue, metricsUrlOf } from '../support/agent-metrics.js';
import { e2eService as service, e2eSlice as slice } from '../support/e2e-objects.js';
import { expectedRefusal } from '../support/kernel.js';

/** The errno of a socket-path refusal on this kernel (docs/semantics.md, rule 23). */
const REFUSAL = expectedRefusal();

const PODS = [{ name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName }];
const WEB = '198.19.0.40';
/** In 198.19.0.0/16 and held by no Service. */
const UNALLOCATED = '198.19.7.7';
/** Outside the flag's range, inside the ServiceCIDR object's. */
const EXTRA_RANGE = '198.18.240.0/20';
const EXTRA_UNALLOCATED = '198.18.240.9';
const HAIRPIN_LB = '198.19.200.40';
const STRICT_LB = '198.19.200.41';
const DROP_TIMEOUT_MS = '800';

/** `kpr_svc_cidr` as the kernel holds it. */
function pinnedRanges(bpffs: string): string[] {
  const m = BpfMap.openPinned(mapPinPath(bpffs, MAP_NAMES.svcCidr));
  try {
    return [...m.keys()].map((k) => decodeSvcCidrKey(k).cidr).sort();
  } finally {
    m.close();
  }
}

function stat(bpffs: string, index: number): bigint {
  const m = BpfMap.openPinned(mapPinPath(bpffs, MAP_NAMES.stats));
  try {
    return readStat(m, index);
  } finally {
    m.close();
  }
}

/** Polls an async check until it holds (scaled timeout). */
async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + scaled(timeoutMs);
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function serviceCidr(name: string, cidrs: string[]) {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name }, spec: { cidrs } };
}

function assertDropped(rep: ClientReport, what: string): void {
  assert.equal(rep.ok, 0, `${what} was served: ${JSON.stringify(rep.byPod)}`);
  assert.deepEqual(rep.errors, { ETIMEDOUT: rep.failed }, `${what}: a drop is silence, not a refusal`);
}

describe('service ranges: unallocated service addresses refused and dropped; the implicit LB source-range allow', { timeout: scaled(120_000) }, () => {
  let box: TwoNodeCluster;
  let metrics: string;
  const bpffs = () => box.nodes['node-1'].bpffsDir;
  const inNode = (mode: 'http' | 'once' | 'udp', target: string, extra: string[] = []) =>
    box.client(box.nodes['node-1'].ns, mode, target, { cgroupOf: 'node-1', extra });

  before(async () => {
    requireRoot();
    box = await TwoNodeCluster.create({ pods: PODS });
    box.api.create(service('web', 'ClusterIP', WEB));
    box.api.create(slice('web', ['198.18.10.10']));
    // Source ranges holding node-1's InternalIP (198.18.1.1): the LB IP is an allowed source too.
    box.api.create(
      service(
        'hairpin',
        'LoadBalancer',
        '198.19.0.41',
        30141,
        { loadBalancerSourceRanges: ['198.18.1.0/24'] },
        { loadBalancer: { ingress: [{ ip: HAIRPIN_LB }] } },
      ),
    );
    box.api.create(slice('hairpin', ['198.18.10.10']));
    // Source ranges without the node's IP: no implicit allow.
    box.api.create(
      service(
        'strict',
        'LoadBalancer',
        '198.19.0.42',
        30142,
        { loadBalancerSourceRanges: ['198.18.100.0/24'] },
        { loadBalancer: { ingress: [{ ip: STRICT_LB }] } },
      ),
    );
    box.api.create(slice('strict', ['198.18.10.10']));
    await box.startAgent('node-1', [
      '--service-cluster-ip-range',
      '198.19.0.0/16, 198.19.0.1/8',
      '--sync-period',
      '1s',
      '--metrics-bind-address',
      '127.0.0.1:0',
      '--healthz-bind-address',
      '127.0.0.1:0',
    ]);
    metrics = await metricsUrlOf(box.agents.get('node-1')!);
  });

  after(async () => {
    await box?.close();
  });

  test("the flag's range: a ClusterIP in it is served; an unallocated address is refused (socket, ECONNREFUSED or EPERM before 5.18) and dropped (tc), each counted; an undefined port of a ClusterIP keeps its own refusal", async () => {
    assert.deepEqual(pinnedRanges(bpffs()), ['198.19.0.0/16']);
    const served = await inNode('http', `${WEB}:80`, ['--count', '3']);
    assert.equal(served.ok, 3, JSON.stringify(served.errors));

    const refusedBefore = stat(bpffs(), STAT.UNALLOCATED_REFUSED);
    const refused = await inNode('once', `${UNALLOCATED}:80`, ['--timeout-ms', '2000']);
    assert.deepEqual(refused.errors, { [REFUSAL]: 1 }, 'refused at connect, as every socket-path refusal');
    const udp = await inNode('udp', `${UNALLOCATED}:53`, ['--count', '1', '--timeout-ms', '1000']);
    assert.deepEqual(udp.errors, { [REFUSAL]: 1 });
    assert.equal(stat(bpffs(), STAT.UNALLOCATED_REFUSED) - refusedBefore, 2n);
    assert.equal(await metricValue(metrics, 'kpr_datapath_refusals_total', { reason: 'unallocated' }), Number(stat(bpffs(), STAT.UNALLOCATED_REFUSED)));

    const unknownBefore = stat(bpffs(), STAT.UNKNOWN_PORT);
    const refusedNow = stat(bpffs(), STAT.UNALLOCATED_REFUSED);
    const unknown = await inNode('once', `${WEB}:81`, ['--timeout-ms', '2000']);
    assert.deepEqual(unknown.errors, { [REFUSAL]: 1 });
    assert.equal(stat(bpffs(), STAT.UNKNOWN_PORT) - unknownBefore, 1n, 'an allocated ClusterIP on an undefined port: unknown_port, as before');
    assert.equal(stat(bpffs(), STAT.UNALLOCATED_REFUSED), refusedNow, 'not counted as unallocated');

    const droppedBefore = stat(bpffs(), STAT.TC_DROP_UNALLOCATED);
    const outside = await box.external('client-a', 'http', `${UNALLOCATED}:80`, ['--count', '2', '--timeout-ms', DROP_TIMEOUT_MS]);
    assertDropped(outside, `client-a to ${UNALLOCATED}`);
    assert.ok(stat(bpffs(), STAT.TC_DROP_UNALLOCATED) - droppedBefore >= 2n, 'each SYN (retransmissions too) dropped and counted');
    assert.ok((await metricValue(metrics, 'kpr_datapath_drops_total', { reason: 'unallocated' })) >= 2);
    // Outside any range, the node answers as it always did: no route, an ICMP error, not silence.
    const unrouted = await box.external('client-a', 'http', '198.18.250.1:80', ['--count', '1', '--timeout-ms', '2000']);
    assert.equal(unrouted.ok, 0);
    assert.notDeepEqual(unrouted.errors, { ETIMEDOUT: 1 }, 'outside the ranges nothing is dropped by kpr');
  });

  test('/configz and kpr status name the ranges and their source; the bad flag entry is a log line and a metric', async () => {
    const agent = box.agents.get('node-1')!;
    const bad = await agent.waitForLog((l) => l.msg === 'service range ignored');
    assert.deepEqual([bad.source, bad.value], ['flag', '198.19.0.1/8']);
    assert.match(String(bad.reason), /host bits set/);
    assert.equal(await metricValue(metrics, 'kpr_service_range_errors_total', { source: 'flag' }), 1);
    assert.equal(await metricValue(metrics, 'kpr_service_ranges', { source: 'flag' }), 1);
    const configz = (await (await fetch(`${metrics}/configz`)).json()) as {
      serviceRanges: { ranges: unknown[]; serviceCIDRApi: string; invalid: unknown[] };
      config: Record<string, unknown>;
    };
    assert.deepEqual(configz.serviceRanges.ranges, [{ cidr: '198.19.0.0/16', family: 'IPv4', source: 'flag' }]);
    assert.equal(configz.serviceRanges.serviceCIDRApi, 'served');
    assert.equal(configz.serviceRanges.invalid.length, 1);
    assert.deepEqual(configz.config.serviceClusterIPRange, ['198.19.0.0/16', '198.19.0.1/8']);
    const health = (await agent.waitForLog('health server listening')).address;
    const run = spawnSync(
      cliBin,
      ['status', '--bpffs', bpffs(), '--metrics-address', metrics.replace('http://', ''), '--healthz-address', String(health), '--timeout', '60s'],
      { encoding: 'utf8' },
    );
    assert.match(run.stdout, /^ranges +198\.19\.0\.0\/16 \(flag\); ServiceCIDR API: served; 1 invalid entry left out/m, run.stdout + run.stderr);
    assert.match(run.stdout, /kpr_svc_cidr +lpm_trie +1 /);
  });

  test('ServiceCIDR objects added and removed at run time replace the flag and update kpr_svc_cidr', async () => {
    const agent = box.agents.get('node-1')!;
    box.api.create(serviceCidr('kubernetes', ['198.19.0.0/16']));
    box.api.create(serviceCidr('extra', [EXTRA_RANGE]));
    await waitFor('the ServiceCIDR ranges in the map', () => pinnedRanges(bpffs()).join() === `${EXTRA_RANGE},198.19.0.0/16`);
    const line = await agent.waitForLog((l) => l.msg === 'service ranges' && JSON.stringify(l.ranges).includes('ServiceCIDR/extra'));
    assert.deepEqual(line.ranges, [`${EXTRA_RANGE} (ServiceCIDR/extra)`, '198.19.0.0/16 (ServiceCIDR/kubernetes)']);
    assert.equal(await metricValue(metrics, 'kpr_service_ranges', { source: 'ServiceCIDR' }), 2);
    const refused = await inNode('once', `${EXTRA_UNALLOCATED}:80`, ['--timeout-ms', '2000']);
    assert.deepEqual(refused.errors, { [REFUSAL]: 1 }, 'the new range is enforced');

    // Drift: an entry deleted behind the agent is back after the next periodic sync (--sync-period 1s).
    const m = BpfMap.openPinned(mapPinPath(bpffs(), MAP_NAMES.svcCidr));
    try {
      for (const k of [...m.keys()]) if (decodeSvcCidrKey(k).cidr === EXTRA_RANGE) m.delete(k);
    } finally {
      m.close();
    }
    assert.deepEqual(pinnedRanges(bpffs()), ['198.19.0.0/16']);
    await waitFor('the deleted range restored', () => pinnedRanges(bpffs()).includes(EXTRA_RANGE), 10_000);
    // Counted when the whole (sliced) resync that repaired it reports.
    await eventually(
      'the repair counted',
      async () => (await metricValue(metrics, 'kpr_drift_repaired_entries_total', { map: MAP_NAMES.svcCidr, kind: 'missing' })) >= 1,
    );

    box.api.remove('ServiceCIDR', undefined, 'extra');
    await waitFor('the removed range gone', () => pinnedRanges(bpffs()).join() === '198.19.0.0/16');
    const now = await inNode('once', `${EXTRA_UNALLOCATED}:80`, ['--timeout-ms', '1000']);
    assert.equal(now.errors[REFUSAL], undefined, `outside every range again: not refused (${JSON.stringify(now.errors)})`);
    box.api.remove('ServiceCIDR', undefined, 'kubernetes');
    await agent.waitForLog((l) => l.msg === 'service ranges' && JSON.stringify(l.ranges) === JSON.stringify(['198.19.0.0/16 (flag)']));
    assert.deepEqual(pinnedRanges(bpffs()), ['198.19.0.0/16'], 'no object left: the flag again');
  });

  test('implicit source-range allow: a packet from the LB IP to the LB IP passes when a range holds the node IP; an outsider and the strict Service drop it', async () => {
    const ns = box.clientNs['client-b'];
    const gw = CLIENTS['client-b'].gateway;
    const n1 = box.nodes['node-1'].ns;
    // client-b plays the hairpinning load balancer: it sends from the LB IPs, out of eth0
    // (locally made packets to them skip the local table), and takes the replies in.
    for (const lbIp of [HAIRPIN_LB, STRICT_LB]) {
      inNs(ns, 'ip', 'addr', 'add', `${lbIp}/32`, 'dev', 'eth0');
      inNs(ns, 'ip', 'route', 'add', 'table', '100', `${lbIp}/32`, 'via', gw, 'dev', 'eth0');
      inNs(n1, 'ip', 'route', 'add', `${lbIp}/32`, 'via', CLIENTS['client-b'].ip, 'dev', CLIENTS['client-b'].uplink);
    }
    inNs(ns, 'ip', 'rule', 'add', 'pref', '10', 'iif', 'lo', 'lookup', '100');
    inNs(ns, 'ip', 'rule', 'add', 'pref', '100', 'lookup', 'local');
    inNs(ns, 'ip', 'rule', 'del', 'pref', '0');
    inNs(
      ns,
      'sysctl',
      '-qw',
      'net.ipv4.conf.all.accept_local=1',
      'net.ipv4.conf.eth0.accept_local=1',
      'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.eth0.rp_filter=0',
    );

    const outsider = await box.external('client-b', 'http', `${HAIRPIN_LB}:80`, ['--count', '2', '--timeout-ms', DROP_TIMEOUT_MS]);
    assertDropped(outsider, `client-b (${CLIENTS['client-b'].ip}) to the LB IP`);
    const hairpin = await box.external('client-b', 'http', `${HAIRPIN_LB}:80`, ['--count', '3', '--bind', HAIRPIN_LB]);
    assert.equal(hairpin.ok, 3, `from the LB IP to itself: ${JSON.stringify(hairpin.errors)}`);
    assert.deepEqual(Object.keys(hairpin.seenAs), [UNDERLAY['node-1']], 'SNATed to node-1 (eTP=Cluster)');
    const strict = await box.external('client-b', 'http', `${STRICT_LB}:80`, ['--count', '2', '--bind', STRICT_LB, '--timeout-ms', DROP_TIMEOUT_MS]);
    assertDropped(strict, 'from its LB IP to a Service whose ranges do not hold the node IP');
  });

  test('an API server that does not serve ServiceCIDR (before 1.33): the agent starts, says so once and uses the flag; once the kind is served it follows the objects', async () => {
    box.api.setUnservedKinds(['ServiceCIDR']);
    // Stored, but not served: the agent must not see it.
    box.api.apply(serviceCidr('kubernetes', [EXTRA_RANGE]));
    await box.stopAgent('node-1');
    process.env.KPR_TEST_SERVICE_CIDR_RETRY_MS = '500';
    try {
      await box.startAgent('node-1', [
        '--service-cluster-ip-range',
        '198.19.0.0/16',
        '--metrics-bind-address',
        '127.0.0.1:0',
        '--healthz-bind-address',
        '127.0.0.1:0',
      ]);
    } finally {
      delete process.env.KPR_TEST_SERVICE_CIDR_RETRY_MS;
    }
    const agent = box.agents.get('node-1')!;
    await agent.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('the API server does not serve ServiceCIDR'));
    await waitFor("the flag's range in the map", () => pinnedRanges(bpffs()).join() === '198.19.0.0/16');
    assert.equal((await inNode('once', `${WEB}:80`, ['--timeout-ms', '2000'])).ok, 1);
    assert.deepEqual((await inNode('once', `${UNALLOCATED}:80`, ['--timeout-ms', '2000'])).errors, { [REFUSAL]: 1 });
    const configz = (await (await fetch(`${await metricsUrlOf(agent)}/configz`)).json()) as {
      serviceRanges: { serviceCIDRApi: string; ranges: Array<{ source: string }> };
    };
    assert.equal(configz.serviceRanges.serviceCIDRApi, 'not_served');
    assert.deepEqual(
      configz.serviceRanges.ranges.map((r) => r.source),
      ['flag'],
    );

    // The cluster is upgraded: the kind is served now, and the agent, still asking, follows the object.
    box.api.setUnservedKinds([]);
    await waitFor("the ServiceCIDR object's range in the map", () => pinnedRanges(bpffs()).join() === EXTRA_RANGE, 15_000);
    await agent.waitForLog('ServiceCIDR is served now: service ranges come from the ServiceCIDR objects');
    const warned = agent.logs.filter((l) => (l.level === 40 || l.level === 'warn') && (l.kind === 'ServiceCIDR' || String(l.msg).includes('ServiceCIDR')));
    assert.deepEqual(warned, [], 'an unserved kind is no warning, retry after retry');
  });
});
