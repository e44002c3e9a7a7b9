/**
 * Lowest-free-first id allocator over [1, max]. Used for backend ids (u32)
 * and frontend ids (u32 since layout v2): ids are reused so that, when everything is removed,
 * the id space returns to empty and the next id is 1 again.
 *
 * Invariant: every id below `next` is either in use or in the free heap, so
 * the lowest free id is min(heap top, next). Heap entries are checked
 * lazily, so reserve() of an id in the heap costs nothing.
 *
 * Used ids are a bitmap (ids are dense: lowest first) up to DENSE_LIMIT,
 * grown on demand; the rare larger id (reserved from a foreign map) goes in
 * a Set, so a stray huge id never makes the bitmap huge.
 */
const DENSE_LIMIT = 1 << 24;

export class IdAllocator {
  private bits = new Uint32Array(64);
  private readonly sparse = new Set<number>();
  private count = 0;
  private readonly heap: number[] = [];
  private next = 1;

  constructor(private readonly max: number) {}

  get size(): number {
    return this.count;
  }

  has(id: number): boolean {
    if (id < DENSE_LIMIT && id === (id | 0)) {
      if (id < 0) return false;
      const w = id >>> 5;
      return w < this.bits.length && (this.bits[w] & (1 << (id & 31))) !== 0;
    }
    return this.sparse.has(id);
  }

  private mark(id: number): void {
    this.count++;
    if (id >= DENSE_LIMIT) {
      this.sparse.add(id);
      return;
    }
    const w = id >>> 5;
    if (w >= this.bits.length) {
      let n = this.bits.length * 2;
      while (n <= w) n *= 2;
      const grown = new Uint32Array(n);
      grown.set(this.bits);
      this.bits = grown;
    }
    this.bits[w] |= 1 << (id & 31);
  }

  /** The lowest free id, or undefined when the space is exhausted. */
  allocate(): number | undefined {
    while (this.heap.length > 0) {
      const id = this.pop();
      if (!this.has(id)) {
        this.mark(id);
        return id;
      }
    }
    while (this.has(this.next)) this.next++;
    if (this.next > this.max) return undefined;
    this.mark(this.next);
    return this.next++;
  }

  /** Marks an id found elsewhere (e.g. in the kernel) as used. Returns false if already used or out of range. */
  reserve(id: number): boolean {
    if (!Number.isInteger(id) || id < 1 || id > this.max || this.has(id)) return false;
    this.mark(id);
    return true;
  }

  release(id: number): void {
    if (!Number.isInteger(id) || id < 1 || !this.has(id)) return;
    this.count--;
    if (id < DENSE_LIMIT) this.bits[id >>> 5] &= ~(1 << (id & 31));
    else this.sparse.delete(id);
    if (id < this.next) this.push(id);
  }

  clear(): void {
    this.bits = new Uint32Array(64);
    this.sparse.clear();
    this.count = 0;
    this.heap.length = 0;
    this.next = 1;
  }

  private push(id: number): void {
    const h = this.heap;
    let i = h.push(id) - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p] <= h[i]) break;
      [h[p], h[i]] = [h[i], h[p]];
      i = p;
    }
  }

  private pop(): number {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l] < h[m]) m = l;
        if (r < h.length && h[r] < h[m]) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}
