/**
 * A timer probe of the event loop for the in-process benchmarks: a 1 ms
 * timer re-armed from its own callback, its lateness recorded. A tick that
 * comes `gap` ms after the one before means the loop was blocked for about
 * gap − period (a synchronous step, a GC pause, the probe's own timer
 * slack); blocks are kept with the time they ended, so a benchmark can ask
 * afterwards for the longest inside a window it learned of later (a resync
 * reports its start and end when it ends).
 */

export interface LoopBlock {
  /** performance.now() when the loop got back to the probe. */
  end: number;
  /** How long the loop was away beyond the probe's period, ms. */
  ms: number;
}

export class LoopProbe {
  private readonly blocks: LoopBlock[] = [];
  private timer: NodeJS.Timeout | undefined;
  private last = 0;

  /** Blocks shorter than `keepAboveMs` are not kept (a 1 ms probe ticks ~1,000 times a second). */
  constructor(
    private readonly periodMs = 1,
    private readonly keepAboveMs = 0.5,
  ) {}

  start(): void {
    this.last = performance.now();
    const tick = () => {
      const now = performance.now();
      const ms = now - this.last - this.periodMs;
      if (ms > this.keepAboveMs) this.blocks.push({ end: now, ms });
      this.last = now;
      this.timer = setTimeout(tick, this.periodMs);
    };
    this.timer = setTimeout(tick, this.periodMs);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The blocks that overlap [from, to] (performance.now() times). */
  within(from: number, to: number): LoopBlock[] {
    return this.blocks.filter((b) => b.end >= from && b.end - b.ms <= to);
  }

  /** The longest block overlapping [from, to], ms (0 when none was kept). */
  longestWithin(from: number, to: number): number {
    let max = 0;
    for (const b of this.within(from, to)) if (b.ms > max) max = b.ms;
    return max;
  }
}
