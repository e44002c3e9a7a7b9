/**
 * Attachments are state, and state is repaired: the real agent's cgroup links
 * and tc attachments broken behind its back, as an operator with bpftool
 * could (`bpftool link detach` on the pinned links: the pins and the link
 * objects stay, only the attachment goes; a clsact filter deleted). The
 * agent's attachment check (every 2 s, and at each periodic resync) finds
 * them missing, attaches again, counts kpr_attachments_repaired_total{hook}
 * and says so in /healthz; node clients (socket hooks) and pod clients (tc)
 * reach the ClusterIP again within seconds. An attachment that cannot be
 * made again (the cgroup removed) makes /healthz 503 with the reason and
 * `kpr status` exit 1, until it can.
 *
 * Runs in each tc attach mode the kernel has (tcx links and clsact filters
 * on 6.6+, clsact filters only before).
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readdirSync, rmdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { BoxCluster, NODE_NAME, waitFor } from '../../sandbox/cluster.js';
import { inNs, nsPath } from '../../sandbox/netns.js';
import { repoRoot } from '../../sandbox/repo.js';
import type { ClientReport } from '../../sandbox/client.js';
import type { ClientRun } from '../../sandbox/topology.js';
import { detachLinkKeepPin, detachTcFilter, listInterfaces, withNetns } from '../../native/index.js';
import { linkPinDir, tcLinkPinDir } from '../../agent/datapath/pins.js';
import { requireRoot } from '../support/preflight.js';
import { httpService, httpSlice } from '../support/e2e-objects.js';
import { metricValue } from '../support/agent-metrics.js';
import { cliBin } from '../support/paths.js';
import { assertAgentMode, tcModeCases, type TcModeCase } from '../support/tc-modes.js';

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
  { name: 'caller', ip: '198.18.0.20' },
];
const BACKENDS = ['web-a', 'web-b'];
const VIP = '198.19.0.10';
/** The periodic resync is far away: what repairs within seconds is the 2 s probe. */
const SYNC_PERIOD = '60s';
/** The probe runs every 2 s: a repair lands within one, plus the time to attach. */
const REPAIR_BOUND_MS = 4500;

const hostPort = (url: string) => url.replace(/^http:\/\//, '');

/** Polls an async check until it returns a truthy value, or fails with what it last saw. */
function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs: number, intervalMs = 100): Promise<T> {
  return waitFor(what, check, timeoutMs, intervalMs);
}

// The cgroup cases do not depend on the tc mode: they run in the first suite only.
tcModeCases().forEach((tcCase, i) => attachmentSuite(tcCase, i === 0));

