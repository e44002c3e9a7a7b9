/**
 * Over capacity, degrading gracefully (issue 22), with the real agent: a
 * service map of 40 entries (--map-size-services 40: the kernel's kpr_svc
 * holds 40, and the agent admits Services against its max_entries),
 * overfilled by 20 Services. Under a connect loop to a Service that
 * fits, for a minute in which the refused Services keep changing (changes
 * that cannot make room) and periodic resyncs re-examine everything:
 *
 *   - the Service that fits answers every connection;
 *   - each refused Service is logged once, the summary line once;
 *   - the agent's CPU stays under 5% of a CPU (utime+stime from /proc:
 *     CPU time used, a resource bound, not a latency) and its RSS within
 *     10% of what it was right after the first sync;
 *   - /healthz stays 200 and says which Services are not served, as do
 *     kpr_services_over_limit and `kpr status` (which shows kpr_svc's 40);
 *   - a deletion makes room, and a refused Service is programmed in the
 *     sync of that deletion.
 */
import { TIME_SCALE, scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME, waitFor, type AgentProcess } from '../../sandbox/cluster.js';
import { repoRoot } from '../../sandbox/repo.js';
import { withPinnedMaps } from '../support/pinned-maps.js';
import { requireRoot } from '../support/preflight.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

const POD = { name: 'oc-web', ip: '198.18.0.10' };
const FITS = { key: 'cap/fits', ip: '198.19.0.10' };
/** 20 Services of one frontend and 3 backends (4 kpr_svc entries each) against 40 entries, 2 of them taken by cap/fits. */
const FILLERS = 20;
const SVC_CAPACITY = 40;
const FRONTEND_IDS = 64;
const FITTING_FILLERS = Math.floor((SVC_CAPACITY - 2) / 4); // 9
const OBSERVE_MS = 60_000;
const SYNC_PERIOD = '10s';
/** CPU bound over the minute: 5% of one CPU (scaled for slower, emulated CPUs). */
const CPU_BOUND = 0.05 * TIME_SCALE;
const cliBin = path.join(repoRoot, 'bin', 'kpr');

const filler = (i: number) => `fill/s${String(i).padStart(2, '0')}`;

function svcObj(key: string, clusterIP: string) {
  return { apiVersion: 'v1', kind: 'Service', ...service(key, { clusterIP, ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] }) };
}

function sliceObj(key: string, ips: string[]) {
  const s = slice(`${key}-1`, {
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ep(ip, { ready: true, nodeName: NODE_NAME })),
  });
  return { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', ...s };
}

/** Filler i's backends: 3 addresses of its own (nothing listens there; the fillers are never connected to). */
const fillerIps = (i: number, extra = 0) => Array.from({ length: 3 + extra }, (_, j) => `198.18.1${Math.floor(i / 50)}.${(i % 50) * 5 + j + 1}`);

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // utime, stime (fields 14, 15)
}

function rssKiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

