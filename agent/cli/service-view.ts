/**
 * The joined view of the service and backend maps that `kpr service list`
 * prints: each frontend with its backends in slot order. Pure: it works on
 * decoded entries, whoever read them.
 */
import { IPPROTO, SVC_FLAG, type Backend, type SvcKey, type SvcVal } from '../maps/layout.js';

export interface ServiceView {
  protocol: string;
  address: string;
  port: number;
  scope: number;
  id: number;
  flags: string[];
  /** Slot order; a slot naming a missing backend shows address "?". */
  backends: Array<{ id: number; address: string; port: number }>;
}

const PROTO_NAMES = new Map<number, string>(Object.entries(IPPROTO).map(([name, n]) => [n, name]));

export function protoName(proto: number): string {
  return PROTO_NAMES.get(proto) ?? `proto-${proto}`;
}

export function flagNames(flags: number): string[] {
  const names = Object.entries(SVC_FLAG)
    .filter(([, bit]) => (flags & bit) !== 0)
    .map(([name]) => name.toLowerCase().replace(/_/g, '-'));
  return names;
}

export function joinServices(services: Array<[SvcKey, SvcVal]>, backends: Array<[number, Backend]>): ServiceView[] {
  const backendById = new Map(backends);
  const frontendKey = (k: SvcKey) => `${k.addr}|${k.port}|${k.proto}|${k.scope}`;
  const slots = new Map<string, Map<number, number>>();
  const masters: Array<[SvcKey, SvcVal]> = [];
  for (const [k, v] of services) {
    if (k.slot === 0) {
      masters.push([k, v]);
      continue;
    }
    const fk = frontendKey(k);
    let m = slots.get(fk);
    if (!m) slots.set(fk, (m = new Map()));
    m.set(k.slot, v.backendId);
  }
  const views = masters.map(([k, v]): ServiceView => {
    const mySlots = slots.get(frontendKey(k));
    const list: ServiceView['backends'] = [];
    for (let slot = 1; slot <= v.count; slot++) {
      const id = mySlots?.get(slot) ?? 0;
      const be = backendById.get(id);
      list.push({ id, address: be?.addr ?? '?', port: be?.port ?? 0 });
    }
    return { protocol: protoName(k.proto), address: k.addr, port: k.port, scope: k.scope, id: v.revNatId, flags: flagNames(v.flags), backends: list };
  });
  return views.sort((a, b) => compareAddr(a.address, b.address) || a.port - b.port || a.protocol.localeCompare(b.protocol));
}

function compareAddr(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 4; i++) if (pa[i] !== pb[i]) return pa[i] - pb[i];
  return 0;
}

/** ipvsadm -Ln style. */
export function formatServiceTable(views: ServiceView[]): string {
  const lines: string[] = [];
  for (const v of views) {
    const n = v.backends.length;
    const flags = v.flags.length ? `  [${v.flags.join(',')}]` : '';
    lines.push(`${v.protocol.padEnd(4)} ${v.address}:${v.port}  id ${v.id}  ${n} backend${n === 1 ? '' : 's'}${flags}`);
    if (n === 0) lines.push('  (no backends: new connections are refused)');
    for (const b of v.backends) lines.push(`  -> ${b.address}:${b.port}`);
  }
  if (views.length === 0) lines.push('(no services programmed)');
  return lines.join('\n') + '\n';
}
