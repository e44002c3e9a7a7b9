/**
 * The conntrack sweep (agent/datapath/ct-sweeper.ts) on a real kpr_ct-shaped
 * LRU hash map: every expired flow goes, every live one stays, whole-map and
 * sliced alike, and the sliced sweep lets the event loop run between slices;
 * an entry a new flow took since the sweep read it is never deleted, not even
 * one written between the last check and the delete.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BATCH_WRITER_LIBRARY, BPF_MAP_TYPE, BatchWriter, BpfMap } from '../../native/index.js';
import {
  deleteStillExpiredHere,
  nativeStillExpiredDeleter,
  sweepExpiredConntrack,
  sweepExpiredConntrackSliced,
  type StillExpiredDeleter,
} from '../../agent/datapath/ct-sweeper.js';
import { CT_DIR, CT_KEY, IPPROTO, mapCodecs } from '../../agent/maps/layout.js';
import { MAPS } from '../../agent/maps/registry.js';
import { requireRoot } from '../support/preflight.js';
import { repoRoot } from '../support/paths.js';

const ct = mapCodecs(MAPS.ct);

function filled(n: number, now: bigint): BpfMap {
  const map = BpfMap.create(BPF_MAP_TYPE.LRU_HASH, ct.key.size, ct.value.size, n * 2, 'kpr_ct_test');
  const keys = Buffer.alloc(n * ct.key.size);
  const vals = Buffer.alloc(n * ct.value.size);
  for (let f = 0; f < n; f++) {
    ct.key.encode(
      { saddr: `198.18.${f >> 8}.${f & 0xff}`, daddr: '198.19.0.10', sport: 40000, dport: 80, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL },
      keys,
      f * ct.key.size,
    );
    // Every third flow expired (one exactly at `now`: a deadline reached counts as expired).
    const expiresNs = f % 3 === 0 ? (f === 0 ? now : now - 1n) : now + 60_000_000_000n;
    ct.value.encode(
      { natSaddr: '198.18.1.1', natDaddr: '198.18.10.10', natSport: 40000, natDport: 8080, backendId: 1, expiresNs, frontendId: 1, flags: 0 },
      vals,
      f * ct.value.size,
    );
  }
  map.updateBatch(keys, vals, n);
  return map;
}

const liveClients = (map: BpfMap) => [...map.entries()].map(([k]) => ct.key.decode(k).saddr).sort();
const expectedLive = (n: number) =>
  [...Array(n).keys()]
    .filter((f) => f % 3 !== 0)
    .map((f) => `198.18.${f >> 8}.${f & 0xff}`)
    .sort();

test('whole-map and sliced sweeps remove exactly the expired flows', async () => {
  requireRoot();
  const now = process.hrtime.bigint();
  const n = 3000;
  const whole = filled(n, now);
  try {
    assert.equal(sweepExpiredConntrack(whole, now), 1000);
    assert.deepEqual(liveClients(whole), expectedLive(n));
    assert.equal(sweepExpiredConntrack(whole, now), 0, 'nothing left to sweep');
  } finally {
    whole.close();
  }
  const sliced = filled(n, now);
  try {
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 0);
    const s = await sweepExpiredConntrackSliced(sliced, now, 256);
    clearInterval(ticker);
    assert.equal(s.removed, 1000);
    assert.ok(s.slices >= Math.ceil(n / 256), `slices of at most 256 entries: ${s.slices}`);
    assert.ok(ticks > 0, 'timers ran between slices');
    assert.deepEqual(liveClients(sliced), expectedLive(n));
  } finally {
    sliced.close();
  }
});

const writerLib = path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY);
const deleters: Array<[string, () => { deleter: StillExpiredDeleter; close(): void }]> = [
  ['a koffi call per syscall', () => ({ deleter: deleteStillExpiredHere, close: () => {} })],
  [
    'the native library (C)',
    () => {
      const writer = BatchWriter.open(writerLib);
      return { deleter: nativeStillExpiredDeleter(writer), close: () => writer.close() };
    },
  ],
];

for (const [how, open] of deleters) {
  test(`an expired entry replaced by a new flow after the sweep read it (a client reusing its port) is not deleted [${how}]`, async () => {
    requireRoot();
    const now = process.hrtime.bigint();
    const map = filled(30, now);
    const { deleter, close } = open();
    try {
      const expiredKeys = [...map.entries()].filter(([, v]) => ct.value.decode(v).expiresNs <= now).map(([k]) => k);
      const reused = expiredKeys[0]!;
      const fresh = Buffer.from(map.lookup(reused)!);
      fresh.writeBigUInt64LE(now + 60_000_000_000n, MAPS.ct.value.at.expires_ns);
      // The map as the agent holds it, except that each batch the sweep reads is followed, before
      // anything else, by the datapath's write of a new flow under an expired key of that batch.
      const racing = new Proxy(map, {
        get(target, prop) {
          if (prop !== 'lookupBatchCursor') {
            const v = Reflect.get(target, prop, target);
            return typeof v === 'function' ? v.bind(target) : v;
          }
          return (n: number) => {
            const cursor = target.lookupBatchCursor(n);
            return {
              next() {
                const b = cursor.next();
                if (b !== null) target.update(reused, fresh);
                return b;
              },
            };
          };
        },
      }) as BpfMap;
      const s = await sweepExpiredConntrackSliced(racing, now, 8, deleter);
      assert.equal(s.removed, expiredKeys.length - 1, 'every other expired flow went');
      const left = map.lookup(reused);
      assert.ok(left, "the new flow's entry is still there");
      assert.equal(ct.value.decode(left).expiresNs, now + 60_000_000_000n);
      assert.equal(sweepExpiredConntrack(map, now, deleter), 0, 'the whole-map sweep leaves it too');
      assert.ok(map.lookup(reused));
    } finally {
      close();
      map.close();
    }
  });
}

test("an entry a new flow took between the sweep's last check and its delete goes back: the delete takes the value out and returns a live one [a koffi call per syscall]", () => {
  requireRoot();
  const now = process.hrtime.bigint();
  const map = filled(30, now);
  try {
    const expiredKeys = [...map.entries()].filter(([, v]) => ct.value.decode(v).expiresNs <= now).map(([k]) => k);
    const reused = expiredKeys[0]!;
    const fresh = Buffer.from(map.lookup(reused)!);
    fresh.writeBigUInt64LE(now + 60_000_000_000n, MAPS.ct.value.at.expires_ns);
    // The datapath writes the new flow right after the sweep's check of that key found it expired.
    const racing = new Proxy(map, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target);
        if (prop !== 'lookup') return typeof v === 'function' ? v.bind(target) : v;
        return (key: Buffer) => {
          const seen = target.lookup(key);
          if (key.equals(reused)) target.update(reused, fresh);
          return seen;
        };
      },
    }) as BpfMap;
    const keys = Buffer.concat(expiredKeys);
    // Before 5.14 a hash map has no lookup-and-delete: the sweep deletes by key there, and the new flow's entry goes too (the window docs/architecture.md names).
    if (map.lookupAndDelete(Buffer.alloc(CT_KEY.size)) === 'unsupported') {
      assert.equal(
        deleteStillExpiredHere(racing, keys, expiredKeys.length, now),
        expiredKeys.length,
        'every expired flow went, the reused one too (delete by key)',
      );
      assert.equal(map.lookup(reused), null);
      return;
    }
    assert.equal(deleteStillExpiredHere(racing, keys, expiredKeys.length, now), expiredKeys.length - 1, 'every other expired flow went');
    const left = map.lookup(reused);
    assert.ok(left, "the new flow's entry is back");
    assert.equal(ct.value.decode(left).expiresNs, now + 60_000_000_000n);
  } finally {
    map.close();
  }
});
