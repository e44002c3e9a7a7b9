/**
 * EndpointSlices → endpoints per Service port (kube-proxy's
 * endpointslicecache, rules 5, 6 and 11–17 of docs/semantics.md).
 * Pure. Bad pieces are skipped and reported; nothing throws.
 */
import type { V1Endpoint, V1EndpointSlice } from '@kubernetes/client-node';
import { compareAddrKeys, ipv4Canonical, IPV4_INVALID, IPV4_NONCANONICAL, parseIP, parseIPv4, type IPFamily } from '../net/ip.js';
import { LABEL_SERVICE_NAME } from '../k8s/labels.js';
import type { Protocol, SkippedObject } from './types.js';
import { quote } from './service-info.js';
import { namespacedKey } from '../runtime/flat-key.js';

/** Per slice, at most this many bad endpoints are reported one by one; the rest in one line. */
const MAX_ENDPOINT_REPORTS = 8;

/** One endpoint of one Service port, with everything later milestones select on. */
export interface Endpoint {
  /** Normalised address (addresses[0] only, rule 12 of docs/semantics.md). */
  address: string;
  /** Numeric order of the address within its family (see parseIP). */
  addressKey: number | string;
  /** The slice port's number (the resolved targetPort). */
  port: number;
  /** conditions.ready == nil || ready (rule 13 of docs/semantics.md). */
  ready: boolean;
  /** conditions.serving == nil || serving. */
  serving: boolean;
  /** conditions.terminating != nil && terminating. */
  terminating: boolean;
  /** endpoint.nodeName == this node's name (rule 14 of docs/semantics.md). */
  isLocal: boolean;
  /** hints.forZones names; null when none (rule 15 of docs/semantics.md). */
  zoneHints: string[] | null;
  /** hints.forNodes names; null when none. */
  nodeHints: string[] | null;
}

/** Key of a Service port for endpoint lookup: name and protocol, never number (rule 11 of docs/semantics.md). */
export function portId(name: string, protocol: string): string {
  return `${name}/${protocol}`;
}

/**
 * "namespace/serviceName" a slice belongs to, or null when it cannot be keyed
 * to a Service (rule 6 of docs/semantics.md: missing/empty label, namespace or name).
 */
export function sliceServiceKey(slice: V1EndpointSlice): string | null {
  const ns = slice.metadata?.namespace;
  const svc = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
  if (!ns || !svc || !slice.metadata?.name) return null;
  if (typeof ns !== 'string' || typeof svc !== 'string' || typeof slice.metadata.name !== 'string') return null;
  return namespacedKey(ns, svc);
}

/** "EndpointSlice ns/name", built only for a skip (the common slice has nothing to report). */
function objectName(slice: V1EndpointSlice): string {
  return `EndpointSlice ${namespacedKey(String(slice.metadata?.namespace), String(slice.metadata?.name))}`;
}

/** A condition as kube-proxy reads it: absent (nil) is `absent`, true is true, anything else false. */
function condition(v: unknown, absent: boolean): boolean {
  return v === undefined || v === null ? absent : v === true;
}

function isBoolOrAbsent(v: unknown): boolean {
  return v === undefined || v === null || typeof v === 'boolean';
}

/**
 * An endpoint's addresses[0]. The agent's cached endpoints (agent/k8s/prune.ts)
 * hold a single address without an array and hand it out as `firstAddress`,
 * so the common case reads it without allocating.
 */
function firstAddress(ep: V1Endpoint | undefined): unknown {
  if (!ep || typeof ep !== 'object') return undefined;
  const direct = (ep as { firstAddress?: unknown }).firstAddress;
  if (typeof direct === 'string') return direct;
  return Array.isArray(ep.addresses) ? ep.addresses[0] : undefined;
}

/** Groups slices by the Service they belong to; slices that cannot be keyed are dropped (rule 6 of docs/semantics.md). */
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

export interface EndpointsByPort {
  /** portId(name, protocol) → endpoints, unique by address:port, sorted by address then port. */
  byPort: Map<string, Endpoint[]>;
  skipped: SkippedObject[];
}

/** The slice ports usable for a Service: their ids and numbers, in slice order. */
interface SlicePorts {
  ids: string[];
  nums: number[];
}

