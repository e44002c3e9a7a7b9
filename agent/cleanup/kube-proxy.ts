/**
 * `kpr cleanup-kube-proxy`: what kube-proxy leaves on a node when it stops —
 * its iptables chains and its jumps into them from the built-in chains
 * (iptables-nft and iptables-legacy, IPv4 and IPv6), the nftables tables of
 * its nftables mode, IPVS virtual servers and the kube-ipvs0 dummy interface
 * of its IPVS mode, and the IPVS mode's ipsets. Only kube-proxy's own names
 * (kube-proxy-owner.ts); every step also lists what it keeps and why. Acts on
 * the network namespace it runs in.
 */
import { existsSync, readFileSync } from 'node:fs';
import { findExecutable, runTool } from './exec.js';
import { kubeProxyDelta, parseIptablesSave, restoreInput, type TableDelta } from './iptables-ruleset.js';
import { ipsetOwner, KUBE_PROXY_NFT_TABLES, nftTableOwner } from './kube-proxy-owner.js';
import type { CleanupItem, CleanupStep, KeptItem } from './types.js';
import { xtablesLockPath, xtablesLockProblem } from './xtables-lock.js';

export const KUBE_IPVS_IFACE = 'kube-ipvs0';

export interface KubeProxyCleanupOptions {
  /** Remove every IPVS virtual server (as `kube-proxy --cleanup` does), not only those on kube-ipvs0. */
  ipvsFlush?: boolean;
  /** Tool lookup, replaceable in tests. */
  which?: (name: string) => string | undefined;
}

interface IptablesVariant {
  label: string;
  save: string;
  restore: string;
  /** iptables-legacy takes the xtables lock; iptables-nft does not. */
  legacy: boolean;
}

/** The iptables back ends present for one family: nft and legacy, or the plain binaries of an old install. */
function iptablesVariants(family: 4 | 6, which: (n: string) => string | undefined): { variants: IptablesVariant[]; notes: string[] } {
  const base = family === 4 ? 'iptables' : 'ip6tables';
  const fam = family === 4 ? 'IPv4' : 'IPv6';
  const variants: IptablesVariant[] = [];
  const notes: string[] = [];
  const nftSave = which(`${base}-nft-save`);
  const nftRestore = which(`${base}-nft-restore`);
  if (nftSave && nftRestore) variants.push({ label: `${base}-nft (${fam})`, save: nftSave, restore: nftRestore, legacy: false });
  const legacySave = which(`${base}-legacy-save`);
  const legacyRestore = which(`${base}-legacy-restore`);
  // Legacy tables exist only once the x_tables module made them; reading them
  // otherwise would load the module for nothing.
  const legacyLoaded = existsSync(family === 4 ? '/proc/net/ip_tables_names' : '/proc/net/ip6_tables_names');
  if (legacySave && legacyRestore) {
    if (legacyLoaded) variants.push({ label: `${base}-legacy (${fam})`, save: legacySave, restore: legacyRestore, legacy: true });
    else notes.push(`${base}-legacy (${fam}): no legacy tables in use`);
  }
  if (variants.length === 0 && !legacySave) {
    const save = which(`${base}-save`);
    const restore = which(`${base}-restore`);
    // An old install's plain binaries: legacy ones, unless `-V` says nf_tables.
    if (save && restore) variants.push({ label: `${base} (${fam})`, save, restore, legacy: !/nf_tables/.test(safeVersion(save)) });
    else notes.push(`${base}-save/${base}-restore not installed: ${fam} iptables not checked`);
  }
  return { variants, notes };
}

function safeVersion(bin: string): string {
  try {
    return runTool(bin, ['-V']);
  } catch {
    return '';
  }
}

/** A step that could not be planned: it removes nothing and fails the run. */
function failedStep(name: string, err: unknown): CleanupStep {
  return { name, items: [], error: (err as Error).message, apply: () => undefined };
}

interface IptablesPlan {
  step: CleanupStep;
  /** ipsets that rules staying in this back end use (set → "label table chain"). */
  setsInUse: Map<string, string>;
}

