/**
 * Tables shared by key: who holds which table, in one place for every user
 * of shared Maglev tables (MaglevTableCache in maglev.ts, the reconciler's
 * kpr_maglev tables in agent/reconcile/tables/maglev.ts). Each table has an
 * id (the caller allocates it), the key it was computed from, a value the
 * caller keeps with it, and a count of holders; a key names at most one
 * table. A table's key may be unknown (null): one adopted from the kernel,
 * held by references read back, until a holder recognises it (rekey).
 * The table is forgotten with its last holder, its key free for another.
 * Pure: no I/O, nothing computed.
 */

interface Share<V> {
  key: string | null;
  holders: number;
  value: V;
}

export class TableShares<V> {
  private readonly byId = new Map<number, Share<V>>();
  private readonly byKey = new Map<string, number>();

  /** The id of the table held under `key`, if any. */
  idOf(key: string): number | undefined {
    return this.byKey.get(key);
  }

  /** The key table `id` was computed from: null when not known yet, undefined when no such table is held. */
  keyOf(id: number): string | null | undefined {
    return this.byId.get(id)?.key;
  }

  /** The value kept with table `id`. */
  value(id: number): V | undefined {
    return this.byId.get(id)?.value;
  }

  /** How many hold table `id` (0: none). */
  holders(id: number): number {
    return this.byId.get(id)?.holders ?? 0;
  }

  /**
   * One more holder of table `id`. A table not held yet starts with `value`
   * under `key` (null: unknown); throws when `key` already names another table.
   */
  hold(id: number, value: V, key: string | null = null): void {
    const s = this.byId.get(id);
    if (s) {
      s.holders++;
      return;
    }
    if (key !== null) this.claimKey(id, key);
    this.byId.set(id, { key, holders: 1, value });
  }

  /** One holder less of table `id`; the holders left (0: the table and its key are forgotten). Throws for a table not held. */
  release(id: number): number {
    const s = this.byId.get(id);
    if (!s) throw new Error(`table ${id} is not held`);
    if (--s.holders > 0) return s.holders;
    this.byId.delete(id);
    if (s.key !== null) this.byKey.delete(s.key);
    return 0;
  }

  /** Table `id` (held) now holds what `key` computes, with `value`: rewritten in place, or recognised after an adoption. */
  rekey(id: number, key: string, value: V): void {
    const s = this.byId.get(id);
    if (!s) throw new Error(`table ${id} is not held`);
    if (s.key === key) {
      s.value = value;
      return;
    }
    this.claimKey(id, key);
    if (s.key !== null) this.byKey.delete(s.key);
    s.key = key;
    s.value = value;
  }

  /** Tables held. */
  get size(): number {
    return this.byId.size;
  }

  clear(): void {
    this.byId.clear();
    this.byKey.clear();
  }

  private claimKey(id: number, key: string): void {
    const other = this.byKey.get(key);
    if (other !== undefined && other !== id) throw new Error(`key of table ${id} already names table ${other}`);
    this.byKey.set(key, id);
  }
}
