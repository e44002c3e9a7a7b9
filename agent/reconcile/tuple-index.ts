/**
 * Backend tuple (see backendTupleKey) → backend id (u32). IPv4 tuples are
 * integers of up to 49 bits: as Map keys they are heap numbers, which V8
 * hashes and compares slowly, and a full sync looks up ~10^5 of them. They
 * go in an open-addressing table instead: the keys in a Float64Array (exact
 * for integers below 2^53; -1 marks an empty slot, -2 a deleted one, so a
 * probe reads one array), the ids in a Uint32Array. Anything else (IPv6
 * strings) goes in a plain Map. Not iterable: the mirror only looks tuples up.
 */
const EMPTY = -1;
const DELETED = -2;
/**
 * Most a table is filled (keys and DELETED) before it is rebuilt larger.
 * Linear probing stays short up to here (~2 probes for a hit, ~6 for a
 * miss), and a million tuples fit 2^21 slots (24 MiB) instead of the 2^22
 * (48 MiB) a half-full limit took: every page of a new table is fresh
 * memory, which on a VM whose host backs a page at its first touch costs
 * ~12 µs (docs/performance.md).
 */
const MAX_LOAD = 0.7;

function isTupleNumber(k: number | string): k is number {
  return typeof k === 'number' && Number.isSafeInteger(k) && k >= 0;
}

export class TupleIndex {
  private readonly other = new Map<number | string, number>();
  private keys = new Float64Array(1024).fill(EMPTY);
  private vals = new Uint32Array(1024);
  private mask = 1023;
  /** Slots holding a key. */
  private used = 0;
  /** Slots holding a key or DELETED (probe chains). */
  private occupied = 0;
  /**
   * The last numeric key get() missed, and the slot add() would put it in
   * (the first DELETED or EMPTY slot of its probe), until the table next
   * changes: a full sync looks up every new backend's tuple before adding
   * it, and the add then needs no probe of its own.
   */
  private missKey = -1;
  private missSlot = 0;

  get size(): number {
    return this.used + this.other.size;
  }

  /** Slots of the numeric table (its memory: 12 bytes a slot). */
  get slots(): number {
    return this.mask + 1;
  }

  private static hash(k: number): number {
    const lo = k >>> 0;
    const hi = (k / 4294967296) >>> 0;
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    return (h ^ (h >>> 16)) >>> 0;
  }

  /** Slot holding k, or -1 (remembering where k would go: missKey, missSlot). */
  private find(k: number): number {
    const mask = this.mask;
    const keys = this.keys;
    let free = -1;
    for (let i = TupleIndex.hash(k) & mask; ; i = (i + 1) & mask) {
      const x = keys[i];
      if (x === k) return i;
      if (x === EMPTY) {
        this.missKey = k;
        this.missSlot = free < 0 ? i : free;
        return -1;
      }
      if (x === DELETED && free < 0) free = i;
    }
  }

  /** The id of tuple k, or -1. */
  get(k: number | string): number {
    if (!isTupleNumber(k)) return this.other.get(k) ?? -1;
    const i = this.find(k);
    return i < 0 ? -1 : this.vals[i];
  }

  /** Maps k to id unless k is present; whether it was added. */
  add(k: number | string, id: number): boolean {
    if (!isTupleNumber(k)) {
      if (this.other.has(k)) return false;
      this.other.set(k, id);
      return true;
    }
    if (k !== this.missKey && this.find(k) >= 0) return false;
    this.insertAbsent(k, id);
    return true;
  }

  /** Puts absent k in the slot its miss found (find() ran on this table for k just before). */
  private insertAbsent(k: number, id: number): void {
    if (this.occupied + 1 > (this.mask + 1) * MAX_LOAD) {
      this.rehash(((this.used + 1) * 2) / MAX_LOAD); // room to double before the next rebuild
      this.find(k);
    }
    const i = this.missSlot;
    if (this.keys[i] === EMPTY) this.occupied++;
    this.keys[i] = k;
    this.vals[i] = id;
    this.used++;
    this.missKey = -1;
  }

  delete(k: number | string): boolean {
    if (!isTupleNumber(k)) return this.other.delete(k);
    const i = this.find(k);
    if (i < 0) return false;
    this.keys[i] = DELETED;
    this.used--;
    this.missKey = -1;
    return true;
  }

  clear(): void {
    this.other.clear();
    this.keys = new Float64Array(1024).fill(EMPTY);
    this.vals = new Uint32Array(1024);
    this.mask = 1023;
    this.used = 0;
    this.occupied = 0;
    this.missKey = -1;
  }

  /**
   * Makes room for `n` numeric tuples in all before the table next grows:
   * grown one insert at a time from its 1,024 slots, a million tuples cost
   * a dozen rebuilds, each moving every key to a table twice the size: more
   * than the lookups and inserts of the keys themselves.
   */
  reserve(n: number): void {
    if (n > (this.mask + 1) * MAX_LOAD) this.rehash(n / MAX_LOAD);
  }

  /** Rebuilds the table (dropping deleted slots) with at least `slots` slots. */
  private rehash(slots: number): void {
    let cap = 1024;
    while (cap < slots) cap *= 2;
    const { keys, vals } = this;
    this.keys = new Float64Array(cap).fill(EMPTY);
    this.vals = new Uint32Array(cap);
    this.mask = cap - 1;
    this.used = 0;
    this.occupied = 0;
    this.missKey = -1;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (k < 0) continue;
      let j = TupleIndex.hash(k) & this.mask;
      while (this.keys[j] !== EMPTY) j = (j + 1) & this.mask;
      this.keys[j] = k;
      this.vals[j] = vals[i];
      this.used++;
      this.occupied++;
    }
  }
}
