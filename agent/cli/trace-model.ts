/**
 * `kpr trace`: what the datapath does with one flow, step by step, computed
 * from the maps' content the way the BPF programs walk them
 * (bpf/include/kpr_lb.h: lookup -> source ranges -> select with affinity;
 * kpr_tc.bpf.c: conntrack first). Pure: the lookups come from a TraceMaps
 * (the CLI reads the pinned maps; tests may read anything).
 *
 * Two paths, as on the node:
 *  - socket: a process on the node or in a pod connects (cgroup hooks).
 *    In-node callers get a frontend's internal set first; source ranges are
 *    not applied there (docs/semantics.md); ClientIP affinity is per network
 *    namespace (the caller's netns cookie), so the trace lists the entries.
 *  - tc: a packet arrives on a node interface, from the network (role ext)
 *    or from a pod of this node (role pod): conntrack first, then the same
 *    lookup, source ranges, and affinity by client address.
 */
import {
  BE_FLAG,
  CFG_FLAG,
  CT_DIR,
  CT_FLAG,
  IPPROTO,
  SCOPE,
  SVC_ALG,
  SVC_FLAG,
  VIP_FLAG,
  encodeAddr,
  svcAlgOf,
  type AffinityKey,
  type AffinityVal,
  type Backend,
  type CtKey,
  type CtVal,
  type KprConfig,
  type MaglevRef,
  type SvcMeta,
  type SvcVal,
} from '../maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES } from '../maps/registry.js';
import { slotOf, tupleHash } from '../lb/maglev-hash.js';
import { formatAddress } from '../net/listen-address.js';
import { flagNames, frontendTypeName, scopeName } from './service-view.js';

export type TracePath = 'socket' | 'tc';
export type TraceRole = 'ext' | 'pod';

export interface TraceQuery {
  to: { addr: string; port: number };
  proto: 'TCP' | 'UDP' | 'SCTP';
  path: TracePath;
  /** tc path: where the packet comes from (ext: the network; pod: a pod of this node). */
  role: TraceRole;
  /** The client; its address is required on the tc path, its port is optional. */
  from?: { addr: string; port?: number };
  /** CLOCK_MONOTONIC now, in ns (bpf_ktime_get_ns' clock): ages and deadlines are computed against it. */
  nowNs: bigint;
}

/** The lookups a trace makes; each returns what the map holds (undefined: no entry). */
export interface TraceMaps {
  svc(addr: string, port: number, proto: number, scope: number, slot: number): SvcVal | undefined;
  backend(id: number): Backend | undefined;
  vipFlags(addr: string): number | undefined;
  meta(frontendId: number): SvcMeta | undefined;
  /** The longest-prefix source-range entry for (frontend id, client), as the tc program looks it up. */
  sourceRangeAllows(frontendId: number, client: string): boolean;
  affinity(key: AffinityKey): AffinityVal | undefined;
  /** Every affinity entry of a frontend (the socket path keys them by network namespace). */
  affinityEntries(frontendId: number): Array<{ key: AffinityKey; val: AffinityVal }>;
  affinityMatch(frontendId: number, backendId: number): boolean;
  /** ORIGINAL-direction conntrack entries from `from` (any source port when absent) to `to`. */
  conntrack(from: { addr: string; port?: number }, to: { addr: string; port: number }, proto: number): Array<{ key: CtKey; val: CtVal }>;
  /** One conntrack entry by its key. */
  conntrackEntry(key: CtKey): CtVal | undefined;
  config(): KprConfig | undefined;
  /** kpr_maglev_ref: the Maglev table of an entry set (undefined: none, or no such map on this node). */
  maglevRef(frontendId: number, scope: number): MaglevRef | undefined;
  /** kpr_maglev: one chunk of a Maglev table. */
  maglevChunk(tableId: number, chunk: number): Uint16Array | undefined;
}

