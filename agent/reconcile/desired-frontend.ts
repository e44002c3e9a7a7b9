/**
 * PlanFrontend → what the maps must hold for it. Pure. Frontends the
 * datapath cannot serve are refused here with a reason, so the reconciler
 * never writes a half-understood entry.
 */
import { ipv4Canonical, IPV4_INVALID, networkText, parseCIDR, parseIP } from '../net/ip.js';
import { frontendKey, frontendLabel, type PlanBackend, type PlanFrontend, type SkippedObject } from '../plan/types.js';
import { BE_FLAG, FE_TYPE, IPPROTO, SCOPE, SVC_ALG, SVC_FLAG, svcAlgFlags, type Backend } from '../maps/layout.js';
import { flatKey } from '../runtime/flat-key.js';
import { MAX_SLOTS } from '../lb/selection.js'; // a frontend with more backends gets the first MAX_SLOTS, reported (limits.ts)

/** A service-map key without its slot and scope: one frontend. */
export interface FrontendBase {
  addr: string;
  port: number;
  proto: number;
}

/** Identity of a backend: a number for IPv4 (cheap to hash), a string for IPv6. */
export type BackendTuple = number | string;

export interface DesiredFrontend {
  /** The frontend key: frontendKey(base). */
  fk: string;
  /** entrySetId(fk, EXTERNAL) and entrySetId(fk, INTERNAL), built once. */
  extSid: string;
  intSid: string;
  /** "namespace/name" of the Service that asked for it. */
  service: string;
  portName: string;
  /** FE_TYPE value, for the frontend's names (tables/svc-meta.ts). */
  feType: number;
  /** The plan's address as written (messages name the frontend as the plan did: desiredFrontendLabel). */
  planAddress: string;
  base: FrontendBase;
  /** SVC_FLAG bits of the master entries. */
  flags: number;
  /** Affinity timeout in seconds (master.backendId); 0 without affinity. */
  affinityTimeout: number;
  /**
   * EXTERNAL scope: slot i+1 = the backend of tuples[i] (backendTupleKey,
   * of protocol base.proto): the plan's valid backends, each once, in plan
   * order. Kept as tuples, not as the plan's backend objects: those then die
   * young (a cold sync at 100,000 Services × 10 endpoints otherwise kept a
   * million of them, each copied twice by the scavenger).
   */
  tuples: readonly BackendTuple[];
  /** Which of `tuples` are on this node (BE_FLAG.LOCAL), by index, ascending. */
  locals: readonly number[];
  /** The canonical address text of each of `tuples` when they are not IPv4 (an IPv4 tuple holds its address); null for IPv4. */
  texts: readonly string[] | null;
  /** INTERNAL scope set, only when it differs from `tuples`: its tuples, locals and texts as above. */
  internalTuples: readonly BackendTuple[] | null;
  internalLocals: readonly number[];
  internalTexts: readonly string[] | null;
  /** A ClusterIP frontend: its address refuses unknown ports (tables/vips.ts). */
  clusterIP: boolean;
  /** loadBalancerSourceRanges in canonical CIDR form, sorted; empty = everyone. */
  sourceRanges: readonly string[];
  /** 0, or the valid backends the plan had for a scope when that was more than MAX_SLOTS (the first MAX_SLOTS are kept). */
  truncatedFrom: number;
  /** The Service selects by Maglev (rule 40 of docs/semantics.md): each entry set gets a table (tables/maglev.ts). */
  maglev: boolean;
}

/** The frontend label (plan/types.ts) of the plan a desired frontend came from, for messages (built only when one is written). */
export function desiredFrontendLabel(d: DesiredFrontend): string {
  return frontendLabel({
    address: d.planAddress,
    port: d.base.port,
    protocol: d.base.proto === IPPROTO.UDP ? 'UDP' : d.base.proto === IPPROTO.SCTP ? 'SCTP' : 'TCP',
  });
}

/** Identity of one entry set (frontend and scope). */
export function entrySetId(fk: string, scope: number): string {
  return flatKey('#', fk, scope);
}

/** The protocol's index in a numeric backendTupleKey (2 bits). */
function protoIndex(proto: number): number {
  return proto === IPPROTO.TCP ? 0 : proto === IPPROTO.UDP ? 1 : proto === IPPROTO.SCTP ? 2 : -1;
}

/**
 * Identity of a backend: one id per distinct (address, port, protocol). For
 * IPv4 a number (50 bits: address, port, TCP/UDP/SCTP; exact below 2^53)
 * because it is looked up once per backend per sync. null for what this
 * agent never writes.
 */
export function backendTupleKey(addrKey: number | string, port: number, proto: number): BackendTuple | null {
  const pi = protoIndex(proto);
  if (pi < 0) return null;
  if (typeof addrKey === 'number') return (addrKey * 65536 + port) * 4 + pi;
  return `${addrKey}:${port}/${proto}`;
}

/** The IPv4 address (u32) of a numeric backendTupleKey; -1 for anything else. */
export function tupleIPv4(tuple: BackendTuple): number {
  return typeof tuple === 'number' ? Math.floor(tuple / 262144) : -1;
}

