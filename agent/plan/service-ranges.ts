/**
 * The cluster's service ranges (rule 33 of docs/semantics.md): where they
 * come from and which entries are usable. Pure.
 *
 * Sources, as kube-proxy's nftables mode and kube-apiserver define them:
 *  - `networking.k8s.io/v1` ServiceCIDR objects (GA in Kubernetes 1.33):
 *    spec.cidrs, at most two, one per IP family. Every object counts,
 *    one being deleted too (its addresses stay allocated until it is gone);
 *  - `--service-cluster-ip-range` (kube-apiserver's flag of the same name:
 *    comma-separated, at most two, one per family), used where the API has
 *    no ServiceCIDR (the kind is not served, as before 1.33, or no object
 *    exists yet).
 * A bad entry (not a CIDR, host bits set, a third CIDR, a second one of a
 * family) is left out and reported; the others still count. Nothing here
 * throws.
 */
import { networkText, parseCIDR, type IPFamily } from '../net/ip.js';

/** One usable range: canonical CIDR, family, and where it came from ("flag" or "ServiceCIDR/<name>"). */
export interface ServiceRange {
  cidr: string;
  family: IPFamily;
  source: string;
}

/** An entry left out: where it came from ("flag", "ServiceCIDR/<name>"), the text and why. */
export interface ServiceRangeProblem {
  source: string;
  value: string;
  reason: string;
}

export interface ServiceRangesResult {
  ranges: ServiceRange[];
  problems: ServiceRangeProblem[];
}

/** The source label of a range from the flag. */
export const FLAG_SOURCE = 'flag';

/** What the planner needs of a ServiceCIDR object (client-node's V1ServiceCIDR satisfies it). */
export interface ServiceCidrObject {
  metadata?: { name?: string };
  spec?: { cidrs?: unknown };
}

/**
 * The usable CIDRs of one list (the flag's entries, or one object's
 * spec.cidrs): at most two, one per family, each canonical (no host bits,
 * as the API server's validation requires of a ServiceCIDR).
 */
export function checkRangeList(values: readonly unknown[], source: string): ServiceRangesResult {
  const ranges: ServiceRange[] = [];
  const problems: ServiceRangeProblem[] = [];
  values.forEach((v) => {
    const value = typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
    const bad = (reason: string) => problems.push({ source, value, reason });
    const c = parseCIDR(v);
    if (!c) return bad('not a CIDR');
    const net = networkText(c);
    if (net !== c.text) return bad(`host bits set (the range is ${net})`);
    if (ranges.length >= 2) return bad('more than two CIDRs (at most one per IP family)');
    if (ranges.some((r) => r.family === c.family)) return bad(`a second ${c.family} CIDR (at most one per IP family)`);
    ranges.push({ cidr: net, family: c.family, source });
  });
  return { ranges, problems };
}

/** --service-cluster-ip-range's entries ("198.18.0.0/16,2001:db8::/108" split already). */
export function rangesFromFlag(entries: readonly string[]): ServiceRangesResult {
  return checkRangeList(entries, FLAG_SOURCE);
}

/** The ranges of ServiceCIDR objects, in name order; an object without a readable spec.cidrs is one problem. */
export function rangesFromServiceCidrs(objects: readonly ServiceCidrObject[]): ServiceRangesResult {
  const ranges: ServiceRange[] = [];
  const problems: ServiceRangeProblem[] = [];
  const sorted = [...objects].sort((a, b) => cmp(a.metadata?.name ?? '', b.metadata?.name ?? ''));
  for (const o of sorted) {
    const source = `ServiceCIDR/${o.metadata?.name ?? ''}`;
    const cidrs = o.spec?.cidrs;
    if (!Array.isArray(cidrs)) {
      problems.push({ source, value: JSON.stringify(cidrs) ?? 'undefined', reason: 'spec.cidrs is not a list' });
      continue;
    }
    const r = checkRangeList(cidrs, source);
    ranges.push(...r.ranges);
    problems.push(...r.problems);
  }
  return { ranges, problems };
}

/**
 * The ranges in force: the ServiceCIDR objects' when the API serves the kind
 * and they give at least one usable range, the flag's otherwise. Problems of
 * both are reported (a bad flag entry is worth a line even while unused).
 * Ranges are unique by CIDR (the first source named wins).
 */
export function effectiveServiceRanges(flag: readonly string[], objects: readonly ServiceCidrObject[] | undefined): ServiceRangesResult {
  const fromFlag = rangesFromFlag(flag);
  const fromApi = objects ? rangesFromServiceCidrs(objects) : { ranges: [], problems: [] };
  const chosen = fromApi.ranges.length > 0 ? fromApi.ranges : fromFlag.ranges;
  const seen = new Set<string>();
  const ranges = chosen.filter((r) => (seen.has(r.cidr) ? false : (seen.add(r.cidr), true)));
  return { ranges, problems: [...fromFlag.problems, ...fromApi.problems] };
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
