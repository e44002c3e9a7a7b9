/**
 * Live map migration end to end (docs/architecture.md, "Upgrades: versioned
 * pins and live migration"): the real agent on node-1 of the two-node box,
 * the embedded API server, and traffic that must not notice while the agent
 * restarts into a new map set:
 *  - from node-1 (its cgroup: the socket hooks), through a ClusterIP: long-
 *    lived TCP connections exchanging lines, long-lived connected UDP
 *    sockets checking each reply comes from the ClusterIP, a connect loop
 *    and new connected UDP sockets back to back;
 *  - from client-a outside the node (only tc serves it), the same through a
 *    NodePort, whose established flows live in kpr_ct.
 * Across (a) a restart with other map sizes, (b) the upgrade from layout v1
 * (this repository's previous release: bpf/ built against
 * test/fixtures/bpf-v1/kpr_types.h) to this release's layouts, and (c) a
 * start over pins of a newer layout (refused, the datapath left serving):
 * not one failed connection, no established flow reset or moved, every
 * reply from the service address.
 */
import { scaled } from '../../sandbox/time-scale.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, possibleCpus } from '../../native/index.js';
import { lruHeadroom } from '../../agent/datapath/map-sizes.js';
import { MAPS } from '../../agent/maps/registry.js';
import { readStats } from '../../agent/datapath/datapath-stats.js';
import { mapPinDir, mapPinPath, mapStagingDir } from '../../agent/datapath/pins.js';
import { EXTERNAL_INTERFACES, NODE1_UPLINK, POD_INTERFACES, TwoNodeCluster, type AgentProcess } from '../../sandbox/two-node.js';
import { nsPath } from '../../sandbox/netns.js';
import { runNodeOnLayoutV1 } from '../support/node-v1.js';
import type { HoldReport } from '../../sandbox/hold.js';
import { requireRoot } from '../support/preflight.js';
import { tcModeCases, type TcModeCase } from '../support/tc-modes.js';

const PODS = [
  { name: 'web-a', ip: '198.18.10.10', node: 'node-1' as const },
  { name: 'web-b', ip: '198.18.10.11', node: 'node-1' as const },
];
const CLUSTER_IP = '198.19.0.10';
const NODE_PORT_IP = '198.19.0.11';
const PORTS = [
  { name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' },
  { name: 'echo', port: 7070, targetPort: 7070, nodePort: 30070, protocol: 'TCP' },
  { name: 'dns', port: 53, targetPort: 5353, nodePort: 30053, protocol: 'UDP' },
];

function service(name: string, type: 'ClusterIP' | 'NodePort', clusterIP: string) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'e2e' },
    spec: { type, clusterIP, clusterIPs: [clusterIP], ports: PORTS.map(({ nodePort, ...p }) => (type === 'NodePort' ? { ...p, nodePort } : p)) },
  };
}

function slice(name: string, svc: string) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'e2e', labels: { 'kubernetes.io/service-name': svc } },
    addressType: 'IPv4',
    ports: PORTS.map((p) => ({ name: p.name, port: p.targetPort, protocol: p.protocol })),
    endpoints: PODS.map((p) => ({ addresses: [p.ip], conditions: { ready: true }, nodeName: p.node })),
  };
}

for (const tcCase of tcModeCases()) upgradeSuite(tcCase);

