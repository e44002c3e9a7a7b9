/**
 * An order-independent fingerprint of a map's entries, computed over the raw
 * key and value bytes: a periodic read-back compares the kernel's batch dump
 * with the mirror's entries encoded the same way, with no object per entry
 * on either side (decoding the 210,000 kpr_svc and kpr_backend entries of
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

export class Fingerprint {
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

  /** Adds one record whose leading bytes hashed to `state` and whose remaining bytes are `len` bytes of `bytes` at `off`. */
  addFrom(state: HashState, bytes: Uint8Array, off: number, len: number): void {
    let h1 = state.h1;
    let h2 = state.h2;
    for (let i = off, end = off + len; i < end; i++) {
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
    h1 ^= h1 >>> 15;
    h1 = Math.imul(h1, 0x2c1b3c6d);
    h1 ^= h1 >>> 12;
    h2 ^= h2 >>> 13;
    h2 = Math.imul(h2, 0x297a2d39);
    h2 ^= h2 >>> 16;
    this.a = (this.a + h1) >>> 0;
    this.b = (this.b + h2) >>> 0;
    this.count++;
  }

  /** Every record of a batch dump (`count` records of fixed sizes, values `valStride` apart). */
  addBatch(count: number, keys: Uint8Array, keyLen: number, vals: Uint8Array, valLen: number, valStride = valLen): void {
    for (let i = 0; i < count; i++) this.add(keys, i * keyLen, keyLen, vals, i * valStride, valLen);
  }

  equals(o: Fingerprint): boolean {
    return this.a === o.a && this.b === o.b && this.count === o.count;
  }
}

/** A batch dump's raw records, as the kernel returned them. */
export interface RawDump {
  count: number;
  keys: Buffer;
  values: Buffer;
  /** Bytes between two values (the value size, for every map this applies to). */
  valueStride: number;
}

/** DatapathMaps that can hand over raw dumps of the two large maps (BpfDatapathMaps). */
export interface RawDumpMaps {
  dumpServicesRaw(): RawDump;
  dumpBackendsRaw(): RawDump;
}