/** The port of a backendTupleKey. */
export function tuplePort(tuple: BackendTuple): number {
  if (typeof tuple === 'number') return Math.floor(tuple / 4) % 65536;
  return Number(tuple.slice(tuple.lastIndexOf(':') + 1, tuple.lastIndexOf('/')));
}

/** backendTupleKey of a backend-map value; null if it is not a well-formed TCP/UDP/SCTP backend this agent writes. */
export function backendValueKey(b: Backend): BackendTuple | null {
  const ip = parseIP(b.addr);
  if (!ip || (b.flags & ~BE_FLAG.LOCAL) !== 0 || !validPort(b.port)) return null;
  return backendTupleKey(ip.key, b.port, b.proto);
}

function validPort(p: unknown): p is number {
  return Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535;
}

const TYPE_FLAG = {
  ClusterIP: SVC_FLAG.CLUSTER_IP,
  NodePort: SVC_FLAG.NODE_PORT,
  LoadBalancer: SVC_FLAG.LOAD_BALANCER,
  ExternalIP: SVC_FLAG.EXTERNAL_IP,
} as const;

const TYPE_FE = {
  ClusterIP: FE_TYPE.CLUSTER_IP,
  NodePort: FE_TYPE.NODE_PORT,
  LoadBalancer: FE_TYPE.LOAD_BALANCER,
  ExternalIP: FE_TYPE.EXTERNAL_IP,
} as const;

/** The SVC_FLAG bits (and SVC_ALG) of planned frontend `f` with affinity timeout `timeout` (0: none). */
function flagsWithTimeout(f: PlanFrontend, timeout: number): number {
  let flags: number = TYPE_FLAG[f.type];
  if (timeout > 0) flags |= SVC_FLAG.AFFINITY;
  // externalTrafficPolicy=Local on an external frontend: the tc path keeps the
  // client address: no SNAT to the node (rule 25 of docs/semantics.md).
  if (f.type !== 'ClusterIP' && f.trafficPolicy === 'Local') flags |= SVC_FLAG.LOCAL_ONLY;
  if (f.dropWhenEmpty) flags |= SVC_FLAG.LOCAL_ONLY;
  if (f.sourceRanges.length > 0) flags |= SVC_FLAG.SOURCE_RANGES;
  // The backend selection algorithm (rule 40 of docs/semantics.md): the planner's choice.
  flags |= svcAlgFlags(f.lbAlgorithm === 'maglev' ? SVC_ALG.MAGLEV : SVC_ALG.RANDOM);
  return flags;
}

/**
 * Translates one planned frontend. Returns null (with a reason in `skipped`)
 * when the datapath cannot serve it; drops (and reports) invalid backends.
 */
export function toDesiredFrontend(service: string, f: PlanFrontend, skipped: SkippedObject[]): DesiredFrontend | null {
  if (!(f.type in TYPE_FLAG)) return refuse(service, f, `unknown type ${JSON.stringify(f.type)}`, skipped);
  // Canonical IPv4 (the common case) is taken as it is, without a parse.
  const v4 = ipv4Canonical(f.address) >= 0;
  const ip = v4 ? null : parseIP(f.address);
  if (!v4 && !ip) return refuse(service, f, `invalid address ${JSON.stringify(f.address)}`, skipped);
  if (!validPort(f.port)) return refuse(service, f, `invalid port ${JSON.stringify(f.port)}`, skipped);
  // SCTP is programmed too: the tc path drops and counts its traffic (rule 39 of docs/semantics.md).
  if (f.protocol !== 'TCP' && f.protocol !== 'UDP' && f.protocol !== 'SCTP')
    return refuse(service, f, `unknown protocol ${JSON.stringify(f.protocol)}`, skipped);
  const family = v4 ? 'IPv4' : ip!.family;
  const timeout = Number.isInteger(f.affinityTimeoutSeconds) && f.affinityTimeoutSeconds > 0 ? f.affinityTimeoutSeconds : 0;
  const proto = IPPROTO[f.protocol];
  const base: FrontendBase = { addr: v4 ? f.address : ip!.text, port: f.port, proto };
  const ext = desiredBackends(f.backends, family, proto, service, f, skipped);
  let int = f.internalBackends ? desiredBackends(f.internalBackends, family, proto, service, f, skipped) : null;
  const longest = Math.max(ext.tuples.length, int?.tuples.length ?? 0);
  const truncatedFrom = longest > MAX_SLOTS ? longest : 0;
  if (ext.tuples.length > MAX_SLOTS) withinSlots(ext, service, f, skipped);
  if (int && int.tuples.length > MAX_SLOTS) withinSlots(int, service, f, skipped);
  if (int && sameTuples(int.tuples, ext.tuples)) int = null;
  // A backend on this node in either scope: a pod calling the frontend may land on itself (hairpin,
  // rule 36 of docs/semantics.md), so the socket hooks ask whether to leave it to tc (bpf/include/kpr_masq.h).
  const localBackend = ext.locals.length > 0 || (int !== null && int.locals.length > 0) ? SVC_FLAG.LOCAL_BACKEND : 0;
  let sourceRanges: readonly string[] = NO_RANGES;
  if (f.sourceRanges.length > 0) {
    const ranges: string[] = [];
    for (const cidr of f.sourceRanges) {
      // The map's form: host bits cleared, canonical text.
      const parsed = parseCIDR(cidr);
      if (parsed === null || parsed.family !== family) {
        refuse(service, f, `invalid source range ${JSON.stringify(cidr)}`, skipped);
        continue;
      }
      const canonical = networkText(parsed);
      if (!ranges.includes(canonical)) ranges.push(canonical);
    }
    sourceRanges = ranges.sort();
  }
  const fk = frontendKey(base);
  return {
    fk,
    extSid: entrySetId(fk, SCOPE.EXTERNAL),
    intSid: entrySetId(fk, SCOPE.INTERNAL),
    service,
    portName: f.portName,
    feType: TYPE_FE[f.type],
    planAddress: f.address,
    base,
    flags: flagsWithTimeout(f, timeout) | localBackend,
    affinityTimeout: timeout,
    tuples: ext.tuples,
    locals: ext.locals,
    texts: ext.texts,
    internalTuples: int?.tuples ?? null,
    internalLocals: int?.locals ?? NO_LOCALS,
    internalTexts: int?.texts ?? null,
    clusterIP: f.type === 'ClusterIP',
    sourceRanges,
    truncatedFrom,
    maglev: f.lbAlgorithm === 'maglev',
  };
}

