/**
 * `kpr cleanup-kube-proxy`: what kube-proxy leaves on a node when it stops —
 * iptables chains and the jumps into them (iptables-nft and iptables-legacy,
 * IPv4 and IPv6), the nftables tables of its nftables mode, IPVS virtual
 * servers and the kube-ipvs0 dummy interface of its IPVS mode, and the
 * IPVS mode's ipsets. Acts on the network namespace it runs in.
 */
import { existsSync, readFileSync } from 'node:fs';
import { findExecutable, runTool } from './exec.js';
import { kubeProxyDelta, parseIptablesSave, restoreInput } from './iptables-ruleset.js';
import type { CleanupStep } from './types.js';

/** The nftables tables kube-proxy's nftables mode creates. */
export const KUBE_PROXY_NFT_TABLES = ['ip kube-proxy', 'ip6 kube-proxy'];
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
}

/** The iptables back ends present for one family: nft and legacy, or the plain binaries of an old install. */
function iptablesVariants(family: 4 | 6, which: (n: string) => string | undefined): { variants: IptablesVariant[]; notes: string[] } {
  const base = family === 4 ? 'iptables' : 'ip6tables';
  const fam = family === 4 ? 'IPv4' : 'IPv6';
  const variants: IptablesVariant[] = [];
  const notes: string[] = [];
  const nftSave = which(`${base}-nft-save`);
  const nftRestore = which(`${base}-nft-restore`);
  if (nftSave && nftRestore) variants.push({ label: `${base}-nft (${fam})`, save: nftSave, restore: nftRestore });
  const legacySave = which(`${base}-legacy-save`);
  const legacyRestore = which(`${base}-legacy-restore`);
  // Legacy tables exist only once the x_tables module made them; reading them
  // otherwise would load the module for nothing.
  const legacyLoaded = existsSync(family === 4 ? '/proc/net/ip_tables_names' : '/proc/net/ip6_tables_names');
  if (legacySave && legacyRestore) {
    if (legacyLoaded) variants.push({ label: `${base}-legacy (${fam})`, save: legacySave, restore: legacyRestore });
    else notes.push(`${base}-legacy (${fam}): no legacy tables in use`);
  }
  if (variants.length === 0 && !legacySave) {
    const save = which(`${base}-save`);
    const restore = which(`${base}-restore`);
    if (save && restore) variants.push({ label: `${base} (${fam})`, save, restore });
    else notes.push(`${base}-save/${base}-restore not installed: ${fam} iptables not checked`);
  }
  return { variants, notes };
}

function iptablesStep(v: IptablesVariant, note?: string): CleanupStep {
  const tables = parseIptablesSave(runTool(v.save, []));
  const deltas = kubeProxyDelta(tables);
  const items = deltas.flatMap((d) => [
    ...d.jumps.map((j) => ({ kind: 'iptables-rule', what: `${d.table} -A ${j.chain} ${j.spec}` })),
    ...d.chains.map((c) => ({ kind: 'iptables-chain', what: `${d.table} ${c}` })),
  ]);
  const step: CleanupStep = {
    name: v.label,
    items,
    apply: () => {
      runTool(v.restore, ['--noflush', '-w', '5'], restoreInput(deltas));
    },
  };
  if (note) step.note = note;
  return step;
}

function nftStep(which: (n: string) => string | undefined): CleanupStep {
  const nft = which('nft');
  if (!nft) return { name: 'nftables', items: [], note: 'nft not installed: nftables not checked', apply: () => undefined };
  const present = new Set(
    runTool(nft, ['list', 'tables'])
      .split('\n')
      .map((l) => l.trim().replace(/^table /, ''))
      .filter(Boolean),
  );
  const tables = KUBE_PROXY_NFT_TABLES.filter((t) => present.has(t));
  return {
    name: 'nftables',
    items: tables.map((t) => ({ kind: 'nft-table', what: t })),
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
      const n = readFileSync('/proc/net/ip_vs', 'utf8').split('\n').filter((l) => /^(TCP|UDP|SCTP|FWM)\s/.test(l)).length;
      note += n > 0 ? ` (/proc/net/ip_vs lists ${n}; install ipvsadm and run again)` : ' (/proc/net/ip_vs lists none)';
    } else {
      note += ' (IPVS is not loaded: nothing to remove)';
    }
    return { name: 'ipvs', items: [], note, apply: () => undefined };
  }
  const services = parseIpvsSave(runTool(ipvsadm, ['-S', '-n']));
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

function ipsetStep(which: (n: string) => string | undefined): CleanupStep | undefined {
  const ipset = which('ipset');
  if (!ipset) return undefined; // only IPVS mode uses ipsets; nothing to say when the tool is absent
  const names = runTool(ipset, ['list', '-n'])
    .split('\n')
    .map((l) => l.trim())
    .filter((n) => n.startsWith('KUBE-'));
  return {
    name: 'ipset',
    items: names.map((n) => ({ kind: 'ipset', what: n })),
    apply: () => {
      for (const n of names) runTool(ipset, ['destroy', n]);
    },
  };
}

/** The steps, planned now (nothing is changed until each step's apply). Order matters: rules before the sets and interface they use. */
export function kubeProxyCleanupSteps(opts: KubeProxyCleanupOptions = {}): CleanupStep[] {
  const which = opts.which ?? ((n: string) => findExecutable(n));
  const steps: CleanupStep[] = [];
  for (const family of [4, 6] as const) {
    const { variants, notes } = iptablesVariants(family, which);
    variants.forEach((v, i) => steps.push(iptablesStep(v, i === 0 ? notes.join('; ') || undefined : undefined)));
    if (variants.length === 0) steps.push({ name: family === 4 ? 'iptables (IPv4)' : 'ip6tables (IPv6)', items: [], note: notes.join('; '), apply: () => undefined });
  }
  steps.push(nftStep(which));
  const ipBin = which('ip');
  steps.push(ipvsStep(which, ipBin, opts.ipvsFlush ?? false));
  steps.push(ipvsIfaceStep(ipBin));
  const sets = ipsetStep(which);
  if (sets) steps.push(sets);
  return steps;
}