function iptablesStep(v: IptablesVariant, note?: string): IptablesPlan {
  let deltas: TableDelta[];
  try {
    deltas = kubeProxyDelta(parseIptablesSave(runTool(v.save, [])));
  } catch (err) {
    return { step: failedStep(v.label, err), setsInUse: new Map() };
  }
  const items: CleanupItem[] = deltas.flatMap((d) => [
    ...d.jumps.map((j) => ({ kind: 'iptables-rule', what: `${d.table} -A ${j.chain} ${j.spec}` })),
    ...d.chains.map((c) => ({ kind: 'iptables-chain', what: `${d.table} ${c}` })),
  ]);
  const kept: KeptItem[] = deltas.flatMap((d) => d.kept.map((k) => ({ kind: 'iptables-chain', what: `${d.table} ${k.chain}`, reason: k.reason })));
  const notes = note ? [note] : [];
  const lock = v.legacy ? xtablesLockPath() : undefined;
  const lockProblem = lock ? xtablesLockProblem(lock.path) : undefined;
  if (lock) notes.push(`xtables lock ${lock.path} (${lock.from})${lockProblem && items.length > 0 ? `: ${lockProblem}` : ''}`);
  const step: CleanupStep = {
    name: v.label,
    items,
    kept,
    apply: () => {
      if (lockProblem) throw new Error(lockProblem);
      // -w: wait for the xtables lock (iptables-legacy; iptables-nft ignores it), as kube-proxy does.
      runTool(v.restore, ['--noflush', '-w', '5'], restoreInput(deltas));
    },
  };
  if (notes.length) step.note = notes.join('; ');
  const setsInUse = new Map<string, string>();
  for (const d of deltas) for (const [set, chain] of d.setsInUse) if (!setsInUse.has(set)) setsInUse.set(set, `${v.label} ${d.table} ${chain}`);
  return { step, setsInUse };
}

function nftStep(which: (n: string) => string | undefined): CleanupStep {
  const nft = which('nft');
  if (!nft) return { name: 'nftables', items: [], note: 'nft not installed: nftables not checked', apply: () => undefined };
  let present: string[];
  try {
    present = runTool(nft, ['list', 'tables'])
      .split('\n')
      .map((l) => l.trim().replace(/^table /, ''))
      .filter(Boolean);
  } catch (err) {
    return failedStep('nftables', err);
  }
  const tables = present.filter((t) => KUBE_PROXY_NFT_TABLES.has(t));
  return {
    name: 'nftables',
    items: tables.map((t) => ({ kind: 'nft-table', what: t })),
    kept: present.filter((t) => !KUBE_PROXY_NFT_TABLES.has(t)).map((t) => ({ kind: 'nft-table', what: t, reason: nftTableOwner(t).reason })),
    apply: () => {
      for (const t of tables) runTool(nft, ['delete', 'table', ...t.split(' ')]);
    },
  };
}

