/**
 * Returning memory after the initial sync, and keeping scavenges out of the
 * changes' syncs.
 *
 * Building the caches and programming 10,000 Services leaves tens of MiB of
 * garbage and free heap pages that V8 would only give back after seconds to
 * minutes of idling. One full GC (bin/kpr-agent runs node with --expose-gc
 * for this) and a malloc_trim return them at once, right after the initial
 * sync, so the agent's RSS starts at its steady state (~50 ms at 10,000
 * Services, before any change is waiting).
 *
 * Never after a periodic resync: a full GC there blocked the event loop for
 * 50–220 ms, the longest thing a change made during a resync waited for.
 * A resync used to leave ~12 MiB of old-generation garbage (RSS +100 MiB
 * over 8 resyncs without the GC): V8's allocation-site pretenuring had
 * learnt from the initial sync, where the planner's objects all live on as
 * the desired state, to allocate them straight in the old generation, so
 * every re-plan's copies (equal to what is kept: Claims.set keeps the old
 * ones) became old garbage instead of dying young. bin/kpr-agent turns that
 * off (--no-allocation-site-pretenuring): a steady-state resync now leaves
 * ~1 MiB, and V8's own incremental, concurrent marking collects it
 * (docs/performance.md has the figures).
 */
import { getHeapSpaceStatistics } from 'node:v8';
import { releaseFreeNativeMemory } from '../native/index.js';

type GcFunction = (options?: { type: 'minor' | 'major' }) => void;

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

/** One full GC (when node exposes it) and a malloc_trim: after the initial sync. */
export function releaseMemory(): Released {
  const started = performance.now();
  const gc = exposedGc();
  gc?.();
  releaseFreeNativeMemory();
  return { ms: Math.round((performance.now() - started) * 10) / 10, fullGc: gc !== undefined };
}

/**
 * Fill of the young generation above which collectYoungIfFilling scavenges.
 * A change's sync allocates ~25 KB and its watch event ~30 KB, so with
 * bin/kpr-agent's 2 MiB semi-space a scavenge (0.3–1 ms) fell inside ~1% of
 * the syncs' windows: as many as set the p99 of one change. Collecting once
 * the space is 60% full, right after a sync, puts nearly every scavenge
 * between syncs instead, for ~1.7× the scavenges (each costs what its
 * survivors cost, not what the garbage does).
 */
export const YOUNG_COLLECT_AT = 0.6;

/**
 * After a sync has written the maps (an event sync, a resync): a minor GC
 * now, if the young generation is filling, so the allocation of the next
 * sync does not pay for one while a change waits. Returns whether it
 * collected (never without --expose-gc).
 */
export function collectYoungIfFilling(): boolean {
  const gc = exposedGc();
  if (!gc) return false;
  const young = getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  if (!young) return false;
  const capacity = young.space_used_size + young.space_available_size;
  if (capacity <= 0 || young.space_used_size < YOUNG_COLLECT_AT * capacity) return false;
  gc({ type: 'minor' });
  return true;
}
