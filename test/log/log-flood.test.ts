/**
 * Logs that cannot flood: every line is bounded (agent/log/log.ts), and a
 * warning about an object is logged once per version of what is wrong with
 * it (agent/log/log-dedupe.ts) — for the planner's skipped input, a
 * healthCheckNodePort that cannot be opened, and frontend conflicts. Each
 * case is one of the floods seen before: 1,000 ipFamilies entries (999
 * lines), healthCheckNodePort 70000 (a line per sync), 100 VIP conflicts
 * (4,999 lines in 75 s), a 100 KB field (a 100,192-character line).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { loggerTo, MAX_FIELD_CHARS, type Fields, type Logger } from '../../agent/log/log.js';
import { OncePerVersion } from '../../agent/log/log-dedupe.js';
import { SyncLoop, type ClusterSource, type SyncReport } from '../../agent/sync/sync-loop.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { ServiceHealthServers } from '../../agent/service-health/servers.js';
import { service } from '../support/k8s-fixtures.js';

/** The JSON lines a real (pino) logger writes. */
function pinoLines(): { lines: string[]; log: Logger } {
  const lines: string[] = [];
  const log = loggerTo({ write: (s: string) => void lines.push(...s.split('\n').filter(Boolean)) }, 'debug');
  return { lines, log };
}

/** A Logger that keeps every call, children included. */
function recorder(): { lines: Array<{ level: string; msg: string; fields: Fields }>; log: Logger } {
  const lines: Array<{ level: string; msg: string; fields: Fields }> = [];
  const make = (bindings: Fields): Logger => ({
    error: (msg, fields = {}) => void lines.push({ level: 'error', msg, fields: { ...bindings, ...fields } }),
    warn: (msg, fields = {}) => void lines.push({ level: 'warn', msg, fields: { ...bindings, ...fields } }),
    info: (msg, fields = {}) => void lines.push({ level: 'info', msg, fields: { ...bindings, ...fields } }),
    debug: (msg, fields = {}) => void lines.push({ level: 'debug', msg, fields: { ...bindings, ...fields } }),
    child: (b) => make({ ...bindings, ...b }),
  });
  return { lines, log: make({}) };
}

class FakeCluster implements ClusterSource {
  readonly svcs = new Map<string, V1Service>();
  nodeObject: V1Node | undefined;
  serviceKeys() {
    return this.svcs.keys();
  }
  serviceByKey(key: string) {
    return this.svcs.get(key);
  }
  endpointSlicesByKey(): readonly V1EndpointSlice[] {
    return [];
  }
  node() {
    return this.nodeObject;
  }
}

function loop(cluster: FakeCluster, log: Logger, plan: ConstructorParameters<typeof SyncLoop>[2]['plan'] = {}) {
  const reports: SyncReport[] = [];
  const l = new SyncLoop(cluster, new Reconciler(new MemoryDatapathMaps(), log), {
    nodeName: 'node-1',
    plan,
    syncPeriodMs: 3_600_000,
    minSyncPeriodMs: 0,
    log,
    onSync: (r) => reports.push(r),
  });
  // A full sync after the first runs in slices (agent/sync/sync-loop.ts): wait for its report.
  const fullSync = async () => {
    const before = reports.length;
    l.serviceChanged(null);
    const deadline = Date.now() + 10_000;
    while (!reports.slice(before).some((r) => r.full)) {
      if (Date.now() > deadline) throw new Error('no full sync reported');
      await new Promise((r) => setImmediate(r));
    }
  };
  return { loop: l, reports, fullSync };
}

const skipLines = (lines: Array<{ msg: string; fields: Fields }>, object?: string) =>
  lines.filter((l) => l.msg === 'skipped invalid or unsupported input' && (object === undefined || l.fields.object === object));