export interface TraceStep {
  step: 'conntrack' | 'frontend' | 'address' | 'source-ranges' | 'backends' | 'affinity' | 'maglev' | 'nat' | 'mode' | 'sctp';
  /** One line a person reads. */
  result: string;
  /** The same in fields, for -o json. */
  detail?: Record<string, unknown>;
}

export type TraceAction = 'translated' | 'continues' | 'passed' | 'refused' | 'dropped';

export interface TraceBackend {
  slot: number;
  id: number;
  /** "?" when the slot names a backend id the backend map does not hold. */
  address: string;
  port: number;
  local?: boolean;
  /** On the tc path with affinity: kpr_aff_match says the backend serves the frontend. */
  affinityEligible?: boolean;
}

export interface Trace {
  query: { to: string; proto: string; path: TracePath; role?: TraceRole; from?: string };
  frontend?: { id: number; service?: string; portName?: string; type?: string; scope: string; flags: string[]; affinityTimeoutSeconds?: number };
  steps: TraceStep[];
  verdict: { action: TraceAction; summary: string; backend?: string; backends?: string[] };
}

/** "addr:port" ("[v6]:port"), or the address alone without a port. */
export function hostPort(addr: string, port: number | undefined): string {
  return port === undefined ? addr : formatAddress(addr, port);
}

const NS_PER_S = 1_000_000_000n;

/** An address as the 16 bytes the maps and the flow hash use (IPv4 mapped). */
function addrBytes(addr: string): Uint8Array {
  const b = Buffer.alloc(16);
  encodeAddr(addr, b, 0);
  return new Uint8Array(b);
}

function seconds(ns: bigint): number {
  return Number((ns * 10n) / NS_PER_S) / 10;
}

