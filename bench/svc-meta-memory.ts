/**
 * What kpr_svc_meta (a frontend id's Service and port names) costs in
 * kernel memory, layout v1 beside layout v2, at 1,000 to 100,000 Services
 * (one ClusterIP frontend each, as `make bench`'s scenario): v1 held 96 +
 * 32 bytes of names in a preallocated hash map; v2 holds 128 + 64 (Kubernetes'
 * longest names whole) in a map allocated on insert (BPF_F_NO_PREALLOC).
 * Each map is created by loading the real objects (v1: the upgrade test's
 * build of bpf/ against test/fixtures/bpf-v1/, which declares v1's struct
 * and flags) at the frontend id space the agent gets at that scale
 * (bench/map-sizing.ts: the compiled 65,536, or what the scenario needs
 * with a quarter of headroom), filled with one name per Service, and
 * measured as the kernel accounts it (the map's memlock in
 * /proc/self/fdinfo: bpf_map_memory_usage()). With --whole-set, the whole
 * map set at the 100,000-Service scale's sizes too (only kpr_svc_meta
 * differs between the layouts, so v1's total is v2's less the difference).
 * Prints a table, then JSON.
 *
 *   make build && node dist/bench/svc-meta-memory.js [--services 0,1000,10000,100000] [--whole-set]
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BpfObject, type BpfMap } from '../native/index.js';
import { codecOf, type SvcMeta } from '../agent/maps/layout.js';
import { SVC_META_V1 } from '../agent/maps/layouts-v1.js';
import { MAPS, RINGS, type MapId } from '../agent/maps/registry.js';
import type { StructLayout } from '../agent/maps/struct-codec.js';
import { repoRoot } from '../sandbox/repo.js';
import { benchMapSizes, scenarioNeeds } from './map-sizing.js';

const { values } = parseArgs({ options: { services: { type: 'string', default: '0,1000,10000,100000' }, 'whole-set': { type: 'boolean', default: false } } });
const counts = values.services!.split(',').map(Number);

const OBJECTS = { v1: path.join(repoRoot, 'build', 'fixtures', 'v1', 'kpr_sock.bpf.o'), v2: path.join(repoRoot, 'build', 'kpr_sock.bpf.o') };
const LAYOUTS: Record<keyof typeof OBJECTS, StructLayout<SvcMeta>> = { v1: SVC_META_V1, v2: MAPS.svcMeta.value };

/** The kernel's accounting of a map's memory (fdinfo memlock), bytes. */
function memlock(m: BpfMap): number {
  const text = fs.readFileSync(`/proc/self/fdinfo/${m.fd}`, 'utf8');
  const v = /^memlock:\s+(\d+)/m.exec(text);
  if (!v) throw new Error(`no memlock in fdinfo of map fd ${m.fd}`);
  return Number(v[1]);
}

/** Loads `object` with every map unpinned, at `sizes` (a one-entry map for the rest, unless `full`), and runs `f` on it. */
function withObject<T>(object: string, sizes: Record<string, number>, full: boolean, f: (o: BpfObject) => T): T {
  if (!fs.existsSync(object)) throw new Error(`${object} is missing: run \`make build\``);
  const probe = BpfObject.open(object);
  const names = probe.mapNames();
  probe.close();
  const rings = new Set<string>(Object.values(RINGS).map((r) => r.name));
  const maxEntries: Record<string, number> = {};
  for (const n of names) if (!rings.has(n) && !full) maxEntries[n] = 1;
  Object.assign(maxEntries, sizes);
  const pinPaths = Object.fromEntries(names.map((n) => [n, null]));
  const o = BpfObject.open(object, { maxEntries, pinPaths });
  try {
    o.load();
    return f(o);
  } finally {
    o.close();
  }
}

