/**
 * kube-proxy's iptables leftovers, computed from iptables-save output (pure
 * code): which chains are kube-proxy's, which rules elsewhere jump to them,
 * and the iptables-restore --noflush input that removes exactly those.
 *
 * Ownership: every KUBE-* chain is kube-proxy's except the ones kubelet
 * creates (KUBE-FIREWALL, KUBE-KUBELET-CANARY, and KUBE-MARK-DROP of older
 * kubelets), which protect the node and stay. Rules in other chains are
 * removed only when their target (-j/-g) is one of the removed chains; a
 * user's own rules and chains are never touched.
 */

/** KUBE-* chains that belong to kubelet, not kube-proxy. */
export const KUBELET_CHAINS = new Set(['KUBE-FIREWALL', 'KUBE-KUBELET-CANARY', 'KUBE-MARK-DROP']);

export function isKubeProxyChain(chain: string): boolean {
  return chain.startsWith('KUBE-') && !KUBELET_CHAINS.has(chain);
}

export interface SavedRule {
  chain: string;
  /** The rule after "-A CHAIN ", exactly as iptables-save printed it. */
  spec: string;
  /** The jump/goto target, if any. */
  target?: string;
}

export interface SavedTable {
  name: string;
  /** Every chain declared in the table (built-in and user), in order. */
  chains: string[];
  rules: SavedRule[];
}

/** Splits a rule like a shell would: double-quoted strings stay one token. */
export function splitRule(spec: string): string[] {
  const tokens: string[] = [];
  const re = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (let m = re.exec(spec); m; m = re.exec(spec)) tokens.push(m[1] !== undefined ? m[1] : m[2]);
  return tokens;
}

function ruleTarget(spec: string): string | undefined {
  const t = splitRule(spec);
  for (let i = 0; i < t.length - 1; i++) {
    if (t[i] === '-j' || t[i] === '--jump' || t[i] === '-g' || t[i] === '--goto') return t[i + 1];
  }
  return undefined;
}

/** Parses iptables-save output into its tables. */
export function parseIptablesSave(text: string): SavedTable[] {
  const tables: SavedTable[] = [];
  let cur: SavedTable | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (!line || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      cur = { name: line.slice(1), chains: [], rules: [] };
      tables.push(cur);
    } else if (line === 'COMMIT') {
      cur = undefined;
    } else if (cur && line.startsWith(':')) {
      cur.chains.push(line.slice(1).split(' ')[0]);
    } else if (cur && line.startsWith('-A ')) {
      const rest = line.slice(3);
      const sp = rest.indexOf(' ');
      const chain = sp < 0 ? rest : rest.slice(0, sp);
      const spec = sp < 0 ? '' : rest.slice(sp + 1);
      const rule: SavedRule = { chain, spec };
      const target = ruleTarget(spec);
      if (target) rule.target = target;
      cur.rules.push(rule);
    }
  }
  return tables;
}

export interface TableDelta {
  table: string;
  /** kube-proxy chains to flush and delete. */
  chains: string[];
  /** Rules in other chains that jump to them (to delete first). */
  jumps: SavedRule[];
}

/** What to remove from each table (tables with nothing to remove are left out). */
export function kubeProxyDelta(tables: SavedTable[]): TableDelta[] {
  const out: TableDelta[] = [];
  for (const t of tables) {
    const chains = t.chains.filter(isKubeProxyChain);
    if (chains.length === 0) continue;
    const removed = new Set(chains);
    const jumps = t.rules.filter((r) => !removed.has(r.chain) && r.target !== undefined && removed.has(r.target));
    out.push({ table: t.name, chains, jumps });
  }
  return out;
}

/**
 * iptables-restore --noflush input for the deltas: per table, flush the
 * chains (so no rule references another), delete the jumps into them, then
 * delete the chains. One table is one atomic commit.
 */
export function restoreInput(deltas: TableDelta[]): string {
  const lines: string[] = [];
  for (const d of deltas) {
    lines.push(`*${d.table}`);
    for (const c of d.chains) lines.push(`:${c} - [0:0]`);
    for (const j of d.jumps) lines.push(`-D ${j.chain} ${j.spec}`);
    for (const c of d.chains) lines.push(`-X ${c}`);
    lines.push('COMMIT');
  }
  return lines.length ? lines.join('\n') + '\n' : '';
}
