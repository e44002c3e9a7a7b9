/**
 * Returning memory after the initial sync. Building the caches and
 * programming 10,000 Services leaves tens of MiB of garbage and free heap
 * pages that V8 would only give back after minutes of idling: one full GC
 * (bin/kpr-agent runs node with --expose-gc for this call alone) and a
 * malloc_trim return them at once, so the agent's RSS is its steady state
 * from the start. It runs after the maps are written, so programming is not
 * delayed; it costs ~50–100 ms once at 10,000 Services.
 */
import { releaseFreeNativeMemory } from '../native/index.js';

/** How long it took, in ms, and whether a full GC could run (false without --expose-gc). */
export function releaseMemoryAfterBulkLoad(): { ms: number; fullGc: boolean } {
  const started = performance.now();
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === 'function') gc();
  releaseFreeNativeMemory();
  return { ms: Math.round((performance.now() - started) * 10) / 10, fullGc: typeof gc === 'function' };
}
