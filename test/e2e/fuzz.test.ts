/**
 * Hostile Kubernetes objects against the real agent (real BPF maps, in the
 * sandbox's namespaces and cgroup), through the embedded API server: a
 * seeded stream of Services and EndpointSlices, each with one field wrong
 * (test/fuzz/hostile-objects.ts), some present before the agent starts, then
 * created, turned from good into bad and back, and deleted, while a client
 * keeps connecting to a good Service with real pods behind it.
 *
 * What must hold: the agent never exits; the good Service never fails a
 * connection; every rejected object is named by exactly one warning per bad
 * version (and counted in kpr_k8s_objects_rejected_total{kind}); what the
 * maps hold (read back from the pins, as `kpr service list -o json` does)
 * equals what the accepted objects alone would program, computed here from
 * first principles; a good Service turned bad stops being served.
 *
 * KPR_FUZZ_SEED (default 21), KPR_FUZZ_OBJECTS (hostile objects, default
 * 400) and KPR_FUZZ_PRE_START (how many of them exist before the agent
 * starts, default 10%) change the run; the summary line says what was fuzzed.
 */
import { scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { BoxCluster, NODE_NAME, type AgentProcess } from '../../sandbox/cluster.js';
import { cliBin } from '../../sandbox/repo.js';
import { POD_HTTP_PORT } from '../../sandbox/topology.js';
import { readServiceViews } from '../../agent/cli/service-commands.js';
import type { ServiceView } from '../../agent/cli/service-view.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';
import { requireRoot } from '../support/preflight.js';
import {
  FUZZ_NAMESPACE,
  GOOD_CLUSTER_IP,
  SERVICE_NAME_LABEL,
  badVersionOf,
  expectedFrontends,
  frontendLabel,
  generateCases,
  goodService,
  goodSlice,
  namesField,
  warnsAbout,
  type FuzzCase,
  type Kind,
  type KubeObject,
} from '../fuzz/hostile-objects.js';
import { rng } from '../support/rng.js';

const SEED = Number(process.env.KPR_FUZZ_SEED ?? 21);
const OBJECTS = Math.max(60, Number(process.env.KPR_FUZZ_OBJECTS ?? 400));
/** Of the hostile objects: ~10% present before the agent starts, ~15% good objects turned bad (and back), the rest created while it runs. */
const PRE_START = process.env.KPR_FUZZ_PRE_START ? Number(process.env.KPR_FUZZ_PRE_START) : Math.max(20, Math.round(OBJECTS * 0.1));
const MODIFIED = Math.max(10, Math.round(OBJECTS * 0.15));
const CREATED = OBJECTS - PRE_START - MODIFIED;
const BATCH = 20;

const PODS = [
  { name: 'fz-pod-a', ip: '198.18.0.10' },
  { name: 'fz-pod-b', ip: '198.18.0.11' },
];
const VICTIM_IP = '198.19.0.20';
/** Client batches of this many connections, at most this many batches: bounded in count and time. */
const CLIENT_BATCH = 40;
const CLIENT_MAX_BATCHES = 1500;

function realService(name: string, ip: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: FUZZ_NAMESPACE },
    spec: {
      type: 'ClusterIP',
      clusterIP: ip,
      clusterIPs: [ip],
      ipFamilies: ['IPv4'],
      ipFamilyPolicy: 'SingleStack',
      ports: [{ name: 'http', port: 80, targetPort: POD_HTTP_PORT, protocol: 'TCP' }],
    },
  };
}

