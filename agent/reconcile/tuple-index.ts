/**
 * A map keyed by backend tuples (see backendTupleKey). IPv4 tuples are
 * integers of up to 49 bits: as Map keys they are heap numbers, which V8
 * hashes and compares slowly, and a full sync looks up ~10^5 of them. They
 * go in an open-addressing table over a Float64Array (exact for integers
 * below 2^53) instead; anything else (IPv6 strings) in a plain Map.
 * Not iterable: the reconciler only looks tuples up.
 */
const EMPTY = 0;
const FULL = 1;
const DELETED = 2;

function isTupleNumber(k: number | string): k is number {
  return typeof k === 'number' && Number.isSafeInteger(k) && k >= 0;
}

export class TupleIndex<V> {
  private readonly other = new Map<number | string, V>();
  private keys = new Float64Array(1024);
  private state = new Uint8Array(1024);
  private vals: Array<V | undefined> = new Array<V | undefined>(1024);
  private mask = 1023;
  /** FULL slots. */
  private used = 0;
  /** FULL + DELETED slots (probe chains). */
  private occupied = 0;

  get size(): number {
    return this.used + this.other.size;
  }

  private static hash(k: number): number {
    const lo = k >>> 0;
    const hi = (k / 4294967296) >>> 0;
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    return (h ^ (h >>> 16)) >>> 0;
  }

  /** Slot holding k, or -1. */
  private find(k: number): number {
    const mask = this.mask;
    const keys = this.keys;
    const state = this.state;
    for (let i = TupleIndex.hash(k) & mask; ; i = (i + 1) & mask) {
      const s = state[i];
      if (s === EMPTY) return -1;
      if (s === FULL && keys[i] === k) return i;
    }
  }

  get(k: number | string): V | undefined {
    if (!isTupleNumber(k)) return this.other.get(k);
    const i = this.find(k);
    return i < 0 ? undefined : this.vals[i];
  }

  has(k: number | string): boolean {
    if (!isTupleNumber(k)) return this.other.has(k);
    return this.find(k) >= 0;
  }

  set(k: number | string, v: V): this {
    if (!isTupleNumber(k)) {
      this.other.set(k, v);
      return this;
    }
    const found = this.find(k);
    if (found >= 0) {
      this.vals[found] = v;
      return this;
    }
    if ((this.occupied + 1) * 2 > this.mask + 1) this.rehash(this.used + 1);
    const mask = this.mask;
    let i = TupleIndex.hash(k) & mask;
    while (this.state[i] === FULL) i = (i + 1) & mask;
    if (this.state[i] === EMPTY) this.occupied++;
    this.state[i] = FULL;
    this.keys[i] = k;
    this.vals[i] = v;
    this.used++;
    return this;
  }

  delete(k: number | string): boolean {
    if (!isTupleNumber(k)) return this.other.delete(k);
    const i = this.find(k);
    if (i < 0) return false;
    this.state[i] = DELETED;
    this.vals[i] = undefined;
    this.used--;
    return true;
  }

  clear(): void {
    this.other.clear();
    this.keys = new Float64Array(1024);
    this.state = new Uint8Array(1024);
    this.vals = new Array<V | undefined>(1024);
    this.mask = 1023;
    this.used = 0;
    this.occupied = 0;
  }

  /** Rebuilds the table (dropping deleted slots) with room for `need` entries at most half full. */
  private rehash(need: number): void {
    let cap = 1024;
    while (cap < need * 4) cap *= 2;
    const { keys, state, vals } = this;
    this.keys = new Float64Array(cap);
    this.state = new Uint8Array(cap);
    this.vals = new Array<V | undefined>(cap);
    this.mask = cap - 1;
    this.used = 0;
    this.occupied = 0;
    for (let i = 0; i < state.length; i++) {
      if (state[i] !== FULL) continue;
      const k = keys[i];
      let j = TupleIndex.hash(k) & this.mask;
      while (this.state[j] !== EMPTY) j = (j + 1) & this.mask;
      this.state[j] = FULL;
      this.keys[j] = k;
      this.vals[j] = vals[i];
      this.used++;
      this.occupied++;
    }
  }
}
