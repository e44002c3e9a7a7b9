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

/**
 * One full GC (when node exposes it) and a malloc_trim. The agent calls it
 * after the initial sync and after every later full sync: each periodic full
 * sync re-plans every Service, and a threshold on heap growth instead let the
 * RSS creep up by ~10 MiB a sync.
 */
export function releaseMemory(): Released {
  const started = performance.now();
  const gc = exposedGc();
  gc?.();
  releaseFreeNativeMemory();
  return { ms: Math.round((performance.now() - started) * 10) / 10, fullGc: gc !== undefined };
}