function ifaceAddresses(ipBin: string, iface: string): Set<string> | undefined {
  try {
    runTool(ipBin, ['-o', 'link', 'show', 'dev', iface]);
  } catch {
    return undefined;
  }
  const out = runTool(ipBin, ['-o', 'addr', 'show', 'dev', iface]);
  const addrs = new Set<string>();
  for (const m of out.matchAll(/\binet6? ([0-9a-fA-F.:]+)\//g)) addrs.add(m[1].toLowerCase());
  return addrs;
}

/** "-A -t 198.19.0.10:80 -s rr" → { flag: '-t', service: '198.19.0.10:80', addr: '198.19.0.10' }. */
export function parseIpvsSave(text: string): Array<{ flag: string; service: string; addr?: string }> {
  const out: Array<{ flag: string; service: string; addr?: string }> = [];
  for (const line of text.split('\n')) {
    const m = /^-A (-[tuf]|--tcp-service|--udp-service|--fwmark-service|--sctp-service) (\S+)/.exec(line.trim());
    if (!m) continue;
    const service = m[2];
    const am = /^\[([^\]]+)\]:\d+$/.exec(service) ?? /^([^:]+):\d+$/.exec(service);
    const entry: { flag: string; service: string; addr?: string } = { flag: m[1], service };
    if (am && m[1] !== '-f' && m[1] !== '--fwmark-service') entry.addr = am[1].toLowerCase();
    out.push(entry);
  }
  return out;
}

function ipvsStep(which: (n: string) => string | undefined, ipBin: string | undefined, flush: boolean): CleanupStep {
  const ipvsadm = which('ipvsadm');
  if (!ipvsadm) {
    let note = 'ipvsadm not installed: IPVS virtual servers not checked';
    if (existsSync('/proc/net/ip_vs')) {
      const n = readFileSync('/proc/net/ip_vs', 'utf8')
        .split('\n')
        .filter((l) => /^(TCP|UDP|SCTP|FWM)\s/.test(l)).length;
      note += n > 0 ? ` (/proc/net/ip_vs lists ${n}; install ipvsadm and run again)` : ' (/proc/net/ip_vs lists none)';
    } else {
      note += ' (IPVS is not loaded: nothing to remove)';
    }
    return { name: 'ipvs', items: [], note, apply: () => undefined };
  }
  // No IPVS in this kernel (or not loaded): no virtual servers, and ipvsadm would only fail.
  if (!existsSync('/proc/net/ip_vs')) return { name: 'ipvs', items: [], note: 'IPVS is not loaded: nothing to remove', apply: () => undefined };
  let services: ReturnType<typeof parseIpvsSave>;
  try {
    services = parseIpvsSave(runTool(ipvsadm, ['-S', '-n']));
  } catch (err) {
    return failedStep('ipvs', err);
  }
  const vips = ipBin ? ifaceAddresses(ipBin, KUBE_IPVS_IFACE) : undefined;
  const selected = flush ? services : services.filter((s) => s.addr !== undefined && vips?.has(s.addr));
  const step: CleanupStep = {
    name: 'ipvs',
    items: selected.map((s) => ({ kind: 'ipvs-virtual-server', what: `${s.flag} ${s.service}` })),
    apply: () => {
      for (const s of selected) runTool(ipvsadm, ['-D', s.flag, s.service]);
    },
  };
  const left = services.length - selected.length;
  if (left > 0) step.note = `${left} virtual server(s) not on ${KUBE_IPVS_IFACE} left in place (NodePort ones bind node addresses; --ipvs-flush removes all)`;
  return step;
}

function ipvsIfaceStep(ipBin: string | undefined): CleanupStep {
  if (!ipBin) return { name: KUBE_IPVS_IFACE, items: [], note: 'ip (iproute2) not installed: interfaces not checked', apply: () => undefined };
  const present = ifaceAddresses(ipBin, KUBE_IPVS_IFACE) !== undefined;
  return {
    name: KUBE_IPVS_IFACE,
    items: present ? [{ kind: 'interface', what: KUBE_IPVS_IFACE }] : [],
    apply: () => {
      runTool(ipBin, ['link', 'del', 'dev', KUBE_IPVS_IFACE]);
    },
  };
}

function ipsetStep(which: (n: string) => string | undefined, setsInUse: Map<string, string>): CleanupStep {
  const ipset = which('ipset');
  if (!ipset) return { name: 'ipset', items: [], note: "ipset not installed: the IPVS mode's ipsets not checked", apply: () => undefined };
  let present: string[];
  try {
    present = runTool(ipset, ['list', '-n'])
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  } catch (err) {
    return failedStep('ipset', err);
  }
  const names: string[] = [];
  const kept: KeptItem[] = [];
  for (const n of present) {
    const owner = ipsetOwner(n);
    const user = setsInUse.get(n);
    if (owner.owner !== 'kube-proxy') kept.push({ kind: 'ipset', what: n, reason: owner.reason });
    // Destroying a set an iptables rule that stays still uses would fail ("in use by a kernel component").
    else if (user) kept.push({ kind: 'ipset', what: n, reason: `kube-proxy's, kept: a rule that stays uses it (${user})` });
    else names.push(n);
  }
  return {
    name: 'ipset',
    items: names.map((n) => ({ kind: 'ipset', what: n })),
    kept,
    apply: () => {
      const failed: string[] = [];
      for (const n of names) {
        try {
          runTool(ipset, ['destroy', n]);
        } catch (err) {
          failed.push((err as Error).message);
        }
      }
      if (failed.length) throw new Error(failed.join('; '));
    },
  };
}

/** The steps, planned now (nothing is changed until each step's apply). Order matters: rules before the sets and interface they use. */
export function kubeProxyCleanupSteps(opts: KubeProxyCleanupOptions = {}): CleanupStep[] {
  const which = opts.which ?? ((n: string) => findExecutable(n));
  const steps: CleanupStep[] = [];
  const setsInUse = new Map<string, string>();
  for (const family of [4, 6] as const) {
    const { variants, notes } = iptablesVariants(family, which);
    variants.forEach((v, i) => {
      const plan = iptablesStep(v, i === 0 ? notes.join('; ') || undefined : undefined);
      steps.push(plan.step);
      for (const [set, user] of plan.setsInUse) if (!setsInUse.has(set)) setsInUse.set(set, user);
    });
    if (variants.length === 0)
      steps.push({ name: family === 4 ? 'iptables (IPv4)' : 'ip6tables (IPv6)', items: [], note: notes.join('; '), apply: () => undefined });
  }
  steps.push(nftStep(which));
  const ipBin = which('ip');
  steps.push(ipvsStep(which, ipBin, opts.ipvsFlush ?? false));
  steps.push(ipvsIfaceStep(ipBin));
  steps.push(ipsetStep(which, setsInUse));
  return steps;
}
