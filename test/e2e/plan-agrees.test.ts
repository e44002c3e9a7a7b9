/**
 * `kpr plan` says what the agent does: the same objects, hostile ones
 * included, given to the real agent (through the embedded API server, real
 * BPF maps) and to `kpr plan` (as manifests: the very objects the API server
 * stored, dumped, creation times and all), with the same map sizes. What
 * the agent programmed, read back from its pinned maps by `kpr service list
 * -o json`, must equal what `kpr plan -o json` lists, frontend by frontend
 * with their backends; and every frontend the agent refused must be among
 * plan's skipped, with the reason the agent has.
 *
 * The objects: a frontend contested by the ownership rules (an externalIP
 * that is another Service's ClusterIP, CVE-2020-8554; a LoadBalancer
 * ingress address two Services claim), two Services at Kubernetes' name
 * limits, objects the agent rejects (the seeded hostile objects of the fuzz
 * suite: invalid IPs, ports, names, types…), and a Service over a datapath
 * limit (--map-size-services small enough that it cannot fit).
 */
import { scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME } from '../../sandbox/cluster.js';
import type { ServiceView } from '../../agent/cli/service-view.js';
import type { PlanJson } from '../../agent/cli/plan.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice, httpService, httpSlice } from '../support/e2e-objects.js';
import { generateCases } from '../fuzz/hostile-objects.js';

const PODS = [
  { name: 'pa-a', ip: '198.18.0.10' },
  { name: 'pa-b', ip: '198.18.0.11' },
];
const NS = 'agree';
const OWNER_IP = '198.19.0.10';
const LB_IP = '198.19.200.1';
/** Hostile objects (and their good companions) from the fuzz suite's generator, seeded. */
const HOSTILE_CASES = 60;
/** Endpoints of the Service that cannot fit kpr_svc. */
const BIG_ENDPOINTS = 120;
/** kpr_svc entries: everything above fits but the big Service (a master and one slot per endpoint). */
const MAP_SIZE_ARGS = ['--map-size-services', '160', '--map-size-frontends', '256'];
/** The big Service's namespace: last in key order, so it is the one refused (Services are admitted in key order). */
const BIG_NS = 'zz-over';

const label = (stem: string, last: string) => `${stem}-${'x'.repeat(63 - stem.length - 2)}${last}`;
const LONG_NS = label('ns', '0');
const LONG_NAMES = [label('web', 'a'), label('web', 'b')];

/** One programmed frontend and scope as text: who, what, where, and its backends (sorted). */
const row = (
  service: string | undefined,
  portName: string | undefined,
  type: string | undefined,
  scope: string,
  address: string,
  port: number,
  protocol: string,
  backends: Array<{ address: string; port: number }>,
) =>
  `${service} ${portName || '-'} ${type} ${scope} ${address.includes(':') ? `[${address}]` : address}:${port}/${protocol} -> ${
    backends
      .map((b) => `${b.address}:${b.port}`)
      .sort()
      .join(',') || '(none)'
  }`;

