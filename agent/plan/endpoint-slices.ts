/**
 * EndpointSlices → endpoints per Service port (kube-proxy's
 * endpointslicecache, rules 5, 6 and 11–17 of the semantics reference).
 * Pure. Bad pieces are skipped and reported; nothing throws.
 */
import type { V1Endpoint, V1EndpointSlice } from '@kubernetes/client-node';
import { compareAddrKeys, ipv4Canonical, IPV4_INVALID, IPV4_NONCANONICAL, parseIP, parseIPv4, type IPFamily } from './ip.js';
import { LABEL_SERVICE_NAME } from './labels.js';
import type { Protocol, SkippedObject } from './types.js';

/** One endpoint of one Service port, with everything later milestones select on. */
export interface Endpoint {
  /** Normalised address (addresses[0] only, rule 12). */
  address: string;
  /** Numeric order of the address within its family (see parseIP). */
  addressKey: number | string;
  /** The slice port's number (the resolved targetPort). */
  port: number;
  /** conditions.ready == nil || ready (rule 13). */
  ready: boolean;
  /** conditions.serving == nil || serving. */
  serving: boolean;
  /** conditions.terminating != nil && terminating. */
  terminating: boolean;
  /** endpoint.nodeName == this node's name (rule 14). */
  isLocal: boolean;
  /** hints.forZones names; null when none (rule 15). */
  zoneHints: string[] | null;
  /** hints.forNodes names; null when none. */
  nodeHints: string[] | null;
}

/** Key of a Service port for endpoint lookup: name and protocol, never number (rule 11). */
export function portId(name: string, protocol: string): string {
  return `${name}/${protocol}`;
}

/**
 * "namespace/serviceName" a slice belongs to, or null when it cannot be keyed
 * to a Service (rule 6: missing/empty label, namespace or name).
 */
export function sliceServiceKey(slice: V1EndpointSlice): string | null {
  const ns = slice.metadata?.namespace;
  const svc = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
  if (!ns || !svc || !slice.metadata?.name) return null;
  return `${ns}/${svc}`;
}

/** "EndpointSlice ns/name", built only for a skip (the common slice has nothing to report). */
function objectName(slice: V1EndpointSlice): string {
  return `EndpointSlice ${slice.metadata?.namespace}/${slice.metadata?.name}`;
}

/**
 * An endpoint's addresses[0]. The agent's cached endpoints (agent/k8s/prune.ts)
 * hold a single address without an array and hand it out as `firstAddress`,
 * so the common case reads it without allocating.
 */
function firstAddress(ep: V1Endpoint | undefined): string | undefined {
  const direct = (ep as { firstAddress?: unknown } | undefined)?.firstAddress;
  if (typeof direct === 'string') return direct;
  return Array.isArray(ep?.addresses) ? ep.addresses[0] : undefined;
}

/** Groups slices by the Service they belong to; slices that cannot be keyed are dropped (rule 6). */
export function groupSlicesByService(slices: readonly V1EndpointSlice[]): Map<string, V1EndpointSlice[]> {
  const out = new Map<string, V1EndpointSlice[]>();
  for (const s of slices) {
    const key = sliceServiceKey(s);
    if (key === null) continue;
    const list = out.get(key);
    if (list) list.push(s);
    else out.set(key, [s]);
  }
  return out;
}

export function compareEndpoints(a: Endpoint, b: Endpoint): number {
  return compareAddrKeys(a.addressKey, b.addressKey) || a.port - b.port;
}

/** address:port; a number for IPv4 (cheap), a string for IPv6. */
function endpointKey(addrKey: number | string, port: number): number | string {
  return typeof addrKey === 'number' ? addrKey * 65536 + port : `${addrKey}:${port}`;
}

/** Endpoints of one Service port being merged: sorted and unique in `list`, or keyed in `map`. */
interface PortMerge {
  list: Endpoint[] | null;
  map: Map<number | string, Endpoint> | null;
}

export interface EndpointsByPort {
  /** portId(name, protocol) → endpoints, unique by address:port, sorted by address then port. */
  byPort: Map<string, Endpoint[]>;
  skipped: SkippedObject[];
}

/**
 * Merges the slices of one address family of one Service into endpoints per
 * Service port. Slices not labelled for `serviceKey` are ignored, as are FQDN
 * slices and slices of the other family (rule 5: IPv4 slices feed IPv4
 * frontends, IPv6 slices IPv6 ones). Duplicates of one address:port across slices are merged
 * with kube-proxy's newest rule (rule 16): a later copy replaces an earlier
 * one unless it is terminating. Slices are walked in name order so the
 * outcome is deterministic.
 */