describe('over capacity: the node serves what fits, says what it refused, and stays quiet', { timeout: scaled(240_000) }, () => {
  let box: BoxCluster;
  let agent: AgentProcess;
  let healthAddr: string;
  let metricsAddr: string;

  /** Frontend addresses programmed in kpr_svc (masters), read through the pins. */
  function programmedAddrs(): Set<string> {
    return withPinnedMaps(
      box.sandbox.bpffsDir,
      (m) =>
        new Set(
          m
            .dumpServices()
            .filter(([k]) => k.slot === 0)
            .map(([k]) => k.addr),
        ),
    );
  }

  const refusedLines = (from = 0) => agent.logs.slice(from).filter((l) => l.msg === 'Service refused: over a datapath limit');

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: [POD] });
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, spec: {} });
    box.api.create(svcObj(FITS.key, FITS.ip));
    box.api.create(sliceObj(FITS.key, [POD.ip]));
    for (let i = 0; i < FILLERS; i++) {
      box.api.create(svcObj(filler(i), `198.19.1.${i + 1}`));
      box.api.create(sliceObj(filler(i), fillerIps(i)));
    }
    // Frontend ids to spare: kpr_svc is the limit the Services run into (a quarter of 40 would bind first).
    agent = await box.startAgent(['--sync-period', SYNC_PERIOD, '--map-size-services', String(SVC_CAPACITY), '--map-size-frontends', String(FRONTEND_IDS)]);
    healthAddr = String((await agent.waitForLog('health server listening')).address);
    metricsAddr = String((await agent.waitForLog('metrics server listening')).address);
  });

  after(async () => {
    await box?.close();
  });

  test(`${FILLERS} Services against ${SVC_CAPACITY} entries: what fits is served, the rest named; a minute under a connect loop costs little CPU and no memory; a deletion programs a refused one at once`, async () => {
    const initial = agent.logs.find((l) => l.msg === 'initial sync complete')!;
    const overLimit = FILLERS - FITTING_FILLERS;
    assert.equal(initial.ok, true, 'a refusal is not a failed sync');
    assert.equal(initial.overLimit, overLimit);
    const refused = refusedLines().map((l) => String(l.service));
    assert.equal(refused.length, overLimit, 'one line per refused Service');
    assert.ok(
      refused.every((s) => s.startsWith('fill/')),
      `only fillers refused: ${refused.join(', ')}`,
    );
    assert.ok(refusedLines().every((l) => l.limit === 'svc_map' && l.capacity === SVC_CAPACITY));
    const summaries = () => agent.logs.filter((l) => l.event === 'ServicesOverLimit');
    assert.equal(summaries().length, 1);
    // Said before it fills: one warning as svc_map passed 90%, none again while it stays there.
    const fillWarnings = () =>
      agent.logs.filter((l) => l.limit === 'svc_map' && typeof l.msg === 'string' && l.msg.startsWith('svc_map is ') && l.msg.includes('% full'));
    assert.equal(fillWarnings().length, 1, JSON.stringify(fillWarnings()));
    assert.equal(fillWarnings()[0].capacity, SVC_CAPACITY);
    assert.ok(Number(fillWarnings()[0].used) >= 0.9 * SVC_CAPACITY);
    assert.equal(summaries()[0].services, overLimit);
    const addrs = programmedAddrs();
    assert.ok(addrs.has(FITS.ip));
    assert.equal(addrs.size, 1 + FITTING_FILLERS);

    // The signals: /healthz 200 and degraded, the gauge, kpr status.
    const hz = await fetch(`http://${healthAddr}/healthz`);
    assert.equal(hz.status, 200, 'a node that serves what fits stays in rotation');
    const body = (await hz.json()) as {
      servicesOverLimit: { degraded: boolean; services: number; byLimit: Record<string, number>; listed: Array<{ service: string }> };
      mapSizes: { configured: Record<string, number>; inUse: Record<string, number>; migration?: unknown };
    };
    assert.equal(body.mapSizes.configured.kpr_svc, SVC_CAPACITY);
    assert.equal(body.mapSizes.inUse.kpr_svc, SVC_CAPACITY);
    assert.equal(body.mapSizes.migration, undefined);
    assert.equal(body.servicesOverLimit.degraded, true);
    assert.equal(body.servicesOverLimit.services, overLimit);
    assert.deepEqual(body.servicesOverLimit.byLimit, { svc_map: overLimit });
    assert.deepEqual(body.servicesOverLimit.listed.map((l) => l.service).sort(), [...refused].sort());
    const metrics = parseProm(await (await fetch(`http://${metricsAddr}/metrics`)).text());
    assert.equal(valueOf(metrics, 'kpr_services_over_limit', { limit: 'svc_map' }), overLimit);
    // The kernel's map is that small: its real max_entries, and what the agent was configured with.
    assert.equal(valueOf(metrics, 'kpr_bpf_map_capacity', { map: 'kpr_svc' }), SVC_CAPACITY);
    assert.equal(valueOf(metrics, 'kpr_bpf_map_configured_capacity', { map: 'kpr_svc' }), SVC_CAPACITY);
    assert.equal(valueOf(metrics, 'kpr_bpf_map_entries', { map: 'kpr_svc' }), 2 + 4 * FITTING_FILLERS);
    const run = spawnSync(cliBin, ['status', '--healthz-address', healthAddr, '--bpffs', box.sandbox.bpffsDir], { encoding: 'utf8' });
    assert.equal(run.status, 1, `kpr status exits 1 on a degraded node: ${run.stderr}`);
    const status = run.stdout;
    assert.match(status, new RegExp(`degraded: ${overLimit} Services over a datapath limit are not served on this node \\(svc_map ${overLimit}\\)`));
    for (const s of refused) assert.match(status, new RegExp(`^${s}\\s+svc_map\\s+refused$`, 'm'));
    assert.match(status, new RegExp(`^kpr_svc\\s+hash\\s+${2 + 4 * FITTING_FILLERS}\\s+${SVC_CAPACITY}\\s+95\\.0%\\s+${SVC_CAPACITY}$`, 'm'));

    // A minute over capacity: a connect loop to the Service that fits; the refused Services change every 2 s.
    const pid = agent.child.pid!;
    const fromLog = agent.logs.length;
    const rss0 = rssKiB(pid);
    const ticks0 = cpuTicks(pid);
    const t0 = performance.now();
    const loop = box.startClient('loop', `${FITS.ip}:80`, ['--duration-ms', String(OBSERVE_MS)]);
    let changes = 0;
    while (performance.now() - t0 < OBSERVE_MS) {
      await new Promise((r) => setTimeout(r, 2000));
      const s = refused[changes % refused.length];
      const i = Number(s.slice(s.lastIndexOf('s') + 1));
      box.api.apply(sliceObj(s, fillerIps(i, (changes % 2) + 1)));
      changes++;
    }
    const report = await loop.report;
    const wallMs = performance.now() - t0;
    const cpuMs = (cpuTicks(pid) - ticks0) * 10; // USER_HZ 100
    const rss1 = rssKiB(pid);
    const during = agent.logs.slice(fromLog);
    const resyncs = during.filter((l) => l.msg === 'sync' && l.trigger === 'periodic').length;
    const eventSyncs = during.filter((l) => l.msg === 'sync' && l.trigger === 'event').length;
    const note = `cpu ${cpuMs} ms over ${Math.round(wallMs)} ms; RSS ${rss0} -> ${rss1} KiB; ${resyncs} resyncs, ${eventSyncs} event syncs, ${changes} changes`;
    process.stderr.write(`over-capacity: ${note}; connect loop ${report.ok} ok, ${report.failed} failed\n`);

    assert.equal(report.failed, 0, `the Service that fits: ${JSON.stringify(report.errors)}`);
    assert.ok(report.ok > 100, `the connect loop ran: ${report.ok}`);
    assert.ok(resyncs >= 3, `periodic resyncs re-examined the refused Services: ${note}`);
    assert.ok(eventSyncs >= changes / 2, `the changes were synced: ${note}`);
    assert.equal(during.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('sync failed')).length, 0, 'no failed sync');
    assert.equal(refusedLines(fromLog).length, 0, 'no Service logged again for the same refusal');
    assert.equal(during.filter((l) => l.event === 'ServicesOverLimit').length, 0, 'no summary while the set stays the same');
    assert.equal(during.filter((l) => l.limit === 'svc_map' && String(l.msg).includes('% full')).length, 0, 'no fill warning again while it stays full');
    assert.ok(cpuMs < CPU_BOUND * wallMs, `the agent's CPU stays under ${CPU_BOUND * 100}% of a CPU: ${note}`);
    assert.ok(rss1 <= rss0 * 1.1, `RSS within 10% of its value right after the first sync: ${note}`);

    // Room made: a programmed filler deleted; in the sync of that deletion a refused one is programmed.
    const gone = filler([...Array(FILLERS).keys()].find((i) => !refused.includes(filler(i)))!);
    const fromDelete = agent.logs.length;
    box.api.remove('Service', 'fill', gone.split('/')[1]);
    // The sync that deletes its entries: a change of the loop above may still sync after fromDelete, writing nothing.
    const synced = await agent.waitForLog((l) => l.msg === 'sync' && l.trigger === 'event' && Number(l.deleted) > 0, 10_000, fromDelete);
    assert.equal(synced.overLimit, overLimit - 1, `one refused Service programmed in the deletion's sync: ${JSON.stringify(synced)}`);
    const back = agent.logs.slice(fromDelete).filter((l) => l.msg === 'Service programmed: within the datapath limits again');
    assert.equal(back.length, 1);
    assert.ok(refused.includes(String(back[0].service)));
    const i = Number(String(back[0].service).slice(-2));
    await waitFor('the programmed one in kpr_svc', () => programmedAddrs().has(`198.19.1.${i + 1}`), 5000);
    assert.equal(agent.logs.slice(fromDelete).filter((l) => l.event === 'ServicesOverLimit').length, 1, 'one summary for the change');
  });

  test('restarted with a larger --map-size-services: the maps migrate live to a new set at 80 entries, and Services refused against 40 are programmed', async () => {
    const overBefore = Number(agent.logs.filter((l) => l.msg === 'sync').at(-1)!.overLimit);
    const programmedBefore = programmedAddrs().size;
    await box.stopAgent();
    agent = await box.startAgent(['--sync-period', SYNC_PERIOD, '--map-size-services', String(2 * SVC_CAPACITY), '--map-size-frontends', String(FRONTEND_IDS)]);
    healthAddr = String((await agent.waitForLog('health server listening')).address);
    metricsAddr = String((await agent.waitForLog('metrics server listening')).address);
    const started = agent.logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('maps migrate to a new set'));
    assert.ok(started, 'the migration is logged');
    // pino level 40: warn.
    assert.deepEqual([started.level, started.maps], [40, [{ map: 'kpr_svc', reason: 'size', detail: `${SVC_CAPACITY} -> ${2 * SVC_CAPACITY} entries` }]]);
    await agent.waitForLog('map migration done: the old maps are released', 10_000);
    // The new set holds more Services: fewer refused.
    const initial = agent.logs.find((l) => l.msg === 'initial sync complete')!;
    assert.ok(Number(initial.overLimit ?? 0) < overBefore, `over limit: ${String(initial.overLimit)} at 80 entries, ${overBefore} at 40`);
    assert.ok(programmedAddrs().size > programmedBefore);
    assert.equal(
      withPinnedMaps(box.sandbox.bpffsDir, (m) => m.capacities().svc),
      2 * SVC_CAPACITY,
    );
    const hz = (await (await fetch(`http://${healthAddr}/healthz`)).json()) as {
      mapSizes: { configured: Record<string, number>; inUse: Record<string, number>; migration?: unknown };
    };
    assert.equal(hz.mapSizes.configured.kpr_svc, 2 * SVC_CAPACITY);
    assert.equal(hz.mapSizes.inUse.kpr_svc, 2 * SVC_CAPACITY);
    assert.deepEqual(hz.mapSizes.migration, {
      state: 'done',
      maps: [{ map: 'kpr_svc', reason: 'size', detail: `${SVC_CAPACITY} -> ${2 * SVC_CAPACITY} entries` }],
    });
    const metrics = parseProm(await (await fetch(`http://${metricsAddr}/metrics`)).text());
    assert.equal(valueOf(metrics, 'kpr_bpf_map_capacity', { map: 'kpr_svc' }), 2 * SVC_CAPACITY);
    assert.equal(valueOf(metrics, 'kpr_bpf_map_configured_capacity', { map: 'kpr_svc' }), 2 * SVC_CAPACITY);
    const status = spawnSync(cliBin, ['status', '--healthz-address', healthAddr, '--bpffs', box.sandbox.bpffsDir], { encoding: 'utf8' }).stdout;
    assert.match(status, new RegExp(`^kpr_svc\\s+hash\\s+\\d+\\s+${2 * SVC_CAPACITY}\\s+[\\d.]+%\\s+${2 * SVC_CAPACITY}$`, 'm'));
    assert.match(status, new RegExp(`^migration done at this start: kpr_svc ${SVC_CAPACITY} -> ${2 * SVC_CAPACITY} entries`, 'm'));
  });
});