function realSlice(svc: string): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${svc}-1`, namespace: FUZZ_NAMESPACE, labels: { [SERVICE_NAME_LABEL]: svc } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: POD_HTTP_PORT, protocol: 'TCP' }],
    endpoints: PODS.map((p) => ({ addresses: [p.ip], conditions: { ready: true }, nodeName: NODE_NAME })),
  };
}

const objKey = (o: KubeObject) => `${o.kind}|${o.metadata.namespace}|${o.metadata.name}`;

/** What the test has put in the API server, and what it expects of each object. */
class World {
  /** Present objects: key → object and whether kpr must accept it. */
  readonly present = new Map<string, { obj: KubeObject; accepted: boolean }>();
  /** Bad versions pushed per object ("Kind|ns|name"): the number of warnings expected to name it. */
  readonly rejectedVersions = new Map<string, { kind: Kind; namespace: string; name: string; field: string; mutation: string; count: number }>();
  /** Accepted hostile-case objects that must not be warned about. */
  readonly quiet = new Map<string, { kind: Kind; namespace: string; name: string; mutation: string }>();
  readonly fuzzed = { Service: { rejected: 0, accepted: 0 }, EndpointSlice: { rejected: 0, accepted: 0 } };
  modifies = 0;
  deletes = 0;

  constructor(private readonly box: BoxCluster) {}

  put(obj: KubeObject, verdict: 'rejected' | 'accepted' | 'companion', c?: { field: string; mutation: string; mayWarn?: boolean }): void {
    const key = objKey(obj);
    if (this.present.has(key)) this.modifies++;
    this.box.api.apply(obj);
    this.present.set(key, { obj, accepted: verdict !== 'rejected' });
    if (verdict === 'companion') return;
    const kind = obj.kind as Kind;
    this.fuzzed[kind][verdict]++;
    const id = { kind, namespace: obj.metadata.namespace as string, name: obj.metadata.name as string };
    if (verdict === 'rejected') {
      const r = this.rejectedVersions.get(key) ?? { ...id, field: c!.field, mutation: c!.mutation, count: 0 };
      r.count++;
      this.rejectedVersions.set(key, r);
    } else if (!c?.mayWarn) this.quiet.set(key, { ...id, mutation: c?.mutation ?? '' });
  }

  putCase(c: FuzzCase): void {
    for (const o of c.companions) this.put(o, 'companion');
    this.put(c.object, c.verdict, c);
  }

  remove(key: string): void {
    const p = this.present.get(key)!;
    this.box.api.remove(p.obj.kind, p.obj.metadata.namespace, p.obj.metadata.name);
    this.present.delete(key);
    this.deletes++;
  }

  expected(): Map<string, string[]> {
    return expectedFrontends([...this.present.values()].filter((p) => p.accepted).map((p) => p.obj));
  }
}

/** The programmed frontends: "addr:port/proto" → sorted "ip:port" backends (several scopes of one frontend must agree). */
function programmed(views: ServiceView[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const v of views) {
    const key = frontendLabel(v.address, v.port, v.protocol);
    const backends = v.backends.map((b) => `${b.address}:${b.port}`).sort();
    const seen = out.get(key);
    if (seen && seen.join(',') !== backends.join(',')) out.set(key, [...seen, `(${v.scope} scope: ${backends.join(',')})`]);
    else out.set(key, backends);
  }
  return out;
}

function diff(actual: Map<string, string[]>, expected: Map<string, string[]>): string[] {
  const out: string[] = [];
  for (const [k, v] of expected) {
    const a = actual.get(k);
    if (!a) out.push(`missing ${k} -> [${v.join(',')}]`);
    else if (a.join(',') !== v.join(',')) out.push(`${k}: programmed [${a.join(',')}], expected [${v.join(',')}]`);
  }
  for (const [k, v] of actual) if (!expected.has(k)) out.push(`unexpected ${k} -> [${v.join(',')}]`);
  return out;
}

describe('hostile Services and EndpointSlices against the real agent', { timeout: scaled(900_000) }, () => {
  let box: BoxCluster;
  let world: World;
  let agent: AgentProcess;
  let healthAddr: string;
  let metricsAddr: string;
  let exited: string | undefined;
  const client = { ok: 0, failed: 0, batches: 0, errors: {} as Record<string, number>, stop: false, done: Promise.resolve() };
  const cases = generateCases(SEED, PRE_START + CREATED);
  /** Where each address came from, for failure messages. */
  const caseByAddr = new Map<string, FuzzCase>();
  for (const c of cases)
    for (const o of [c.object, ...c.companions])
      if (o.kind === 'Service' && typeof o.spec?.clusterIP === 'string') caseByAddr.set(o.spec.clusterIP.slice(0, 64), c);

  const explain = (line: string) => {
    const addr = line.replace(/^(missing|unexpected) /, '').split(/:\d+\//)[0];
    const c = caseByAddr.get(addr);
    return c ? `${line}   [${c.id} ${c.kind} ${c.mutation} (${c.verdict})]` : line;
  };

  /** Waits until the maps hold what the accepted objects program; fails with the difference. */
  async function converge(what: string, timeoutMs = 60_000): Promise<void> {
    const end = Date.now() + scaled(timeoutMs);
    let last: string[];
    for (;;) {
      assert.equal(exited, undefined, `the agent exited: ${exited}`);
      last = diff(programmed(readServiceViews(box.sandbox.bpffsDir)), world.expected());
      if (last.length === 0) return;
      if (Date.now() > end) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.fail(
      `${what}: the maps differ from the accepted objects in ${last.length} frontends:\n${last
        .slice(0, Number(process.env.KPR_FUZZ_SHOW ?? 25))
        .map(explain)
        .join('\n')}`,
    );
  }

  async function pushInBatches(items: Array<() => void>): Promise<void> {
    for (let i = 0; i < items.length; i += BATCH) {
      for (const f of items.slice(i, i + BATCH)) f();
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  before(async () => {
    requireRoot();
    box = await BoxCluster.create({ pods: PODS });
    world = new World(box);
    box.api.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME }, spec: {} });
    world.put(realService('good', GOOD_CLUSTER_IP), 'companion');
    world.put(realSlice('good'), 'companion');
    world.put(realService('victim', VICTIM_IP), 'companion');
    world.put(realSlice('victim'), 'companion');
    // Hostile objects already there when the agent lists.
    for (const c of cases.slice(0, PRE_START)) world.putCase(c);
    agent = await box.startAgent();
    agent.child.once('exit', (code, signal) => (exited = `code ${code}, signal ${signal}`));
    healthAddr = String((await agent.waitForLog('health server listening')).address);
    metricsAddr = String((await agent.waitForLog('metrics server listening')).address);
  });

  after(async () => {
    // For a look at what the agent said: KPR_FUZZ_LOG=FILE keeps its log lines.
    if (process.env.KPR_FUZZ_LOG && agent) writeFileSync(process.env.KPR_FUZZ_LOG, agent.logs.map((l) => JSON.stringify(l)).join('\n') + '\n');
    client.stop = true;
    await client.done.catch(() => undefined);
    await box?.close();
  });

  test('with hostile objects present at start: the initial sync completes, /healthz is 200 and the good Service answers', async () => {
    const hz = await fetch(`http://${healthAddr}/healthz`, { signal: AbortSignal.timeout(scaled(5000)) });
    assert.equal(hz.status, 200);
    const rep = await box.client('http', `${GOOD_CLUSTER_IP}:80`, ['--count', '20']);
    assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
    assert.deepEqual(Object.keys(rep.byPod).sort(), PODS.map((p) => p.name).sort());
    await converge('after the initial sync');
  });

  test(`${OBJECTS} hostile objects created, modified and deleted: the agent lives, the good Service never fails, the maps hold only what the accepted objects program`, async () => {
    // The client: batches of connections to the good Service for the whole run.
    client.done = (async () => {
      while (!client.stop && client.batches < CLIENT_MAX_BATCHES) {
        const rep = await box.client('http', `${GOOD_CLUSTER_IP}:80`, ['--count', String(CLIENT_BATCH)]);
        client.ok += rep.ok;
        client.failed += rep.failed;
        for (const [k, n] of Object.entries(rep.errors)) client.errors[k] = (client.errors[k] ?? 0) + n;
        client.batches++;
      }
    })();

    // Creates.
    await pushInBatches(cases.slice(PRE_START).map((c) => () => world.putCase(c)));
    await converge(`after creating ${CREATED} hostile objects`);

    // Good objects turned bad, then good again: gone from the maps while bad, back after.
    const r = rng(SEED + 1);
    const first = PRE_START + CREATED;
    const mods = Array.from({ length: MODIFIED }, (_, k) => {
      const i = first + k;
      const kind: Kind = r() < 0.5 ? 'Service' : 'EndpointSlice';
      const svc = goodService(i);
      const good = kind === 'Service' ? svc : goodSlice(i, 'b');
      return { kind, svc, a: goodSlice(i, 'a'), good, bad: badVersionOf(kind, good, SEED * 7919 + i) };
    });
    await pushInBatches(mods.map((m) => () => [m.svc, m.a, m.good].forEach((o) => world.put(o, 'companion'))));
    await converge('good objects before turning them bad');
    await pushInBatches(mods.map((m) => () => world.put(m.bad.object, 'rejected', { field: m.bad.mutation.split(' = ')[0], mutation: m.bad.mutation })));
    await converge(`after turning ${MODIFIED} good objects bad`);
    await pushInBatches(mods.map((m) => () => world.put(m.good, 'companion')));
    await converge('after turning them good again');

    // A served Service turned bad stops being served, and stays so when deleted.
    const before = await box.client('http', `${VICTIM_IP}:80`, ['--count', '10']);
    assert.equal(before.failed, 0, JSON.stringify(before.errors));
    const victim = realService('victim', VICTIM_IP);
    world.put({ ...victim, spec: { ...victim.spec, internalTrafficPolicy: 'Everywhere' } }, 'rejected', {
      field: 'spec.internalTrafficPolicy',
      mutation: 'spec.internalTrafficPolicy = "Everywhere"',
    });
    await converge('the victim Service turned bad');
    const whileBad = await box.client('once', `${VICTIM_IP}:80`, ['--timeout-ms', '1000']);
    assert.equal(whileBad.failed, 1, `the bad victim Service still answered: ${JSON.stringify(whileBad)}`);
    world.remove(objKey(victim));
    await converge('the bad victim Service deleted');
    const afterDelete = await box.client('once', `${VICTIM_IP}:80`, ['--timeout-ms', '1000']);
    assert.equal(afterDelete.failed, 1, `the deleted victim Service still answered: ${JSON.stringify(afterDelete)}`);

    // Deletes: about half of everything the cases brought, good and bad.
    const keep = new Set([objKey(realService('good', GOOD_CLUSTER_IP)), objKey(realSlice('good'))]);
    const doomed = [...world.present.keys()].filter((k) => !keep.has(k) && r() < 0.5);
    await pushInBatches(doomed.map((k) => () => world.remove(k)));
    await converge(`after deleting ${doomed.length} objects`);

    client.stop = true;
    await client.done;
    await converge('at the end');

    // What the CLI prints from the pins is the same.
    const { stdout } = await promisify(execFile)(cliBin, ['service', 'list', '--bpffs', box.sandbox.bpffsDir, '-o', 'json'], { maxBuffer: 64 << 20 });
    assert.deepEqual(diff(programmed(JSON.parse(stdout)), world.expected()), [], 'kpr service list -o json');

    const line =
      `fuzz summary: seed ${SEED}; ${OBJECTS} hostile objects (${PRE_START} before start, ${CREATED} created, ${MODIFIED} turned bad and back): ` +
      `Service rejected ${world.fuzzed.Service.rejected}, accepted ${world.fuzzed.Service.accepted}; ` +
      `EndpointSlice rejected ${world.fuzzed.EndpointSlice.rejected}, accepted ${world.fuzzed.EndpointSlice.accepted}; ` +
      `${world.modifies} modifies, ${world.deletes} deletes; good Service connections ${client.ok} ok, ${client.failed} failed in ${client.batches} batches; agent exits: ${exited ? 1 : 0}`;
    console.log(line);

    assert.equal(exited, undefined, `the agent exited: ${exited}`);
    assert.equal(agent.child.exitCode, null);
    assert.equal(client.failed, 0, `the good Service failed connections: ${JSON.stringify(client.errors)}`);
    assert.ok(client.ok > 0);
    const hz = await fetch(`http://${healthAddr}/healthz`, { signal: AbortSignal.timeout(scaled(5000)) });
    assert.equal(hz.status, 200);
  });

  test('every rejected object is named by exactly one warning per bad version, with its field; no accepted object is warned about', async () => {
    const logs = agent.logs;
    const wrong: string[] = [];
    for (const r of world.rejectedVersions.values()) {
      const lines = logs.filter((l) => warnsAbout(l, r.kind, r.namespace, r.name));
      if (lines.length !== r.count)
        wrong.push(
          `${r.kind} ${r.namespace}/${r.name.slice(0, 80)} (${r.mutation.slice(0, 120)}): ${lines.length} warnings, expected ${r.count}${lines.length ? `: ${JSON.stringify(lines[0]).slice(0, 300)}` : ''}`,
        );
      else if (!lines.every((l) => namesField(l, r.field)))
        wrong.push(
          `${r.kind} ${r.namespace}/${r.name.slice(0, 80)}: the warning does not name the field ${r.field}: ${JSON.stringify(lines[0]).slice(0, 300)}`,
        );
    }
    for (const q of world.quiet.values()) {
      const lines = logs.filter((l) => warnsAbout(l, q.kind, q.namespace, q.name));
      if (lines.length) wrong.push(`accepted ${q.kind} ${q.namespace}/${q.name} (${q.mutation}) warned about: ${JSON.stringify(lines[0]).slice(0, 300)}`);
    }
    assert.deepEqual(wrong.slice(0, 30), [], `${wrong.length} of ${world.rejectedVersions.size + world.quiet.size} objects`);
    const long = logs.filter((l) => JSON.stringify(l).length > 8192);
    assert.equal(
      long.length,
      0,
      `log lines over 8 KiB (values must be truncated): ${long
        .map((l) => `${l.msg}: ${JSON.stringify(l).length} chars`)
        .slice(0, 5)
        .join('; ')}`,
    );
  });

  test('kpr_k8s_objects_rejected_total{kind} counts the rejected versions', async () => {
    const samples = parseProm(await (await fetch(`http://${metricsAddr}/metrics`, { signal: AbortSignal.timeout(scaled(5000)) })).text());
    for (const kind of ['Service', 'EndpointSlice'] as const) {
      const want = [...world.rejectedVersions.values()].filter((r) => r.kind === kind).reduce((n, r) => n + r.count, 0);
      assert.equal(valueOf(samples, 'kpr_k8s_objects_rejected_total', { kind }), want, `kpr_k8s_objects_rejected_total{kind="${kind}"}`);
    }
  });
});