describe('bounded log lines (agent/log/log.ts)', () => {
  it('a 100 KB field value gives a line under 2 KB, cut with a marker', () => {
    const { lines, log } = pinoLines();
    log.warn('skipped invalid or unsupported input', { object: 'Service a/b', reason: `invalid annotation ${'x'.repeat(100_000)}` });
    assert.equal(lines.length, 1);
    assert.ok(lines[0].length < 2048, `${lines[0].length} characters`);
    const line = JSON.parse(lines[0]);
    assert.equal(line.object, 'Service a/b');
    assert.match(line.reason, /^invalid annotation x+…\(99507 more\)$/);
    assert.equal(line.reason.length, MAX_FIELD_CHARS + '…(99507 more)'.length);
  });

  it('long arrays, wide and deep objects, huge messages and child bindings are bounded too', () => {
    const { lines, log } = pinoLines();
    const deep: Record<string, unknown> = {};
    let at = deep;
    for (let i = 0; i < 50; i++) at = (at.next = {}) as Record<string, unknown>;
    const wide = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, 'v'.repeat(1000)]));
    log.child({ source: 's'.repeat(10_000) }).info('m'.repeat(100_000), {
      names: Array.from({ length: 10_000 }, (_, i) => `name-${i}-${'y'.repeat(500)}`),
      wide,
      deep,
      err: new Error('e'.repeat(100_000)),
    });
    assert.equal(lines.length, 1);
    assert.ok(lines[0].length < 64 * 1024, `${lines[0].length} characters`);
    const line = JSON.parse(lines[0]);
    assert.match(line.names.at(-1), /…\(9968 more\)/);
    assert.equal(Object.keys(line.wide).length, 33);
    assert.match(line.msg, /…\(98976 more\)$/);
    assert.ok(line.source.length < 600);
    assert.ok(JSON.stringify(line.deep).length < 200);
  });

  it('lines below the level cost no bounding and are not written', () => {
    const lines: string[] = [];
    const log = loggerTo({ write: (s: string) => void lines.push(s) }, 'info');
    log.debug('d', { big: 'x'.repeat(1000) });
    assert.equal(lines.length, 0);
  });
});

describe('once per object version (agent/log/log-dedupe.ts)', () => {
  it('new versions are reported, repeats are not; forgetting or evicting reports again', () => {
    const d = new OncePerVersion(3);
    assert.equal(d.isNew('a', 'v1'), true);
    assert.equal(d.isNew('a', 'v1'), false);
    assert.equal(d.isNew('a', 'v2'), true);
    const long = 'r'.repeat(100_000);
    assert.equal(d.isNew('b', long), true);
    assert.equal(d.isNew('b', long), false);
    assert.equal(d.isNew('b', `${long}!`), true);
    d.forget('a');
    assert.equal(d.isNew('a', 'v2'), true);
    // At most 3 objects: the least recently seen goes first.
    d.isNew('c', 'x');
    d.isNew('d', 'x');
    assert.equal(d.size, 3);
    assert.equal(d.has('b'), false);
    assert.equal(d.isNew('a', 'v2'), false, 'seen recently, kept');
  });
});

