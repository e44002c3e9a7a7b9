/**
 * Returning memory after full syncs. Building the caches and programming
 * 10,000 Services leaves tens of MiB of garbage and free heap pages that V8
 * would only give back after seconds to minutes of idling, and each periodic
 * full sync (every Service re-planned) churns more. One full GC
 * (bin/kpr-agent runs node with --expose-gc for this alone) and a
 * malloc_trim return them at once, so the agent's RSS stays at its steady
 * state. It runs after the maps are written, so programming is never delayed;
 * it costs ~50 ms at 10,000 Services, next to a full sync's several hundred.
 */
import { releaseFreeNativeMemory } from '../native/index.js';

type GcFunction = () => void;

function exposedGc(): GcFunction | undefined {
  const gc = (globalThis as { gc?: GcFunction }).gc;
  return typeof gc === 'function' ? gc : undefined;
}

export interface Released {
  /** How long the release took. */
  ms: number;
  /** Whether a full GC ran (false without --expose-gc: only malloc_trim then). */
  fullGc: boolean;
}

function release(): Released {
  const started = performance.now();
  const gc = exposedGc();
  gc?.();
  releaseFreeNativeMemory();
  return { ms: Math.round((performance.now() - started) * 10) / 10, fullGc: gc !== undefined };
}

/** A full sync grew the heap by this much over what the last release left: worth a release. */
const GROWTH_WORTH_RELEASING = 1.1;

export class MemoryReleaser {
  private heapAfterRelease = 0;

  /** After the initial sync: always. */
  afterInitialSync(): Released {
    return this.releaseNow();
  }

  /** After a periodic or event-triggered full sync: only when the heap grew since the last release. */
  afterFullSync(): Released | undefined {
    if (process.memoryUsage().heapUsed < this.heapAfterRelease * GROWTH_WORTH_RELEASING) return undefined;
    return this.releaseNow();
  }

  private releaseNow(): Released {
    const r = release();
    this.heapAfterRelease = process.memoryUsage().heapUsed;
    return r;
  }
}
