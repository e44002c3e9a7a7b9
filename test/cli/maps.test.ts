/**
 * bin/kpr against real pinned maps, no agent: the real datapath object is
 * loaded with its maps pinned under a fresh /sys/fs/bpf/kpr-test-* directory,
 * filled with batch writes (10,000 ClusterIP services × 10 backends), then
 * the CLI runs as a subprocess and its output is compared with what was
 * written.
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { BpfMap, BPF_MAP_TYPE, ensureBpffs, possibleCpus } from '../../native/index.js';
import { mapPinDir, mapPinName, mapPinPath } from '../../agent/datapath/pins.js';
import { MAPS } from '../../agent/maps/registry.js';
import { SVC_VAL_V1 } from '../../agent/maps/layouts-v1.js';
import { structCodec } from '../../agent/maps/struct-codec.js';
import { IPPROTO, MAP_NAMES, SCOPE, STAT, SVC_FLAG, SVC_KEY, decodeAddr, encodeAddr, encodeSvcKey } from '../../agent/maps/layout.js';
import { cliBin } from '../support/paths.js';
import { fillServiceMaps, pinDatapathMaps } from '../../sandbox/service-maps.js';
import { requireRoot } from '../support/preflight.js';

const run = promisify(execFile);
const SERVICES = 10_000;
const BACKENDS_PER_SERVICE = 10;

async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const t0 = performance.now();
  try {
    const { stdout, stderr } = await run(cliBin, args, { maxBuffer: 512 * 1024 * 1024 });
    return { code: 0, stdout, stderr, ms: performance.now() - t0 };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr, ms: performance.now() - t0 };
  }
}

/** Service i: ClusterIP 198.19.x.y:80/TCP, id i+1, backends 10.(i>>8).(i&255).{1..10}:8080 with ids 10i+1..10i+10. */
const svcAddr = (i: number) => `198.19.${(i >> 8) & 0xff}.${i & 0xff}`;
const backendAddr = (i: number, j: number) => `10.${(i >> 8) & 0xff}.${i & 0xff}.${j + 1}`;
const svcName = (i: number) => `ns-${i % 50}/svc-${i}`;

function fill(bpffsDir: string): void {
  // Service 0 has session affinity (timeout 10800 s in slot 0's backend_id).
  fillServiceMaps(bpffsDir, {
    services: SERVICES,
    backendsPerService: BACKENDS_PER_SERVICE,
    svcAddr,
    backendAddr,
    name: svcName,
    affinity: (i) => (i === 0 ? 10800 : 0),
  });
  // Datapath counters: CONNECT_XLATE = cpu+1 on each CPU, NO_BACKEND = 7 on CPU 0.
  const stats = BpfMap.openPinned(mapPinPath(bpffsDir, MAP_NAMES.stats));
  try {
    const cpus = possibleCpus();
    const slot = stats.valueStride / cpus;
    const key = Buffer.alloc(4);
    const v = Buffer.alloc(stats.valueStride);
    for (let c = 0; c < cpus; c++) v.writeBigUInt64LE(BigInt(c + 1), c * slot);
    key.writeUInt32LE(STAT.CONNECT_XLATE);
    stats.update(key, v);
    v.fill(0);
    v.writeBigUInt64LE(7n, 0);
    key.writeUInt32LE(STAT.NO_BACKEND);
    stats.update(key, v);
  } finally {
    stats.close();
  }
}

