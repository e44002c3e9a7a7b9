/**
 * `kpr service list -o json` written straight from the raw batches
 * (agent/cli/service-json.ts): the same bytes as JSON.stringify of the views
 * (agent/cli/service-view.ts joinTables) and a newline, the contract the
 * output has always had, on batches encoded with the maps' own codecs that
 * exercise every member: IPv4 and IPv6 frontends and backends, every
 * frontend type and protocol (and unknown ones), scopes, flags (affinity,
 * traffic policy, source ranges, unknown bits), local backends, missing
 * backends and slots, Services without endpoints, names from kpr_svc_meta
 * (with characters JSON escapes) or none, counters, and the ties of the
 * listing order, at every chunk boundary.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serviceJson } from '../../agent/cli/service-json.js';
import { BackendBatch, joinTables, tablesFromBatch, type FrontendCounters, type RawBatch } from '../../agent/cli/service-view.js';
import {
  BACKEND,
  BACKEND_ID_SIZE,
  BE_FLAG,
  FE_TYPE,
  IPPROTO,
  SCOPE,
  SVC_FLAG,
  SVC_KEY,
  SVC_VAL,
  encodeBackend,
  encodeBackendId,
  encodeSvcKey,
  encodeSvcVal,
  encodeAddr,
  type SvcMeta,
} from '../../agent/maps/layout.js';

interface Frontend {
  addr: string;
  port: number;
  proto: number;
  scope: number;
  id: number;
  flags: number;
  affinity?: number;
  /** Backend ids by slot (0: the slot has no entry). */
  slots: number[];
  /** Slot count in the master (default slots.length). */
  count?: number;
}

/** A deterministic generator (the same cases every run). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

function shuffled<T>(list: T[], rand: () => number): T[] {
  const out = [...list];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** kpr_svc's batch of `frontends` (master and slots, in a shuffled order, as a hash map returns them). */
function svcBatch(frontends: Frontend[], rand: () => number): RawBatch {
  const entries: Array<[number, Frontend]> = [];
  for (const f of frontends) for (let slot = 0; slot <= f.slots.length; slot++) if (slot === 0 || f.slots[slot - 1] !== 0) entries.push([slot, f]);
  const order = shuffled(entries, rand);
  const keys = Buffer.alloc(order.length * SVC_KEY.size);
  const values = Buffer.alloc(order.length * SVC_VAL.size);
  order.forEach(([slot, f], i) => {
    encodeSvcKey({ addr: f.addr, port: f.port, proto: f.proto, scope: f.scope, slot }, keys, i * SVC_KEY.size);
    const val =
      slot === 0
        ? { backendId: f.affinity ?? 0, count: f.count ?? f.slots.length, frontendId: f.id, flags: f.flags }
        : { backendId: f.slots[slot - 1]!, count: 0, frontendId: 0, flags: 0 };
    encodeSvcVal(val, values, i * SVC_VAL.size);
  });
  return { count: order.length, keys, values };
}

function backendBatch(backends: Array<{ id: number; addr: string; port: number; flags: number }>, rand: () => number): RawBatch {
  const order = shuffled(backends, rand);
  const keys = Buffer.alloc(order.length * BACKEND_ID_SIZE);
  const values = Buffer.alloc(order.length * BACKEND.size);
  order.forEach((b, i) => {
    encodeBackendId(b.id, keys, i * BACKEND_ID_SIZE);
    encodeBackend({ addr: b.addr, port: b.port, proto: IPPROTO.TCP, flags: b.flags }, values, i * BACKEND.size);
  });
  return { count: order.length, keys, values };
}

