/**
 * Emptying the long-lived Maps and Sets of a sync without leaving garbage
 * for a full GC. V8 allocates the new table of a Map or Set that clear()
 * (or growth) replaces in the generation of the table it had: once a
 * long-lived collection's table is in the old generation, every clear()
 * makes a new old-generation table, even of an empty one, and the one it
 * drops is old garbage. A resync runs ~400 syncs, each clearing a few: that
 * was ~1.1 MiB of old garbage per resync at 10,000 Services, which only a
 * major GC returns (agent/runtime/memory.ts).
 */

/** Empties `c` unless it is empty already (an empty one's clear() would still make a new table). */
export function clearIfAny(c: { size: number; clear(): void }): void {
  if (c.size > 0) c.clear();
}
