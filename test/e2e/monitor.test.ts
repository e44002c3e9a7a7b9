/**
 * `kpr monitor` against a running agent on the two-node box: real clients
 * connect through a ClusterIP (the socket hooks) and a NodePort (tc) while
 * `kpr monitor -o json --count N` runs; each event names the right Service,
 * frontend and backend (the pod that answered), a refused connection to a
 * Service without endpoints and a call on a port no Service defines are
 * refusal events, and once the command exits the switch is off (the
 * kpr_monitor map read back). The table form and SIGINT are checked too.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { MAP_NAMES } from '../../agent/maps/layout.js';
import { MonitorSwitch } from '../../agent/cli/monitor-switch.js';
import type { MonitorEvent } from '../../agent/cli/monitor-events.js';
import { scaled } from '../../sandbox/time-scale.js';
import { CLIENTS, NODE1_UPLINK, TwoNodeCluster, type NodeName } from '../../sandbox/two-node.js';
import { requireRoot } from '../support/preflight.js';
import { cliBin } from '../support/paths.js';
import { e2eService as service, e2eSlice as slice } from '../support/e2e-objects.js';
import { expectedRefusal } from '../support/kernel.js';

/** What a socket-hook refusal gives the caller on this kernel (docs/semantics.md rule 23). */
const REFUSED = expectedRefusal();

const PODS = [
  { name: 'web-1a', ip: '198.18.10.10', node: 'node-1' as NodeName },
  { name: 'web-1b', ip: '198.18.10.11', node: 'node-1' as NodeName },
];
const POD_BY_IP = Object.fromEntries(PODS.map((p) => [p.ip, p.name]));
const WEB = '198.19.0.30';
const EMPTY = '198.19.0.32';
const NODE_PORT = 30131;