/** One scope's checked backends, as a desired frontend keeps them. */
interface ScopeBackends {
  tuples: BackendTuple[];
  locals: readonly number[];
  texts: string[] | null;
}

/**
 * Cuts `b` (longer than MAX_SLOTS) to its first MAX_SLOTS backends: the
 * planner sorts by address and port, so the same backends are kept from
 * sync to sync. Reported in `skipped`.
 */
function withinSlots(b: ScopeBackends, service: string, f: PlanFrontend, skipped: SkippedObject[]): void {
  refuse(
    service,
    f,
    `${b.tuples.length} backends, over the limit of ${MAX_SLOTS} per frontend (u16 slot count): only the first ${MAX_SLOTS} are programmed`,
    skipped,
  );
  b.tuples.length = MAX_SLOTS;
  if (b.texts) b.texts.length = MAX_SLOTS;
  if (b.locals.length > 0 && b.locals[b.locals.length - 1] >= MAX_SLOTS) b.locals = b.locals.filter((i) => i < MAX_SLOTS);
}

/** Whether two scopes hold the same backends (tuples name address, port and protocol). */
export function sameTuples(a: readonly BackendTuple[], b: readonly BackendTuple[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const NO_RANGES: readonly string[] = Object.freeze([]);
/** `locals` of a scope with no backend on this node (the usual case), shared. */
const NO_LOCALS: readonly number[] = Object.freeze([]);

/** Reports a part of frontend `f` of `service` that cannot be programmed (the message names it as the plan did); null. */
function refuse(service: string, f: PlanFrontend, reason: string, skipped: SkippedObject[]): null {
  skipped.push({ object: `Service ${service}`, reason: `frontend ${frontendLabel(f)}: ${reason}` });
  return null;
}

/**
 * The backends of `list` the datapath can use, in order: the invalid ones
 * left out (reported) and repeats, each address in canonical form. A sorted,
 * unique list of canonical IPv4 backends (what the planner emits) is checked
 * without a Set.
 */
function desiredBackends(
  list: readonly PlanBackend[],
  family: 'IPv4' | 'IPv6',
  proto: number,
  service: string,
  f: PlanFrontend,
  skipped: SkippedObject[],
): ScopeBackends {
  const tuples: BackendTuple[] = new Array(list.length);
  let n = 0;
  let locals: number[] | null = null;
  const texts: string[] | null = family === 'IPv4' ? null : [];
  let seen: Set<BackendTuple> | null = null;
  let last = -1;
  for (let i = 0; i < list.length; i++) {
    const b = list[i];
    const num = family === 'IPv4' ? ipv4Canonical(b.address) : IPV4_INVALID;
    const bip = num < 0 ? parseIP(b.address) : null;
    const valid = (num >= 0 || (bip !== null && bip.family === family)) && validPort(b.port);
    if (!valid) {
      refuse(service, f, `invalid backend ${JSON.stringify(`${b.address}:${b.port}`)}`, skipped);
      continue;
    }
    const tuple = backendTupleKey(num >= 0 ? num : bip!.key, b.port, proto)!;
    // No Set while every backend so far is IPv4 in increasing order: none can repeat.
    if (seen === null && typeof tuple === 'number' && tuple > last) last = tuple;
    else {
      if (seen === null) {
        seen = new Set();
        for (let j = 0; j < n; j++) seen.add(tuples[j]);
      }
      if (seen.has(tuple)) continue;
      seen.add(tuple);
    }
    if (b.local) (locals ??= []).push(n);
    if (texts !== null) texts.push(bip!.text);
    tuples[n++] = tuple;
  }
  if (n < tuples.length) tuples.length = n;
  return { tuples, locals: locals ?? NO_LOCALS, texts };
}
