/**
 * An order-independent fingerprint of a map's entries, computed over the raw
 * key and value bytes: a periodic read-back compares the kernel's batch dump
 * with the mirror's entries encoded the same way, with no object per entry
 * on either side (decoding the 210,000 slot and backend entries of
 * 10,000 Services × 10 took ~0.4 s; hashing the raw records ~20 ms). Only a
 * map whose fingerprint differs is decoded and compared entry by entry.
 *
 * Two 32-bit hashes per record, summed modulo 2^32, and the record count:
 * an accidental match of all three after a real change is ~2^-64 likely.
 */
/** FNV-1a's and MurmurHash2's constants, one per running hash. */
const SEED1 = 0x811c9dc5;
const SEED2 = 0x2545f491;
const M1 = 0x01000193;
const M2 = 0x5bd1e995;

/** Both running hashes after some bytes. */
export interface HashState {
  h1: number;
  h2: number;
}

/** What a mirror's records are hashed into: a Fingerprint, or one side of a sliced read-back (RecordHashes). */
export interface RecordSink {
  /** One record whose leading key bytes hashed to `state`: then `keyRest` more key bytes of `bytes` at `off`, then `valLen` value bytes after them. */
  addFrom(state: HashState, bytes: Uint8Array, off: number, keyRest: number, valLen: number): void;
}

/** The hash state of no bytes (a record hashed from its first byte). */
export const EMPTY_STATE: HashState = { h1: SEED1, h2: SEED2 };

export class Fingerprint implements RecordSink {
  private a = 0;
  private b = 0;
  count = 0;

  /** The hash state after `len` bytes of `bytes` at `off` (a record's leading bytes shared by several records). */
  static prefix(bytes: Uint8Array, off: number, len: number): HashState {
    let h1 = SEED1;
    let h2 = SEED2;
    for (let i = off, end = off + len; i < end; i++) {
      h1 = Math.imul(h1 ^ bytes[i], M1);
      h2 = Math.imul(h2 ^ bytes[i], M2);
    }
    return { h1, h2 };
  }

  /** Adds one record whose leading bytes hashed to `state` and whose remaining bytes are `keyRest + valLen` bytes of `bytes` at `off` (RecordSink's). */
  addFrom(state: HashState, bytes: Uint8Array, off: number, keyRest: number, valLen: number): void {
    let h1 = state.h1;
    let h2 = state.h2;
    for (let i = off, end = off + keyRest + valLen; i < end; i++) {
      h1 = Math.imul(h1 ^ bytes[i], M1);
      h2 = Math.imul(h2 ^ bytes[i], M2);
    }
    this.mix(h1, h2);
  }

  /** Adds one record: `keyLen` bytes of `keys` at `keyOff`, then `valLen` bytes of `vals` at `valOff`. */
  add(keys: Uint8Array, keyOff: number, keyLen: number, vals: Uint8Array, valOff: number, valLen: number): void {
    let h1 = SEED1;
    let h2 = SEED2;
    for (let i = keyOff, end = keyOff + keyLen; i < end; i++) {
      h1 = Math.imul(h1 ^ keys[i], M1);
      h2 = Math.imul(h2 ^ keys[i], M2);
    }
    for (let i = valOff, end = valOff + valLen; i < end; i++) {
      h1 = Math.imul(h1 ^ vals[i], M1);
      h2 = Math.imul(h2 ^ vals[i], M2);
    }
    this.mix(h1, h2);
  }

  /** Final mixing (records that differ in one byte spread over the whole word), then the sums. */
  private mix(h1: number, h2: number): void {
    this.a = (this.a + mix1(h1)) >>> 0;
    this.b = (this.b + mix2(h2)) >>> 0;
    this.count++;
  }

  /** Every record of a batch dump (`count` records of fixed sizes, values `valStride` apart). */
  addBatch(count: number, keys: Uint8Array, keyLen: number, vals: Uint8Array, valLen: number, valStride = valLen): void {
    for (let i = 0; i < count; i++) this.add(keys, i * keyLen, keyLen, vals, i * valStride, valLen);
  }

  /** A fingerprint with these sums. */
  static of(a: number, b: number, count: number): Fingerprint {
    const fp = new Fingerprint();
    fp.a = a >>> 0;
    fp.b = b >>> 0;
    fp.count = count;
    return fp;
  }

  equals(o: Fingerprint): boolean {
    return this.a === o.a && this.b === o.b && this.count === o.count;
  }
}

/** The final mixing of each running hash (records that differ in one byte spread over the whole word). */
function mix1(h1: number): number {
  h1 ^= h1 >>> 15;
  h1 = Math.imul(h1, 0x2c1b3c6d);
  return (h1 ^ (h1 >>> 12)) >>> 0;
}

function mix2(h2: number): number {
  h2 ^= h2 >>> 13;
  h2 = Math.imul(h2, 0x297a2d39);
  return (h2 ^ (h2 >>> 16)) >>> 0;
}

/**
 * A key's identity in a sliced read-back: 52 bits of the two running hashes
 * after its bytes (the state a record's hash goes on from), exact in a double.
 */
function keyIdOf(h1: number, h2: number): number {
  return (h1 >>> 0) * 0x100000 + (h2 >>> 12);
}

/** The bit of a key id in TouchedKeys' filter. */
function filterBit(keyId: number): number {
  return keyId % 0x10000;
}

/**
 * The keys of one map that syncs wrote or deleted while its read-back
 * window was open, by key id: both sides of the comparison leave them out.
 */
export class TouchedKeys {
  private readonly ids = new Set<number>();
  /** One bit per filterBit(): most records' check is one typed-array read. */
  private readonly filter = new Uint32Array(0x10000 / 32);