describe('kpr CLI on pinned maps (10,000 services × 10 backends)', { timeout: 120_000 }, () => {
  let dir: string;

  before(() => {
    requireRoot();
    dir = path.join('/sys/fs/bpf', `kpr-test-cli-${process.pid}-${randomBytes(4).toString('hex')}`);
    pinDatapathMaps(dir); // every map of the real datapath, pinned as the agent names the pins
    fill(dir);
  });

  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('service list -o json: every service with its name and backends', async () => {
    await kpr('service', 'list', '--bpffs', dir, '-o', 'json'); // warm the page cache for node and the modules
    const r = await kpr('service', 'list', '--bpffs', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    console.log(
      `# kpr service list -o json, ${SERVICES} services x ${BACKENDS_PER_SERVICE} backends: ${r.ms.toFixed(0)} ms (${(r.stdout.length / 1e6).toFixed(1)} MB)`,
    );
    // Its speed is a benchmark figure (printed above), not asserted: this machine is shared.
    const views = JSON.parse(r.stdout) as Array<Record<string, any>>;
    assert.equal(views.length, SERVICES);
    const byAddr = new Map(views.map((v) => [v.address, v]));
    for (let i = 0; i < SERVICES; i++) {
      const v = byAddr.get(svcAddr(i));
      assert.ok(v, `service ${i} missing`);
      assert.equal(v.service, svcName(i));
      assert.equal(v.portName, 'http');
      assert.equal(v.type, 'ClusterIP');
      assert.equal(v.id, i + 1);
      assert.equal(v.port, 80);
      assert.equal(v.protocol, 'TCP');
      assert.equal(v.scope, 'external');
      assert.deepEqual(
        v.backends,
        Array.from({ length: BACKENDS_PER_SERVICE }, (_, j) => ({ id: i * BACKENDS_PER_SERVICE + j + 1, address: backendAddr(i, j), port: 8080 })),
      );
    }
    assert.deepEqual(byAddr.get(svcAddr(0))!.flags, ['cluster-ip', 'affinity']);
    assert.equal(byAddr.get(svcAddr(0))!.affinityTimeoutSeconds, 10800);
    assert.deepEqual(byAddr.get(svcAddr(1))!.flags, ['cluster-ip']);
    // Sorted by address: 198.19.0.2 before 198.19.0.10 (numeric, not text order).
    assert.ok(views.findIndex((v) => v.address === '198.19.0.2') < views.findIndex((v) => v.address === '198.19.0.10'));
  });

  test('service list (table) names each service and lists its backends', async () => {
    const r = await kpr('service', 'list', '--bpffs', dir);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^TCP  198\.19\.0\.7:80  id 8  10 backends  ClusterIP ns-7\/svc-7:http  \[cluster-ip\]$/m);
    assert.match(r.stdout, /^  -> 10\.0\.7\.10:8080$/m);
    assert.equal(r.stdout.split('\n').filter((l) => l.startsWith('TCP ')).length, SERVICES);
  });

  test('service get NAMESPACE/NAME prints that service only; an unknown one is an error', async () => {
    const r = await kpr('service', 'get', 'ns-3/svc-1253', '--bpffs', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const views = JSON.parse(r.stdout);
    assert.equal(views.length, 1);
    assert.equal(views[0].address, svcAddr(1253));
    assert.equal(views[0].backends.length, BACKENDS_PER_SERVICE);
    const missing = await kpr('service', 'get', 'ns-3/nope', '--bpffs', dir);
    assert.equal(missing.code, 1, 'ran, found nothing');
    assert.match(missing.stderr, /service ns-3\/nope is not programmed/);
    const bad = await kpr('service', 'get', 'no-slash', '--bpffs', dir);
    assert.equal(bad.code, 2, 'a usage error');
    assert.match(bad.stderr, /service get: NAMESPACE\/NAME expected/);
  });

  test('map list: every pinned map with its type, entries and capacity as the kernel reports them', async () => {
    const r = await kpr('map', 'list', '--bpffs', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const listed = JSON.parse(r.stdout) as {
      maps: Array<{ name: string; type: string; entries: number; capacity: number; keySize: number; valueSize: number }>;
      tcAttachments: unknown[];
    };
    const maps = listed.maps;
    assert.deepEqual(listed.tcAttachments, [], 'no agent ran: no tc program of kpr in this namespace');
    assert.deepEqual(
      maps.map((m) => m.name),
      Object.values(MAP_NAMES).slice().sort(),
    );
    const get = (name: string) => maps.find((m) => m.name === name)!;
    for (const m of maps) {
      const real = BpfMap.openPinned(mapPinPath(dir, m.name));
      try {
        assert.equal(m.capacity, real.maxEntries, m.name);
        assert.equal(m.type, real.typeName, m.name);
        assert.equal(m.keySize, real.keySize, m.name);
        assert.equal(m.valueSize, real.valueSize, m.name);
      } finally {
        real.close();
      }
    }
    assert.equal(get(MAP_NAMES.svc).entries, SERVICES * (BACKENDS_PER_SERVICE + 1));
    assert.equal(get(MAP_NAMES.backend).entries, SERVICES * BACKENDS_PER_SERVICE);
    assert.equal(get(MAP_NAMES.svcMeta).entries, SERVICES);
    assert.equal(get(MAP_NAMES.vip).entries, 0);
    assert.equal(get(MAP_NAMES.stats).type, 'percpu_array');
    assert.equal(get(MAP_NAMES.stats).entries, get(MAP_NAMES.stats).capacity, 'an array always holds max_entries');
    const table = await kpr('map', 'list', '--bpffs', dir);
    assert.match(table.stdout, /^kpr_backend\s+hash\s+4\s+20\s+100000\s+262144\s/m);
    assert.match(table.stdout, /^tc attachments: none in this network namespace$/m);
  });

  test('map dump of a map with 100,000 entries decodes every one of them', async () => {
    const r = await kpr('map', 'dump', 'kpr_backend', '--bpffs', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const entries = JSON.parse(r.stdout) as Array<{ key: { id: number }; value: { address: string; port: number; protocol: string; flags: string[] } }>;
    assert.equal(entries.length, SERVICES * BACKENDS_PER_SERVICE);
    entries.forEach((e, n) => {
      assert.equal(e.key.id, n + 1, 'sorted by id');
      const i = Math.floor(n / BACKENDS_PER_SERVICE);
      assert.deepEqual(e.value, { address: backendAddr(i, n % BACKENDS_PER_SERVICE), port: 8080, protocol: 'TCP', flags: [] });
    });
    const table = await kpr('map', 'dump', 'kpr_backend', '--bpffs', dir);
    const lines = table.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 1 + SERVICES * BACKENDS_PER_SERVICE);
    assert.match(lines[0], /^ID\s+=>\s+ADDRESS\s+PORT\s+PROTOCOL\s+FLAGS$/);
    assert.match(lines[1], /^1\s+=>\s+10\.0\.0\.1\s+8080\s+TCP\s+-$/);
  });

  test('map dump kpr_svc and kpr_svc_meta: masters, slots and names as written', async () => {
    const svc = JSON.parse((await kpr('map', 'dump', 'kpr_svc', '--bpffs', dir, '-o', 'json')).stdout) as Array<{ key: any; value: any }>;
    assert.equal(svc.length, SERVICES * (BACKENDS_PER_SERVICE + 1));
    const master = svc.find((e) => e.key.address === svcAddr(42) && e.key.slot === 0)!;
    assert.deepEqual(master, {
      key: { address: svcAddr(42), port: 80, protocol: 'TCP', scope: 'external', slot: 0 },
      value: { count: 10, id: 43, flags: ['cluster-ip'] },
    });
    const slot3 = svc.find((e) => e.key.address === svcAddr(42) && e.key.slot === 3)!;
    assert.deepEqual(slot3.value, { backendId: 42 * BACKENDS_PER_SERVICE + 3 });
    const meta = JSON.parse((await kpr('map', 'dump', 'kpr_svc_meta', '--bpffs', dir, '-o', 'json')).stdout) as Array<{ key: any; value: any }>;
    assert.equal(meta.length, SERVICES);
    assert.deepEqual(meta[99], { key: { id: 100 }, value: { service: svcName(99), portName: 'http', type: 'ClusterIP', protocol: 'TCP' } });
  });

  test('stats and map dump kpr_stats sum the per-CPU counters', async () => {
    const cpus = possibleCpus();
    const expectConnect = (cpus * (cpus + 1)) / 2;
    const r = await kpr('stats', '--bpffs', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const rows = (JSON.parse(r.stdout) as { counters: Array<{ stat: string; metric: string; labels: Record<string, string>; value: number }> }).counters;
    assert.deepEqual(
      rows.find((x) => x.stat === 'connect_xlate'),
      { stat: 'connect_xlate', metric: 'kpr_datapath_translations_total', labels: { path: 'connect' }, value: expectConnect },
    );
    assert.deepEqual(
      rows.find((x) => x.stat === 'no_backend'),
      { stat: 'no_backend', metric: 'kpr_datapath_refusals_total', labels: { reason: 'no_backend' }, value: 7 },
    );
    assert.equal(rows.find((x) => x.stat === 'sendmsg_xlate')!.value, 0);
    assert.deepEqual(
      rows.find((x) => x.stat === 'tc_ct_reply_restored'),
      { stat: 'tc_ct_reply_restored', metric: 'kpr_datapath_conntrack_reply_restored_total', labels: {}, value: 0 },
    );
    const dump = JSON.parse((await kpr('map', 'dump', 'kpr_stats', '--bpffs', dir, '-o', 'json')).stdout) as Array<{ key: any; value: any }>;
    const connect = dump.find((e) => e.key.stat === 'connect_xlate')!;
    assert.equal(connect.value.total, String(expectConnect));
    assert.equal(connect.value.perCpu.length, cpus);
    const table = await kpr('stats', '--bpffs', dir);
    assert.match(table.stdout, new RegExp(`^connect_xlate\\s+${expectConnect}\\s+kpr_datapath_translations_total\\{path="connect"\\}$`, 'm'));
  });

  test('an unknown map name is an error that lists the known maps', async () => {
    const r = await kpr('map', 'dump', 'kpr_nope', '--bpffs', dir);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown map "kpr_nope"; known maps: .*kpr_backend.*kpr_svc.*kpr_svc_meta/);
  });

  test('a map pinned at an older layout (a node still on the previous release): map dump converts it, map list names the layout, service list says why it cannot read it', async () => {
    const old = ensureBpffs(path.join('/sys/fs/bpf', `kpr-test-cli-v1-${process.pid}-${randomBytes(4).toString('hex')}`));
    try {
      mkdirSync(mapPinDir(old), { recursive: true });
      const m = BpfMap.create(BPF_MAP_TYPE.HASH, SVC_KEY.size, SVC_VAL_V1.size, 16, 'kpr_svc');
      try {
        const v1 = structCodec(SVC_VAL_V1, { encode: encodeAddr, decode: decodeAddr });
        m.update(
          encodeSvcKey({ addr: '198.19.0.10', port: 80, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
          v1.encode({ backendId: 0, count: 1, frontendId: 7, flags: SVC_FLAG.CLUSTER_IP }),
        );
        m.update(
          encodeSvcKey({ addr: '198.19.0.10', port: 80, slot: 1, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL }),
          v1.encode({ backendId: 3, count: 0, frontendId: 0, flags: 0 }),
        );
        m.pin(path.join(mapPinDir(old), mapPinName(MAP_NAMES.svc, 1)));
      } finally {
        m.close();
      }
      const dump = await kpr('map', 'dump', MAP_NAMES.svc, '--bpffs', old, '-o', 'json');
      assert.equal(dump.code, 0, dump.stderr);
      assert.deepEqual(
        JSON.parse(dump.stdout).map((e: { value: unknown }) => e.value),
        [{ count: 1, id: 7, flags: ['cluster-ip'] }, { backendId: 3 }],
      );
      const list = await kpr('map', 'list', '--bpffs', old, '-o', 'json');
      assert.equal(list.code, 0, list.stderr);
      assert.deepEqual(
        JSON.parse(list.stdout).maps.map((x: { name: string; layoutVersion?: number }) => [x.name, x.layoutVersion]),
        [[MAP_NAMES.svc, 1]],
      );
      const svc = await kpr('service', 'list', '--bpffs', old);
      assert.equal(svc.code, 1);
      assert.match(svc.stderr, new RegExp(`kpr_svc is pinned at layout v1 .*this kpr reads v${MAPS.svc.version}: the agent on this node is another release`));
    } finally {
      rmSync(old, { recursive: true, force: true });
    }
  });

  test('nothing pinned, or no permission: a clear error, exit code 1', async () => {
    const empty = `/sys/fs/bpf/kpr-test-none-${process.pid}`;
    for (const args of [['map', 'list'], ['service', 'list'], ['stats'], ['map', 'dump', 'kpr_svc']]) {
      const r = await kpr(...args, '--bpffs', empty);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /is the kpr agent running on this node with --bpffs/, args.join(' '));
    }
    // Without privileges (uid/gid nobody, no capabilities), opening a pin is refused.
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--inh-caps=-all', cliBin, 'service', 'list', '--bpffs', dir], {
      encoding: 'utf8',
    });
    assert.equal(r.error, undefined, 'setpriv (util-linux) runs');
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /needs root|EACCES|EPERM/);
  });
});
