/**
 * The Maglev table a desired entry set asks for (rule 40 of
 * docs/semantics.md): its backends in slot order (slot i+1 = tuples[i], as
 * diffSet writes them), the table agent/lb/maglev.ts computes from them,
 * each entry the slot of the backend it names, cut into the datapath's
 * chunks. The key is what the table is a function of (M and the backends)
 * plus the slot order, so an unchanged entry set is recognised without
 * computing its table. Pure.
 */
import { formatIPv4 } from '../net/ip.js';
import { maglevTable, maglevTableKey, type MaglevBackendInput } from '../lb/maglev.js';
import { maglevChunks, maglevSlotEntries } from '../lb/maglev-chunks.js';
import { tupleIPv4, tuplePort, type BackendTuple } from './desired-frontend.js';
import type { DesiredMaglev } from './tables/maglev.js';
import { MAGLEV_CHUNK_ENTRIES } from '../maps/registry.js';

/** The table of one entry set's backends (`tuples`, with `texts` for those not IPv4), as tables/maglev.ts writes it. */
export function desiredMaglev(tuples: readonly BackendTuple[], texts: readonly string[] | null): DesiredMaglev {
  const input: MaglevBackendInput[] = tuples.map((t, i) => {
    const v4 = tupleIPv4(t);
    return { address: v4 >= 0 ? formatIPv4(v4) : texts![i], port: tuplePort(t) };
  });
  const order = input.map((b) => `${b.address}/${b.port}`).join(' ');
  return {
    key: `${maglevTableKey(input)} @${order}`,
    build() {
      const table = maglevTable(input);
      // A backend's slot is its place in the entry set (tuples are distinct: desired-frontend.ts).
      const slotOf = new Map(input.map((b, i) => [`${b.address}/${b.port}`, i + 1]));
      const entries = maglevSlotEntries(table, (b) => slotOf.get(`${b.address}/${b.port}`) ?? 0);
      return { m: table.m, chunks: maglevChunks(entries, MAGLEV_CHUNK_ENTRIES) };
    },
  };
}
