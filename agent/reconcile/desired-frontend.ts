/**
 * PlanFrontend → what the service and backend maps must hold for it. Pure.
 * Frontends the datapath cannot serve yet are refused here with a reason,
 * so the reconciler never writes a half-understood entry.
 */
import { parseIPv4 } from '../plan/ip.js';
import { frontendKey, type PlanFrontend, type SkippedObject } from '../plan/types.js';
import { IPPROTO, SCOPE, SVC_FLAG, type Backend } from '../maps/layout.js';

/** Most backend slots one frontend can have: slot and count are u16. */
export const MAX_SLOTS = 0xffff;

/** A service-map key without its slot: one frontend entry. */
export interface FrontendBase {
  addr: string;
  port: number;
  proto: number;
  scope: number;
}

export interface DesiredBackend {
  /** backendTupleKey(): the backend's identity. */
  tuple: number;
  /** Normalised IPv4 address. */
  addr: string;
  port: number;
}

export interface DesiredFrontend {
  /** frontendMapKey(base). */
  mk: string;
  /** "namespace/name" of the Service that asked for it. */
  service: string;
  /** frontendKey() of the plan, for messages. */
  label: string;
  base: FrontendBase;
  flags: number;
  /** Slot i+1 = backends[i]; all of protocol base.proto. */
  backends: DesiredBackend[];
}

/** Identity of a frontend in the service map (all of the key but the slot). */
export function frontendMapKey(b: FrontendBase): string {
  return `${b.addr}:${b.port}/${b.proto}#${b.scope}`;
}

/**
 * Identity of a backend: one id per distinct (address, port, protocol), as a
 * number (49 bits: address, port, TCP/UDP) because it is looked up once per
 * backend per sync. null for what this agent never writes (other protocols).
 */
export function backendTupleKey(addrNum: number, port: number, proto: number): number | null {
  if (proto !== IPPROTO.TCP && proto !== IPPROTO.UDP) return null;
  return (addrNum * 65536 + port) * 2 + (proto === IPPROTO.UDP ? 1 : 0);
}

/** backendTupleKey of a backend-map value; null if it is not a well-formed TCP/UDP backend. */
export function backendValueKey(b: Backend): number | null {
  const ip = parseIPv4(b.addr);
  return ip && b.flags === 0 && validPort(b.port) ? backendTupleKey(ip.num, b.port, b.proto) : null;
}

function validPort(p: unknown): p is number {
  return Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535;
}

/**
 * Translates one planned frontend. Returns null (with a reason in `skipped`)
 * when the datapath cannot serve it; drops (and reports) invalid backends.
 */
export function toDesiredFrontend(service: string, f: PlanFrontend, skipped: SkippedObject[]): DesiredFrontend | null {
  const object = `Service ${service}`;
  const label = frontendKey(f);
  if (f.type !== 'ClusterIP') {
    skipped.push({ object, reason: `frontend ${label}: type ${f.type} is not supported by the datapath yet` });
    return null;
  }
  const ip = parseIPv4(f.address);
  if (!ip) {
    skipped.push({ object, reason: `frontend ${label}: invalid IPv4 address ${JSON.stringify(f.address)}` });
    return null;
  }
  if (!validPort(f.port)) {
    skipped.push({ object, reason: `frontend ${label}: invalid port ${JSON.stringify(f.port)}` });
    return null;
  }
  if (f.protocol !== 'TCP' && f.protocol !== 'UDP') {
    skipped.push({ object, reason: `frontend ${label}: ${f.protocol} is not supported by kpr yet` });
    return null;
  }
  const proto = IPPROTO[f.protocol];
  const base: FrontendBase = { addr: ip.text, port: f.port, proto, scope: SCOPE.EXTERNAL };

  const backends: DesiredBackend[] = [];
  let seen: Set<number> | null = null;
  let last = -1;
  for (const b of f.backends) {
    const bip = parseIPv4(b.address);
    if (!bip || !validPort(b.port)) {
      skipped.push({ object, reason: `frontend ${label}: invalid backend ${JSON.stringify(`${b.address}:${b.port}`)}` });
      continue;
    }
    const tuple = backendTupleKey(bip.num, b.port, proto)!;
    // The planner emits sorted, unique backends: only fall back to a set when the order is unexpected.
    if (tuple <= last) {
      seen ??= new Set(backends.map((x) => x.tuple));
      if (seen.has(tuple)) continue;
    }
    if (seen) seen.add(tuple);
    last = Math.max(last, tuple);
    backends.push({ tuple, addr: bip.text, port: b.port });
  }
  if (backends.length > MAX_SLOTS) {
    skipped.push({ object, reason: `frontend ${label}: ${backends.length} backends, only the first ${MAX_SLOTS} are used` });
    backends.length = MAX_SLOTS;
  }
  return { mk: frontendMapKey(base), service, label, base, flags: SVC_FLAG.CLUSTER_IP, backends };
}