const V6_FORMS = ['2001:db8::1', '2001:db8:0:1::', '2001:db8:1:2:3:4:5:6', '::1', '::', '2001:db8::ffff:0:1', 'fe80::1:0:0:1', '::ffff:0:198.18.0.1'];
const PROTOS = [IPPROTO.TCP, IPPROTO.UDP, IPPROTO.SCTP, 99];
const TYPES = [FE_TYPE.CLUSTER_IP, FE_TYPE.NODE_PORT, FE_TYPE.LOAD_BALANCER, FE_TYPE.EXTERNAL_IP, 9];
const FLAG_SETS = [
  SVC_FLAG.CLUSTER_IP,
  SVC_FLAG.CLUSTER_IP | SVC_FLAG.AFFINITY,
  SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY,
  SVC_FLAG.LOAD_BALANCER | SVC_FLAG.LOCAL_ONLY | SVC_FLAG.SOURCE_RANGES | SVC_FLAG.AFFINITY,
  SVC_FLAG.EXTERNAL_IP,
  0,
  SVC_FLAG.CLUSTER_IP | 0x4000,
];
const NAMES = ['ns/web', 'kube-system/kube-dns', 'ns/"quoted"\\back', 'ns/ünïcødé-名前', 'ns/tab\there\u0001'];

/** `n` frontends with backends, names and counters covering every member (see the file's comment). */
function scenario(n: number, seed: number, sparseIds: boolean) {
  const rand = rng(seed);
  const frontends: Frontend[] = [];
  const backends: Array<{ id: number; addr: string; port: number; flags: number }> = [];
  const meta = new Map<number, SvcMeta>();
  const counters = new Map<number, FrontendCounters>();
  let nextBackend = 1;
  for (let i = 0; i < n; i++) {
    const v6 = i % 7 === 3;
    // Frontends share addresses (ports, protocols and scopes then order them); scope 12 sorts before 2 as text.
    const addr = v6 ? `2001:db8::${(i >> 2).toString(16)}` : `198.18.${(i >> 10) & 255}.${(i >> 2) & 255}`;
    const slots: number[] = [];
    const backendCount = i % 11 === 5 ? 0 : 1 + (i % 4);
    for (let s = 0; s < backendCount; s++) {
      const id = sparseIds && s === 0 ? 0x80000000 + i : nextBackend++;
      const kind = (i + s) % 13;
      if (kind === 7) {
        slots.push(id + 5_000_000); // a slot naming a backend kpr_backend lacks
        continue;
      }
      if (kind === 11 && s > 0) {
        slots.push(0); // a slot with no entry in kpr_svc
        continue;
      }
      slots.push(id);
      const bAddr = kind % 3 === 2 ? V6_FORMS[(i + s) % V6_FORMS.length]! : `10.${(id >> 16) & 255}.${(id >> 8) & 255}.${id & 255}`;
      backends.push({ id, addr: bAddr, port: kind === 4 ? 0 : kind === 5 ? 65535 : 8080 + s, flags: kind % 4 === 1 ? BE_FLAG.LOCAL : kind === 6 ? 0x82 : 0 });
    }
    const flags = FLAG_SETS[i % FLAG_SETS.length]!;
    const f: Frontend = {
      addr,
      port: i % 5 === 0 ? 65535 : 80 + (i % 3),
      proto: PROTOS[i % PROTOS.length]!,
      scope: [SCOPE.EXTERNAL, SCOPE.INTERNAL, 12, 2][(i >> 1) % 4]!,
      id: i + 1,
      flags,
      slots,
    };
    if (flags & SVC_FLAG.AFFINITY) f.affinity = 10800 + i;
    if (i % 17 === 9) f.count = slots.length + 2; // a master counting slots that were never written
    frontends.push(f);
    if (i % 6 !== 4)
      meta.set(f.id, { name: NAMES[i % NAMES.length]!, portName: i % 3 === 0 ? '' : `port-${i % 3}`, type: TYPES[i % TYPES.length]!, proto: f.proto });
    if (i % 5 === 2)
      counters.set(f.id, {
        balanced: i * 1000,
        refused: i % 2,
        droppedNoEndpoint: 0,
        droppedNoLocalEndpoint: 2 ** 40,
        droppedSourceRange: Number(2n ** 64n - 1n),
      });
  }
  const t = tablesFromBatch(svcBatch(frontends, rand), new BackendBatch(backendBatch(backends, rand)), meta);
  if (seed % 2 === 0) t.counters = counters; // kpr_svc_stats pinned, or not
  return t;
}

