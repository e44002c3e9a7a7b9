/**
 * bin/kpr against foreign maps pinned under kpr's names (another program's
 * map, or one made by hand, at kpr's pin path) in a fresh
 * /sys/fs/bpf/kpr-test-foreign-* directory: commands that read them fail
 * with a layout error naming the map and both layouts (exit 1), never a raw
 * Node error or a wrong "empty"; `kpr map list` and `kpr status` flag them
 * and go on. And the CLI's address arguments: an IPv4 octet with a leading
 * zero is a usage error (exit 2) in every flag that takes an address.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { BpfMap, BPF_MAP_TYPE, ensureBpffs } from '../../native/index.js';
import { libbpf } from '../../native/libbpf.js';
import { mapPinDir, mapPinPath } from '../../agent/datapath/pins.js';
import { MAPS } from '../../agent/maps/registry.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const run = promisify(execFile);

async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(cliBin, args, { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const BPF_F_NO_PREALLOC = 1;
const BPF_MAP_TYPE_LPM_TRIE = 11;

/** An LPM trie (it needs BPF_F_NO_PREALLOC, which BpfMap.create does not pass): bpf_map_create_opts with sz and map_flags set. */
function createLpmTrie(keySize: number, valueSize: number, maxEntries: number): BpfMap {
  const opts = Buffer.alloc(48);
  opts.writeBigUInt64LE(48n, 0); // sz
  opts.writeUInt32LE(BPF_F_NO_PREALLOC, 28); // map_flags
  // The binding declares opts `const void *`; its TypeScript type only admits null (no caller in native/ passes options).
  const create = libbpf().bpf_map_create as unknown as (t: number, n: string, k: number, v: number, m: number, o: Buffer) => number;
  const fd = create(BPF_MAP_TYPE_LPM_TRIE, 'foreign_lpm', keySize, valueSize, maxEntries, opts);
  assert.ok(fd >= 0, `LPM trie create: errno ${-fd}`);
  return new BpfMap(fd, true, { name: 'foreign_lpm' });
}

/** Pins `map` at kpr's pin path for `name` and closes it (the pin keeps it). */
function pinAs(dir: string, name: string, map: BpfMap): void {
  try {
    map.pin(mapPinPath(dir, name));
  } finally {
    map.close();
  }
}

const NO_RAW_ERROR = /offset is out of range|RangeError|ERR_OUT_OF_RANGE|TypeError|at .*\.js:\d+/;

