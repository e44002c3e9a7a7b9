/**
 * Which interfaces carry which traffic. External interfaces (where NodePort,
 * LoadBalancer and externalIP traffic arrives) and pod-facing interfaces
 * (where local pods' packets enter the node) are given as name patterns,
 * since kpr runs beside any CNI and pod interfaces come and go.
 */

/** "eth0,ens*,kprv*" → a matcher; "*" is the only wildcard (any run of characters). */
export function interfaceMatcher(patterns: string[]): (name: string) => boolean {
  const res = patterns
    .map((p) => p.trim())
    .filter(Boolean)
    .map((p) => new RegExp(`^${p.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')}$`));
  return (name) => res.some((re) => re.test(name));
}

export type InterfaceRole = 'external' | 'pod';

export interface InterfaceSelection {
  external: string[];
  pod: string[];
}

/** Assigns each interface at most one role; external wins, loopback never qualifies. */
export function selectInterfaces(names: string[], external: string[], pod: string[]): InterfaceSelection {
  const isExternal = interfaceMatcher(external);
  const isPod = interfaceMatcher(pod);
  const out: InterfaceSelection = { external: [], pod: [] };
  for (const name of [...names].sort()) {
    if (name === 'lo') continue;
    if (isExternal(name)) out.external.push(name);
    else if (isPod(name)) out.pod.push(name);
  }
  return out;
}