/** The steps the datapath takes for `q`, and what it does in the end. */
export function traceFlow(q: TraceQuery, maps: TraceMaps): Trace {
  const proto = IPPROTO[q.proto];
  const to = hostPort(q.to.addr, q.to.port);
  const trace: Trace = {
    query: { to, proto: q.proto, path: q.path, ...(q.path === 'tc' ? { role: q.role } : {}), ...(q.from ? { from: hostPort(q.from.addr, q.from.port) } : {}) },
    steps: [],
    verdict: { action: 'passed', summary: '' },
  };
  const steps = trace.steps;
  const cfg = maps.config();
  const done = (action: TraceAction, summary: string, extra: Partial<Trace['verdict']> = {}): Trace => {
    trace.verdict = { action, summary, ...extra };
    return trace;
  };

  if (q.path === 'socket' && cfg && cfg.flags & CFG_FLAG.SOCK_HOST_ONLY) {
    steps.push({
      step: 'mode',
      result: "service-mesh mode: the socket hooks serve only the node's own processes; pods are served by the tc path",
      detail: { sockHostOnly: true },
    });
  }

  // tc: an established flow keeps its backend before any lookup.
  if (q.path === 'tc' && q.from) {
    const flows = maps.conntrack(q.from, q.to, proto);
    const live = flows.filter((f) => f.val.expiresNs > q.nowNs);
    const backendLive = (f: { val: CtVal }) => {
      const be = maps.backend(f.val.backendId);
      return be !== undefined && be.addr === f.val.natDaddr && be.port === f.val.natDport;
    };
    const shown = flows.slice(0, 20).map((f) => ({
      clientPort: f.key.sport,
      backend: hostPort(f.val.natDaddr, f.val.natDport),
      backendId: f.val.backendId,
      source: hostPort(f.val.natSaddr, f.val.natSport),
      expiresInSeconds: seconds(f.val.expiresNs - q.nowNs),
      closing: (f.val.flags & CT_FLAG.CLOSING) !== 0,
      snat: (f.val.flags & CT_FLAG.SNAT) !== 0,
      backendLive: backendLive(f),
    }));
    if (flows.length === 0) {
      steps.push({ step: 'conntrack', result: `no flow from ${hostPort(q.from.addr, q.from.port)} to ${to}: a packet is a new flow`, detail: { flows: [] } });
    } else {
      const lines = shown.map(
        (f) =>
          `port ${f.clientPort} -> ${f.backend}${f.snat ? ` (as ${f.source})` : ''}, ${f.expiresInSeconds > 0 ? `expires in ${f.expiresInSeconds}s` : 'expired'}${f.closing ? ', closing' : ''}${f.backendLive ? '' : ', backend gone'}`,
      );
      steps.push({
        step: 'conntrack',
        result: `${flows.length} flow${flows.length === 1 ? '' : 's'} (${live.length} live): ${lines.join('; ')}${flows.length > shown.length ? '; …' : ''}`,
        detail: { flows: shown, total: flows.length },
      });
    }
    if (q.from.port !== undefined) {
      const f = flows[0];
      if (f && f.val.expiresNs > q.nowNs && backendLive(f)) {
        const backend = hostPort(f.val.natDaddr, f.val.natDport);
        const closing = f.val.flags & CT_FLAG.CLOSING && q.proto === 'TCP' ? closingNote(maps, f, q.from.addr) : '';
        const fe = maps.meta(f.val.frontendId);
        const of = fe
          ? ` (${frontendTypeName(fe.type)} ${fe.name}${fe.portName ? `:${fe.portName}` : ''}, frontend id ${f.val.frontendId})`
          : ` (frontend id ${f.val.frontendId})`;
        return done('continues', `established flow${of}: packets go to ${backend} as before${closing}`, { backend });
      }
    }
  }

  // Lookup: in-node callers (socket path, pods on tc) get the internal set first.
  const inNode = q.path === 'socket' || q.role === 'pod';
  let scope: number = SCOPE.INTERNAL;
  let master = inNode ? maps.svc(q.to.addr, q.to.port, proto, SCOPE.INTERNAL, 0) : undefined;
  if (!master) {
    scope = SCOPE.EXTERNAL;
    master = maps.svc(q.to.addr, q.to.port, proto, SCOPE.EXTERNAL, 0);
  }
  if (!master) {
    const vip = maps.vipFlags(q.to.addr);
    if (vip !== undefined && q.path === 'socket' && vip & VIP_FLAG.REFUSE_UNKNOWN_PORT) {
      steps.push({
        step: 'address',
        result: `${q.to.addr} is a Service address, but no Service defines ${q.proto} port ${q.to.port} on it`,
        detail: { serviceAddress: true, refuseUnknownPort: true },
      });
      return done('refused', 'a Service address on a port no Service defines: refused at once (the socket call fails with EPERM), as kube-proxy rejects it');
    }
    steps.push({
      step: 'frontend',
      result: `no frontend ${q.proto} ${to}${vip !== undefined ? ` (${q.to.addr} is a Service address)` : ''}`,
      detail: { found: false, serviceAddress: vip !== undefined },
    });
    return done(
      'passed',
      q.path === 'socket'
        ? `not a Service frontend: the connection goes to ${to} untranslated`
        : `not a Service frontend: the packet passes to the node's stack untranslated`,
    );
  }
  const meta = maps.meta(master.frontendId);
  trace.frontend = {
    id: master.frontendId,
    ...(meta ? { service: meta.name, portName: meta.portName, type: frontendTypeName(meta.type) } : {}),
    scope: scopeName(scope),
    flags: flagNames(master.flags),
    ...(master.flags & SVC_FLAG.AFFINITY ? { affinityTimeoutSeconds: master.backendId } : {}),
  };
  const name = meta ? `${frontendTypeName(meta.type)} ${meta.name}${meta.portName ? `:${meta.portName}` : ''}` : '(no name in kpr_svc_meta)';
  steps.push({
    step: 'frontend',
    result: `${name}  id ${master.frontendId}  scope ${scopeName(scope)}${trace.frontend.flags.length ? `  [${trace.frontend.flags.join(',')}]` : ''}`,
    detail: { found: true, ...trace.frontend },
  });

  // SCTP: programmed, never carried (rule 39 of docs/semantics.md).
  if (q.proto === 'SCTP') {
    if (q.path === 'socket') {
      steps.push({
        step: 'sctp',
        result: 'Linux runs no connect or sendmsg hook for SCTP sockets: kpr never sees the association',
        detail: { translated: false },
      });
      return done('passed', `SCTP is not translated at the socket: the association goes to ${to} untranslated (docs/semantics.md rule 39)`);
    }
    steps.push({ step: 'sctp', result: 'kpr does not rewrite SCTP (its CRC32c covers the ports)', detail: { translated: false } });
    return done('dropped', 'an SCTP packet to a frontend: dropped (kpr_datapath_drops_total{reason="sctp"}; docs/semantics.md rule 39)');
  }

  // Source ranges: the tc path only.
  if (master.flags & SVC_FLAG.SOURCE_RANGES) {
    if (q.path === 'socket') {
      steps.push({
        step: 'source-ranges',
        result: 'loadBalancerSourceRanges are not applied to callers on the node (socket path)',
        detail: { applied: false },
      });
    } else {
      const allowed = maps.sourceRangeAllows(master.frontendId, q.from!.addr);
      steps.push({
        step: 'source-ranges',
        result: `${q.from!.addr} is ${allowed ? '' : 'not '}in the frontend's loadBalancerSourceRanges`,
        detail: { applied: true, allowed },
      });
      if (!allowed) return done('dropped', `${q.from!.addr} is outside loadBalancerSourceRanges (kpr_datapath_drops_total{reason="source_range"})`);
    }
  } else {
    steps.push({ step: 'source-ranges', result: 'none (every source allowed)', detail: { applied: false } });
  }

  // Backends in slot order.
  const backends: TraceBackend[] = [];
  for (let slot = 1; slot <= master.count; slot++) {
    const id = maps.svc(q.to.addr, q.to.port, proto, scope, slot)?.backendId ?? 0;
    const be = maps.backend(id);
    const entry: TraceBackend = { slot, id, address: be?.addr ?? '?', port: be?.port ?? 0 };
    if (be && be.flags & BE_FLAG.LOCAL) entry.local = true;
    if (master.flags & SVC_FLAG.AFFINITY) entry.affinityEligible = maps.affinityMatch(master.frontendId, id);
    backends.push(entry);
  }
  const missing = backends.filter((b) => b.address === '?');
  const listed = backends.map((b) => `${hostPort(b.address, b.port)}${b.local ? ' local' : ''}`);
  if (master.count === 0) {
    const why = master.flags & SVC_FLAG.LOCAL_ONLY ? 'no endpoint on this node (traffic policy Local)' : 'no ready endpoint';
    steps.push({ step: 'backends', result: `none: ${why}`, detail: { count: 0, backends: [] } });
    return q.path === 'socket'
      ? done('refused', `${why}: refused at once (the socket call fails with EPERM)`)
      : done('dropped', `${why} (kpr_datapath_drops_total{reason="no_backend"})`);
  }
  steps.push({
    step: 'backends',
    result: `${master.count}: ${listed.join(', ')}${missing.length ? ` (${missing.length} slot${missing.length === 1 ? '' : 's'} name a missing backend: a connection choosing one proceeds untranslated)` : ''}`,
    detail: { count: master.count, backends },
  });

  // Affinity.
  let chosen: TraceBackend | undefined;
  if (master.flags & SVC_FLAG.AFFINITY) {
    const timeoutNs = BigInt(master.backendId) * NS_PER_S;
    if (q.path === 'tc') {
      const val = maps.affinity({ netnsCookie: 0n, client: q.from!.addr, frontendId: master.frontendId });
      const fresh = val !== undefined && q.nowNs - val.lastUsedNs <= timeoutNs;
      const match = val !== undefined && maps.affinityMatch(master.frontendId, val.backendId);
      if (val && fresh && match) chosen = backends.find((b) => b.id === val.backendId);
      const age = val ? seconds(q.nowNs - val.lastUsedNs) : undefined;
      const result = !val
        ? `no entry for ${q.from!.addr}: the first connection chooses at random and is remembered for ${master.backendId}s`
        : chosen
          ? `${q.from!.addr} -> ${hostPort(chosen.address, chosen.port)} (last used ${age}s ago, timeout ${master.backendId}s)`
          : `${q.from!.addr} had backend id ${val.backendId}, ${!fresh ? `expired (last used ${age}s ago, timeout ${master.backendId}s)` : 'which no longer serves the frontend'}: a new choice`;
      steps.push({
        step: 'affinity',
        result,
        detail: {
          key: 'client address',
          hit: chosen !== undefined,
          entry: val ? { backendId: val.backendId, ageSeconds: age } : null,
          timeoutSeconds: master.backendId,
        },
      });
    } else {
      const entries = maps.affinityEntries(master.frontendId).filter((e) => e.key.netnsCookie !== 0n);
      const fresh = entries.filter((e) => q.nowNs - e.val.lastUsedNs <= timeoutNs);
      steps.push({
        step: 'affinity',
        result: `per network namespace of the caller (timeout ${master.backendId}s): ${fresh.length} live entr${fresh.length === 1 ? 'y' : 'ies'}${
          fresh.length
            ? ': ' +
              fresh
                .slice(0, 10)
                .map((e) => `netns ${e.key.netnsCookie} -> backend id ${e.val.backendId}`)
                .join(', ')
            : ''
        }`,
        detail: {
          key: 'netns cookie',
          timeoutSeconds: master.backendId,
          entries: fresh
            .slice(0, 100)
            .map((e) => ({ netnsCookie: String(e.key.netnsCookie), backendId: e.val.backendId, ageSeconds: seconds(q.nowNs - e.val.lastUsedNs) })),
        },
      });
    }
  } else {
    steps.push({ step: 'affinity', result: 'none (sessionAffinity None)', detail: { hit: false } });
  }

  // Maglev (rule 40 of docs/semantics.md): the flow's slot in the entry set's table, when the tuple is known.
  let maglevPick: TraceBackend | undefined;
  if (!chosen && svcAlgOf(master.flags) === SVC_ALG.MAGLEV) {
    const ref = maps.maglevRef(master.frontendId, scope);
    const known = q.path === 'tc' && q.from?.port !== undefined;
    if (!ref) {
      steps.push({
        step: 'maglev',
        result: 'Maglev frontend without a table (kpr_maglev_ref): chosen at random (kpr_datapath_maglev_random_fallbacks_total{reason="no_table"})',
        detail: { table: null },
      });
    } else if (!known) {
      const why =
        q.path === 'socket'
          ? "the socket path hashes the connecting socket's bound source; an unbound socket's connect is chosen at random"
          : 'give --from ADDR:PORT for the backend of one flow';
      steps.push({ step: 'maglev', result: `table ${ref.tableId} (M=${ref.m}): ${why}`, detail: { tableId: ref.tableId, m: ref.m } });
    } else {
      const from = q.from!;
      const nodePort = (master.flags & SVC_FLAG.NODE_PORT) !== 0;
      const hash = tupleHash({
        saddr: addrBytes(from.addr),
        daddr: nodePort ? new Uint8Array(16) : addrBytes(q.to.addr),
        sport: from.port!,
        dport: q.to.port,
        proto,
      });
      const index = slotOf(hash, ref.m);
      const slot = maps.maglevChunk(ref.tableId, Math.floor(index / MAGLEV_CHUNK_ENTRIES))?.[index % MAGLEV_CHUNK_ENTRIES] ?? 0;
      maglevPick = slot >= 1 && slot <= master.count ? backends[slot - 1] : undefined;
      steps.push({
        step: 'maglev',
        result: maglevPick
          ? `hash 0x${hash.toString(16).padStart(8, '0')} -> entry ${index} of table ${ref.tableId} (M=${ref.m}) -> slot ${slot}: ${hostPort(maglevPick.address, maglevPick.port)}`
          : `hash 0x${hash.toString(16).padStart(8, '0')} -> entry ${index} of table ${ref.tableId} (M=${ref.m}): slot ${slot} is not one of the ${master.count}: chosen at random`,
        detail: { tableId: ref.tableId, m: ref.m, hash, entry: index, slot, nodePortHash: nodePort },
      });
    }
  }

  // NAT on the tc path.
  if (q.path === 'tc') {
    const snatV = q.to.addr.includes(':') ? cfg?.snatV6 : cfg?.snatV4;
    const snat = q.role === 'ext' ? !(master.flags & SVC_FLAG.LOCAL_ONLY) : undefined;
    const result =
      snat === true
        ? `source NATed to the node (${snatV || 'no SNAT address configured: the packet is dropped'}), as kube-proxy masquerades external traffic`
        : snat === false
          ? 'client address kept (externalTrafficPolicy Local)'
          : 'client address kept (a pod reaching itself is NATed to the node: hairpin)';
    steps.push({ step: 'nat', result, detail: { snat: snat ?? 'hairpin-only', snatAddress: snatV || null } });
  }

  const all = backends.filter((b) => b.address !== '?').map((b) => hostPort(b.address, b.port));
  if (chosen)
    return done('translated', `affinity: a new connection goes to ${hostPort(chosen.address, chosen.port)}`, {
      backend: hostPort(chosen.address, chosen.port),
    });
  if (maglevPick)
    return done(
      'translated',
      `Maglev: a new connection of this flow goes to ${hostPort(maglevPick.address, maglevPick.port)} on every node with the same backends`,
      { backend: hostPort(maglevPick.address, maglevPick.port) },
    );
  const each = master.count === 1 ? '' : ` (each 1/${master.count})`;
  if (svcAlgOf(master.flags) === SVC_ALG.MAGLEV && q.path === 'tc')
    return done('translated', `a new connection goes to one of ${master.count} backend${master.count === 1 ? '' : 's'}, by its 5-tuple's Maglev hash`, {
      backends: all,
    });
  return done('translated', `a new connection goes to one of ${master.count} backend${master.count === 1 ? '' : 's'} at random${each}`, { backends: all });
}

