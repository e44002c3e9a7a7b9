/**
 * A map keyed by ids handed out lowest-first (backend ids): an array for
 * the dense low range, a Map for ids far beyond it (a stray large id from a
 * foreign map must not make the array huge). Cheaper than a Map of 10^5
 * entries, which rehashes as it grows. Iteration order is unspecified.
 *
 * Invariant: ids below items.length live in `items`, every key of `other`
 * is at least items.length.
 */
/** How far past the array's end an id may land and still extend it. */
const SLACK = 4096;

export class IdIndex<V> {
  private items: Array<V | undefined> = [];
  private readonly other = new Map<number, V>();
  private count = 0;

  get size(): number {
    return this.count + this.other.size;
  }

  get(id: number): V | undefined {
    return id >>> 0 === id && id < this.items.length ? this.items[id] : this.other.get(id);
  }

  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  set(id: number, v: V): this {
    const items = this.items;
    if (id >>> 0 !== id || id > items.length + SLACK) {
      this.other.set(id, v);
      return this;
    }
    // Extend without holes (keeps the array fast), taking over ids the Map held.
    while (items.length <= id) {
      const i = items.length;
      const moved = this.other.size > 0 ? this.other.get(i) : undefined;
      items.push(moved);
      if (moved !== undefined) {
        this.other.delete(i);
        this.count++;
      }
    }
    if (items[id] === undefined) this.count++;
    items[id] = v;
    return this;
  }

  delete(id: number): boolean {
    const items = this.items;
    if (!(id >>> 0 === id && id < items.length)) return this.other.delete(id);
    if (items[id] === undefined) return false;
    items[id] = undefined;
    this.count--;
    return true;
  }

  clear(): void {
    this.items = [];
    this.other.clear();
    this.count = 0;
  }

  /**
   * Calls fn for every value. A plain loop: values() is a generator, whose
   * result object per value a full sync's sweep of 10^5 backends paid for.
   */
  forEachValue(fn: (v: V) => void): void {
    const items = this.items;
    for (let i = 0; i < items.length; i++) {
      const v = items[i];
      if (v !== undefined) fn(v);
    }
    for (const v of this.other.values()) fn(v);
  }

  *values(): IterableIterator<V> {
    const items = this.items;
    for (let i = 0; i < items.length; i++) {
      const v = items[i];
      if (v !== undefined) yield v;
    }
    yield* this.other.values();
  }
}
