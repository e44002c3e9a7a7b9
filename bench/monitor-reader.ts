/**
 * kpr monitor on for the side-by-side cost arm of the data-plane
 * benchmarks: the switch (kpr_monitor) renewed as `kpr monitor` renews it,
 * and a reader draining kpr_events every MONITOR_POLL_MS as it does. The
 * reader only counts the records (no decoding, no printing): what the arm
 * measures is the datapath's cost, beside the reader's small share of the CPU.
 */
import { BpfMap, RingBuffer } from '../native/index.js';
import { mapPinPath } from '../agent/datapath/pins.js';
import { MAP_NAMES, STAT } from '../agent/maps/layout.js';
import { readStat } from '../agent/datapath/datapath-stats.js';
import { MONITOR_RENEW_MS, MonitorSwitch } from '../agent/cli/monitor-switch.js';
import { MONITOR_POLL_MS } from '../agent/cli/monitor.js';

export interface MonitoredRound<T> {
  result: T;
  /** Records the reader took from the ring during the round. */
  events: number;
  /** Events the ring had no room for meanwhile (kpr_stats MONITOR_LOST). */
  lost: number;
}

/** Runs `round` with the events on and read; off again afterwards. */
export async function withMonitorOn<T>(bpffsDir: string, round: () => Promise<T>): Promise<MonitoredRound<T>> {
  const open = (name: string) => BpfMap.openPinned(mapPinPath(bpffsDir, name));
  const maps = { monitor: open(MAP_NAMES.monitor), events: open(MAP_NAMES.events), stats: open(MAP_NAMES.stats) };
  const sw = new MonitorSwitch(maps.monitor);
  let events = 0;
  const ring = new RingBuffer(maps.events, () => void events++);
  const lost0 = readStat(maps.stats, STAT.MONITOR_LOST);
  const timers: NodeJS.Timeout[] = [];
  let lost: number;
  let result: T;
  try {
    sw.renew();
    timers.push(
      setInterval(() => sw.renew(), MONITOR_RENEW_MS),
      setInterval(() => ring.consume(), MONITOR_POLL_MS),
    );
    result = await round();
  } finally {
    for (const t of timers) clearInterval(t);
    sw.release();
    ring.consume();
    ring.close();
    lost = Number(readStat(maps.stats, STAT.MONITOR_LOST) - lost0);
    for (const m of Object.values(maps)) m.close();
  }
  return { result, events, lost };
}