/** A running `kpr monitor`: its output so far, and its exit. */
interface Monitor {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

describe('kpr monitor on a running agent', { timeout: scaled(120_000) }, () => {
  let box: TwoNodeCluster;
  const bpffs = () => box.nodes['node-1'].bpffsDir;

  /** Starts kpr monitor and resolves once it says the events are on. */
  async function startMonitor(args: string[]): Promise<Monitor> {
    const child = spawn(cliBin, ['monitor', '--bpffs', bpffs(), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    box.sandbox.track(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (err += d));
    const exited = once(child, 'close').then(([code]) => code as number | null);
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        if (err.includes('events on')) resolve();
      };
      child.stderr!.on('data', check);
      void exited.then((code) => reject(new Error(`kpr monitor exited ${code} before it was on: ${err}`)));
    });
    return { child, stdout: () => out, stderr: () => err, exited };
  }

  function switchDeadline(): bigint {
    const m = BpfMap.openPinned(mapPinPath(bpffs(), MAP_NAMES.monitor));
    try {
      return new MonitorSwitch(m).deadline();
    } finally {
      m.close();
    }
  }

  const inNode = (mode: 'http' | 'once', target: string, extra: string[] = []) =>
    box.client(box.nodes['node-1'].ns, mode, target, { cgroupOf: 'node-1', extra });

  before(async () => {
    requireRoot();
    box = await TwoNodeCluster.create({ pods: PODS });
    box.api.create(service('web', 'ClusterIP', WEB));
    box.api.create(slice('web', ['198.18.10.10', '198.18.10.11']));
    box.api.create(service('nodeport', 'NodePort', '198.19.0.31', NODE_PORT));
    box.api.create(slice('nodeport', ['198.18.10.10', '198.18.10.11']));
    box.api.create(service('empty', 'ClusterIP', EMPTY));
    await box.startAgents();
  });

  after(async () => {
    await box?.close();
  });

  test('ClusterIP and NodePort connections, a refusal and an unknown port: one event each, naming Service, frontend and backend; off after exit', async () => {
    assert.equal(switchDeadline(), 0n, 'off before any kpr monitor ran');
    // The ring is pinned in rings/: maps/ holds only maps with entries, which versions before it rely on.
    assert.ok(existsSync(path.join(bpffs(), 'rings', MAP_NAMES.events)));
    assert.ok(!readdirSync(path.join(bpffs(), 'maps')).includes(MAP_NAMES.events));
    const mon = await startMonitor(['-o', 'json', '--count', '7']);
    assert.ok(switchDeadline() > process.hrtime.bigint(), 'on while it runs');

    const web = await inNode('http', `${WEB}:80`, ['--count', '3']);
    assert.equal(web.ok, 3, JSON.stringify(web.errors));
    const refused = await inNode('once', `${EMPTY}:80`, ['--timeout-ms', '2000']);
    assert.deepEqual(refused.errors, { [REFUSED]: 1 });
    const unknownPort = await inNode('once', `${WEB}:81`, ['--timeout-ms', '2000']);
    assert.deepEqual(unknownPort.errors, { [REFUSED]: 1 });
    const ext = await box.external('client-a', 'http', `${NODE1_UPLINK}:${NODE_PORT}`, ['--count', '2']);
    assert.equal(ext.ok, 2, JSON.stringify(ext.errors));

    assert.equal(await mon.exited, 0, mon.stderr());
    const events = mon
      .stdout()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as MonitorEvent);
    assert.equal(events.length, 7, mon.stdout());
    assert.match(mon.stderr(), /7 events shown; events off/);
    assert.equal(switchDeadline(), 0n, 'the switch is off once it exits');

    const socketPath = events.filter((e) => e.path === 'socket');
    const clusterIp = socketPath.filter((e) => e.type === 'translated');
    assert.equal(clusterIp.length, 3);
    const servedBy: Record<string, number> = {};
    for (const e of clusterIp) {
      assert.deepEqual([e.hook, e.protocol, e.family, e.verdict], ['connect4', 'TCP', 'IPv4', 'translated']);
      assert.deepEqual([e.service, e.portName, e.frontendType], ['e2e/web', 'http', 'ClusterIP']);
      assert.deepEqual([e.frontend.address, e.frontend.port], [WEB, 80]);
      assert.ok(e.backend && POD_BY_IP[e.backend.address], `a pod of web: ${JSON.stringify(e.backend)}`);
      assert.equal(e.backend!.port, 8080);
      assert.ok(e.backend!.id > 0);
      assert.ok(BigInt(e.socketCookie!) > 0n && BigInt(e.netnsCookie!) > 0n);
      servedBy[POD_BY_IP[e.backend!.address]] = (servedBy[POD_BY_IP[e.backend!.address]] ?? 0) + 1;
    }
    assert.deepEqual(servedBy, web.byPod, 'the backends the events name are the pods that answered');

    const noEndpoint = socketPath.find((e) => e.type === 'no-endpoint');
    assert.ok(noEndpoint, JSON.stringify(socketPath));
    assert.deepEqual([noEndpoint.verdict, noEndpoint.service, noEndpoint.frontend.address, noEndpoint.backend], ['refused', 'e2e/empty', EMPTY, undefined]);
    const unknown = socketPath.find((e) => e.type === 'unknown-port');
    assert.ok(unknown, JSON.stringify(socketPath));
    assert.deepEqual([unknown.verdict, unknown.frontend.address, unknown.frontend.port, unknown.service], ['refused', WEB, 81, undefined]);

    const tc = events.filter((e) => e.path === 'tc');
    assert.equal(tc.length, 2, 'one per connection: the packets after the SYN and the replies make none');
    const extBy: Record<string, number> = {};
    for (const e of tc) {
      assert.deepEqual(
        [e.type, e.hook, e.service, e.frontendType, e.frontend.address, e.frontend.port],
        ['translated', 'tc-ext', 'e2e/nodeport', 'NodePort', NODE1_UPLINK, NODE_PORT],
      );
      assert.equal(e.client?.address, CLIENTS['client-a'].ip);
      assert.ok(e.flags.includes('snat'), 'eTP=Cluster: SNATed to the node');
      extBy[POD_BY_IP[e.backend!.address]] = (extBy[POD_BY_IP[e.backend!.address]] ?? 0) + 1;
    }
    assert.deepEqual(extBy, ext.byPod);
    console.log(JSON.stringify(tc[0])); // docs/cli.md's example (kpr monitor)
  });

