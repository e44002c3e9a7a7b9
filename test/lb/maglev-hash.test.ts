/**
 * The hashes of Maglev selection against fixed vectors: murmur3's published
 * ones (SMHasher), and for jhash_3words, the flow hash and the slot, the
 * values the kernel's include/linux/jhash.h and the C expressions of
 * tupleHash's comment give (compiled with clang on x86_64), so the datapath
 * can be checked against the same numbers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { foldAddress, jhash3, MAGLEV_SEED_OFFSET, MAGLEV_SEED_SKIP, murmur3, slotOf, tupleHash } from '../../agent/lb/maglev-hash.js';

const text = (s: string) => new TextEncoder().encode(s);

/** The 16-byte map form of an IPv4 address (::ffff:a.b.c.d). */
function v4(a: string): Uint8Array {
  const b = new Uint8Array(16);
  b[10] = b[11] = 0xff;
  a.split('.').forEach((x, i) => (b[12 + i] = Number(x)));
  return b;
}

describe('murmur3 (MurmurHash3_x86_32)', () => {
  it('gives the published vectors', () => {
    assert.equal(murmur3(text(''), 0), 0);
    assert.equal(murmur3(text(''), 1), 0x514e28b7);
    assert.equal(murmur3(text(''), 0xffffffff), 0x81f16f39);
    assert.equal(murmur3(text('hello'), 0), 0x248bfa47);
    assert.equal(murmur3(text('The quick brown fox jumps over the lazy dog'), 0x9747b28c), 0x2fa826cd);
  });

  it("gives the reference implementation's values for a backend identity (198.18.0.1:8080) under both seeds", () => {
    const id = new Uint8Array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1, 0x1f, 0x90]);
    assert.equal(murmur3(id, MAGLEV_SEED_OFFSET), 0xd93c4d81);
    assert.equal(murmur3(id, MAGLEV_SEED_SKIP), 0xedea8558);
  });
});

describe("jhash3 (the kernel's jhash_3words)", () => {
  it("gives the kernel's values", () => {
    assert.equal(jhash3(0, 0, 0, 0), 0x1b68e557);
    assert.equal(jhash3(1, 2, 3, 4), 0x8103143f);
    assert.equal(jhash3(0xdeadbeef, 0xffffffff, 0x80000000, 0x6b707235), 0x35a5c31d);
  });
});

describe('tupleHash and slotOf (what the datapath will compute)', () => {
  it("gives the C expressions' values for an IPv4 and an IPv6 flow", () => {
    const h4 = tupleHash({ saddr: v4('198.18.0.1'), daddr: v4('198.18.1.10'), sport: 40000, dport: 80, proto: 6 });
    assert.equal(h4, 0xe752c6cb);
    assert.deepEqual([slotOf(h4, 16381), slotOf(h4, 1021)], [14801, 922]);
    const s6 = new Uint8Array([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    const d6 = new Uint8Array([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    const h6 = tupleHash({ saddr: s6, daddr: d6, sport: 1234, dport: 443, proto: 17 });
    assert.equal(h6, 0xfa607519);
    assert.equal(slotOf(h6, 16381), 16021);
  });

  it('folds an address to the XOR of its big-endian words', () => {
    assert.equal(foldAddress(v4('198.18.0.1')), (0x0000ffff ^ 0xc6120001) >>> 0);
  });

  it('depends on every field of the tuple', () => {
    const base = { saddr: v4('198.18.0.1'), daddr: v4('198.18.1.10'), sport: 40000, dport: 80, proto: 6 };
    const h = tupleHash(base);
    for (const change of [{ saddr: v4('198.18.0.2') }, { daddr: v4('198.18.1.11') }, { sport: 40001 }, { dport: 81 }, { proto: 17 }]) {
      assert.notEqual(tupleHash({ ...base, ...change }), h, JSON.stringify(Object.keys(change)));
    }
  });

  it('maps the whole u32 range onto 0..m-1', () => {
    for (const m of [251, 1021, 16381, 65521]) {
      assert.equal(slotOf(0, m), 0);
      assert.equal(slotOf(0xffffffff, m), m - 1);
      assert.equal(slotOf(0x80000000, m), Math.floor(m / 2));
    }
  });
});