  get size(): number {
    return this.ids.size;
  }

  /** Records the key of `len` bytes at `off`. */
  add(bytes: Uint8Array, off: number, len: number): void {
    let h1 = SEED1;
    let h2 = SEED2;
    for (let i = off, end = off + len; i < end; i++) {
      h1 = Math.imul(h1 ^ bytes[i], M1);
      h2 = Math.imul(h2 ^ bytes[i], M2);
    }
    const id = keyIdOf(h1, h2);
    this.ids.add(id);
    const bit = filterBit(id);
    this.filter[bit >>> 5] |= 1 << (bit & 31);
  }

  has(keyId: number): boolean {
    const bit = filterBit(keyId);
    return (this.filter[bit >>> 5] & (1 << (bit & 31))) !== 0 && this.ids.has(keyId);
  }
}

/**
 * One side of a sliced read-back (the kernel's batches, or the mirror's
 * entries), kept per record as its key id and its two record hashes, in
 * typed arrays (no object per record), and summed as they come: the records
 * whose keys were touched before the window closed are only known at its
 * end, and taken out of the sums then (untouchedSum, or subtractTouched a
 * range at a time) — when no key was touched, at no cost.
 */
export class RecordHashes implements RecordSink {
  private keyIds = new Float64Array(1024);
  private a = new Uint32Array(1024);
  private b = new Uint32Array(1024);
  length = 0;
  /** The sums over every record so far. */
  private sumA = 0;
  private sumB = 0;

  /** Every record of a batch dump (`count` records of fixed sizes, values `valStride` apart). */
  addBatch(count: number, keys: Uint8Array, keyLen: number, vals: Uint8Array, valLen: number, valStride = valLen): void {
    this.reserve(count);
    for (let r = 0; r < count; r++) {
      let h1 = SEED1;
      let h2 = SEED2;
      for (let i = r * keyLen, end = i + keyLen; i < end; i++) {
        h1 = Math.imul(h1 ^ keys[i], M1);
        h2 = Math.imul(h2 ^ keys[i], M2);
      }
      const keyId = keyIdOf(h1, h2);
      for (let i = r * valStride, end = i + valLen; i < end; i++) {
        h1 = Math.imul(h1 ^ vals[i], M1);
        h2 = Math.imul(h2 ^ vals[i], M2);
      }
      this.push(keyId, h1, h2);
    }
  }

  /**
   * One record whose leading key bytes hashed to `state`: then `keyRest`
   * more key bytes of `bytes` at `off`, then `valLen` value bytes after them.
   */
  addFrom(state: HashState, bytes: Uint8Array, off: number, keyRest: number, valLen: number): void {
    this.reserve(1);
    let h1 = state.h1;
    let h2 = state.h2;
    let i = off;
    for (const end = off + keyRest; i < end; i++) {
      h1 = Math.imul(h1 ^ bytes[i], M1);
      h2 = Math.imul(h2 ^ bytes[i], M2);
    }
    const keyId = keyIdOf(h1, h2);
    for (const end = i + valLen; i < end; i++) {
      h1 = Math.imul(h1 ^ bytes[i], M1);
      h2 = Math.imul(h2 ^ bytes[i], M2);
    }
    this.push(keyId, h1, h2);
  }

  /**
   * Forgets every record, keeping the arrays: one RecordHashes per map and
   * side serves every read-back, so no resync allocates (and leaves for a
   * major GC to free) megabytes of typed arrays.
   */
  clear(): void {
    this.length = 0;
    this.sumA = 0;
    this.sumB = 0;
  }

  /** The sums over every record so far (a Fingerprint's). */
  totals(): UntouchedSum {
    return { a: this.sumA, b: this.sumB, count: this.length };
  }

  /**
   * Takes the records in [from, to) whose keys are in `touched` out of
   * `sum` (begun as totals()); returns where it stopped (`to`, or the end).
   */
  subtractTouched(touched: TouchedKeys, sum: UntouchedSum, from: number, to: number): number {
    const end = Math.min(to, this.length);
    if (touched.size === 0) return end;
    for (let i = from; i < end; i++) {
      if (!touched.has(this.keyIds[i])) continue;
      sum.a = (sum.a - this.a[i]) >>> 0;
      sum.b = (sum.b - this.b[i]) >>> 0;
      sum.count--;
    }
    return end;
  }

  /** The fingerprint of every record whose key is not in `touched` (what Fingerprint would sum over them), in one go. */
  untouchedSum(touched: TouchedKeys): Fingerprint {
    const sum = this.totals();
    this.subtractTouched(touched, sum, 0, this.length);
    return Fingerprint.of(sum.a, sum.b, sum.count);
  }

  private push(keyId: number, h1: number, h2: number): void {
    const n = this.length++;
    const a = mix1(h1);
    const b = mix2(h2);
    this.keyIds[n] = keyId;
    this.a[n] = a;
    this.b[n] = b;
    this.sumA = (this.sumA + a) >>> 0;
    this.sumB = (this.sumB + b) >>> 0;
  }

  private reserve(more: number): void {
    const need = this.length + more;
    if (need <= this.keyIds.length) return;
    let cap = this.keyIds.length * 2;
    while (cap < need) cap *= 2;
    const k = new Float64Array(cap);
    k.set(this.keyIds.subarray(0, this.length));
    const a = new Uint32Array(cap);
    a.set(this.a.subarray(0, this.length));
    const b = new Uint32Array(cap);
    b.set(this.b.subarray(0, this.length));
    this.keyIds = k;
    this.a = a;
    this.b = b;
  }
}

/** Sums of record hashes, and how many records (a Fingerprint's parts, while one is worked out). */
export interface UntouchedSum {
  a: number;
  b: number;
  count: number;
}
