/**
 * A Maglev table (agent/lb/maglev.ts) in the form the datapath reads it
 * (bpf/include/kpr_types.h, struct kpr_maglev_chunk): each of its M entries
 * the slot number (1..count) of the frontend's backend it names, in chunks
 * of a fixed number of entries. Pure; the chunk size comes from the
 * caller (the maps' registry owns it, and agent/lb/ imports nothing of the
 * maps).
 *
 * Entries hold slot numbers, not backend ids, so a table serves every
 * frontend whose slots name the same backends in the same order, and the
 * datapath's slot-based steps (kpr_lb_select_other's redraw, affinity,
 * conntrack) stay as they are. A frontend's slots are in its plan's order;
 * the table's backends in identity order (maglev.ts), so `slotOf` maps one
 * to the other.
 */
import type { MaglevBackend, MaglevTable } from './maglev.js';

/**
 * The table's M entries as slot numbers: entry i = slotOf(table.backends[table.entries[i]]).
 * Throws a RangeError when slotOf gives a slot outside 1..65535 for a backend.
 */
export function maglevSlotEntries(table: MaglevTable, slotOf: (b: MaglevBackend, index: number) => number): Uint16Array {
  const slots = table.backends.map((b, i) => {
    const s = slotOf(b, i);
    if (!Number.isInteger(s) || s < 1 || s > 0xffff) throw new RangeError(`backend ${b.address}:${b.port} has no slot (${s}) in its frontend`);
    return s;
  });
  const out = new Uint16Array(table.m);
  for (let i = 0; i < table.m; i++) out[i] = slots[table.entries[i]];
  return out;
}

/** `entries` cut into chunks of `chunkEntries` (the last one zero-filled past the end): chunk c holds entries c·chunkEntries onwards. */
export function maglevChunks(entries: Uint16Array, chunkEntries: number): Uint16Array[] {
  if (!Number.isInteger(chunkEntries) || chunkEntries < 1) throw new RangeError(`a Maglev chunk holds at least one entry, not ${chunkEntries}`);
  const out: Uint16Array[] = [];
  for (let off = 0; off < entries.length; off += chunkEntries) {
    const c = new Uint16Array(chunkEntries);
    c.set(entries.subarray(off, Math.min(off + chunkEntries, entries.length)));
    out.push(c);
  }
  return out;
}
