/**
 * --external-ip-cidrs: which spec.externalIPs kpr programs at all. Unset or
 * empty, every externalIP is (as kube-proxy does); otherwise only those
 * inside one of the CIDRs, like the DenyServiceExternalIPs admission plugin
 * (all denied) or Calico's allow-list (only these). An externalIP outside
 * is skipped with a reason; the Service's other frontends are unaffected.
 * This is the node-side defence against CVE-2020-8554 (docs/architecture.md).
 */
import { cidrContains, parseCIDR, parseIP, type ParsedCIDR } from '../net/ip.js';
import type { FamilyInfo } from './service-info.js';
import type { SkippedObject } from './types.js';

const parsed = new WeakMap<readonly string[], ParsedCIDR[]>();

/** The setting's CIDRs, parsed once per setting (invalid entries are rejected by the flag parser, and ignored here). */
function allowList(cidrs: readonly string[]): ParsedCIDR[] {
  let list = parsed.get(cidrs);
  if (!list) {
    list = [];
    for (const c of cidrs) {
      const p = parseCIDR(c);
      if (p) list.push(p);
    }
    parsed.set(cidrs, list);
  }
  return list;
}

/** Whether externalIP `address` (canonical) may be programmed under `cidrs` (unset or empty: every address). */
export function externalIPAllowed(address: string, cidrs: readonly string[] | undefined): boolean {
  if (!cidrs || cidrs.length === 0) return true;
  const ip = parseIP(address);
  return ip !== null && allowList(cidrs).some((c) => cidrContains(c, ip));
}

/** `fam` with only the externalIPs `cidrs` allows; the others are reported as skipped. `fam` itself when nothing is left out. */
export function withAllowedExternalIPs(fam: FamilyInfo, cidrs: readonly string[] | undefined, object: string, skipped: SkippedObject[]): FamilyInfo {
  if (!cidrs || cidrs.length === 0 || fam.externalIPs.length === 0) return fam;
  const kept: string[] = [];
  for (const a of fam.externalIPs) {
    if (externalIPAllowed(a, cidrs)) kept.push(a);
    else skipped.push({ object, reason: `externalIP ${JSON.stringify(a)} is outside --external-ip-cidrs; not programmed` });
  }
  return kept.length === fam.externalIPs.length ? fam : { ...fam, externalIPs: kept };
}
