/**
 * kube-proxy's iptables leftovers, computed from iptables-save output (pure
 * code): which chains are kube-proxy's (kube-proxy-owner.ts), which rules in
 * the built-in chains jump to them, and the iptables-restore --noflush input
 * that removes exactly those.
 *
 * A chain of another owner never changes. When one of its rules jumps to a
 * kube-proxy chain (an operator's chain to KUBE-SERVICES, a CNI's hostport
 * chain to KUBE-MARK-MASQ), deleting that chain would make the restore fail
 * ("chain in use") and editing the other owner's rule would break it, so the
 * chain stays, rules and all, with every kube-proxy chain it reaches; the
 * report names the rule's chain. kube-proxy's jumps from the built-in chains
 * go in every case, so kube-proxy's rules no longer see traffic of their own.
 */
import { chainOwner, type Ownership } from './kube-proxy-owner.js';

export interface SavedRule {
  chain: string;
  /** The rule after "-A CHAIN ", exactly as iptables-save printed it. */
  spec: string;
  /** The jump/goto target, if any. */
  target?: string;
}

export interface SavedChain {
  name: string;
  /** Built-in chains (INPUT, PREROUTING, …) have a policy; user chains print "-". */
  builtin: boolean;
}

export interface SavedTable {
  name: string;
  /** Every chain declared in the table, in order. */
  chains: SavedChain[];
  rules: SavedRule[];
}

/** Splits a rule like a shell would: double-quoted strings stay one token. */
export function splitRule(spec: string): string[] {
  const tokens: string[] = [];
  const re = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (let m = re.exec(spec); m; m = re.exec(spec)) tokens.push(m[1] !== undefined ? m[1] : m[2]);
  return tokens;
}

function ruleTarget(tokens: string[]): string | undefined {
  for (let i = 0; i < tokens.length - 1; i++) {
    if (tokens[i] === '-j' || tokens[i] === '--jump' || tokens[i] === '-g' || tokens[i] === '--goto') return tokens[i + 1];
  }
  return undefined;
}

/** The ipsets a rule matches on (-m set --match-set NAME …, and the SET target's --add-set/--del-set/--map-set). */
export function ruleSets(spec: string): string[] {
  const t = splitRule(spec);
  const out: string[] = [];
  for (let i = 0; i < t.length - 1; i++) {
    if (['--match-set', '--add-set', '--del-set', '--map-set'].includes(t[i])) out.push(t[i + 1]);
  }
  return out;
}

/** Parses iptables-save output into its tables. */
export function parseIptablesSave(text: string): SavedTable[] {
  const tables: SavedTable[] = [];
  let cur: SavedTable | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (!line || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      // One table per name, even if the text names it twice (restore input does; iptables-save does not).
      cur = tables.find((t) => t.name === line.slice(1));
      if (!cur) {
        cur = { name: line.slice(1), chains: [], rules: [] };
        tables.push(cur);
      }
    } else if (line === 'COMMIT') {
      cur = undefined;
    } else if (cur && line.startsWith(':')) {
      const [name, policy] = line.slice(1).split(' ');
      cur.chains.push({ name, builtin: policy !== undefined && policy !== '-' });
    } else if (cur && line.startsWith('-A ')) {
      const rest = line.slice(3);
      const sp = rest.indexOf(' ');
      const chain = sp < 0 ? rest : rest.slice(0, sp);
      const spec = sp < 0 ? '' : rest.slice(sp + 1);
      const rule: SavedRule = { chain, spec };
      const target = ruleTarget(splitRule(spec));
      if (target) rule.target = target;
      cur.rules.push(rule);
    }
  }
  return tables;
}

export interface KeptChain {
  chain: string;
  reason: string;
}

export interface TableDelta {
  table: string;
  /** kube-proxy chains to flush and delete. */
  chains: string[];
  /** kube-proxy's jumps from the built-in chains (deleted first). */
  jumps: SavedRule[];
  /** Every user chain that stays, and why. */
  kept: KeptChain[];
  /** The ipsets the rules that stay use, each with the first chain using it. */
  setsInUse: Map<string, string>;
}

function ownerLabel(o: Ownership): string {
  return o.owner === 'other' ? "not kube-proxy's" : o.owner + "'s";
}

/** What to remove from, and keep in, one table. */
export function tableDelta(t: SavedTable): TableDelta {
  const builtin = new Set(t.chains.filter((c) => c.builtin).map((c) => c.name));
  const owners = new Map(t.chains.filter((c) => !c.builtin).map((c) => [c.name, chainOwner(t.name, c.name)]));
  const isKubeProxy = (c: string) => owners.get(c)?.owner === 'kube-proxy';
  const keptKubeProxy = new Map<string, string>();
  const queue: string[] = [];
  for (const r of t.rules) {
    if (builtin.has(r.chain) || isKubeProxy(r.chain) || !r.target || !isKubeProxy(r.target) || keptKubeProxy.has(r.target)) continue;
    keptKubeProxy.set(r.target, `kube-proxy's, kept: ${r.chain} (${ownerLabel(owners.get(r.chain) ?? { owner: 'other', reason: '' })}) jumps to it`);
    queue.push(r.target);
  }
  while (queue.length > 0) {
    const from = queue.shift()!;
    for (const r of t.rules) {
      if (r.chain !== from || !r.target || !isKubeProxy(r.target) || keptKubeProxy.has(r.target)) continue;
      keptKubeProxy.set(r.target, `kube-proxy's, kept: reached from ${from}, which stays`);
      queue.push(r.target);
    }
  }
  const chains = t.chains.filter((c) => !c.builtin && isKubeProxy(c.name) && !keptKubeProxy.has(c.name)).map((c) => c.name);
  const removed = new Set(chains);
  const jumps = t.rules.filter((r) => builtin.has(r.chain) && r.target !== undefined && isKubeProxy(r.target));
  const jumpSet = new Set(jumps);
  const kept: KeptChain[] = [];
  for (const c of t.chains) {
    if (c.builtin || removed.has(c.name)) continue;
    kept.push({ chain: c.name, reason: keptKubeProxy.get(c.name) ?? owners.get(c.name)!.reason });
  }
  const setsInUse = new Map<string, string>();
  for (const r of t.rules) {
    if (removed.has(r.chain) || jumpSet.has(r)) continue;
    for (const s of ruleSets(r.spec)) if (!setsInUse.has(s)) setsInUse.set(s, r.chain);
  }
  return { table: t.name, chains, jumps, kept, setsInUse };
}

/** Every table's delta, in iptables-save order. */
export function kubeProxyDelta(tables: SavedTable[]): TableDelta[] {
  return tables.map(tableDelta);
}

/**
 * iptables-restore --noflush input for the deltas: per table, flush the
 * chains (so no rule references another), delete the jumps into them, then
 * delete the chains. One table is one atomic commit; tables with nothing to
 * remove are left out.
 */
export function restoreInput(deltas: TableDelta[]): string {
  const lines: string[] = [];
  for (const d of deltas) {
    if (d.chains.length === 0 && d.jumps.length === 0) continue;
    lines.push(`*${d.table}`);
    for (const c of d.chains) lines.push(`:${c} - [0:0]`);
    for (const j of d.jumps) lines.push(`-D ${j.chain} ${j.spec}`);
    for (const c of d.chains) lines.push(`-X ${c}`);
    lines.push('COMMIT');
  }
  return lines.length ? lines.join('\n') + '\n' : '';
}
