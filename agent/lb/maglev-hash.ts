/**
 * The hashes of Maglev selection (agent/lb/maglev.ts), pure 32-bit integer
 * arithmetic (Math.imul and `>>> 0`, no BigInt, no floating point that can
 * round): every node computes the same numbers from the same input, on any
 * CPU, in the agent and in the datapath.
 *
 * - **A backend's permutation** (control plane only): MurmurHash3_x86_32
 *   (Austin Appleby, SMHasher; public domain) over the backend's identity
 *   bytes, twice with two fixed seeds: h1 = murmur3(id, MAGLEV_SEED_OFFSET)
 *   gives the offset, h2 = murmur3(id, MAGLEV_SEED_SKIP) the skip. Two seeds
 *   of a hash with full avalanche behave as two independent hashes (the
 *   Maglev paper asks only for offset and skip to be uncorrelated); murmur3
 *   is well known, needs only 32-bit multiplies, and has published test
 *   vectors (test/lb/maglev-hash.test.ts checks them).
 * - **A packet's slot** (the datapath mirrors it in C, see tupleHash): the
 *   Linux kernel's jhash_3words (include/linux/jhash.h, Bob Jenkins'
 *   lookup3 final mix, ~20 ALU instructions, no loop, no multiply) over the
 *   5-tuple folded to three words, then a multiply-shift onto 0..M-1.
 */

/** Seed of h1 (the permutation's offset): "magl". */
export const MAGLEV_SEED_OFFSET = 0x6d61676c;
/** Seed of h2 (the permutation's skip): "skip". */
export const MAGLEV_SEED_SKIP = 0x736b6970;
/** The 5-tuple hash's initval before the protocol is mixed in: "kpr5". */
export const MAGLEV_TUPLE_SEED = 0x6b707235;

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;

const rotl = (x: number, r: number): number => (x << r) | (x >>> (32 - r));

/**
 * MurmurHash3_x86_32 of `bytes[0..length)` with `seed`, as an unsigned
 * 32-bit number. Blocks are read little-endian, as the reference
 * implementation does on x86 (the published vectors assume it).
 */
export function murmur3(bytes: Uint8Array, seed: number, length = bytes.length): number {
  let h = seed >>> 0;
  const blocks = length & ~3;
  for (let i = 0; i < blocks; i += 4) {
    let k = bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24);
    k = Math.imul(k, C1);
    k = rotl(k, 15);
    k = Math.imul(k, C2);
    h ^= k;
    h = rotl(h, 13);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const tail = length & 3;
  if (tail) {
    let k = bytes[blocks];
    if (tail > 1) k ^= bytes[blocks + 1] << 8;
    if (tail > 2) k ^= bytes[blocks + 2] << 16;
    k = Math.imul(k, C1);
    k = rotl(k, 15);
    k = Math.imul(k, C2);
    h ^= k;
  }
  h ^= length;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The kernel's JHASH_INITVAL. */
const JHASH_INITVAL = 0xdeadbeef;

/**
 * The Linux kernel's jhash_3words(a, b, c, initval) (include/linux/jhash.h
 * since 2.6.37: __jhash_nwords with initval + JHASH_INITVAL + (3 << 2),
 * then __jhash_final), as an unsigned 32-bit number.
 */
export function jhash3(a: number, b: number, c: number, initval: number): number {
  const iv = (initval + JHASH_INITVAL + 12) | 0;
  a = (a + iv) | 0;
  b = (b + iv) | 0;
  c = (c + iv) | 0;
  c ^= b;
  c = (c - rotl(b, 14)) | 0;
  a ^= c;
  a = (a - rotl(c, 11)) | 0;
  b ^= a;
  b = (b - rotl(a, 25)) | 0;
  c ^= b;
  c = (c - rotl(b, 16)) | 0;
  a ^= c;
  a = (a - rotl(c, 4)) | 0;
  b ^= a;
  b = (b - rotl(a, 14)) | 0;
  c ^= b;
  c = (c - rotl(b, 24)) | 0;
  return c >>> 0;
}

/**
 * A flow's 5-tuple as the datapath sees the packet: addresses as the 16
 * bytes every kpr map uses (IPv4 as ::ffff:a.b.c.d, bpf/include/kpr_addr.h),
 * ports and protocol as numbers.
 */
export interface FiveTuple {
  saddr: Uint8Array;
  daddr: Uint8Array;
  sport: number;
  dport: number;
  /** IPPROTO_TCP 6, IPPROTO_UDP 17, IPPROTO_SCTP 132. */
  proto: number;
}

/** The XOR of an address's four 32-bit words, each read big-endian (network order): one word per address. */
export function foldAddress(addr: Uint8Array): number {
  let x = 0;
  for (let i = 0; i < 16; i += 4) x ^= (addr[i] << 24) | (addr[i + 1] << 16) | (addr[i + 2] << 8) | addr[i + 3];
  return x >>> 0;
}

/**
 * The flow hash a Maglev table is indexed with. Exactly, for the C side
 * (with `__be32 s[4], d[4]` the 16-byte addresses and `__be16` ports as in
 * the packet):
 *
 *     a = bpf_ntohl(s[0] ^ s[1] ^ s[2] ^ s[3]);
 *     b = bpf_ntohl(d[0] ^ d[1] ^ d[2] ^ d[3]);
 *     c = ((__u32)bpf_ntohs(sport) << 16) | bpf_ntohs(dport);
 *     h = jhash_3words(a, b, c, MAGLEV_TUPLE_SEED ^ proto);
 *
 * (XOR commutes with the byte swap, so one ntohl per address.) Host-order
 * values make the hash the same on little- and big-endian nodes.
 */
export function tupleHash(t: FiveTuple): number {
  const c = (((t.sport & 0xffff) << 16) | (t.dport & 0xffff)) >>> 0;
  return jhash3(foldAddress(t.saddr), foldAddress(t.daddr), c, (MAGLEV_TUPLE_SEED ^ (t.proto & 0xff)) >>> 0);
}

/**
 * The table slot 0..m-1 of a flow hash: the high 32 bits of hash × m
 * (Lemire's multiply-shift; no division in the datapath). In C:
 * `(__u32)(((__u64)h * m) >> 32)`. The product is below 2^48, exact in a double.
 */
export function slotOf(hash: number, m: number): number {
  return Math.floor(((hash >>> 0) * m) / 4294967296);
}
