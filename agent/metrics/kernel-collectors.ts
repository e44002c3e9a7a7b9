/**
 * The kernel-side values, read from the pinned maps once per scrape: each
 * map's entries and capacity (kpr_bpf_map_*), and the datapath counters of
 * kpr_stats (kpr_datapath_*_total, counters that mirror the kernel's totals).
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { MAP_NAMES } from '../maps/layout.js';
import type { Logger } from '../log/log.js';
import { STAT_METRIC_HELP, readStats, statMetric, type StatMetric } from '../datapath/datapath-stats.js';
import { pinnedMapStats } from './map-stats.js';

/** Registers the metrics; the function returned reads the maps into them. */
export function kernelCollectors(registry: Registry, bpffsDir: string, log: Logger): () => void {
  const registers = [registry];
  const entries = new Gauge({
    name: 'kpr_bpf_map_entries',
    help: 'Entries in each pinned BPF map (arrays: always their capacity).',
    labelNames: ['map'],
    registers,
  });
  const capacity = new Gauge({ name: 'kpr_bpf_map_capacity', help: 'max_entries of each pinned BPF map.', labelNames: ['map'], registers });
  const counters = new Map<StatMetric['metric'], Counter<string>>();
  for (const [metric, help] of Object.entries(STAT_METRIC_HELP) as Array<[StatMetric['metric'], string]>) {
    const labelNames = STAT_LABELS[metric] ? [STAT_LABELS[metric]!] : [];
    counters.set(metric, new Counter({ name: `kpr_datapath_${metric}_total`, help, labelNames, registers }));
  }
  return () => {
    try {
      const stats = pinnedMapStats(bpffsDir);
      entries.reset();
      capacity.reset();
      for (const s of stats) {
        // A ring buffer has no entries, and its capacity is bytes: not a map that fills.
        if (s.entries === null) continue;
        entries.set({ map: s.name }, s.entries);
        capacity.set({ map: s.name }, s.capacity);
      }
    } catch (err) {
      log.debug('cannot read the pinned maps for metrics', { error: (err as Error).message });
    }
    let stats;
    try {
      const map = BpfMap.openPinned(mapPinPath(bpffsDir, MAP_NAMES.stats));
      try {
        stats = readStats(map);
      } finally {
        map.close();
      }
    } catch (err) {
      log.debug('cannot read kpr_stats for metrics', { error: (err as Error).message });
      return;
    }
    // Counters that mirror kernel totals: reset, then add the current total.
    for (const c of counters.values()) c.reset();
    for (const s of stats) {
      const m = statMetric(s.stat);
      const c = counters.get(m.metric)!;
      if (m.label) c.inc({ [m.label.name]: m.label.value }, Number(s.value));
      else c.inc(Number(s.value));
    }
  };
}

/** The label each datapath counter carries, if any. */
const STAT_LABELS: Partial<Record<StatMetric['metric'], string>> = {
  translations: 'path',
  refusals: 'reason',
  drops: 'reason',
  tc_packets: 'action',
  snat_port_skips: 'reason',

  masquerade: 'action',
  maglev_random_fallbacks: 'reason',
  other: 'stat',
};