/** The chunks' text. */
const text = (chunks: Iterable<Uint8Array>) => Buffer.concat([...chunks]).toString('utf8');

test('the JSON written from the batches is JSON.stringify(views, null, 2) and a newline, at every chunk boundary', () => {
  for (const n of [0, 1, 2, 40, 999, 1000, 1001, 2500]) {
    for (const [seed, sparse] of [
      [1, false],
      [2, false],
      [4, true],
    ] as const) {
      const t = scenario(n, seed + n, sparse);
      const want = JSON.stringify(joinTables(t), null, 2) + '\n';
      assert.equal(text(serviceJson(t)), want, `${n} frontends, seed ${seed + n}, sparse ids ${sparse}`);
      // A consumer done with each chunk before the next (the CLI's stdout): one buffer reused throughout.
      const parts: Buffer[] = [];
      for (const c of serviceJson(t, t.order, () => true)) parts.push(Buffer.from(c));
      assert.equal(Buffer.concat(parts).toString('utf8'), want, `${n} frontends reusing the buffer`);
    }
  }
});

test('the scenario reaches every member the output can have', () => {
  const views = joinTables(scenario(1000, 2, false));
  const has = (f: (v: (typeof views)[number]) => boolean, what: string) => assert.ok(views.some(f), what);
  has((v) => v.address.includes(':'), 'an IPv6 frontend');
  for (const type of ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalIP', 'type-9']) has((v) => v.type === type, type);
  for (const p of ['TCP', 'UDP', 'SCTP', 'proto-99']) has((v) => v.protocol === p, p);
  for (const s of ['external', 'internal', 'scope-12']) has((v) => v.scope === s, s);
  for (const flag of ['affinity', 'local-only', 'source-ranges', '0x4000']) has((v) => v.flags.includes(flag), flag);
  has((v) => v.flags.length === 0, 'no flags');
  has((v) => v.affinityTimeoutSeconds !== undefined, 'an affinity timeout');
  has((v) => v.service === undefined, 'a frontend without a name');
  has((v) => v.portName === '', 'an unnamed port');
  has((v) => v.counters !== undefined, 'counters');
  has((v) => v.backends.length === 0, 'a Service without endpoints');
  has((v) => v.backends.some((b) => b.local), 'a local backend');
  has((v) => v.backends.some((b) => b.address === '?' && b.id !== 0), 'a slot naming a missing backend');
  has((v) => v.backends.some((b) => b.id === 0), 'a slot with no entry');
  has((v) => v.backends.some((b) => b.address.includes(':')), 'an IPv6 backend');
  has((v) => v.backends.some((b) => b.port === 65535), 'the largest port');
});

/** The listing order as the CLI always made it: a string per frontend (address bytes in hex, port, protocol padded, scope), sorted stably. */
function textOrder(t: ReturnType<typeof scenario>): number[] {
  const buf = Buffer.alloc(16);
  const keyOf = (m: number) => {
    const k = t.masters[m]!.key;
    encodeAddr(k.addr, buf, 0);
    return `${buf.toString('hex')}|${String(k.port).padStart(5, '0')}|${String(k.proto).padStart(3, '0')}|${k.scope}`;
  };
  return Array.from({ length: t.masters.length }, (_, m) => m).sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0));
}

test('frontends are listed in the order the CLI has always used', () => {
  for (const n of [0, 1, 1000]) {
    const t = scenario(n, 5, false);
    assert.deepEqual(Array.from(t.order), textOrder(t), `${n} frontends`);
  }
});

test('a subset of the frontends (service get, --frontend) is written as the same subset of views', () => {
  const t = scenario(300, 3, false);
  const which = Array.from(t.order).filter((m) => m % 3 === 1);
  assert.equal(text(serviceJson(t, which)), JSON.stringify(joinTables(t, which), null, 2) + '\n');
  assert.equal(text(serviceJson(t, [])), '[]\n');
});
