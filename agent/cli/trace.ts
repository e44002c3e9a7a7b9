/**
 * `kpr trace`: reads this node's pinned maps with point lookups (a scan only
 * for the conntrack and affinity entries of one client or frontend) and
 * prints what the datapath does with one flow (trace-model.ts).
 */
import os from 'node:os';
import { existsSync } from 'node:fs';
import type { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { CT_DIR, encodeSrcRangeKey, mapCodecs, type AffinityKey, type AffinityVal, type CtKey, type CtVal } from '../maps/layout.js';
import { MAPS, type MapId, type MapSpec } from '../maps/registry.js';
import { parseIP } from '../net/ip.js';
import { openPinnedMap } from './pinned-maps.js';
import { UsageError } from './errors.js';
import { rejectLeadingZeros } from './address-args.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';
import { formatTrace, traceFlow, type TraceMaps, type TracePath, type TraceRole } from './trace-model.js';

/** "198.19.0.10:80", "[2001:db8::1]:53", or without a port when `portOptional`. */
export function parseEndpoint(text: string, flag: string, portOptional: boolean): { addr: string; port?: number } {
  rejectLeadingZeros(text, flag);
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/.exec(text) ?? /^([^[\]]*:[^[\]]*)$/.exec(text);
  const host = m?.[1] ?? m?.[2];
  const ip = host === undefined ? null : parseIP(host);
  const port = m?.[3] === undefined ? undefined : Number(m[3]);
  // A bare IPv6 address (no brackets) has no port.
  const bareV6 = m !== null && m[2] === undefined && m[3] === undefined && ip?.family === 'IPv6';
  if (!ip || (port !== undefined && (port < 1 || port > 65535)) || (port === undefined && !portOptional) || (bareV6 && !portOptional)) {
    throw new UsageError(`invalid ${flag} "${text}" (${portOptional ? 'IP or IP:PORT' : 'IP:PORT'}, IPv6 as [addr]:port)`);
  }
  return port === undefined ? { addr: ip.text } : { addr: ip.text, port };
}

/** Lookups on the pinned maps, each map opened once and closed by close(). */
class PinnedTraceMaps implements TraceMaps {
  private readonly open = new Map<MapId, BpfMap | null>();

  constructor(private readonly bpffsDir: string) {}

  private map(id: MapId, optional = false): BpfMap | null {
    if (!this.open.has(id)) {
      const name = MAPS[id].name;
      this.open.set(id, optional && !existsSync(mapPinPath(this.bpffsDir, name)) ? null : openPinnedMap(this.bpffsDir, name));
    }
    return this.open.get(id)!;
  }

  private get<K, V>(id: MapId, key: K, optional = false): V | undefined {
    const spec = MAPS[id] as MapSpec<K, V>;
    const m = this.map(id, optional);
    if (!m) return undefined;
    const c = mapCodecs(spec);
    const raw = m.lookup(c.key.encode(key));
    return raw ? c.value.decode(raw) : undefined;
  }

  private scan<K, V>(id: MapId, keep: (k: K, v: V) => boolean): Array<{ key: K; val: V }> {
    const spec = MAPS[id] as MapSpec<K, V>;
    const c = mapCodecs(spec);
    const out: Array<{ key: K; val: V }> = [];
    this.map(id)!.forEachBatch(4096, (count, keys, values) => {
      for (let i = 0; i < count; i++) {
        const key = c.key.decode(keys, i * c.key.size);
        const val = c.value.decode(values, i * c.value.size);
        if (keep(key, val)) out.push({ key, val });
      }
    });
    return out;
  }

  svc(addr: string, port: number, proto: number, scope: number, slot: number) {
    return this.get<unknown, ReturnType<TraceMaps['svc']>>('svc', { addr, port, proto, scope, slot });
  }
  backend(id: number) {
    return this.get<number, ReturnType<TraceMaps['backend']>>('backend', id);
  }
  vipFlags(addr: string) {
    return this.get<string, number>('vip', addr);
  }
  meta(frontendId: number) {
    return this.get<number, ReturnType<TraceMaps['meta']>>('svcMeta', frontendId, true);
  }
  sourceRangeAllows(frontendId: number, client: string): boolean {
    const key = encodeSrcRangeKey({ frontendId, cidr: `${client}/${client.includes(':') ? 128 : 32}` });
    return this.map('srcRange')!.lookup(key) !== null;
  }
  affinity(key: AffinityKey) {
    return this.get<AffinityKey, AffinityVal>('affinity', key);
  }
  affinityEntries(frontendId: number) {
    return this.scan<AffinityKey, AffinityVal>('affinity', (k) => k.frontendId === frontendId);
  }
  affinityMatch(frontendId: number, backendId: number): boolean {
    return this.get('affinityMatch', { backendId, frontendId }) !== undefined;
  }
  conntrack(from: { addr: string; port?: number }, to: { addr: string; port: number }, proto: number) {
    if (from.port !== undefined) {
      const key: CtKey = { saddr: from.addr, daddr: to.addr, sport: from.port, dport: to.port, proto, dir: CT_DIR.ORIGINAL };
      const val = this.get<CtKey, CtVal>('ct', key);
      return val ? [{ key, val }] : [];
    }
    return this.scan<CtKey, CtVal>(
      'ct',
      (k) => k.dir === CT_DIR.ORIGINAL && k.proto === proto && k.saddr === from.addr && k.daddr === to.addr && k.dport === to.port,
    ).sort((a, b) => a.key.sport - b.key.sport);
  }
  conntrackEntry(key: CtKey) {
    return this.get<CtKey, CtVal>('ct', key);
  }
  config() {
    return this.get<number, ReturnType<TraceMaps['config']>>('config', 0);
  }
  maglevRef(frontendId: number, scope: number) {
    return this.get<unknown, ReturnType<TraceMaps['maglevRef']>>('maglevRef', { frontendId, scope }, true);
  }
  maglevChunk(tableId: number, chunk: number) {
    return this.get<unknown, Uint16Array>('maglev', { tableId, chunk }, true);
  }

  close(): void {
    for (const m of this.open.values()) m?.close();
    this.open.clear();
  }
}

/** The node kpr trace runs on, as the agent names it (--node-name, $NODE_NAME, the hostname). */
function thisNode(env: NodeJS.ProcessEnv): string {
  return env.NODE_NAME || os.hostname();
}

export function traceCommand(argv: string[], env: NodeJS.ProcessEnv = process.env, nowNs: bigint = process.hrtime.bigint()): string {
  const { values: v } = parseCommand(commandSpec('trace'), argv);
  const values = v as Record<string, string | undefined>;
  if (!values.to) throw new UsageError('trace: --to ADDR:PORT is required', 'trace');
  const to = parseEndpoint(values.to, '--to', false) as { addr: string; port: number };
  const from = values.from === undefined ? undefined : parseEndpoint(values.from, '--from', true);
  const proto = values.proto!.toUpperCase();
  if (proto !== 'TCP' && proto !== 'UDP' && proto !== 'SCTP') throw new UsageError(`invalid --proto "${values.proto}" (tcp, udp or sctp)`, 'trace');
  const path = (values.path ?? (from ? 'tc' : 'socket')) as TracePath;
  if (path !== 'socket' && path !== 'tc') throw new UsageError(`invalid --path "${values.path}" (socket or tc)`, 'trace');
  const role = values.role as TraceRole;
  if (role !== 'ext' && role !== 'pod') throw new UsageError(`invalid --role "${values.role}" (ext or pod)`, 'trace');
  if (path === 'tc' && !from) throw new UsageError('--path tc needs --from IP[:PORT]: the tc path decides by the client address', 'trace');
  if (from && from.addr.includes(':') !== to.addr.includes(':'))
    throw new UsageError(`--from ${from.addr} and --to ${to.addr} are of different address families`, 'trace');
  if (values.node !== undefined && values.node !== thisNode(env)) {
    throw new UsageError(
      `kpr trace reads the maps of the node it runs on (${thisNode(env)}), not ${values.node}: run it there (e.g. kubectl exec into the kpr pod on ${values.node})`,
    );
  }
  const maps = new PinnedTraceMaps(values.bpffs!);
  try {
    const trace = traceFlow({ to, proto, path, role, ...(from ? { from } : {}), nowNs }, maps);
    return values.output === 'json' ? JSON.stringify(trace, null, 2) + '\n' : formatTrace(trace);
  } finally {
    maps.close();
  }
}