describe("foreign maps pinned under kpr's names", () => {
  let dir = '';

  before(() => {
    requireRoot();
    dir = ensureBpffs(path.join('/sys/fs/bpf', `kpr-test-foreign-${process.pid}-${randomBytes(4).toString('hex')}`));
    ensureBpffs(mapPinDir(dir));
    // kpr_svc: a hash, but with another key and value size, holding one entry (which a decoder would read past).
    const svc = BpfMap.create(BPF_MAP_TYPE.HASH, 8, 4, 16);
    svc.update(Buffer.alloc(8, 1), Buffer.alloc(4, 2));
    pinAs(dir, MAPS.svc.name, svc);
    // kpr_backend and kpr_svc_meta: kpr's layouts (empty), so service list reaches kpr_svc.
    pinAs(dir, MAPS.backend.name, BpfMap.create(BPF_MAP_TYPE.HASH, MAPS.backend.key.size, MAPS.backend.value.size, 16));
    pinAs(dir, MAPS.svcMeta.name, BpfMap.create(BPF_MAP_TYPE.HASH, MAPS.svcMeta.key.size, MAPS.svcMeta.value.size, 16));
    // kpr_ct: an LPM trie with one entry (kpr's is an LRU hash).
    const ct = createLpmTrie(8, 4, 16);
    const key = Buffer.alloc(8);
    key.writeUInt32LE(32, 0);
    key.writeUInt32BE(0xc6120001, 4);
    ct.update(key, Buffer.alloc(4, 1));
    pinAs(dir, MAPS.ct.name, ct);
    // kpr_vip: an array instead of a hash, with kpr's key and value sizes.
    pinAs(dir, MAPS.vip.name, BpfMap.create(BPF_MAP_TYPE.ARRAY, 4, MAPS.vip.value.size, 4));
  });

  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('kpr map dump on a map with another key and value size: a layout error naming the map and both layouts, exit 1', async () => {
    const r = await kpr('map', 'dump', MAPS.svc.name, '--bpffs', dir);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, '');
    const want = `kpr's kpr_svc is hash, key ${MAPS.svc.key.size} B, value ${MAPS.svc.value.size} B; the map pinned there is hash, key 8 B, value 4 B`;
    assert.ok(r.stderr.includes(want), r.stderr);
    assert.match(r.stderr, /kpr_svc \(.*\) is not kpr's map: layout mismatch/);
    assert.doesNotMatch(r.stderr, NO_RAW_ERROR);
  });

  test('kpr service list on it: the same layout error, exit 1, in table and JSON', async () => {
    for (const output of ['table', 'json']) {
      const r = await kpr('service', 'list', '--bpffs', dir, '-o', output);
      assert.equal(r.code, 1, r.stderr);
      assert.match(
        r.stderr,
        /kpr_svc \(.*\) is not kpr's map: layout mismatch: kpr's kpr_svc is hash, key \d+ B, value \d+ B; the map pinned there is hash, key 8 B, value 4 B/,
      );
      assert.doesNotMatch(r.stderr, NO_RAW_ERROR);
    }
  });

  test('kpr map dump kpr_ct on a foreign LPM trie says it is foreign, not empty', async () => {
    const r = await kpr('map', 'dump', MAPS.ct.name, '--bpffs', dir);
    assert.equal(r.code, 1, r.stderr);
    assert.doesNotMatch(r.stdout, /empty/);
    assert.ok(
      r.stderr.includes(
        `kpr's kpr_ct is lru_hash, key ${MAPS.ct.key.size} B, value ${MAPS.ct.value.size} B; the map pinned there is lpm_trie, key 8 B, value 4 B`,
      ),
      r.stderr,
    );
    const vip = await kpr('map', 'dump', MAPS.vip.name, '--bpffs', dir, '-o', 'json');
    assert.equal(vip.code, 1);
    assert.match(vip.stderr, /kpr's kpr_vip is hash, .*; the map pinned there is array, /);
  });

  test('kpr map list flags the foreign maps and lists the others as usual', async () => {
    const t = await kpr('map', 'list', '--bpffs', dir);
    assert.equal(t.code, 0, t.stderr);
    const line = (name: string) => t.stdout.split('\n').find((l) => l.startsWith(`${name} `)) ?? '';
    for (const name of [MAPS.svc.name, MAPS.ct.name, MAPS.vip.name])
      assert.match(line(name), /FOREIGN: not kpr's map \(kpr's is \w+, key \d+ B, value \d+ B\)/, line(name));
    assert.match(line(MAPS.ct.name), /^kpr_ct\s+lpm_trie\s+8\s+4\s+-\s+16\s+FOREIGN/);
    for (const name of [MAPS.backend.name, MAPS.svcMeta.name]) assert.doesNotMatch(line(name), /FOREIGN/);

    const j = await kpr('map', 'list', '--bpffs', dir, '-o', 'json');
    assert.equal(j.code, 0, j.stderr);
    const maps = (JSON.parse(j.stdout) as { maps: Array<{ name: string; foreign?: { expected: { type: string }; found: { type: string; keySize: number } } }> })
      .maps;
    const ct = maps.find((m) => m.name === MAPS.ct.name)!;
    assert.deepEqual(ct.foreign, {
      expected: { type: 'lru_hash', keySize: MAPS.ct.key.size, valueSize: MAPS.ct.value.size },
      found: { type: 'lpm_trie', keySize: 8, valueSize: 4 },
    });
    assert.equal(maps.find((m) => m.name === MAPS.backend.name)!.foreign, undefined);
  });

  test('kpr status lists a foreign map as such instead of failing on it', async () => {
    const r = await kpr('status', '--bpffs', dir, '--healthz-address', '127.0.0.1:1', '--metrics-address', '127.0.0.1:1', '--timeout', '1s');
    assert.doesNotMatch(r.stderr, /not kpr's map|offset is out of range/);
    assert.match(r.stdout, /kpr_ct\s+lpm_trie \(FOREIGN\)/);
  });
});

describe('address arguments are strict', () => {
  const cases: Array<{ args: string[]; flag: string; bad: string }> = [
    { args: ['trace', '--to', '198.019.0.10:80'], flag: '--to', bad: '198.019.0.10' },
    { args: ['trace', '--to', '198.19.0.10:80', '--from', '198.18.0.07'], flag: '--from', bad: '198.18.0.07' },
    { args: ['trace', '--to', '[::ffff:198.019.0.10]:80'], flag: '--to', bad: '198.019.0.10' },
    { args: ['service', 'list', '--frontend', '010.0.0.1:80'], flag: '--frontend', bad: '010.0.0.1' },
    { args: ['monitor', '--frontend', '198.19.0.010'], flag: '--frontend', bad: '198.19.0.010' },
    { args: ['status', '--healthz-address', '127.000.0.1:10256'], flag: '--healthz-address', bad: '127.000.0.1' },
    { args: ['status', '--metrics-address', '127.0.0.01:10249'], flag: '--metrics-address', bad: '127.0.0.01' },
    { args: ['version', '--metrics-address', '0127.0.0.1:10249'], flag: '--metrics-address', bad: '0127.0.0.1' },
    { args: ['plan', '--node', 'n', '-f', '/dev/null', '--external-ip-cidrs', '198.18.00.0/24'], flag: '--external-ip-cidrs', bad: '198.18.00.0' },
    { args: ['plan', '--node', 'n', '-f', '/dev/null', '--node-port-addresses', '198.018.0.0/16'], flag: '--node-port-addresses', bad: '198.018.0.0' },
    {
      args: [
        'cleanup-nodes',
        '--namespace',
        'a',
        '--agent-daemonset',
        'b',
        '--agent-selector',
        'c=d',
        '--cleanup-daemonset',
        '/dev/null',
        '--k8s-service-host',
        '198.019.0.1',
      ],
      flag: '--k8s-service-host',
      bad: '198.019.0.1',
    },
  ];
  for (const c of cases) {
    test(`kpr ${c.args.join(' ')}: exit 2, naming ${c.flag} and the address`, async () => {
      const r = await kpr(...c.args);
      assert.equal(r.code, 2, `${r.stdout}${r.stderr}`);
      assert.ok(r.stderr.includes(`invalid ${c.flag} "`), r.stderr);
      assert.ok(r.stderr.includes(`${c.bad} has an octet with a leading zero`), r.stderr);
    });
  }

  test('the same addresses without leading zeros are accepted (the command goes on to read the maps)', async () => {
    const r = await kpr('trace', '--to', '198.19.0.10:80', '--from', '198.18.0.7', '--bpffs', '/nonexistent-kpr-test');
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /no pinned map/);
  });
});