/** The named, numbered ports of one slice (invalid ones reported). */
function slicePorts(slice: V1EndpointSlice, skipped: SkippedObject[]): SlicePorts {
  const out: SlicePorts = { ids: [], nums: [] };
  for (const p of slice.ports!) {
    if (!p || typeof p !== 'object') {
      skipped.push({ object: objectName(slice), reason: `invalid port entry ${quote(p)}` });
      continue;
    }
    const protocol = p.protocol || 'TCP';
    if (typeof p.name !== 'string') {
      skipped.push({ object: objectName(slice), reason: `port ${quote(p.port)}/${quote(protocol)} has no name (nil name is ignored)` });
      continue;
    }
    if (protocol !== 'TCP' && protocol !== 'UDP' && protocol !== 'SCTP') {
      skipped.push({ object: objectName(slice), reason: `unknown protocol ${quote(protocol)} (port ${quote(p.name)})` });
      continue;
    }
    if (!Number.isInteger(p.port) || (p.port as number) < 1 || (p.port as number) > 65535) {
      skipped.push({ object: objectName(slice), reason: `invalid port ${quote(p.port ?? null)} (port ${quote(p.name)})` });
      continue;
    }
    out.ids.push(portId(p.name, protocol as Protocol));
    out.nums.push(p.port as number);
  }
  return out;
}

/**
 * Merges the slices of one address family of one Service into endpoints per
 * Service port. Slices not labelled for `serviceKey` are ignored, as are FQDN
 * slices and slices of the other family (rule 5 of docs/semantics.md: IPv4 slices feed IPv4
 * frontends, IPv6 slices IPv6 ones). Duplicates of one address:port across slices are merged
 * with kube-proxy's newest rule (rule 16 of docs/semantics.md): a later copy replaces an earlier
 * one unless it is terminating. Slices are walked in name order so the
 * outcome is deterministic.
 */