/** One name per Service into kpr_svc_meta, in batches: "ns-<k>/svc-<i>", port "http", as the agent writes them. */
function fill(m: BpfMap, layout: StructLayout<SvcMeta>, n: number): void {
  const codec = codecOf(layout);
  const chunk = 8192;
  for (let start = 0; start < n; start += chunk) {
    const c = Math.min(chunk, n - start);
    const keys = Buffer.alloc(c * 4);
    const vals = Buffer.alloc(c * codec.size);
    for (let i = 0; i < c; i++) {
      const id = start + i + 1;
      keys.writeUInt32LE(id, i * 4);
      codec.encode({ name: `ns-${id % 100}/svc-${id}`, portName: 'http', type: 0, proto: 6 }, vals, i * codec.size);
    }
    m.updateBatch(keys, vals, c);
  }
}

/** The frontend id space (kpr_svc_meta's max_entries) the agent gets at `services` Services × 10 endpoints. */
const idSpace = (services: number) => benchMapSizes(scenarioNeeds(services, 10)).frontends;

interface Row {
  services: number;
  maxEntries: number;
  v1Bytes: number;
  v2Bytes: number;
}

const rows: Row[] = [];
for (const services of counts) {
  const maxEntries = idSpace(services);
  const bytes = {} as Record<keyof typeof OBJECTS, number>;
  for (const v of ['v1', 'v2'] as const) {
    bytes[v] = withObject(OBJECTS[v], { [MAPS.svcMeta.name]: maxEntries }, false, (o) => {
      const m = o.map(MAPS.svcMeta.name);
      fill(m, LAYOUTS[v], services);
      return memlock(m);
    });
  }
  rows.push({ services, maxEntries, v1Bytes: bytes.v1, v2Bytes: bytes.v2 });
}

const MiB = (b: number) => (b / 1048576).toFixed(2);
console.log('kpr_svc_meta, kernel memory (fdinfo memlock), one ClusterIP frontend per Service');
console.log('services  max_entries  v1 (96+32 B, prealloc)  v2 (128+64 B, no prealloc)  v2/v1');
for (const r of rows) {
  console.log(
    `${String(r.services).padStart(8)}  ${String(r.maxEntries).padStart(11)}  ${`${MiB(r.v1Bytes)} MiB`.padStart(22)}  ${`${MiB(r.v2Bytes)} MiB`.padStart(26)}  ${(r.v2Bytes / r.v1Bytes).toFixed(2).padStart(5)}`,
  );
}

let wholeSet: { services: number; sizes: Record<string, number>; v2TotalBytes: number; v1TotalBytes: number; byMap: Record<string, number> } | undefined;
if (values['whole-set']) {
  const services = 100_000;
  const s = benchMapSizes(scenarioNeeds(services, 10));
  const sizeOf: Partial<Record<MapId, number>> = {
    svc: s.services,
    backend: s.backends,
    affinityMatch: s.backends,
    svcMeta: s.frontends,
    svcStats: s.frontends,
    vip: s.frontends,
  };
  const sizes = Object.fromEntries(Object.entries(sizeOf).map(([id, n]) => [MAPS[id as MapId].name, n!]));
  const byMap = withObject(OBJECTS.v2, sizes, true, (o) => {
    fill(o.map(MAPS.svcMeta.name), LAYOUTS.v2, services);
    return Object.fromEntries(o.mapNames().map((n) => [n, memlock(o.map(n))]));
  });
  const v2TotalBytes = Object.values(byMap).reduce((a, b) => a + b, 0);
  const last = rows.find((r) => r.services === services);
  const v1TotalBytes = last ? v2TotalBytes - last.v2Bytes + last.v1Bytes : NaN;
  wholeSet = { services, sizes, v2TotalBytes, v1TotalBytes, byMap };
  console.log(
    `\nthe whole map set at ${services} Services' sizes (${Object.entries(sizes)
      .map(([n, v]) => `${n}=${v}`)
      .join(', ')}; the rest compiled):`,
  );
  console.log(`  v2 ${MiB(v2TotalBytes)} MiB, v1 ${MiB(v1TotalBytes)} MiB (v2 less kpr_svc_meta's difference)`);
}

console.log(JSON.stringify({ bench: 'svc-meta-memory', kernel: fs.readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim(), rows, wholeSet }, null, 2));