function attachmentSuite(tcCase: TcModeCase, withCgroupCases: boolean): void {
  describe(`attachment repair end to end [${tcCase.label}]`, { timeout: scaled(120_000) }, () => {
    let box: BoxCluster;
    let metricsUrl: string;
    let healthUrl: string;

    const metric = (name: string, labels: Record<string, string> = {}) => metricValue(metricsUrl, name, labels);
    const healthz = async () => {
      const r = await fetch(`${healthUrl}/healthz`);
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    };
    const logsFrom = (from: number, msg: string) => box.agent!.logs.slice(from).filter((l) => l.msg === msg);

    /** A client in the caller pod's namespace and outside the run's cgroup: only tc translates its traffic. */
    const startPodClient = (mode: 'http' | 'loop', extra: string[]): ClientRun => {
      const child = box.sandbox.spawnIn(
        box.topo.pods.get('caller')!.ns,
        process.execPath,
        [path.join(repoRoot, 'dist', 'sandbox', 'client.js'), mode, '--target', `${VIP}:80`, ...extra],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let err = '';
      child.stdout!.on('data', (d) => (out += d));
      child.stderr!.on('data', (d) => (err += d));
      const report = once(child, 'exit').then(([code]) => {
        if (code !== 0) throw new Error(`pod client exited ${code}: ${err}`);
        return JSON.parse(out) as ClientReport;
      });
      return { child, report };
    };
    const podClient = (mode: 'http', extra: string[]) => startPodClient(mode, extra).report;

    /**
     * A connect loop (one HTTP request per connection, each failure counted) running while
     * `breakIt` breaks an attachment, until the repair is logged: it sees the failures and the
     * recovery. `running` is the datapath counter that moves once the loop is served.
     */
    const loopAcross = async (run: ClientRun, running: [string, Record<string, string>], breakIt: () => void, repaired: () => boolean) => {
      const base = await metric(...running);
      await until('the loop client to be served', async () => (await metric(...running)) >= base + 3, 10_000, 50);
      const brokenAt = performance.now();
      breakIt();
      await until('the repair', async () => repaired(), REPAIR_BOUND_MS, 20);
      const repairedMs = performance.now() - brokenAt;
      // Served again: the loop's counter moves after the repair.
      const after = await metric(...running);
      await until('the loop client to be served again', async () => (await metric(...running)) >= after + 3, 5000, 50);
      run.child.kill('SIGTERM');
      return { rep: await run.report, repairedMs };
    };

    const status = () =>
      spawnSync(
        cliBin,
        ['status', '--healthz-address', hostPort(healthUrl), '--metrics-address', hostPort(metricsUrl), '--bpffs', box.sandbox.bpffsDir, '--timeout', '60s'],
        { encoding: 'utf8' },
      );

    before(async () => {
      requireRoot();
      box = await BoxCluster.create({ pods: PODS });
      // The caller pod reaches service addresses through the node, where tc translates them and
      // forwards (a FIB lookup the node namespace answers only when it forwards).
      inNs(box.topo.pods.get('caller')!.ns, 'ip', 'route', 'add', '198.19.0.0/16', 'via', '198.18.0.1');
      inNs(box.topo.nodeNs, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
      // The Node object: /healthz answers 503 for a node the API server does not know, like kube-proxy.
      box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
      box.api.create(httpService('attach', 'web', VIP));
      box.api.create(
        httpSlice(
          'attach',
          'web-1',
          'web',
          PODS.filter((p) => BACKENDS.includes(p.name)).map((p) => p.ip),
        ),
      );
      const agent = await box.startAgent(['--sync-period', SYNC_PERIOD, ...tcCase.args]);
      assertAgentMode(agent.logs, tcCase.mode, 'the agent');
      metricsUrl = `http://${(await agent.waitForLog('metrics server listening')).address}`;
      healthUrl = `http://${(await agent.waitForLog('health server listening')).address}`;
      // The tc programs are on every pod interface, and /healthz has checked the attachments.
      await until('the first attachment check', async () => (await healthz()).body.attachments !== undefined, 10_000);
    });

    after(async () => {
      await box?.close();
    });

    test('every attachment is in place at start: /healthz says so, kpr status has an attach line and exits 0, pod and node clients are served', async () => {
      const hz = await healthz();
      assert.equal(hz.status, 200, JSON.stringify(hz.body));
      const a = hz.body.attachments;
      assert.equal(a.healthy, true, JSON.stringify(a));
      assert.deepEqual(a.missing, []);
      assert.ok(a.attached.cgroup >= 6, JSON.stringify(a.attached)); // connect, sendmsg (and more where the kernel has them), v4 and v6
      assert.equal(a.attached[tcCase.mode], PODS.length, JSON.stringify(a.attached));
      const st = status();
      assert.equal(st.status, 0, st.stdout + st.stderr);
      assert.match(st.stdout, new RegExp(`^attach    every attachment in place \\(cgroup \\d+, ${tcCase.mode} ${PODS.length}; checked`, 'm'));
      const node = await box.client('http', `${VIP}:80`, ['--count', '20']);
      assert.equal(node.failed, 0, JSON.stringify(node.errors));
      const pod = await podClient('http', ['--count', '20']);
      assert.equal(pod.failed, 0, JSON.stringify(pod.errors));
      assert.deepEqual(Object.keys(pod.byPod).sort(), BACKENDS, JSON.stringify(pod.byPod));
    });

    if (withCgroupCases) {
      test('the cgroup links detached behind the agent (pins kept): node clients fail, then are served again within seconds; counted, logged, in /healthz', async () => {
        const from = box.agent!.logs.length;
        const before = await metric('kpr_attachments_repaired_total', { hook: 'cgroup' });
        const pins = readdirSync(linkPinDir(box.sandbox.bpffsDir))
          .map((f) => path.join(linkPinDir(box.sandbox.bpffsDir), f))
          .filter((p) => statSync(p).isFile());
        assert.ok(pins.length >= 6, pins.join(' '));
        const { rep: loop, repairedMs } = await loopAcross(
          box.startClient('loop', `${VIP}:80`, ['--duration-ms', '60000', '--timeout-ms', '1000']),
          ['kpr_datapath_translations_total', { path: 'connect' }],
          () => {
            for (const pin of pins) detachLinkKeepPin(pin);
            for (const pin of pins) assert.ok(existsSync(pin), `${pin} stays`);
          },
          () => logsFrom(from, 'attachment missing; attached again').filter((l) => l.hook === 'cgroup').length >= pins.length,
        );
        // Untranslated, the ClusterIP has no route in the node namespace: connections failed until the repair.
        assert.ok(loop.failed >= 1, `the detach broke the node clients: ${JSON.stringify(loop)}`);
        assert.ok(loop.ok >= 6, JSON.stringify(loop));
        assert.ok(repairedMs <= scaled(REPAIR_BOUND_MS), `repaired ${repairedMs.toFixed(0)} ms after the detach`);
        const lines = logsFrom(from, 'attachment missing; attached again');
        assert.equal(lines.length, pins.length, 'one line per repair, no more');
        assert.match(String(lines[0].found), /link \d+ is detached/);

        const rep = await box.client('http', `${VIP}:80`, ['--count', '40']);
        assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
        assert.equal(await metric('kpr_attachments_repaired_total', { hook: 'cgroup' }), before + pins.length);
        const hz = await healthz();
        assert.equal(hz.status, 200, JSON.stringify(hz.body));
        assert.equal(hz.body.attachments.repaired.cgroup, before + pins.length);
        assert.equal(hz.body.attachments.healthy, true);
        console.log(
          `fault=cgroup-links-detached links=${pins.length} connections=${loop.ok + loop.failed} failed=${loop.failed} repairMs=${repairedMs.toFixed(0)}`,
        );
      });
    }

    test(`the ${tcCase.mode === 'tcx' ? 'tcx links detached behind the agent (pins kept)' : 'clsact filters deleted behind the agent'}: pod clients fail, then are served again within seconds; counted, logged, in /healthz`, async () => {
      const from = box.agent!.logs.length;
      const before = await metric('kpr_attachments_repaired_total', { hook: tcCase.mode });
      const node = nsPath(box.topo.nodeNs);
      const podIfs = withNetns(node, () => listInterfaces())
        .map((i) => i.name)
        .filter((n) => n.startsWith('v'));
      assert.equal(podIfs.length, PODS.length, podIfs.join(' '));
      const { rep: loop, repairedMs } = await loopAcross(
        startPodClient('loop', ['--duration-ms', '60000', '--timeout-ms', '500']),
        ['kpr_datapath_tc_packets_total', { action: 'dnat' }],
        () => {
          if (tcCase.mode === 'tcx') {
            const dir = tcLinkPinDir(box.sandbox.bpffsDir);
            for (const f of readdirSync(dir)) detachLinkKeepPin(path.join(dir, f));
          } else {
            withNetns(node, () => {
              for (const ifname of podIfs) assert.equal(detachTcFilter(ifname), true, ifname);
            });
          }
        },
        () => logsFrom(from, 'attachment missing; attached again').filter((l) => l.hook === tcCase.mode).length >= podIfs.length,
      );
      // Untranslated, the ClusterIP goes to the node, which has no route for it: no answer until the repair.
      assert.ok(loop.failed >= 1, `the detach broke the pod clients: ${JSON.stringify(loop)}`);
      assert.ok(loop.ok >= 6, JSON.stringify(loop));
      assert.ok(repairedMs <= scaled(REPAIR_BOUND_MS), `repaired ${repairedMs.toFixed(0)} ms after the detach`);
      const lines = logsFrom(from, 'attachment missing; attached again');
      assert.deepEqual(lines.map((l) => l.target).sort(), [...podIfs].sort());
      assert.match(String(lines[0].found), tcCase.mode === 'tcx' ? /link \d+ is detached/ : /clsact filter is gone/);

      const rep = await podClient('http', ['--count', '40']);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.deepEqual(Object.keys(rep.byPod).sort(), BACKENDS, JSON.stringify(rep.byPod));
      assert.equal(await metric('kpr_attachments_repaired_total', { hook: tcCase.mode }), before + podIfs.length);
      const hz = await healthz();
      assert.equal(hz.status, 200, JSON.stringify(hz.body));
      assert.equal(hz.body.attachments.repaired[tcCase.mode], before + podIfs.length);
      assert.equal(hz.body.attachments.attached[tcCase.mode], podIfs.length);
      console.log(
        `fault=${tcCase.mode}-detached interfaces=${podIfs.length} connections=${loop.ok + loop.failed} failed=${loop.failed} repairMs=${repairedMs.toFixed(0)}`,
      );
    });

    if (withCgroupCases) {
      test('an attachment that cannot be made again (the cgroup removed): /healthz 503 with the reason, kpr status exits 1; both recover when it can be', async () => {
        const cg = box.sandbox.cgroupPath;
        const from = box.agent!.logs.length;
        // A cgroup can only be removed empty: no client runs during this step.
        await waitFor('the cgroup to be removed', () => {
          rmdirSync(cg);
          return true;
        });
        const down = await until(
          '/healthz 503',
          async () => {
            const hz = await healthz();
            return hz.status === 503 ? hz : undefined;
          },
          REPAIR_BOUND_MS,
        );
        const a = down.body.attachments;
        assert.equal(a.healthy, false, JSON.stringify(a));
        assert.match(a.reason, /attachments missing and not attached again: kpr_\w+ on cgroup .*does not exist/);
        assert.ok(a.missing.length >= 6 && a.missing.every((m: any) => m.hook === 'cgroup' && m.target === cg), JSON.stringify(a.missing));
        assert.equal(down.body.healthy, true, 'the proxy itself is healthy: the 503 is the attachments');
        const st = status();
        assert.equal(st.status, 1, st.stdout + st.stderr);
        assert.match(st.stdout, /^agent .*\/healthz 503, unhealthy \(an attachment is missing\)$/m);
        assert.match(st.stdout, /^attach    MISSING: \d+ attachments not in place and not attached again/m);
        assert.match(st.stdout, new RegExp(`^  kpr_connect4 on cgroup ${cg}: cgroup ${cg} does not exist`, 'm'));
        const json = JSON.parse(
          spawnSync(
            cliBin,
            ['status', '--healthz-address', hostPort(healthUrl), '--metrics-address', hostPort(metricsUrl), '--bpffs', box.sandbox.bpffsDir, '-o', 'json'],
            { encoding: 'utf8' },
          ).stdout,
        );
        assert.equal(json.attachments.healthy, false);
        // Logged once, however many checks find it.
        await new Promise((r) => setTimeout(r, scaled(4500)));
        assert.equal(logsFrom(from, 'attachments missing and not attached again; retried every 2 s, /healthz is 503 meanwhile').length, 1);

        mkdirSync(cg);
        await until('/healthz 200 again', async () => (await healthz()).status === 200, REPAIR_BOUND_MS);
        const up = await healthz();
        assert.equal(up.body.attachments.healthy, true, JSON.stringify(up.body.attachments));
        assert.equal(status().status, 0);
        const rep = await box.client('http', `${VIP}:80`, ['--count', '20']);
        assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
        assert.equal(logsFrom(from, 'every attachment in place again').length, 1);
      });
    }
  });
}
