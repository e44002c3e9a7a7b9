/**
 * A map that is about to fill is said before it fills: one warning when a
 * limit (a map the reconciler fills, or the frontend id space) goes over
 * WARN_RATIO of its capacity, one info line when it is back under
 * CLEAR_RATIO (the gap keeps a map hovering at the mark from logging every
 * sync). kpr_bpf_map_entries / kpr_bpf_map_capacity and the chart's
 * KprMapFillHigh alert say the same to monitoring.
 */
import type { Logger } from '../log/log.js';
import type { MapFill } from './sync-types.js';

export const WARN_RATIO = 0.9;
export const CLEAR_RATIO = 0.85;

export class FillWarning {
  private readonly over = new Set<string>();

  constructor(private readonly log: Pick<Logger, 'warn' | 'info'>) {}

  /** After each sync, with its SyncResult.fill. */
  observe(fill: readonly MapFill[] | undefined): void {
    for (const f of fill ?? []) {
      if (f.capacity <= 0) continue;
      const ratio = f.used / f.capacity;
      const fields = { limit: f.limit, used: f.used, capacity: f.capacity, percent: Math.round(ratio * 1000) / 10 };
      if (!this.over.has(f.limit) && ratio >= WARN_RATIO) {
        this.over.add(f.limit);
        this.log.warn(
          `${f.limit} is ${fields.percent}% full (${f.used} of ${f.capacity}): Services that do not fit will be refused; raise its size (--map-size-*) or remove Services`,
          fields,
        );
      } else if (this.over.has(f.limit) && ratio < CLEAR_RATIO) {
        this.over.delete(f.limit);
        this.log.info(`${f.limit} is back under ${CLEAR_RATIO * 100}% full (${f.used} of ${f.capacity})`, fields);
      }
    }
  }
}
