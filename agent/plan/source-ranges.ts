/**
 * The implicit loadBalancerSourceRanges allow (rule 34 of docs/semantics.md),
 * as kube-proxy's iptables and nftables modes write it: when one of a
 * Service's source ranges contains the node's IP, the load-balancer IPs
 * themselves are allowed sources too. A cloud load balancer that hairpins
 * the node's own traffic to its LB IP delivers it with the LB IP as source
 * (the VIP is a local address, so the request loops back SNATted to it);
 * without the allow the node could not reach its own LoadBalancer. Pure.
 *
 * "The node's IP" is kube-proxy's: its primary address of the family, the
 * Node's first InternalIP of that family, else its first ExternalIP.
 */
import type { V1Node } from '@kubernetes/client-node';
import { cidrContains, parseCIDR, parseIP, type IPFamily } from '../net/ip.js';

/** The node's primary address of `family` (first InternalIP, else first ExternalIP), canonical; undefined without one. */
export function primaryNodeIP(node: V1Node | undefined, family: IPFamily): string | undefined {
  const addrs = node?.status?.addresses ?? [];
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const a of addrs) {
      if (!a || a.type !== type) continue;
      const ip = parseIP(a.address);
      if (ip && ip.family === family) return ip.text;
    }
  }
  return undefined;
}

/**
 * The sources a load-balancer frontend allows: `ranges` (canonical CIDRs of
 * one family), plus every LB IP of that family as a host CIDR when a range
 * contains `nodeIP`. Unchanged without ranges (no ranges: everyone is allowed).
 */
export function withImplicitLbAllow(ranges: readonly string[], lbIPs: readonly string[], nodeIP: string | undefined): string[] {
  const out = [...ranges];
  if (ranges.length === 0 || lbIPs.length === 0 || nodeIP === undefined) return out;
  const node = parseIP(nodeIP);
  if (!node) return out;
  const allowFromNode = ranges.some((r) => {
    const c = parseCIDR(r);
    return c !== null && cidrContains(c, node);
  });
  if (!allowFromNode) return out;
  for (const a of lbIPs) {
    const ip = parseIP(a);
    if (!ip || ip.family !== node.family) continue;
    const host = `${ip.text}/${ip.family === 'IPv4' ? 32 : 128}`;
    if (!out.includes(host)) out.push(host);
  }
  return out;
}
