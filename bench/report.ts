/**
 * Statistics and output of the benchmark: the results object (printed as JSON
 * and written to build/bench-results.json) and the side-by-side table.
 */
import type { ConnResult, DataplaneRounds } from './data-plane.js';

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const idx = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[idx];
}

export const median = (v: number[]): number => percentile(v, 50);

export interface Dist {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export function dist(values: number[]): Dist {
  const n = values.length;
  return {
    n,
    p50: round(percentile(values, 50)),
    p99: round(percentile(values, 99)),
    max: round(n ? Math.max(...values) : NaN),
    mean: round(n ? values.reduce((a, b) => a + b, 0) / n : NaN),
  };
}

export function round(v: number, digits = 3): number {
  if (!Number.isFinite(v)) return v;
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

export interface ArmSummary {
  rounds: ConnResult[];
  /** Medians over rounds of each round's figure. */
  p50_us: number;
  p99_us: number;
  mean_us: number;
  conns_per_sec: number;
  errors: number;
}

export interface DataplaneSummary {
  services: number;
  arms: Partial<Record<string, ArmSummary>>;
  /** ClusterIP latency / direct latency (median of per-round p50; and per-round paired mean ratio). */
  costRatioP50?: number;
  costRatioMean?: number;
  costRatioP99?: number;
  /** ClusterIP conns/s / direct conns/s. */
  rateRatio?: number;
  /** direct (in kpr's cgroup) / direct outside any hook: the cost of the hook on non-service traffic. */
  hookCostRatioP50?: number;
  /** ClusterIP with the per-Service counters on / off (the same agent, alternating rounds). */
  countersCost?: RatioSet;
  /** ClusterIP with kpr monitor on (a reader draining) / off (the same agent, alternating rounds). */
  monitorCost?: RatioSet & MonitorCounts;
}

/** What the monitor arm's reader saw over all its rounds. */
export interface MonitorCounts {
  events: number;
  lost: number;
  /** Connections made in those rounds (warm-up excluded: its connections make events too). */
  connections: number;
}

/** ratioSet(on, off) of a monitor arm, with what its reader saw. */
function monitorCost(on: ArmSummary | undefined, off: ArmSummary | undefined): (RatioSet & MonitorCounts) | undefined {
  const r = ratioSet(on, off);
  if (!r || !on) return undefined;
  const sum = (f: (x: ConnResult) => number) => on.rounds.reduce((n, x) => n + f(x), 0);
  return { ...r, events: sum((x) => x.monitor_events ?? 0), lost: sum((x) => x.monitor_lost ?? 0), connections: sum((x) => x.count + x.errors) };
}

/** Per arm: medians over its rounds of each round's figures (arms without rounds are left out). */
export function summarizeArms(byArm: Partial<Record<string, ConnResult[]>>): Record<string, ArmSummary> {
  const arms: Record<string, ArmSummary> = {};
  for (const [arm, rounds] of Object.entries(byArm)) {
    if (!rounds || rounds.length === 0) continue;
    arms[arm] = {
      rounds,
      p50_us: round(median(rounds.map((x) => x.p50_us)), 1),
      p99_us: round(median(rounds.map((x) => x.p99_us)), 1),
      mean_us: round(median(rounds.map((x) => x.mean_us)), 1),
      conns_per_sec: round(median(rounds.map((x) => x.conns_per_sec)), 0),
      errors: rounds.reduce((a, x) => a + x.errors, 0),
    };
  }
  return arms;
}

export function summarizeDataplane(services: number, r: DataplaneRounds): DataplaneSummary {
  const arms = summarizeArms(r.rounds);
  const s: DataplaneSummary = { services, arms };
  const c = arms.clusterip;
  const d = arms.direct;
  if (c && d) {
    s.costRatioP50 = round(c.p50_us / d.p50_us);
    s.costRatioP99 = round(c.p99_us / d.p99_us);
    // Paired per round (the two runs of a round are adjacent in time).
    s.costRatioMean = round(median(c.rounds.map((x, i) => x.mean_us / d.rounds[i].mean_us)));
    s.rateRatio = round(c.conns_per_sec / d.conns_per_sec);
  }
  const n = arms['direct-nohook'];
  if (d && n) s.hookCostRatioP50 = round(d.p50_us / n.p50_us);
  const off = arms['clusterip-nocounters'];
  if (c && off) s.countersCost = ratioSet(c, off);
  s.monitorCost = monitorCost(arms['clusterip-monitor'], c);
  return s;
}

export interface RatioSet {
  p50: number | null;
  p99: number | null;
  /** conns/s ratio (higher is better for the numerator). */
  connsPerSec: number | null;
  /** Median over rounds of the paired per-round mean-latency ratio (the two runs of a round are adjacent in time). */
  pairedMean: number | null;
  /** Median over rounds of the paired per-round p50 ratio: the round-to-round drift of the machine cancels in each pair. */
  pairedP50: number | null;
}

function ratioSet(a: ArmSummary | undefined, b: ArmSummary | undefined): RatioSet | undefined {
  if (!a || !b) return undefined;
  const q = (x: number, y: number) => (Number.isFinite(x) && Number.isFinite(y) && y > 0 ? round(x / y) : null);
  const n = Math.min(a.rounds.length, b.rounds.length);
  const paired = (of: (r: ConnResult) => number) => {
    const per = Array.from({ length: n }, (_, i) => of(a.rounds[i]) / of(b.rounds[i])).filter(Number.isFinite);
    return per.length ? round(median(per)) : null;
  };
  return {
    p50: q(a.p50_us, b.p50_us),
    p99: q(a.p99_us, b.p99_us),
    connsPerSec: q(a.conns_per_sec, b.conns_per_sec),
    pairedMean: paired((r) => r.mean_us),
    pairedP50: paired((r) => r.p50_us),
  };
}

/** The NodePort data plane at one service count: kpr, iptables, nftables and direct arms, and their ratios. */
export interface NodePortSummary {
  services: number;
  nodePort: number;
  arms: Record<string, ArmSummary>;
  /**
   * kprTcKpr: the agent with --tc-attach tc (clsact filter) over the default (tcx link where the kernel has it).
   * kprAtNOverOne: kpr at these `services` over the agent served the echo Service alone (arm kpr-one), same rounds.
   */
  ratios: {
    kprDirect?: RatioSet;
    iptablesDirect?: RatioSet;
    kprIptables?: RatioSet;
    nftablesDirect?: RatioSet;
    kprNftables?: RatioSet;
    kprTcKpr?: RatioSet;
    kprAtNOverOne?: RatioSet;
    countersOnOff?: RatioSet;
    monitorOnOff?: RatioSet & MonitorCounts;
  };
  kpr?: unknown;
  kprTc?: unknown;
  kprOne?: unknown;
  iptables?: unknown;
  nftables?: unknown;
  /** A kube-proxy ruleset load that ran out of its bound (or failed), by mode. */
  notFinished?: Partial<Record<'iptables' | 'nftables', string>>;
  tcp: Partial<Record<string, { clientSynRetrans: number; podPawsTimewait: number; podTimeWait: number }>>;
  errors: string[];
}

export function summarizeNodePort(p: Omit<NodePortSummary, 'arms' | 'ratios'> & { rounds: Partial<Record<string, ConnResult[]>> }): NodePortSummary {
  const arms = summarizeArms(p.rounds);
  return {
    services: p.services,
    nodePort: p.nodePort,
    arms,
    ratios: {
      kprDirect: ratioSet(arms.kpr, arms.direct),
      iptablesDirect: ratioSet(arms.iptables, arms.direct),
      kprIptables: ratioSet(arms.kpr, arms.iptables),
      nftablesDirect: ratioSet(arms.nftables, arms.direct),
      kprNftables: ratioSet(arms.kpr, arms.nftables),
      kprTcKpr: ratioSet(arms['kpr-tc'], arms.kpr),
      kprAtNOverOne: ratioSet(arms.kpr, arms['kpr-one']),
      countersOnOff: ratioSet(arms.kpr, arms['kpr-nocounters']),
      monitorOnOff: monitorCost(arms['kpr-monitor'], arms.kpr),
    },
    kpr: p.kpr,
    kprTc: p.kprTc,
    kprOne: p.kprOne,
    iptables: p.iptables,
    nftables: p.nftables,
    notFinished: p.notFinished,
    tcp: p.tcp,
    errors: p.errors,
  };
}

export interface Row {
  metric: string;
  kpr: string;
  other: string;
  ratio: string;
  target: string;
  result: string;
}

export function fmtMs(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return 'n/a';
  if (v >= 1000) return `${(v / 1000).toFixed(2)} s`;
  if (v >= 10) return `${v.toFixed(1)} ms`;
  return `${v.toFixed(3)} ms`;
}

export function fmtRatio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return 'n/a';
  const r = a / b;
  if (r >= 100) return `${r.toFixed(0)}×`;
  if (r >= 10) return `${r.toFixed(1)}×`;
  if (r >= 0.1) return `${r.toFixed(3)}×`;
  // Tiny ratios read better as "1/N" (kpr N times faster).
  return `${r.toPrecision(2)}× (1/${Math.round(1 / r).toLocaleString('en-US')})`;
}

export function passFail(value: number | undefined, limit: number): string {
  if (value === undefined || !Number.isFinite(value)) return 'n/a';
  return value <= limit ? 'PASS' : 'FAIL';
}

export function renderTable(title: string, rows: Row[], heads: Partial<Row> = {}): string {
  const head: Row = { metric: 'metric', kpr: 'kpr', other: 'other', ratio: 'ratio kpr:other', target: 'target', result: 'result', ...heads };
  const keys: (keyof Row)[] = ['metric', 'kpr', 'other', 'ratio', 'target', 'result'];
  return renderGrid(
    title,
    keys.map((k) => head[k]),
    rows.map((r) => keys.map((k) => r[k])),
  );
}

/** A markdown-style table with any columns. */
export function renderGrid(title: string, head: string[], rows: string[][]): string {
  const all = [head, ...rows];
  const w = head.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => '| ' + w.map((x, i) => (r[i] ?? '').padEnd(x)).join(' | ') + ' |';
  const sep = '|' + w.map((x) => '-'.repeat(x + 2)).join('|') + '|';
  return [title, '', line(head), sep, ...rows.map(line)].join('\n');
}