export function endpointsByServicePort(
  serviceKey: string,
  slices: readonly V1EndpointSlice[],
  nodeName: string,
  family: IPFamily = 'IPv4',
): EndpointsByPort {
  const skipped: SkippedObject[] = [];
  // Per port: a list while endpoints arrive in strictly increasing order (the
  // usual case: one slice, sorted), which is then already the answer; the
  // keyed merge only once an endpoint arrives out of order or twice.
  const merged = new Map<string, PortMerge>();
  // One slice per Service is the common case: no filtered copy of the list for it.
  let ordered: readonly V1EndpointSlice[];
  if (slices.length === 1) ordered = slices[0].addressType === family && sliceServiceKey(slices[0]) === serviceKey ? slices : [];
  else {
    const mine = slices.filter((s) => s.addressType === family && sliceServiceKey(s) === serviceKey);
    if (mine.length > 1) mine.sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : a.metadata!.name! > b.metadata!.name! ? 1 : 0));
    ordered = mine;
  }

  for (const slice of ordered) {
    if (!Array.isArray(slice.ports) || slice.ports.length === 0) {
      skipped.push({ object: objectName(slice), reason: 'no ports' });
      continue;
    }
    // Ports first: which Service ports this slice feeds, and with which number.
    const ports: Array<{ id: string; port: number }> = [];
    for (const p of slice.ports) {
      if (!p || typeof p !== 'object') {
        skipped.push({ object: objectName(slice), reason: `invalid port entry ${JSON.stringify(p)}` });
        continue;
      }
      const protocol = p.protocol || 'TCP';
      if (typeof p.name !== 'string') {
        skipped.push({ object: objectName(slice), reason: `port ${String(p.port)}/${protocol} has no name (nil name is ignored)` });
        continue;
      }
      if (!Number.isInteger(p.port) || (p.port as number) < 1 || (p.port as number) > 65535) {
        skipped.push({ object: objectName(slice), reason: `invalid port ${JSON.stringify(p.port ?? null)} (port ${JSON.stringify(p.name)})` });
        continue;
      }
      ports.push({ id: portId(p.name, protocol as Protocol), port: p.port as number });
    }
    if (ports.length === 0) continue;
    // Each port's merge, looked up once per slice rather than once per endpoint.
    const merges = new Array<PortMerge>(ports.length);
    for (let i = 0; i < ports.length; i++) {
      let pm = merged.get(ports[i].id);
      if (!pm) merged.set(ports[i].id, (pm = { list: [], map: null }));
      merges[i] = pm;
    }

    for (const ep of Array.isArray(slice.endpoints) ? slice.endpoints : []) {
      const raw = firstAddress(ep);
      if (raw === undefined) {
        skipped.push({ object: objectName(slice), reason: 'endpoint with no addresses' });
        continue;
      }
      // IPv4 slices (the common case) parse without allocating when the text is canonical.
      const num = family === 'IPv4' ? ipv4Canonical(raw) : IPV4_INVALID;
      const v4 = num === IPV4_NONCANONICAL ? parseIPv4(raw) : null;
      const ip = num >= 0 || v4 ? null : parseIP(raw);
      if (num < 0 && !v4 && (!ip || ip.family !== family)) {
        skipped.push({ object: objectName(slice), reason: `invalid endpoint address ${JSON.stringify(raw)}${ip ? ` in an ${family} slice` : ''}` });
        continue;
      }
      const text = num >= 0 ? (raw as string) : v4 ? v4.text : ip!.text;
      const addrKey = num >= 0 ? num : v4 ? v4.num : ip!.key;
      const c = ep.conditions;
      const ready = c?.ready == null || c.ready;
      const serving = c?.serving == null || c.serving;
      const terminating = c?.terminating != null && c.terminating;
      const isLocal = nodeName !== '' && ep.nodeName === nodeName;
      const zoneHints = Array.isArray(ep.hints?.forZones) && ep.hints.forZones.length ? ep.hints.forZones.map((z) => z?.name) : null;
      const nodeHints = Array.isArray(ep.hints?.forNodes) && ep.hints.forNodes.length ? ep.hints.forNodes.map((n) => n?.name) : null;
      for (let i = 0; i < ports.length; i++) {
        const port = ports[i].port;
        const pm = merges[i];
        const list = pm.list;
        if (list !== null) {
          const last = list.length > 0 ? list[list.length - 1] : null;
          if (last === null || compareAddrKeys(last.addressKey, addrKey) < 0 || (last.addressKey === addrKey && last.port < port)) {
            list.push({ address: text, addressKey: addrKey, port, ready, serving, terminating, isLocal, zoneHints, nodeHints });
            continue;
          }
          // Out of order or a duplicate: switch to the keyed merge (the list is unique, so this is the same map).
          pm.map = new Map();
          for (const e of list) pm.map.set(endpointKey(e.addressKey, e.port), e);
          pm.list = null;
        }
        const m = pm.map!;
        const k = endpointKey(addrKey, port);
        if (!terminating || !m.has(k)) {
          m.set(k, { address: text, addressKey: addrKey, port, ready, serving, terminating, isLocal, zoneHints, nodeHints });
        }
      }
    }
  }

  const byPort = new Map<string, Endpoint[]>();
  for (const [id, pm] of merged) byPort.set(id, pm.list ?? [...pm.map!.values()].sort(compareEndpoints));
  return { byPort, skipped };
}
