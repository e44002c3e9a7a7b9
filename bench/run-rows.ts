/** The control-plane and ClusterIP data-plane rows of `bench/run.ts`'s tables, with their ratios and targets. */
import { PAUSE_MS } from './control-plane.js';
import { fmtMs, fmtRatio, passFail, round, type Row } from './report.js';
import { clusterIpScaleCost, fmtLimit, nodePortScaleCost, targetResults } from './scale-targets.js';
import { cfg, FLOOR_RUNS, T } from './run-config.js';
import type { Results } from './run-results.js';

export function buildRows(res: Results): { control: Row[]; data: Row[] } {
  const k = res.controlPlane.kpr;
  const i = res.controlPlane.iptables;
  const n = `${cfg.services.toLocaleString('en-US')} svc × ${cfg.endpoints} ep`;
  const control: Row[] = [];
  const ratios: Record<string, number> = {};
  const ratio = (key: string, a?: number, b?: number) => {
    if (a !== undefined && b !== undefined && Number.isFinite(a) && Number.isFinite(b) && b > 0) ratios[key] = round(a / b, 6);
    return fmtRatio(a, b);
  };
  control.push({
    metric: `cold programming, ${n} (median of ${k?.coldRunsMs?.length ?? 1} agent starts)`,
    kpr: k ? `${fmtMs(k.coldMs)}${k.coldRunsMs?.length > 1 ? ` (${k.coldRunsMs.map((v) => fmtMs(v)).join(', ')})` : ''}` : fmtMs(undefined),
    other: i ? (i.cold ? `${fmtMs(i.cold.medianMs)} (iptables-restore)` : `${i.notFinished} (iptables-restore)`) : 'n/a',
    ratio: ratio('cold', k?.coldMs, i?.cold?.medianMs),
    target: fmtLimit(T.coldMs, 'ms'),
    result: passFail(k?.coldMs, T.coldMs),
  });
  control.push({
    metric: `  its floor: the same entries, no Kubernetes rules (median of ${FLOOR_RUNS})`,
    kpr: fmtMs(k?.coldFloor.medianMs),
    other: '',
    ratio: k ? `kpr ÷ floor ${ratio('coldOverFloor', k.coldMs, k.coldFloor.medianMs)}` : '',
    target: '',
    result: '',
  });
  const ch = k?.change;
  control.push({
    metric: `one endpoint change p50 (n=${ch?.eventToMapsMs.n ?? 0} / ${i?.changeMinimalMs.n ?? 0})`,
    kpr: fmtMs(ch?.eventToMapsMs.p50),
    other: i ? `${fmtMs(i.changeMinimalMs.p50)} (changed chains only)` : 'n/a',
    ratio: ratio('changeP50', ch?.eventToMapsMs.p50, i?.changeMinimalMs.p50),
    target: '',
    result: '',
  });
  control.push({
    metric: 'one endpoint change p99',
    kpr: fmtMs(ch?.eventToMapsMs.p99),
    other: i ? `${fmtMs(i.changeMinimalMs.p99)} (changed chains only)` : 'n/a',
    ratio: ratio('changeP99', ch?.eventToMapsMs.p99, i?.changeMinimalMs.p99),
    target: fmtLimit(T.changeP99Ms, 'ms'),
    result: passFail(ch?.eventToMapsMs.p99, T.changeP99Ms),
  });
  control.push({
    metric: `  kube-proxy's real partial sync p50 / p99, ratio on p99 (n=${i?.changeExactMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: i ? `${fmtMs(i.changeExactMs.p50)} / ${fmtMs(i.changeExactMs.p99)} (+KUBE-SERVICES)` : 'n/a',
    ratio: ratio('changeExactP99', ch?.eventToMapsMs.p99, i?.changeExactMs.p99),
    target: '',
    result: '',
  });
  const nf = res.controlPlane.nftables;
  control.push({
    metric: `kube-proxy nftables mode: cold programming, ${n}`,
    kpr: fmtMs(k?.coldMs),
    other: nf ? `${nf.cold ? fmtMs(nf.cold.medianMs) : nf.notFinished} (nft -f)` : 'n/a',
    ratio: ratio('coldNft', k?.coldMs, nf?.cold?.medianMs),
    target: '',
    result: '',
  });
  ratio('changeNftP50', ch?.eventToMapsMs.p50, nf?.changeMinimalMs.p50);
  control.push({
    metric: `  one endpoint change p50 / p99, ratio on p99 (n=${ch?.eventToMapsMs.n ?? 0} / ${nf?.changeMinimalMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: nf ? `${fmtMs(nf.changeMinimalMs.p50)} / ${fmtMs(nf.changeMinimalMs.p99)} (the nft -f transaction)` : 'n/a',
    ratio: ratio('changeNftP99', ch?.eventToMapsMs.p99, nf?.changeMinimalMs.p99),
    target: '',
    result: '',
  });
  control.push({
    metric: `  kube-proxy's real partial sync p50 / p99, ratio on p99 (n=${nf?.changeExactMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.eventToMapsMs.p50)} / ${fmtMs(ch.eventToMapsMs.p99)}` : 'n/a',
    other: nf ? `${fmtMs(nf.changeExactMs.p50)} / ${fmtMs(nf.changeExactMs.p99)} (+nft -j list chains: ${fmtMs(nf.listChainsMs.p50)})` : 'n/a',
    ratio: ratio('changeNftExactP99', ch?.eventToMapsMs.p99, nf?.changeExactMs.p99),
    target: '',
    result: '',
  });
  control.push({
    metric: `  kpr change p50 / p99 back to back (n=${ch?.backToBackMs.n ?? 0}) · after a ≥ ${ch?.pauseMs ?? PAUSE_MS} ms pause (n=${ch?.afterPauseMs.n ?? 0})`,
    kpr: ch ? `${fmtMs(ch.backToBackMs.p50)} / ${fmtMs(ch.backToBackMs.p99)} · ${fmtMs(ch.afterPauseMs.p50)} / ${fmtMs(ch.afterPauseMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: '  kpr sync durationMs p50 / p99',
    kpr: ch ? `${fmtMs(ch.durationMs.p50)} / ${fmtMs(ch.durationMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: '  kpr API update → sync log seen p50 / p99',
    kpr: ch ? `${fmtMs(ch.apiToLogMs.p50)} / ${fmtMs(ch.apiToLogMs.p99)}` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  control.push({
    metric: 'agent RSS after initial sync',
    kpr: k ? `${k.rssMiB.afterInitialSync} MiB` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.rssMiB, 'MiB'),
    result: passFail(k?.rssMiB.afterInitialSync, T.rssMiB),
  });
  control.push({
    metric: `agent RSS after ${ch?.eventToMapsMs.n ?? 0} changes`,
    kpr: k?.rssMiB.afterChanges !== undefined ? `${k.rssMiB.afterChanges} MiB` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.rssMiB, 'MiB'),
    result: passFail(k?.rssMiB.afterChanges, T.rssMiB),
  });
  const sl = k?.serviceList;
  control.push({
    metric: `kpr service list -o json, ${n} (median of ${sl?.runsMs.length ?? 0}; ${sl ? `${sl.frontends.toLocaleString('en-US')} frontends, ${(sl.bytes / 1e6).toFixed(1)} MB` : 'not run'})`,
    kpr: sl ? `${fmtMs(sl.medianMs)} (${sl.runsMs.map((v) => fmtMs(v)).join(', ')})` : 'n/a',
    other: '',
    ratio: '',
    target: fmtLimit(T.serviceListMs, 'ms'),
    result: T.serviceListMs !== undefined ? passFail(sl?.medianMs, T.serviceListMs) : '',
  });
  const rs = k?.resync;
  control.push({
    metric: `periodic full resync with kernel read-back, ${n} (n=${rs?.durationMs.length ?? 0})`,
    kpr: rs?.durationMs.length ? `${rs.durationMs.map((v) => fmtMs(v)).join(', ')} (read-back ${rs.readBackMs.map((v) => fmtMs(v)).join(', ')})` : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  const listMs = (xs: Array<number | null> | undefined) => (xs?.length && xs.every((x) => x !== null) ? xs.map((v) => fmtMs(v!)).join(', ') : 'n/a');
  control.push({
    metric: "  its longest event-loop block (the agent's 1 ms probe) · its longest slice",
    kpr: rs ? `${listMs(rs.loopBlockMs)} · ${listMs(rs.longestSliceMs)}` : 'n/a',
    other: '',
    ratio: '',
    target: '≤ a few ms',
    result: '',
  });
  const during = rs?.duringApiToLogMs;
  const none = rs?.otherApiToLogMs;
  control.push({
    metric: `  an endpoint change, API update → synced, p50 / p99: made during a resync (n=${during?.n ?? 0}) · with none running (n=${none?.n ?? 0})`,
    kpr:
      during && none
        ? `${fmtMs(during.p50)} / ${fmtMs(during.p99)} · ${fmtMs(none.p50)} / ${fmtMs(none.p99)} (during ÷ none ${ratio('resyncChangeP50', during.p50, none.p50)} / ${ratio('resyncChangeP99', during.p99, none.p99)})`
        : 'n/a',
    other: '',
    ratio: '',
    target: '',
    result: '',
  });
  res.controlPlane.ratios = ratios;

  const data: Row[] = [];
  for (const d of res.dataPlane) {
    const c = d.arms.clusterip;
    const x = d.arms.direct;
    const h = d.arms['direct-nohook'];
    const at = `${d.services.toLocaleString('en-US')} svc`;
    const isScale = d.services === cfg.services && d.services > 1 && T.clusterIpVsDirect !== undefined;
    data.push({
      metric: `conn p50 latency, ${at} (ClusterIP vs pod IP)`,
      kpr: c ? `${c.p50_us} µs` : 'n/a',
      other: x ? `${x.p50_us} µs` : 'n/a',
      ratio: fmtRatio(c?.p50_us, x?.p50_us),
      target: isScale ? fmtLimit(T.clusterIpVsDirect, '×') : '',
      result: isScale ? passFail(d.costRatioP50, T.clusterIpVsDirect!) : '',
    });
    const off = d.arms['clusterip-nocounters'];
    if (c && off) {
      data.push({
        metric: `conn p50, ${at}: per-Service counters on vs off`,
        kpr: `${c.p50_us} µs`,
        other: `${off.p50_us} µs`,
        ratio: fmtRatio(c.p50_us, off.p50_us),
        target: '≤ 1.02×',
        result: passFail(d.countersCost?.p50 ?? undefined, 1.02),
      });
    }
    const mon = d.monitorCost;
    const on = d.arms['clusterip-monitor'];
    if (c && on && mon) {
      data.push({
        metric: `conn p50 / p99, ${at}: kpr monitor on (reader draining; ${mon.events} events read, ${mon.lost} lost) vs off`,
        kpr: `${on.p50_us} / ${on.p99_us} µs`,
        other: `${c.p50_us} / ${c.p99_us} µs`,
        ratio: `${fmtRatio(on.p50_us, c.p50_us)} / ${fmtRatio(on.p99_us, c.p99_us)}`,
        target: '',
        result: '',
      });
    }
    data.push({
      metric: `conn p99 latency, ${at}`,
      kpr: c ? `${c.p99_us} µs` : 'n/a',
      other: x ? `${x.p99_us} µs` : 'n/a',
      ratio: fmtRatio(c?.p99_us, x?.p99_us),
      target: '',
      result: '',
    });
    data.push({
      metric: `conns/s, ${at}`,
      kpr: c ? `${c.conns_per_sec}` : 'n/a',
      other: x ? `${x.conns_per_sec}` : 'n/a',
      ratio: fmtRatio(c?.conns_per_sec, x?.conns_per_sec),
      target: '',
      result: '',
    });
    data.push({
      metric: `  paired mean-latency ratio, ${at}`,
      kpr: d.costRatioMean !== undefined ? `${d.costRatioMean}×` : 'n/a',
      other: h ? `no-hook p50 ${h.p50_us} µs` : '',
      ratio: '',
      target: '',
      result: '',
    });
  }
  const target = (ratio?: number) => ({ target: fmtLimit(T.atScaleVsOne, '×'), result: T.atScaleVsOne !== undefined ? passFail(ratio, T.atScaleVsOne) : '' });
  for (const [what, c] of [
    ['ClusterIP', clusterIpScaleCost(res.dataPlane)],
    ['NodePort', nodePortScaleCost(res.dataPlaneNodePort)],
  ] as const) {
    if (c.services === undefined) continue;
    const at = `${what} cost at ${c.services.toLocaleString('en-US')} svc over at 1 svc`;
    const s = c.sameRounds;
    if (s && c.ratio !== undefined) {
      // c.ratio is the target's figure: the paired per-round ratio (nodePortScaleCost).
      data.push({
        metric: `${at}, same rounds (kpr p50 at N over kpr at 1 Service, paired per round, median of the rounds; ratio of the medians ${s.p50}×, paired mean ${s.pairedMean ?? 'n/a'}×)`,
        kpr: `${s.kprP50AtN} µs vs ${s.kprP50AtOne} µs`,
        other: '',
        ratio: `${c.ratio.toFixed(3)}×`,
        ...target(c.ratio),
      });
    }
    // The figure across the two phases: the target's where there is no same-rounds one, kept for reference beside it.
    const cross = c.crossPhaseRatio ?? c.ratio;
    data.push({
      metric: `${at} (p50 over direct at each${s ? ', phases minutes apart: for reference' : ''})`,
      kpr: `${c.atN ?? 'n/a'}× vs ${c.one ?? 'n/a'}×`,
      other: '',
      ratio: cross !== undefined ? `${cross.toFixed(3)}×` : 'n/a',
      ...(s ? { target: '', result: '' } : target(cross)),
    });
  }
  return { control, data };
}

export function collectTargets(res: Results): void {
  const k = res.controlPlane.kpr;
  const scale = res.dataPlane.find((d) => d.services === cfg.services && d.services > 1);
  res.scaleCost = { clusterIp: clusterIpScaleCost(res.dataPlane), nodePort: nodePortScaleCost(res.dataPlaneNodePort) };
  res.targets = targetResults({
    services: cfg.services,
    coldMs: k?.coldMs,
    changeP99Ms: k?.change?.eventToMapsMs.p99,
    rssMiB: k ? Math.max(k.rssMiB.afterInitialSync, k.rssMiB.afterChanges ?? 0) : undefined,
    serviceListMs: k?.serviceList?.medianMs,
    clusterIpVsDirect: scale?.costRatioP50,
    ...res.scaleCost,
  });
}