function upgradeSuite(tcCase: TcModeCase): void {
  describe(`live map migration under load [${tcCase.label}]`, { timeout: scaled(300_000) }, () => {
    let box: TwoNodeCluster;
    const bpffs = () => box.nodes['node-1'].bpffsDir;

    const startAgent = (extra: string[] = []) => box.startAgent('node-1', [...tcCase.args, ...extra]);

    /**
     * Traffic from both vantage points until stopped; the reports of both. A
     * request's bound is generous (10 s): a flow the datapath broke never
     * answers, while two CPUs shared with other work can stall a process for
     * seconds.
     */
    function traffic() {
      const hold = (ns: string, ip: string, ports: { http: number; echo: number; dns: number }, cgroupOf?: 'node-1') =>
        box.startClient<HoldReport>(
          ns,
          'hold',
          [
            '--echo',
            `${ip}:${ports.echo}`,
            '--udp',
            `${ip}:${ports.dns}`,
            '--udp-new',
            '--http',
            `${ip}:${ports.http}`,
            '--flows',
            '3',
            '--interval-ms',
            '20',
            '--duration-ms',
            String(scaled(240_000)),
            '--timeout-ms',
            '10000',
          ],
          cgroupOf ? { cgroupOf } : {},
        );
      const runs = {
        clusterIP: hold(box.nodes['node-1'].ns, CLUSTER_IP, { http: 80, echo: 7070, dns: 53 }, 'node-1'),
        nodePort: hold(box.clientNs['client-a'], NODE1_UPLINK, { http: 30080, echo: 30070, dns: 30053 }),
      };
      return {
        async stop(): Promise<Record<keyof typeof runs, HoldReport>> {
          for (const r of Object.values(runs)) r.child.kill('SIGTERM');
          return { clusterIP: await runs.clusterIP.report, nodePort: await runs.nodePort.report };
        },
      };
    }

    /** The datapath's counters that are not 0 (the failure message's context: drops, lost flows). */
    function counters(): Record<string, string> {
      const m = BpfMap.openPinned(mapPinPath(bpffs(), MAPS.stats.name));
      try {
        return Object.fromEntries(
          readStats(m)
            .filter((s) => s.value > 0n)
            .map((s) => [s.stat, String(s.value)]),
        );
      } finally {
        m.close();
      }
    }

    /** The agent's steps of a migration with their times: a failure's example carries its time, to be placed among them. */
    function timeline(): string[] {
      const steps = /migrat|attached|swap|initial sync complete|agent (started|stopping)/;
      return (box.agents.get('node-1')?.logs ?? [])
        .filter((l) => steps.test(String(l.msg)))
        .map((l) => `${new Date(Number(l.time)).toISOString()} ${String(l.msg)}${l.interface ? ` (${String(l.interface)})` : ''}`);
    }

    /** Every kind of traffic ran and none failed; long-lived flows kept their pod and replies came from the service. */
    function assertUnharmed(reports: Record<string, HoldReport>, what: string): void {
      const stats = counters();
      for (const [where, rep] of Object.entries(reports)) {
        const at = `${what}, ${where}`;
        const kinds = Object.entries(rep.kinds)
          .map(([k, r]) => `${k}=${r.ok}/${r.ok + r.failed}`)
          .join(' ');
        console.log(`migration=${what.replace(/ /g, '-')} via=${where} exchanges=${rep.ok + rep.failed} failed=${rep.failed} ${kinds}`);
        assert.equal(
          rep.failed,
          0,
          `${at}: ${JSON.stringify({ errors: rep.errors, examples: rep.examples, datapath: stats, agent: rep.failed ? timeline() : undefined })}`,
        );
        for (const kind of ['echo', 'udp', 'udpNew', 'http'] as const)
          assert.ok((rep.kinds[kind]?.ok ?? 0) > 0, `${at}: no ${kind} exchange served: ${JSON.stringify(rep.kinds)}`);
        assert.deepEqual(
          Object.keys(rep.byPod).sort(),
          PODS.map((p) => p.name),
          `${at}: both backends served`,
        );
      }
    }

    const pause = (ms: number) => new Promise((r) => setTimeout(r, scaled(ms)));

    async function waitForExit(agent: AgentProcess): Promise<number | null> {
      if (agent.child.exitCode !== null) return agent.child.exitCode;
      const [code] = (await once(agent.child, 'exit')) as [number | null];
      return code;
    }

    const pinned = (name: string) => {
      const m = BpfMap.openPinned(mapPinPath(bpffs(), name));
      try {
        return { id: m.id, maxEntries: m.maxEntries };
      } finally {
        m.close();
      }
    };

    before(async () => {
      requireRoot();
      box = await TwoNodeCluster.create({ pods: PODS });
      box.api.create(service('web', 'ClusterIP', CLUSTER_IP));
      box.api.create(slice('web-1', 'web'));
      box.api.create(service('np', 'NodePort', NODE_PORT_IP));
      box.api.create(slice('np-1', 'np'));
      await startAgent();
    });

    after(async () => {
      await box?.close();
    });

    test('(a) a restart with other map sizes migrates the set live: no failed connection, no flow moved, replies from the service address', async () => {
      const before = { ct: pinned(MAPS.ct.name), svc: pinned(MAPS.svc.name) };
      const load = traffic();
      await pause(1500);
      await box.stopAgent('node-1');
      await pause(300);
      const agent = await startAgent(['--map-size-conntrack', '65536', '--map-size-services', '131072']);
      const done = await agent.waitForLog('map migration done: the old maps are released', 30_000);
      await pause(1500);
      const reports = await load.stop();
      assertUnharmed(reports, 'size change');
      const reasons = (done.maps as Array<{ map: string; reason: string }>).map((m) => `${m.map}:${m.reason}`).sort();
      // The frontend id space (a quarter of kpr_svc) and its maps follow the service map (kpr_maglev_ref: two entry sets an id).
      assert.deepEqual(reasons, ['kpr_ct:size', 'kpr_maglev_ref:size', 'kpr_svc:size', 'kpr_svc_meta:size', 'kpr_svc_stats:size', 'kpr_vip:size']);
      const after = { ct: pinned(MAPS.ct.name), svc: pinned(MAPS.svc.name) };
      // The capacity asked for plus the LRU headroom (agent/datapath/map-sizes.ts), rounded up to the possible CPUs.
      const ctMax = 65536 + lruHeadroom(possibleCpus());
      assert.ok(after.ct.maxEntries >= ctMax && after.ct.maxEntries < ctMax + possibleCpus(), `kpr_ct ${after.ct.maxEntries}`);
      assert.equal(after.svc.maxEntries, 131072);
      assert.notEqual(after.ct.id, before.ct.id);
      assert.equal(fs.existsSync(mapStagingDir(bpffs())), false, 'staging/ is gone');
      // The flows the old programs tracked moved with them: 3 TCP and 3 UDP NodePort flows at least, 2 entries each.
      const ct = (done.copied as Record<string, { copied: number }> | undefined)?.[MAPS.ct.name];
      assert.ok(ct && ct.copied >= 12, `the NodePort flows' conntrack entries were copied: ${JSON.stringify(done.copied)}`);
      // A restart with the same sizes adopts the set: no migration.
      await box.stopAgent('node-1');
      const again = await startAgent(['--map-size-conntrack', '65536', '--map-size-services', '131072']);
      assert.equal(
        again.logs.some((l) => String(l.msg).startsWith('maps migrate to a new set')),
        false,
      );
      assert.equal(pinned(MAPS.ct.name).id, after.ct.id);
    });

    test("(b) the upgrade from layout v1 (the previous release's maps and programs) to this release's layouts, live: no failed connection, no flow moved, replies from the service address", async () => {
      await box.stopAgent('node-1');
      runNodeOnLayoutV1({
        bpffsDir: bpffs(),
        cgroupPath: box.nodes['node-1'].cgroup,
        netns: nsPath(box.nodes['node-1'].ns),
        externalInterfaces: EXTERNAL_INTERFACES.split(','),
        podInterfaces: POD_INTERFACES.split(','),
        tcAttach: tcCase.mode === 'tc' && tcCase.args.length ? 'tc' : 'auto',
      });
      const changed = Object.values(MAPS).filter((m) => m.version > 1);
      assert.ok(
        changed.some((m) => m.name === MAPS.ct.name) && changed.some((m) => m.name === MAPS.svc.name),
        'this release changed the service and conntrack layouts',
      );
      for (const m of changed) {
        assert.ok(fs.existsSync(path.join(mapPinDir(bpffs()), m.name)), `${m.name} pinned at v1`);
        assert.equal(fs.existsSync(mapPinPath(bpffs(), m.name)), false, `${m.name} not pinned at v${m.version}`);
      }
      // The node serves on v1 alone; the flows start there.
      const load = traffic();
      await pause(1500);
      const agent = await startAgent(['--map-size-conntrack', '65536', '--map-size-services', '131072']);
      const done = await agent.waitForLog('map migration done: the old maps are released', 30_000);
      await pause(1500);
      const reports = await load.stop();
      assertUnharmed(reports, 'upgrade from v1');
      const reasons = (done.maps as Array<{ map: string; reason: string; detail: string }>).map((m) => `${m.map}:${m.reason}:${m.detail}`).sort();
      assert.deepEqual(reasons, changed.map((m) => `${m.name}:layout:layout v1 -> v${m.version}`).sort());
      for (const m of changed) {
        assert.ok(fs.existsSync(mapPinPath(bpffs(), m.name)), `${m.name} pinned at v${m.version}`);
        assert.equal(fs.existsSync(path.join(mapPinDir(bpffs()), m.name)), false, `${m.name}'s v1 pin is gone`);
      }
      const ct = (done.copied as Record<string, { copied: number }> | undefined)?.[MAPS.ct.name];
      assert.ok(ct && ct.copied >= 12, `the NodePort flows' conntrack entries were copied: ${JSON.stringify(done.copied)}`);
    });

    test('(c) pins of a newer layout: the agent refuses with the map and both versions named, exits non-zero, and the datapath keeps serving', async () => {
      const load = traffic();
      await pause(1000);
      await box.stopAgent('node-1');
      const ctPin = mapPinPath(bpffs(), MAPS.ct.name);
      const newer = path.join(mapPinDir(bpffs()), `${MAPS.ct.name}@v${MAPS.ct.version + 1}`);
      fs.renameSync(ctPin, newer);
      const pinsBefore = fs.readdirSync(mapPinDir(bpffs())).sort();
      try {
        const refused = box.startAgent('node-1', tcCase.args).catch((err: Error) => err);
        const agent = box.agents.get('node-1')!;
        const code = await waitForExit(agent);
        await refused;
        assert.notEqual(code, 0, 'a non-zero exit');
        const line = agent.logs.find((l) => l.msg === 'agent failed to start');
        assert.ok(line, 'the start failure is logged');
        assert.match(String(line.error), new RegExp(`${MAPS.ct.name} pinned at layout v${MAPS.ct.version + 1} .*this agent knows up to v${MAPS.ct.version}`));
        assert.deepEqual(fs.readdirSync(mapPinDir(bpffs())).sort(), pinsBefore, 'no pin touched');
        assert.equal(fs.existsSync(mapStagingDir(bpffs())), false);
        await pause(1000);
      } finally {
        fs.renameSync(newer, ctPin);
      }
      const reports = await load.stop();
      assertUnharmed(reports, 'refused downgrade');
      // The release that knows the layout starts as usual.
      await startAgent(['--map-size-conntrack', '65536', '--map-size-services', '131072']);
    });
  });
}