describe('floods that no longer happen', () => {
  it('ipFamilies with 1,000 entries: one line, once, however many syncs', async () => {
    const cluster = new FakeCluster();
    const svc = service('a/dual', { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ipFamilies: Array.from({ length: 1000 }, () => 'IPv6') });
    cluster.svcs.set('a/dual', svc);
    const { lines, log } = recorder();
    const { loop: l, fullSync } = loop(cluster, log);
    l.start();
    for (let i = 0; i < 20; i++) await fullSync();
    l.stop();
    const warned = skipLines(lines, 'Service a/dual');
    assert.equal(warned.length, 1, JSON.stringify(warned.map((w) => w.fields.reason)));
  });

  it('1,000 reasons for one object (ports of an unknown protocol): one line with the first ten and a count, once', async () => {
    const cluster = new FakeCluster();
    const ports = Array.from({ length: 1000 }, (_, i) => ({ name: `p${i}`, port: 1000 + i, protocol: 'ICMP' }));
    cluster.svcs.set('a/many', service('a/many', { clusterIP: '10.96.0.11', ports }));
    const { lines, log } = recorder();
    const { loop: l, fullSync } = loop(cluster, log);
    l.start();
    for (let i = 0; i < 20; i++) await fullSync();
    l.stop();
    const warned = skipLines(lines, 'Service a/many');
    assert.equal(warned.length, 1);
    assert.match(String(warned[0].fields.reason), /unknown protocol "ICMP"/);
    assert.equal((warned[0].fields.otherReasons as string[]).length, 9);
    assert.ok((warned[0].fields.reasonsNotShown as number) >= 990, String(warned[0].fields.reasonsNotShown));
  });

  it('a changed reason is logged again, a fixed object is forgotten, and a bad setting is one line for every Service', async () => {
    const cluster = new FakeCluster();
    cluster.nodeObject = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } };
    for (let i = 0; i < 50; i++)
      cluster.svcs.set(
        `a/np-${i}`,
        service(`a/np-${i}`, { clusterIP: `10.96.0.${i + 1}`, type: 'NodePort', ports: [{ port: 80, protocol: 'TCP', nodePort: 30000 + i }] }),
      );
    cluster.svcs.set('a/bad', service('a/bad', { clusterIP: '10.96.1.1', ports: [{ port: 80, protocol: 'ICMP' }] }));
    const { lines, log } = recorder();
    const { loop: l, fullSync } = loop(cluster, log, { nodePortAddresses: ['not-a-cidr', '198.18.0.0/15'] });
    l.start();
    for (let i = 0; i < 5; i++) await fullSync();
    assert.equal(skipLines(lines, 'Setting nodePortAddresses').length, 1);
    assert.equal(skipLines(lines, 'Service a/bad').length, 1);
    cluster.svcs.set('a/bad', service('a/bad', { clusterIP: '10.96.1.1', ports: [{ port: 70000, protocol: 'TCP' }] }));
    for (let i = 0; i < 5; i++) await fullSync();
    assert.equal(skipLines(lines, 'Service a/bad').length, 2, 'its reason changed');
    cluster.svcs.set('a/bad', service('a/bad', { clusterIP: '10.96.1.1' }));
    await fullSync();
    cluster.svcs.set('a/bad', service('a/bad', { clusterIP: '10.96.1.1', ports: [{ port: 80, protocol: 'ICMP' }] }));
    for (let i = 0; i < 5; i++) await fullSync();
    l.stop();
    assert.equal(skipLines(lines, 'Service a/bad').length, 3, 'fixed, then broken again the first way: logged again');
    assert.equal(skipLines(lines).length, 4);
  });

  it('healthCheckNodePort 70000: the server is retried every sync but warned about once per port and error', async () => {
    const { lines, log } = recorder();
    const servers = new ServiceHealthServers({ proxyHealthy: () => true, log });
    try {
      for (let i = 0; i < 20; i++) await servers.sync([{ service: 'a/lb', port: 70000, localEndpoints: 1 }]);
      const warned = () => lines.filter((l) => l.msg === 'could not start service health check server');
      assert.equal(warned().length, 1);
      assert.equal(warned()[0].fields.port, 70000);
      for (let i = 0; i < 5; i++) await servers.sync([{ service: 'a/lb', port: 70001, localEndpoints: 1 }]);
      assert.equal(warned().length, 2, 'another port: a new warning');
      await servers.sync([]);
      await servers.sync([{ service: 'a/lb', port: 70001, localEndpoints: 1 }]);
      assert.equal(warned().length, 3, 'gone and back: warned again');
      assert.deepEqual([...servers.ports()], []);
    } finally {
      await servers.close();
    }
  });

  it("100 Services hijacking 100 ClusterIPs with externalIPs: a bounded first report, then silence; each VIP stays its owner's", async () => {
    const cluster = new FakeCluster();
    for (let i = 0; i < 100; i++) {
      const owner = service(`default/web-${i}`, { clusterIP: `10.96.2.${i}` });
      owner.metadata!.creationTimestamp = '2024-01-01T00:00:00Z' as unknown as Date;
      const evil = service(`aaa-evil/web-${i}`, { clusterIP: `10.96.3.${i}`, externalIPs: [`10.96.2.${i}`] });
      evil.metadata!.creationTimestamp = '2023-01-01T00:00:00Z' as unknown as Date; // older, and first by key: still loses
      cluster.svcs.set(`default/web-${i}`, owner);
      cluster.svcs.set(`aaa-evil/web-${i}`, evil);
    }
    const { lines, log } = recorder();
    const { loop: l, reports, fullSync } = loop(cluster, log);
    l.start();
    for (let i = 0; i < 30; i++) await fullSync();
    l.stop();
    assert.ok(reports.length >= 31 && reports.every((r) => r.result.ok));
    assert.deepEqual(reports.at(-1)!.result.conflicts, [{ type: 'ExternalIP', rule: 'cluster-ip-address', frontends: 100 }]);
    const warnings = lines.filter((x) => x.level === 'warn');
    assert.ok(warnings.length <= 11, `${warnings.length} warnings`);
    assert.equal(warnings.filter((w) => w.msg === 'frontend conflicts').length, 1);
  });
});
