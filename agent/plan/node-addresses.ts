/**
 * The addresses NodePorts listen on: this Node's InternalIP and ExternalIP
 * status addresses, filtered by the nodePortAddresses setting (kube-proxy's
 * --nodeport-addresses, rule 29 of docs/semantics.md): CIDRs, or "primary" for the Node's
 * InternalIP(s). The default (no setting) is every node address. kpr has no
 * "--dst-type LOCAL" match on the socket path, so it needs the addresses
 * themselves; they come from the Node object, not from the host's interfaces.
 */
import type { V1Node } from '@kubernetes/client-node';
import { cidrContains, parseCIDR, parseIP, type IPFamily, type ParsedCIDR } from '../net/ip.js';
import type { SkippedObject } from './types.js';

export interface NodePortAddressFilter {
  cidrs: ParsedCIDR[];
  /** "primary" was given. */
  primary: boolean;
}

/** Parses the setting; invalid entries are reported and ignored. */
export function parseNodePortAddresses(raw: readonly string[] | undefined, skipped: SkippedObject[]): NodePortAddressFilter | null {
  if (!raw || raw.length === 0) return null;
  const f: NodePortAddressFilter = { cidrs: [], primary: false };
  for (const r of raw) {
    if (r === 'primary') f.primary = true;
    else {
      const c = parseCIDR(r);
      if (c) f.cidrs.push(c);
      else skipped.push({ object: 'Setting nodePortAddresses', reason: `invalid CIDR ${JSON.stringify(r)} ignored` });
    }
  }
  return f;
}

/** Canonical addresses of `family` NodePorts answer on, in status order, unique. */
export function nodePortAddresses(node: V1Node | undefined, family: IPFamily, filter: NodePortAddressFilter | null): string[] {
  const out: string[] = [];
  for (const a of node?.status?.addresses ?? []) {
    if (!a || (a.type !== 'InternalIP' && a.type !== 'ExternalIP')) continue;
    const ip = parseIP(a.address);
    if (!ip || ip.family !== family || out.includes(ip.text)) continue;
    if (filter && !((filter.primary && a.type === 'InternalIP') || filter.cidrs.some((c) => cidrContains(c, ip)))) continue;
    out.push(ip.text);
  }
  return out;
}