export function endpointsByServicePort(
  serviceKey: string,
  slices: readonly V1EndpointSlice[],
  nodeName: string,
  family: IPFamily = 'IPv4',
  skipped: SkippedObject[] = [],
): EndpointsByPort {
  // Per port: a sorted, unique list in byPort while endpoints arrive in
  // strictly increasing order (the usual case: one slice, sorted), which is
  // then already the answer; a port switches to the keyed merge in `keyed`
  // once an endpoint arrives out of order or twice.
  const byPort = new Map<string, Endpoint[]>();
  let keyed: Map<string, Map<number | string, Endpoint>> | null = null;
  // One slice per Service is the common case: no filtered copy of the list for it.
  let ordered: readonly V1EndpointSlice[];
  if (slices.length === 1) ordered = slices[0].addressType === family && sliceServiceKey(slices[0]) === serviceKey ? slices : [];
  else {
    const mine = slices.filter((s) => s.addressType === family && sliceServiceKey(s) === serviceKey);
    if (mine.length > 1) mine.sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : a.metadata!.name! > b.metadata!.name! ? 1 : 0));
    ordered = mine;
  }

  for (let si = 0; si < ordered.length; si++) {
    const slice = ordered[si];
    // The same slice given twice (two manifests): used once. Its endpoints would merge anyway (rule 16 of docs/semantics.md); its reports would not.
    if (si > 0 && ordered[si - 1].metadata!.name === slice.metadata!.name) {
      skipped.push({ object: objectName(slice), reason: 'duplicate object: the first one is used' });
      continue;
    }
    if (!Array.isArray(slice.ports) || slice.ports.length === 0) {
      skipped.push({ object: objectName(slice), reason: 'no ports' });
      continue;
    }
    // Ports first: which Service ports this slice feeds, and with which number.
    const { ids, nums } = slicePorts(slice, skipped);
    const nPorts = ids.length;
    if (nPorts === 0) continue;
    // Each port's list (null once keyed), looked up once per slice rather than once per endpoint.
    const lists = new Array<Endpoint[] | null>(nPorts);
    for (let i = 0; i < nPorts; i++) {
      const id = ids[i];
      let list = byPort.get(id);
      if (list === undefined) byPort.set(id, (list = []));
      lists[i] = keyed?.has(id) ? null : list;
    }

    const rawEndpoints: unknown = slice.endpoints;
    if (rawEndpoints !== undefined && rawEndpoints !== null && !Array.isArray(rawEndpoints)) {
      skipped.push({ object: objectName(slice), reason: `endpoints is not a list (${quote(rawEndpoints)}); no endpoints used` });
    }
    const endpoints = Array.isArray(rawEndpoints) ? (rawEndpoints as V1Endpoint[]) : [];
    // Bad endpoints are skipped one by one, never the slice: the first few are named, the rest counted.
    let bad = 0;
    const report = (reason: string) => {
      if (++bad <= MAX_ENDPOINT_REPORTS) skipped.push({ object: objectName(slice), reason });
    };
    for (let ei = 0; ei < endpoints.length; ei++) {
      const ep = endpoints[ei];
      const raw = firstAddress(ep);
      if (raw === undefined) {
        report(`endpoints[${ei}]: endpoint with no addresses`);
        continue;
      }
      // IPv4 slices (the common case) parse without allocating when the text is canonical.
      const str = typeof raw === 'string' ? raw : undefined;
      const num = family === 'IPv4' ? ipv4Canonical(str) : IPV4_INVALID;
      const v4 = num === IPV4_NONCANONICAL ? parseIPv4(str) : null;
      const ip = num >= 0 || v4 ? null : parseIP(str);
      if (num < 0 && !v4 && (!ip || ip.family !== family)) {
        report(`endpoints[${ei}]: invalid endpoint address ${quote(raw)}${ip ? ` in an ${family} slice` : ''}; this endpoint is skipped`);
        continue;
      }
      const text = num >= 0 ? (raw as string) : v4 ? v4.text : ip!.text;
      const addrKey = num >= 0 ? num : v4 ? v4.num : ip!.key;
      const c = ep.conditions as { ready?: unknown; serving?: unknown; terminating?: unknown } | undefined | null;
      const cond = c && typeof c === 'object' ? c : undefined;
      if (cond && !(isBoolOrAbsent(cond.ready) && isBoolOrAbsent(cond.serving) && isBoolOrAbsent(cond.terminating))) {
        report(`endpoints[${ei}]: conditions that are not booleans are taken as false (${quote(cond)})`);
      }
      // kube-proxy: ready and serving when nil, terminating only when true; garbage is false (never ready by accident).
      const ready = condition(cond?.ready, true);
      const serving = condition(cond?.serving, true);
      const terminating = condition(cond?.terminating, false);
      const isLocal = nodeName !== '' && ep.nodeName === nodeName;
      const zoneHints = Array.isArray(ep.hints?.forZones) && ep.hints.forZones.length ? ep.hints.forZones.map((z) => z?.name) : null;
      const nodeHints = Array.isArray(ep.hints?.forNodes) && ep.hints.forNodes.length ? ep.hints.forNodes.map((n) => n?.name) : null;
      for (let i = 0; i < nPorts; i++) {
        const port = nums[i];
        const list = lists[i];
        if (list !== null) {
          const last = list.length > 0 ? list[list.length - 1] : null;
          if (last === null || compareAddrKeys(last.addressKey, addrKey) < 0 || (last.addressKey === addrKey && last.port < port)) {
            list.push({ address: text, addressKey: addrKey, port, ready, serving, terminating, isLocal, zoneHints, nodeHints });
            continue;
          }
          // Out of order or a duplicate: switch to the keyed merge (the list is unique, so this is the same map).
          const m = new Map<number | string, Endpoint>();
          for (const e of list) m.set(endpointKey(e.addressKey, e.port), e);
          (keyed ??= new Map()).set(ids[i], m);
          for (let j = 0; j < nPorts; j++) if (ids[j] === ids[i]) lists[j] = null; // a port listed twice shares the merge
        }
        const m = keyed!.get(ids[i])!;
        const k = endpointKey(addrKey, port);
        if (!terminating || !m.has(k)) {
          m.set(k, { address: text, addressKey: addrKey, port, ready, serving, terminating, isLocal, zoneHints, nodeHints });
        }
      }
    }
    if (bad > MAX_ENDPOINT_REPORTS) {
      skipped.push({ object: objectName(slice), reason: `${bad - MAX_ENDPOINT_REPORTS} more invalid endpoints skipped` });
    }
  }

  if (keyed) for (const [id, m] of keyed) byPort.set(id, [...m.values()].sort(compareEndpoints));
  return { byPort, skipped };
}
