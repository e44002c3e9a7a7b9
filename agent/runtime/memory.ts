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
 * A resync used to leave ~14 MiB of old-generation garbage, from two
 * sources, both removed:
 * - V8's allocation-site pretenuring learnt from the initial sync, where
 *   the planner's objects all live on as the desired state, to allocate
 *   them straight in the old generation, so every re-plan's copies (equal
 *   to what is kept: Claims.set keeps the old ones) became old garbage
 *   instead of dying young: bin/kpr-agent turns it off
 *   (--no-allocation-site-pretenuring);
 * - a long-lived Map or Set whose table is old gets every new table in the
 *   old generation, so clearing one per sync (400 syncs a resync) made old
 *   garbage even when it was empty (reconcile/collections.ts).
 * What is left, ~0.5 MiB a resync, V8 collects by itself, with incremental
 * and concurrent marking; only, its default growth before it starts (up to
 * 4× the live heap for a heap this size) let the RSS creep for hours.
 * afterInitialSync lowers it to HEAP_GROWING_PERCENT once the initial sync
 * is done (before, it would add major GCs to the cold sync):
 * docs/performance.md has the figures.
 */
import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';
import { releaseFreeNativeMemory } from '../../native/index.js';

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

/**
 * How much the old generation grows past what a major GC left before V8
 * starts the next one (incremental), once the initial sync is done: at
 * 10,000 Services ~7 MiB, one V8 major GC every ~15–25 periodic resyncs.
 */
export const HEAP_GROWING_PERCENT = 10;

/**
 * After the initial sync: V8's heap growth lowered to HEAP_GROWING_PERCENT
 * (it takes effect with the limit the release's GC computes), then the release.
 */
export function afterInitialSync(): Released {
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return releaseMemory();
}

/** One full GC (when node exposes it) and a malloc_trim. */
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
