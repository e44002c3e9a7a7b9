/**
 * Lowest-free-first id allocator over [1, max]. Used for backend ids (u32)
 * and revNatIds (u16): ids are reused so that, when everything is removed,
 * the id space returns to empty and the next id is 1 again.
 *
 * Invariant: every id below `next` is either in use or in the free heap, so
 * the lowest free id is min(heap top, next). Heap entries are checked
 * lazily, so reserve() of an id in the heap costs nothing.
 */
export class IdAllocator {
  private readonly used = new Set<number>();
  private readonly heap: number[] = [];
  private next = 1;

  constructor(private readonly max: number) {}

  get size(): number {
    return this.used.size;
  }

  has(id: number): boolean {
    return this.used.has(id);
  }

  /** The lowest free id, or undefined when the space is exhausted. */
  allocate(): number | undefined {
    while (this.heap.length > 0) {
      const id = this.pop();
      if (!this.used.has(id)) {
        this.used.add(id);
        return id;
      }
    }
    while (this.used.has(this.next)) this.next++;
    if (this.next > this.max) return undefined;
    this.used.add(this.next);
    return this.next++;
  }

  /** Marks an id found elsewhere (e.g. in the kernel) as used. Returns false if already used or out of range. */
  reserve(id: number): boolean {
    if (!Number.isInteger(id) || id < 1 || id > this.max || this.used.has(id)) return false;
    this.used.add(id);
    return true;
  }

  release(id: number): void {
    if (!this.used.delete(id)) return;
    if (id < this.next) this.push(id);
  }

  clear(): void {
    this.used.clear();
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