/** The table form of a trace. */
export function formatTrace(t: Trace): string {
  const q = t.query;
  const where = q.path === 'socket' ? 'socket path: a caller on this node' : `tc path: ${q.role === 'pod' ? 'from a pod of this node' : 'from the network'}`;
  const lines = [`trace ${q.proto} ${q.from ?? '(any caller)'} -> ${q.to}  (${where})`];
  t.steps.forEach((s, i) => lines.push(`${String(i + 1).padStart(2)} ${s.step.padEnd(13)} ${s.result}`));
  lines.push(`=> ${t.verdict.action}: ${t.verdict.summary}`);
  return lines.join('\n') + '\n';
}

/**
 * What a SYN from the port of a closing TCP flow does (kpr_tc.bpf.c): a flow
 * its client reset before the backend answered (its REPLY entry, still this
 * flow's, saw no SYN-ACK) is retried on the same backend and SNAT port; any
 * other is balanced afresh.
 */
function closingNote(maps: TraceMaps, f: { key: CtKey; val: CtVal }, client: string): string {
  const reply = maps.conntrackEntry({
    saddr: f.val.natDaddr,
    daddr: f.val.natSaddr,
    sport: f.val.natDport,
    dport: f.val.natSport,
    proto: f.key.proto,
    dir: CT_DIR.REPLY,
  });
  const ours = reply !== undefined && reply.natDaddr === client && reply.natDport === f.key.sport;
  return ours && (reply.flags & CT_FLAG.ANSWERED) === 0
    ? ' (never answered: a SYN from this port retries the connect on this backend and SNAT port)'
    : ' (a new SYN from this port is balanced afresh: the flow is closing)';
}
