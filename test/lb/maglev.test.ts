/**
 * Maglev tables as plain data (agent/lb/maglev.ts, prime.ts): the same
 * table from the same backends in any order, the same backend for a flow
 * on two independently computed "agents", little movement when a backend
 * goes, balance, weights, the table size's rules, and sharing.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';
import { findRepoRoot } from '../../agent/runtime/paths.js';
import { tupleHash, type FiveTuple } from '../../agent/lb/maglev-hash.js';
import {
  MAGLEV_CILIUM_SIZING,
  MAGLEV_DEFAULT_SIZING,
  MaglevTableCache,
  maglevTable,
  pickBackend,
  type MaglevBackendInput,
  type MaglevSizing,
  type MaglevTable,
} from '../../agent/lb/maglev.js';
import { autoTableSize, isPrime, MAGLEV_TABLE_SIZES, validateTableSize } from '../../agent/lb/prime.js';
import { rng } from '../support/rng.js';

/** n IPv4 backends 198.18.x.y:8080. */
const backends = (n: number, port = 8080): MaglevBackendInput[] => Array.from({ length: n }, (_, i) => ({ address: `198.18.${i >> 8}.${i & 255}`, port }));

function shuffled<T>(xs: readonly T[], seed: number): T[] {
  const r = rng(seed);
  const a = [...xs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

const v4bytes = (n: number): Uint8Array => {
  const b = new Uint8Array(16);
  b[10] = b[11] = 0xff;
  b[12] = n >>> 24;
  b[13] = (n >>> 16) & 255;
  b[14] = (n >>> 8) & 255;
  b[15] = n & 255;
  return b;
};

/** `count` client flows to 198.19.0.1:80 (TCP), from random clients of 198.18.0.0/15 and random ports. */
function flows(count: number, seed: number): FiveTuple[] {
  const r = rng(seed);
  const daddr = v4bytes(0xc6130001);
  return Array.from({ length: count }, () => ({
    saddr: v4bytes((0xc6120000 + Math.floor(r() * 0x20000)) >>> 0),
    daddr,
    sport: 1024 + Math.floor(r() * 64511),
    dport: 80,
    proto: 6,
  }));
}

/** The backend (address/port) a flow picks from a table. */
function pickOf(t: MaglevTable, f: FiveTuple): string {
  const b = t.backends[pickBackend(t, tupleHash(f))];
  return `${b.address}/${b.port}`;
}

/** Slots per backend (by address/port). */
function slotCounts(t: MaglevTable): Map<string, number> {
  const c = new Map<string, number>();
  for (const e of t.entries) {
    const k = `${t.backends[e].address}/${t.backends[e].port}`;
    c.set(k, (c.get(k) ?? 0) + 1);
  }
  return c;
}

describe('maglevTable: determinism', () => {
  it('gives the same table for the same backends in any order, and different spellings of one address', () => {
    for (const n of [1, 3, 10, 100, 300]) {
      const a = maglevTable(backends(n));
      const b = maglevTable(shuffled(backends(n), n));
      assert.deepEqual(b.backends, a.backends);
      assert.deepEqual(Buffer.from(b.entries.buffer), Buffer.from(a.entries.buffer), `n=${n}`);
      assert.equal(b.key, a.key);
    }
    const spelled = maglevTable([
      { address: '::ffff:198.18.0.1', port: 80 },
      { address: '2001:DB8:0::1', port: 80 },
      { address: '198.018.0.2', port: 80 },
    ]);
    const plain = maglevTable([
      { address: '2001:db8::1', port: 80 },
      { address: '198.18.0.2', port: 80 },
      { address: '198.18.0.1', port: 80 },
    ]);
    assert.deepEqual(spelled.entries, plain.entries);
    assert.deepEqual(
      plain.backends.map((b) => b.address),
      ['198.18.0.1', '198.18.0.2', '2001:db8::1'],
      'identity order: the 16-byte form, IPv4-mapped first',
    );
  });

  it('counts a backend listed twice once, with its largest weight', () => {
    const once = maglevTable([...backends(4), { address: '198.18.0.9', port: 8080, weight: 3 }]);
    const twice = maglevTable([...backends(4), { address: '198.18.0.9', port: 8080 }, ...backends(2), { address: '198.18.0.9', port: 8080, weight: 3 }]);
    assert.equal(twice.key, once.key);
    assert.deepEqual(twice.entries, once.entries);
  });

  it('treats the port as part of the identity', () => {
    const a = maglevTable(backends(5, 8080));
    const b = maglevTable(backends(5, 8081));
    assert.notDeepEqual(a.entries, b.entries);
  });
});

/** Agent B in a worker thread (its own V8 isolate and module instances): the backend each flow picks, computed there. */
function picksInWorker(list: MaglevBackendInput[], fs: FiveTuple[]): Promise<string[]> {
  const maglevUrl = new URL('../../agent/lb/maglev.js', import.meta.url).href;
  const hashUrl = new URL('../../agent/lb/maglev-hash.js', import.meta.url).href;
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    Promise.all([import(${JSON.stringify(maglevUrl)}), import(${JSON.stringify(hashUrl)})]).then(([m, h]) => {
      const t = new m.MaglevTableCache().acquire(workerData.list).table;
      parentPort.postMessage(workerData.fs.map((f) => { const b = t.backends[m.pickBackend(t, h.tupleHash(f))]; return b.address + '/' + b.port; }));
    });`;
  return new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { list, fs } });
    w.once('message', (v: string[]) => {
      resolve(v);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

describe('two agents pick the same backend for a flow', () => {
  it('agrees on ≥ 99% of 2,000 flows (here: all) at N = 3, 10, 100: agent B in another thread, its backends listed in another order', async () => {
    for (const n of [3, 10, 100]) {
      // Agent A: the backends as one EndpointSlice lists them; agent B: split in two slices, listed in another order.
      const a = new MaglevTableCache().acquire(backends(n)).table;
      const bList = shuffled(backends(n), 7 * n);
      const fs = flows(2000, n);
      const picksB = await picksInWorker([...bList.slice(n >> 1), ...bList.slice(0, n >> 1)], fs);
      const agree = fs.filter((f, i) => pickOf(a, f) === picksB[i]).length;
      assert.ok(agree / fs.length >= 0.99, `n=${n}: ${agree}/${fs.length}`);
      assert.equal(agree, fs.length, `n=${n}: the computation is deterministic`);
    }
  });
});

describe('removing one of N backends', () => {
  /** Over every slot (what a uniform flow hash samples) and over 20,000 flows: the share that changed backend, overall and among the flows whose backend stayed. */
  function disruption(n: number, removed: number, sizing: MaglevSizing) {
    const all = backends(n);
    const before = maglevTable(all, sizing);
    const after = maglevTable(
      all.filter((_, i) => i !== removed),
      sizing,
    );
    assert.equal(after.m, before.m, 'M is the same for N and N - 1 here');
    const gone = `${all[removed].address}/${all[removed].port}`;
    let moved = 0;
    let others = 0;
    let othersMoved = 0;
    for (let s = 0; s < before.m; s++) {
      const x = before.backends[before.entries[s]];
      const y = after.backends[after.entries[s]];
      const changed = x.address !== y.address || x.port !== y.port;
      if (changed) moved++;
      if (`${x.address}/${x.port}` !== gone) {
        others++;
        if (changed) othersMoved++;
      }
    }
    const fs = flows(20000, removed + 1);
    let flowsMoved = 0;
    let flowsOthers = 0;
    let flowsOthersMoved = 0;
    for (const f of fs) {
      const p = pickOf(before, f);
      const changed = p !== pickOf(after, f);
      if (changed) flowsMoved++;
      if (p !== gone) {
        flowsOthers++;
        if (changed) flowsOthersMoved++;
      }
    }
    return { slots: moved / before.m, otherSlots: othersMoved / others, flows: flowsMoved / fs.length, otherFlows: flowsOthersMoved / flowsOthers };
  }

  for (const n of [3, 10, 100]) {
    it(`moves ≤ 1.2/N of the other flows at N = ${n} (auto M), each of several backends removed`, () => {
      for (const removed of [0, n >> 1, n - 1]) {
        const d = disruption(n, removed, MAGLEV_DEFAULT_SIZING);
        assert.ok(d.otherSlots <= 1.2 / n, `n=${n} removed ${removed}: ${(d.otherSlots * 100).toFixed(2)}% of the other slots moved`);
        assert.ok(d.otherFlows <= 1.2 / n, `n=${n} removed ${removed}: ${(d.otherFlows * 100).toFixed(2)}% of the other flows moved`);
        // All flows: the removed backend's share (1/N) plus the others that moved. Within 1.2/N up to
        // N = 10; at N = 100 no M of 16 bits gets Maglev there (1.6/N at 65521), hence 2/N.
        const bound = n <= 10 ? 1.2 / n : 2 / n;
        assert.ok(d.slots <= bound, `n=${n} removed ${removed}: ${(d.slots * 100).toFixed(2)}% of all slots moved`);
        assert.ok(d.flows <= bound * 1.1, `n=${n} removed ${removed}: ${(d.flows * 100).toFixed(2)}% of all flows moved`);
      }
    });
  }

  it("at M = 16381 for every N (Cilium's model) moves more of the other flows at N = 100 than auto M does", () => {
    const fixed = disruption(100, 50, MAGLEV_CILIUM_SIZING);
    const auto = disruption(100, 50, MAGLEV_DEFAULT_SIZING);
    assert.ok(fixed.otherSlots > auto.otherSlots, `${fixed.otherSlots} vs ${auto.otherSlots}`);
  });

  it('rebuilds at another M when N crosses a step of auto sizing (3 → 4), and not at a fixed M', () => {
    const three = maglevTable(backends(3));
    const four = maglevTable(backends(4));
    assert.deepEqual([three.m, four.m], [1021, 2039]);
    const fixed3 = maglevTable(backends(3), MAGLEV_CILIUM_SIZING);
    const fixed4 = maglevTable(backends(4), MAGLEV_CILIUM_SIZING);
    const fs = flows(5000, 3);
    const movedFixed = fs.filter((f) => pickOf(fixed3, f) !== pickOf(fixed4, f)).length / fs.length;
    assert.ok(movedFixed <= 1.2 / 4, `fixed M: ${movedFixed}`);
  });
});

describe('balance', () => {
  it('gives every backend ⌊M/N⌋ or ⌈M/N⌉ slots', () => {
    for (const n of [1, 2, 3, 7, 10, 64, 100, 257, 1000]) {
      for (const sizing of [MAGLEV_DEFAULT_SIZING, MAGLEV_CILIUM_SIZING]) {
        const t = maglevTable(backends(n), sizing);
        const c = [...slotCounts(t).values()];
        assert.equal(c.length, n, `n=${n}: every backend has a slot`);
        assert.ok(Math.min(...c) >= Math.floor(t.m / n) && Math.max(...c) <= Math.ceil(t.m / n), `n=${n} M=${t.m}: ${Math.min(...c)}..${Math.max(...c)}`);
      }
    }
  });

  it('spreads 100,000 flows over 10 backends within 5% of an even share each', () => {
    const t = maglevTable(backends(10));
    const fs = flows(100000, 99);
    const per = new Map<string, number>();
    for (const f of fs) per.set(pickOf(t, f), (per.get(pickOf(t, f)) ?? 0) + 1);
    assert.equal(per.size, 10);
    for (const [b, k] of per) assert.ok(Math.abs(k / fs.length - 0.1) <= 0.005, `${b}: ${k}`);
  });
});

describe('weights', () => {
  it('gives a backend of weight w about w shares of the slots', () => {
    const t = maglevTable([
      { address: '198.18.0.1', port: 80, weight: 1 },
      { address: '198.18.0.2', port: 80, weight: 2 },
      { address: '198.18.0.3', port: 80, weight: 3 },
      { address: '198.18.0.4', port: 80, weight: 10 },
    ]);
    const c = slotCounts(t);
    const total = 16;
    for (const [addr, w] of [
      ['198.18.0.1', 1],
      ['198.18.0.2', 2],
      ['198.18.0.3', 3],
      ['198.18.0.4', 10],
    ] as const) {
      const got = c.get(`${addr}/80`)!;
      assert.ok(Math.abs(got - (t.m * w) / total) <= w, `${addr} weight ${w}: ${got} of ${t.m}`);
    }
  });

  it('leaves a backend of weight 0 out of the table, and gives no table when every weight is 0', () => {
    const t = maglevTable([...backends(3), { address: '198.18.9.9', port: 8080, weight: 0 }]);
    assert.deepEqual(t.entries, maglevTable(backends(3)).entries);
    assert.ok(!t.backends.some((b) => b.address === '198.18.9.9'));
    const none = maglevTable(backends(3).map((b) => ({ ...b, weight: 0 })));
    assert.deepEqual([none.m, none.bytes, none.backends.length], [0, 0, 0]);
    assert.equal(pickBackend(none, 12345), -1);
    assert.equal(maglevTable([]).m, 0);
  });

  it('divides the weights by their greatest common divisor: 4,4,4 is 1,1,1 and 2,4 is 1,2', () => {
    assert.deepEqual(maglevTable(backends(3).map((b) => ({ ...b, weight: 4 }))).entries, maglevTable(backends(3)).entries);
    const a = maglevTable([
      { address: '198.18.0.1', port: 80, weight: 2 },
      { address: '198.18.0.2', port: 80, weight: 4 },
    ]);
    const b = maglevTable([
      { address: '198.18.0.1', port: 80, weight: 1 },
      { address: '198.18.0.2', port: 80, weight: 2 },
    ]);
    assert.equal(a.key, b.key);
    assert.deepEqual(a.entries, b.entries);
  });

  it('refuses weights and ports out of range, and addresses that are not addresses', () => {
    assert.throws(() => maglevTable([{ address: '198.18.0.1', port: 80, weight: -1 }]), /weight must be a whole number from 0 to 65535, not -1/);
    assert.throws(() => maglevTable([{ address: '198.18.0.1', port: 80, weight: 1.5 }]), /not 1.5/);
    assert.throws(() => maglevTable([{ address: '198.18.0.1', port: 0 }]), /port must be 1 to 65535, not 0/);
    assert.throws(() => maglevTable([{ address: 'pod-a', port: 80 }]), /IPv4 or IPv6 address, not "pod-a"/);
    assert.throws(() => maglevTable([{ address: 'fe80::1%eth0', port: 80 }]), RangeError);
  });
});

describe('the table size M', () => {
  it('accepts primes from 3 to 65521 only', () => {
    assert.ok(MAGLEV_TABLE_SIZES.every(isPrime));
    for (const m of [0, 1, 2, 4, 1000, 16383, 65537, 1021.5, NaN]) assert.throws(() => validateTableSize(m, 1), /must be a prime from 3 to 65521/, String(m));
    assert.throws(() => new MaglevTableCache({ mode: 'fixed', m: 16384 }), /not 16384/);
    assert.deepEqual(validateTableSize(16381, 10), []);
  });

  it('refuses M below N, and warns below 100·N', () => {
    assert.throws(() => maglevTable(backends(300), { mode: 'fixed', m: 251 }), /M=251 is smaller than its 300 backends/);
    const t = maglevTable(backends(10), { mode: 'fixed', m: 251 });
    assert.equal(t.m, 251);
    assert.match(t.warnings.join(), /below 100×10 backends/);
    assert.deepEqual(maglevTable(backends(10), { mode: 'fixed', m: 1021 }).warnings, []);
  });

  it('in auto mode, takes the smallest size of the ladder ≥ max(minM, 300·N, 3·N²) within 64 KiB of entries', () => {
    const at = (n: number) => autoTableSize(n);
    assert.deepEqual(
      [1, 3, 4, 6, 7, 13, 14, 27, 28, 54, 55, 104, 105, 256, 257, 5000].map(at),
      [1021, 1021, 2039, 2039, 4093, 4093, 8191, 8191, 16381, 16381, 32749, 32749, 65521, 65521, 32749, 32749],
    );
    assert.equal(autoTableSize(10, 251, 16381), 4093);
    assert.equal(autoTableSize(1, 251, 16381), 509, '300·1 > 251');
    assert.equal(autoTableSize(200, 251, 16381), 16381, 'capped at maxM');
    assert.throws(() => autoTableSize(1, 16381, 1021), /minimum table size 16381 is above the maximum 1021/);
    assert.throws(() => autoTableSize(1, 1000, 16381), /not 1000/);
  });

  it("keeps every table within 64 KiB of entries, and below Cilium's 65,524 bytes (16381 × 4)", () => {
    for (const n of [1, 10, 104, 105, 256, 257, 1000, 5000]) {
      const t = maglevTable(backends(n));
      assert.ok(t.bytes <= 65536 && t.bytes < 16381 * 4, `n=${n}: ${t.bytes} bytes`);
      assert.equal(t.entries.BYTES_PER_ELEMENT, n <= 256 ? 1 : 2, `n=${n}`);
      assert.equal(t.bytes, t.m * t.entries.BYTES_PER_ELEMENT);
    }
  });
});

describe('MaglevTableCache: one table per distinct backend set', () => {
  it('shares a table between frontends with the same backends, weights and M, in any order', () => {
    const cache = new MaglevTableCache();
    const clusterIP = cache.acquire(backends(10));
    const nodePort = cache.acquire(shuffled(backends(10), 1));
    const other = cache.acquire(backends(10, 9090));
    assert.equal(nodePort, clusterIP);
    assert.notEqual(other.id, clusterIP.id);
    assert.deepEqual([cache.tables, cache.holders(clusterIP), cache.stats.computed, cache.stats.shared], [2, 2, 2, 1]);
    assert.equal(cache.bytes, clusterIP.table.bytes + other.table.bytes);
    const weighted = cache.acquire(backends(10).map((b, i) => ({ ...b, weight: i === 0 ? 2 : 1 })));
    assert.notEqual(weighted.id, clusterIP.id, 'other weights, another table');
    const fixedCache = new MaglevTableCache(MAGLEV_CILIUM_SIZING);
    assert.notEqual(fixedCache.acquire(backends(10)).table.key, clusterIP.table.key, 'another M, another key');
  });

  it('frees a table with its last holder and reuses its id; refuses a release of what is not held', () => {
    const cache = new MaglevTableCache();
    const a = cache.acquire(backends(3));
    const b = cache.acquire(backends(3));
    const c = cache.acquire(backends(4));
    cache.release(a);
    assert.equal(cache.tables, 2);
    cache.release(b);
    assert.deepEqual([cache.tables, cache.bytes], [1, c.table.bytes]);
    assert.throws(() => cache.release(a), /is not held/);
    const d = cache.acquire(backends(5));
    assert.equal(d.id, a.id, 'the freed id is reused');
    cache.release(c);
    cache.release(d);
    assert.deepEqual([cache.tables, cache.bytes], [0, 0]);
  });

  it('after an endpoint change (release the old set, acquire the new), holds only the new table', () => {
    const cache = new MaglevTableCache();
    let ref = cache.acquire(backends(10));
    const next = cache.acquire(backends(10).slice(1));
    cache.release(ref);
    ref = next;
    assert.deepEqual([cache.tables, cache.bytes], [1, ref.table.bytes]);
  });
});

describe('the Maglev modules are pure', () => {
  it('import nothing but each other and agent/net/ (no kernel, map, planner or I/O module)', () => {
    const root = findRepoRoot();
    for (const f of ['maglev.ts', 'maglev-hash.ts', 'prime.ts', 'table-shares.ts']) {
      const text = readFileSync(path.join(root, 'agent', 'lb', f), 'utf8');
      const specs = [
        ...text.matchAll(/^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/gm),
        ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
      ].map((m) => m[1]);
      for (const s of specs) assert.ok(/^\.\/(maglev|maglev-hash|prime|table-shares)\.js$/.test(s) || s === '../net/ip.js', `${f} imports ${s}`);
    }
  });
});
