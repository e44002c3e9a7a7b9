/**
 * How long the event loop was held at most over a stretch of time (a
 * resync): node's event-loop delay histogram on a 1 ms timer, enabled only
 * while it is asked for. A timer due every millisecond that fires `d` ms
 * after the one before means the loop was busy for about d − 1 ms: a slice,
 * a change's sync, a GC pause, whatever ran.
 */
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks';

const RESOLUTION_MS = 1;

export class LoopBlockProbe {
  private histogram: ELDHistogram | undefined;
  private on = false;

  start(): void {
    this.histogram ??= monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    this.histogram.reset();
    this.histogram.enable();
    this.on = true;
  }

  /** Stops; the longest block since start(), ms (undefined when not started, or no tick came). */
  stop(): number | undefined {
    if (!this.on || !this.histogram) return undefined;
    this.on = false;
    this.histogram.disable();
    const max = this.histogram.max;
    this.histogram.reset();
    // An empty histogram's max is 0; a tick records its interval since the last one, the resolution included.
    return max > 0 ? Math.max(0, max / 1e6 - RESOLUTION_MS) : undefined;
  }
}
