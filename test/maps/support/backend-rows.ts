/** Backend-map values as the reconciler's BackendTable holds them, for tests of the column writers. */
import { BackendTable } from '../../../agent/reconcile/backend-table.js';
import { backendValueKey } from '../../../agent/reconcile/desired-frontend.js';
import { parseIP } from '../../../agent/net/ip.js';
import type { Backend } from '../../../agent/maps/layout.js';

/** A table holding recs[i] as backend ids[i]. */
export function backendTable(ids: readonly number[], recs: readonly Backend[]): BackendTable {
  const t = new BackendTable();
  ids.forEach((id, i) => {
    const b = recs[i];
    const ip = parseIP(b.addr);
    t.insert(id, ip?.family === 'IPv4' ? (ip.key as number) : -1, b.addr, b.port, b.proto, b.flags, backendValueKey(b));
  });
  return t;
}