describe('kpr plan agrees with the agent on the same objects, hostile ones included', { timeout: scaled(180_000) }, () => {
  let box: BoxCluster;
  let dir: string;

  function kpr(...args: string[]): { code: number | null; stdout: string; stderr: string } {
    const r = spawnSync(cliBin, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    const api = box.api;
    api.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: NODE_NAME },
      spec: {},
      status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
    });
    // Ownership: an externalIP that is another Service's ClusterIP, and an LB address two Services claim.
    api.create(httpService(NS, 'owner', OWNER_IP));
    api.create(httpSlice(NS, 'owner-1', 'owner', [PODS[0].ip]));
    api.create(httpService(NS, 'thief', '198.19.0.11', { externalIPs: [OWNER_IP, '198.19.100.11'] }));
    api.create(httpSlice(NS, 'thief-1', 'thief', [PODS[1].ip]));
    for (const [name, nodePort] of [
      ['lb-first', 30081],
      ['lb-second', 30082],
    ] as const) {
      const svc = httpService(NS, name, name === 'lb-first' ? '198.19.0.12' : '198.19.0.13', { type: 'LoadBalancer', externalTrafficPolicy: 'Cluster' });
      svc.spec.ports[0].nodePort = nodePort;
      svc.status = { loadBalancer: { ingress: [{ ip: LB_IP }] } };
      api.create(svc);
      api.create(httpSlice(NS, `${name}-1`, name, [PODS[0].ip]));
    }
    // Names at the limits.
    LONG_NAMES.forEach((name, i) => {
      const port = { name: label('port', 'p'), port: 80, targetPort: 8080, protocol: 'TCP' };
      api.create(httpService(LONG_NS, name, `198.19.0.${20 + i}`, { ports: [port] }));
      api.create(endpointSlice(LONG_NS, `${name}-1`.slice(-63), name, [PODS[i].ip], [{ name: port.name, port: 8080 }]));
    });
    // Over a limit: more endpoints than kpr_svc has room for.
    api.create(httpService(BIG_NS, 'big', '198.19.0.30'));
    api.create(
      httpSlice(
        BIG_NS,
        'big-1',
        'big',
        Array.from({ length: BIG_ENDPOINTS }, (_, i) => `198.18.${40 + (i >> 8)}.${i & 255}`),
      ),
    );
    // Rejected objects: the fuzz suite's hostile objects with their companions.
    for (const c of generateCases(36, HOSTILE_CASES)) {
      for (const o of [...c.companions, c.object]) {
        try {
          api.apply(structuredClone(o));
        } catch {
          /* a case whose companion is the same object: the last one counts */
        }
      }
    }
    await box.startAgent(MAP_SIZE_ARGS);
    // The manifests: what the API server stored, as the agent listed it.
    dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-agrees-'));
    const items = [...api.list('Service'), ...api.list('EndpointSlice'), ...api.list('Node')];
    writeFileSync(path.join(dir, 'objects.json'), JSON.stringify({ apiVersion: 'v1', kind: 'List', items }));
  });

  after(async () => {
    await box?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('every frontend the agent programmed is listed by kpr plan, and nothing else, with the same backends', () => {
    const list = kpr('service', 'list', '--bpffs', box.sandbox.bpffsDir, '-o', 'json');
    assert.equal(list.code, 0, list.stderr);
    const agent = (JSON.parse(list.stdout) as ServiceView[])
      .map((v) => row(v.service, v.portName, v.type, v.scope, v.address, v.port, v.protocol, v.backends))
      .sort();
    const p = kpr('plan', '--node', NODE_NAME, '-f', dir, ...MAP_SIZE_ARGS, '-o', 'json');
    assert.equal(p.code, 0, p.stderr);
    const plan = JSON.parse(p.stdout) as PlanJson;
    const planned = plan.frontends
      .flatMap((f) => [
        row(f.service, f.portName, f.type, 'external', f.address, f.port, f.protocol, f.backends),
        ...(f.internalBackends ? [row(f.service, f.portName, f.type, 'internal', f.address, f.port, f.protocol, f.internalBackends)] : []),
      ])
      .sort();
    assert.ok(agent.length > 20, `the agent programmed a fair share of the objects: ${agent.length}`);
    assert.deepEqual(planned, agent);

    // The hostile cases were met, and plan refused them as the agent did.
    const reasons = (object: string) =>
      plan.skipped
        .filter((s) => s.object === object)
        .map((s) => s.reason)
        .join('\n');
    assert.match(
      reasons(`Service ${NS}/thief`),
      new RegExp(`ExternalIP frontend ${OWNER_IP.replace(/\./g, '\\.')}:80/TCP is not programmed: its address is the ClusterIP of Service ${NS}/owner`),
    );
    assert.ok(
      agent.some((r) => r.startsWith(`${NS}/thief http ExternalIP external 198.19.100.11:80/TCP`)),
      "the thief's other externalIP is programmed",
    );
    assert.equal(agent.filter((r) => r.includes(` ${LB_IP}:80/TCP`)).length, 1, 'one Service owns the contested LB address');
    assert.match(reasons(`Service ${BIG_NS}/big`), /not programmed: over the limit of 160 kpr_svc entries/);
    assert.equal(
      agent.some((r) => r.startsWith(`${BIG_NS}/big `)),
      false,
      'the agent refused the big Service',
    );
    for (const name of LONG_NAMES)
      assert.ok(
        agent.some((r) => r.startsWith(`${LONG_NS}/${name} `)),
        `${name} programmed`,
      );
    assert.ok(
      plan.skipped.filter((s) => / invalid: /.test(` ${s.reason}`)).length >= 10,
      `plan names the objects the agent rejects: ${JSON.stringify(plan.skipped.slice(0, 5))}`,
    );
  });
});
