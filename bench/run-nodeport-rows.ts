/** The rows of `bench/run.ts`'s NodePort tables (kpr, kube-proxy's two modes and direct; tc attach modes). */
import { fmtMs, fmtRatio, passFail } from './report.js';
import type { Results } from './run-results.js';

/**
 * Rows of the NodePort table: metric, kpr, iptables, nftables, direct,
 * kpr/direct, iptables/direct, nftables/direct, kpr/iptables, kpr/nftables.
 */
export function nodePortRows(res: Results): string[][] {
  const rows: string[][] = [];
  for (const d of res.dataPlaneNodePort) {
    const k = d.arms.kpr;
    const i = d.arms.iptables;
    const f = d.arms.nftables;
    const x = d.arms.direct;
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const us = (v?: number) => (v === undefined ? 'n/a' : `${v} µs`);
    const five = (kv?: number, iv?: number, fv?: number, xv?: number) => [
      fmtRatio(kv, xv),
      fmtRatio(iv, xv),
      fmtRatio(fv, xv),
      fmtRatio(kv, iv),
      fmtRatio(kv, fv),
    ];
    const line = (metric: string, g: (a: NonNullable<typeof k>) => number, fmt: (v?: number) => string) => {
      const [kv, iv, fv, xv] = [k && g(k), i && g(i), f && g(f), x && g(x)];
      return [metric, fmt(kv), fmt(iv), fmt(fv), fmt(xv), ...five(kv, iv, fv, xv)];
    };
    const load = (mode: 'iptables' | 'nftables') => {
      const done = d[mode] as { loadMs?: number } | undefined;
      return done?.loadMs !== undefined ? fmtMs(done.loadMs) : (d.notFinished?.[mode] ?? '');
    };
    const kprSync = (d.kpr as { initialSyncMs?: number } | undefined)?.initialSyncMs;
    rows.push([
      `  programming ${at} (kpr: cache synced → maps written; kube-proxy: the ruleset's load)`,
      kprSync !== undefined ? fmtMs(kprSync) : '',
      load('iptables'),
      load('nftables'),
      '',
      '',
      '',
      '',
      '',
      '',
    ]);
    rows.push(line(`NodePort conn p50 latency, ${at}`, (a) => a.p50_us, us));
    rows.push(line(`NodePort conn p99 latency, ${at}`, (a) => a.p99_us, us));
    rows.push(
      line(
        `NodePort conns/s, ${at}`,
        (a) => a.conns_per_sec,
        (v) => (v === undefined ? 'n/a' : `${v}`),
      ),
    );
    const pm = (r?: { pairedMean: number | null }) => (r?.pairedMean != null ? `${r.pairedMean}×` : 'n/a');
    rows.push([
      `  paired mean-latency ratio, ${at}`,
      '',
      '',
      '',
      '',
      pm(d.ratios.kprDirect),
      pm(d.ratios.iptablesDirect),
      pm(d.ratios.nftablesDirect),
      pm(d.ratios.kprIptables),
      pm(d.ratios.kprNftables),
    ]);
    const vk = d.arms['direct-via-kpr-node'];
    const vi = d.arms['direct-via-iptables-node'];
    const vf = d.arms['direct-via-nftables-node'];
    rows.push([
      `  pod IP direct through that node, p50, ${at}`,
      us(vk?.p50_us),
      us(vi?.p50_us),
      us(vf?.p50_us),
      us(x?.p50_us),
      ...five(vk?.p50_us, vi?.p50_us, vf?.p50_us, x?.p50_us),
    ]);
    const tc = (t?: { clientSynRetrans: number; podPawsTimewait: number }) => (t ? `${t.clientSynRetrans} / ${t.podPawsTimewait}` : 'n/a');
    rows.push([
      `  client SYN retransmits / pod PAWS-rejected SYNs, ${at}`,
      tc(d.tcp.kpr),
      tc(d.tcp.iptables),
      tc(d.tcp.nftables),
      tc(d.tcp.direct),
      '',
      '',
      '',
      '',
      '',
    ]);
    const single = d.arms['kpr-one'];
    const n1 = d.ratios.kprAtNOverOne;
    if (k && single && n1) {
      // Same rounds, each agent on its own identical node: the kpr column at N Services, the direct column the agent served the echo Service alone.
      rows.push([
        `  kpr at N over kpr at 1 Service, same rounds: p50 / p99 (paired per round: p50 ${n1.pairedP50 ?? 'n/a'}×, mean ${pm(n1)}), ${at}`,
        `${us(k.p50_us)} / ${us(k.p99_us)}`,
        '',
        '',
        `at 1 svc: ${us(single.p50_us)} / ${us(single.p99_us)}`,
        `${fmtRatio(k.p50_us, single.p50_us)} / ${fmtRatio(k.p99_us, single.p99_us)}`,
        '',
        '',
        '',
        '',
      ]);
    }
    const off = d.arms['kpr-nocounters'];
    if (k && off) {
      // Same node, same rounds: the kpr column with its per-Service counters on, the direct column with them off.
      const r = d.ratios.countersOnOff;
      rows.push([
        `  kpr p50 per-Service counters on / off (target ≤ 1.02×), ${at}`,
        us(k.p50_us),
        '',
        '',
        `off: ${us(off.p50_us)}`,
        `${fmtRatio(k.p50_us, off.p50_us)} ${passFail(r?.p50 ?? undefined, 1.02)}`,
        '',
        '',
        '',
        '',
      ]);
    }
    const on = d.arms['kpr-monitor'];
    const mon = d.ratios.monitorOnOff;
    if (k && on && mon) {
      // Same node, same rounds: the kpr column with kpr monitor on (a reader draining), the direct column with it off.
      rows.push([
        `  kpr p50 / p99 kpr monitor on / off (${mon.events} events read, ${mon.lost} lost), ${at}`,
        `${us(on.p50_us)} / ${us(on.p99_us)}`,
        '',
        '',
        `off: ${us(k.p50_us)} / ${us(k.p99_us)}`,
        `${fmtRatio(on.p50_us, k.p50_us)} / ${fmtRatio(on.p99_us, k.p99_us)}`,
        '',
        '',
        '',
        '',
      ]);
    }
  }
  return rows;
}

/** Rows of the tc attach mode table: metric, tcx link, clsact filter, direct, tc / tcx (measured side by side in the same rounds). */
export function tcModeRows(res: Results): string[][] {
  const rows: string[][] = [];
  for (const d of res.dataPlaneNodePort) {
    const x = d.arms.kpr;
    const c = d.arms['kpr-tc'];
    if (!x || !c) continue;
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const us = (v?: number) => (v === undefined ? 'n/a' : `${v} µs`);
    const direct = d.arms.direct;
    rows.push([`NodePort conn p50 latency, ${at}`, us(x.p50_us), us(c.p50_us), us(direct?.p50_us), fmtRatio(c.p50_us, x.p50_us)]);
    rows.push([`NodePort conn p99 latency, ${at}`, us(x.p99_us), us(c.p99_us), us(direct?.p99_us), fmtRatio(c.p99_us, x.p99_us)]);
    rows.push([
      `NodePort conns/s, ${at}`,
      String(x.conns_per_sec),
      String(c.conns_per_sec),
      String(direct?.conns_per_sec ?? 'n/a'),
      fmtRatio(c.conns_per_sec, x.conns_per_sec),
    ]);
    const pm = d.ratios.kprTcKpr?.pairedMean;
    rows.push([`  paired mean-latency ratio, ${at}`, '', '', '', pm != null ? `${pm}×` : 'n/a']);
  }
  return rows;
}