  test('the table: one row per decision, as docs/cli.md shows it', async () => {
    const mon = await startMonitor(['--count', '4']);
    await inNode('http', `${WEB}:80`, ['--count', '1']);
    await inNode('once', `${EMPTY}:80`, ['--timeout-ms', '2000']);
    await inNode('once', `${WEB}:81`, ['--timeout-ms', '2000']);
    await box.external('client-a', 'http', `${NODE1_UPLINK}:${NODE_PORT}`, ['--count', '1']);
    assert.equal(await mon.exited, 0, mon.stderr());
    const rows = mon.stdout().trimEnd().split('\n');
    assert.equal(rows.length, 5, mon.stdout());
    const time = String.raw`\d\d:\d\d:\d\d\.\d{3}`;
    assert.match(rows[1], new RegExp(`^${time} +connect4 +TCP +- +198\\.19\\.0\\.30:80 +e2e/web:http +translated +198\\.18\\.10\\.1[01]:8080 #\\d+ +-$`));
    assert.match(rows[2], new RegExp(`^${time} +connect4 +TCP +- +198\\.19\\.0\\.32:80 +e2e/empty:http +no-endpoint +refused +-$`));
    assert.match(rows[3], new RegExp(`^${time} +connect4 +TCP +- +198\\.19\\.0\\.30:81 +- +unknown-port +refused +-$`));
    assert.match(
      rows[4],
      new RegExp(
        `^${time} +tc-ext +TCP +198\\.18\\.100\\.2:\\d+ +198\\.18\\.100\\.1:${NODE_PORT} +e2e/nodeport:http +translated +198\\.18\\.10\\.1[01]:8080 #\\d+ +snat$`,
      ),
    );
    console.log(mon.stdout());
  });

  test('filters; SIGINT stops it and turns the events off', async () => {
    const mon = await startMonitor(['--frontend', `${WEB}:80`, '--type', 'translated']);
    await inNode('once', `${EMPTY}:80`, ['--timeout-ms', '2000']); // another frontend, another type: filtered out
    const web = await inNode('http', `${WEB}:80`, ['--count', '2']);
    assert.equal(web.ok, 2);
    mon.child.kill('SIGINT');
    assert.equal(await mon.exited, 0, mon.stderr());
    assert.equal(switchDeadline(), 0n);
    const lines = mon.stdout().trimEnd().split('\n');
    assert.match(lines[0], /^TIME +HOOK +PROTO +CLIENT +FRONTEND +SERVICE +EVENT +RESULT +FLAGS$/);
    assert.equal(lines.length, 3, `the two translations to ${WEB}:80 only: ${mon.stdout()}`);
    for (const l of lines.slice(1)) assert.match(l, / connect4 .* 198\.19\.0\.30:80 .* translated /);
  });

  test("bad flags are usage errors; a bpffs without kpr's maps says so", () => {
    for (const [args, re] of [
      [['--count', '0'], /invalid --count/],
      [['--type', 'nope'], /invalid --type "nope": unknown nope/],
      [['--frontend', 'not-an-ip'], /invalid --frontend/],
      [['--duration', 'soon'], /duration/],
    ] as Array<[string[], RegExp]>) {
      const r = spawnSync(cliBin, ['monitor', '--bpffs', bpffs(), ...args], { encoding: 'utf8' });
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, re);
    }
    const r = spawnSync(cliBin, ['monitor', '--bpffs', `${bpffs()}-none`], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /is the kpr agent running/);
    assert.equal(switchDeadline(), 0n, 'a failed start never turned the events on');
  });
});
