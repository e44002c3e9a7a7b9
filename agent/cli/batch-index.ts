/**
 * Open-addressing hash indexes over the records of a raw map batch, for the
 * CLI's join of kpr_svc and kpr_backend: typed arrays, no string or object
 * per record. At 100,000 Services × 10 backends (1.1 M kpr_svc entries,
 * 1 M backends) a latin1 string made from every kpr_svc key to group the
 * slots, and a Map of every backend id, were a third of `kpr service list`'s
 * CPU time and most of its garbage.
 */

/** U32Index uses a table indexed by the key when the largest key is below this many × the records (+ 65,536). */
const DENSE_SLACK = 4;

/** A power of two at least twice `count` (a load factor of at most one half). */
function capacityFor(count: number): number {
  let cap = 16;
  while (cap < count * 2) cap *= 2;
  return cap;
}

/**
 * Record index by a u32 key (a backend id → its record in kpr_backend's
 * batch). The agent hands ids out lowest-free-first, so they are dense: a
 * table indexed by the key itself (no hash, one memory access a lookup)
 * when the largest key is at most DENSE_SLACK × the records; open
 * addressing otherwise (a map written by something else).
 */
export class U32Index {
  /** Dense: record + 1 by key (0: none). */
  private readonly direct?: Int32Array;
  private readonly keys?: Uint32Array;
  /** Record index + 1 of each slot; 0: empty. */
  private readonly records?: Int32Array;
  private readonly mask: number = 0;
  private readonly shift: number = 0;

  constructor(count: number, keyOf: (record: number) => number) {
    const all = new Uint32Array(count);
    let max = 0;
    for (let r = 0; r < count; r++) {
      const key = keyOf(r) >>> 0;
      all[r] = key;
      if (key > max) max = key;
    }
    if (max < count * DENSE_SLACK + 65536) {
      const direct = (this.direct = new Int32Array(max + 1));
      for (let r = 0; r < count; r++) if (direct[all[r]!] === 0) direct[all[r]!] = r + 1; // a key twice: the first record stands
      return;
    }
    const cap = capacityFor(count);
    const keys = (this.keys = new Uint32Array(cap));
    const records = (this.records = new Int32Array(cap));
    this.mask = cap - 1;
    this.shift = 32 - Math.log2(cap);
    for (let r = 0; r < count; r++) {
      const key = all[r]!;
      let i = this.slot(key);
      while (records[i] !== 0 && keys[i] !== key) i = (i + 1) & this.mask;
      if (records[i] !== 0) continue; // a key twice: the first record stands
      keys[i] = key;
      records[i] = r + 1;
    }
  }

  /** Fibonacci hashing: the product's high bits, which every bit of the key reaches. */
  private slot(key: number): number {
    return Math.imul(key, 0x9e3779b1) >>> this.shift;
  }

  /** The record of `key`, or -1. */
  get(key: number): number {
    const k = key >>> 0;
    const direct = this.direct;
    if (direct) return k < direct.length ? direct[k]! - 1 : -1;
    const keys = this.keys!;
    const records = this.records!;
    for (let i = this.slot(k); records[i] !== 0; i = (i + 1) & this.mask) if (keys[i] === k) return records[i]! - 1;
    return -1;
  }
}

/**
 * Groups of records whose keys are equal outside one field (kpr_svc's slot:
 * a frontend's master and its backend slots): `add` gives a record's group a
 * number, `find` returns it for any record of the group. Keys are read as
 * 32-bit words, the field's bytes masked out; each table slot holds the
 * head record, its hash and the group's number side by side (one cache line
 * per probe: the records come in the kernel's hash order, at random).
 */
export class KeyGroups {
  /** Per slot: head record + 1 (0: empty), hash, group number. */
  private readonly table: Int32Array;
  private readonly mask: number;
  private readonly words: Uint32Array;
  /** Per word of a key: the bits that are part of the group's identity. */
  private readonly wordMasks: Uint32Array;
  private readonly stride: number;

  /** `keys`: records of `keySize` bytes; bytes [skipAt, skipAt + skipSize) are not part of the group's identity. */
  constructor(keys: Buffer, keySize: number, skipAt: number, skipSize: number, heads: number) {
    const cap = capacityFor(heads);
    this.table = new Int32Array(cap * 3);
    this.mask = cap - 1;
    // Keys padded to whole words (kpr_svc's are already: 24 bytes), in an aligned copy when they are not.
    this.stride = Math.ceil(keySize / 4);
    const count = Math.floor(keys.length / keySize);
    if (keySize === this.stride * 4 && keys.byteOffset % 4 === 0) {
      this.words = new Uint32Array(keys.buffer, keys.byteOffset, count * this.stride);
    } else {
      const bytes = new Uint8Array(count * this.stride * 4);
      for (let r = 0; r < count; r++) bytes.set(keys.subarray(r * keySize, (r + 1) * keySize), r * this.stride * 4);
      this.words = new Uint32Array(bytes.buffer);
    }
    const maskBytes = new Uint8Array(this.stride * 4).fill(0xff, 0, keySize).fill(0, skipAt, skipAt + skipSize);
    this.wordMasks = new Uint32Array(maskBytes.buffer);
  }

  private hash(record: number): number {
    const base = record * this.stride;
    let h = 0x811c9dc5;
    for (let i = 0; i < this.stride; i++) h = Math.imul(h ^ (this.words[base + i]! & this.wordMasks[i]!), 0x01000193);
    return h ^ (h >>> 15);
  }

  private sameGroup(a: number, b: number): boolean {
    const ka = a * this.stride;
    const kb = b * this.stride;
    for (let i = 0; i < this.stride; i++) if (((this.words[ka + i]! ^ this.words[kb + i]!) & this.wordMasks[i]!) !== 0) return false;
    return true;
  }

  /** Gives `record`'s group the number `group` (at most `heads` groups); a group that has one keeps it. */
  add(record: number, group: number): void {
    const h = this.hash(record);
    const t = this.table;
    let i = h & this.mask;
    for (; t[i * 3] !== 0; i = (i + 1) & this.mask) if (t[i * 3 + 1] === h && this.sameGroup(t[i * 3]! - 1, record)) return;
    t[i * 3] = record + 1;
    t[i * 3 + 1] = h;
    t[i * 3 + 2] = group;
  }

  /** The number of `record`'s group, or -1 when it has none. */
  find(record: number): number {
    const h = this.hash(record);
    const t = this.table;
    for (let i = h & this.mask; t[i * 3] !== 0; i = (i + 1) & this.mask) {
      if (t[i * 3 + 1] === h && this.sameGroup(t[i * 3]! - 1, record)) return t[i * 3 + 2]!;
    }
    return -1;
  }
}
