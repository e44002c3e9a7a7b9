/**
 * Backend selection tables, pure: which of a frontend's backends each slot
 * of its table names. The datapath picks a slot in 1..count of the
 * frontend's entry set (bpf/include/kpr_lb.h) and forwards to the backend
 * the slot names; the reconciler writes the table computed here
 * (reconcile/diff.ts, diffSet) without knowing how it was made. Nothing
 * here knows the maps' layouts or the kernel (a codebase test checks the
 * imports), so a table is tested as plain data.
 *
 * Random selection, today's only algorithm: the table is the backends
 * themselves, one slot each in the planner's order (address, then port),
 * so slot s names backend s - 1. A consistent-hashing table (Maglev: M
 * slots filled from a permutation per backend, so a backend leaving moves
 * only its own slots) is another SelectionTable computed here.
 */

/** Slots a frontend's table holds at most: its slot number and count are u16 (slot 0 is the frontend's own entry). */
export const MAX_SLOTS = 0xffff;

/** A frontend's selection table over its ordered backends. */
export interface SelectionTable {
  /** Slots in the table: they are numbered 1..size. */
  readonly size: number;
  /** The index, in the frontend's ordered backends, of the backend slot `slot` (1..size) names. */
  backendAt(slot: number): number;
}

const inOrder = (slot: number): number => slot - 1;

/** Random selection over `n` backends (at most MAX_SLOTS): one slot each, in order. */
export function randomTable(n: number): SelectionTable {
  if (!(Number.isInteger(n) && n >= 0 && n <= MAX_SLOTS)) throw new RangeError(`a selection table holds 0 to ${MAX_SLOTS} backends, not ${n}`);
  return { size: n, backendAt: inOrder };
}
