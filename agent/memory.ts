/**
 * Returning memory after full syncs. Building the caches and programming
 * 10,000 Services leaves tens of MiB of garbage and free heap pages that V8
 * would only give back after seconds to minutes of idling, and each periodic
 * full sync (every Service re-planned) churns more. One full GC
 * (bin/kpr-agent runs node with --expose-gc for this alone) and a
 * malloc_trim return them at once, so the agent's RSS stays at its steady
 * state. It runs after the maps are written, so programming is never delayed;
 * it costs ~50 ms at 10,000 Services (40–270 ms on a loaded machine).
 *
 * Since the periodic resync runs sliced (a change's sync runs between two
 * slices of a few ms), that GC was the longest thing a change could wait
 * for during a resync. It cannot simply go: a steady-state resync at 10,000
 * Services leaves ~17 MiB of old-generation garbage (the desired state it
 * replaced), and without the GC the RSS grew by that much per resync until
 * V8's own major GC (153 → 280 MiB over 7 resyncs in bench/resync.ts);
 * letting V8 collect sooner (--heap-growing-percent=20) put its GCs inside
 * the slices instead (longest slice 74 ms, the resync 2.5× longer).
 * MemoryReleaser runs it after the initial sync, and after a resync only
 * when that resync wrote or freed RELEASE_CHANGED_ENTRIES or more entries
 * (a repaired drift, a cluster that changed a lot) or the heap in use grew
 * by RELEASE_GROWTH_BYTES since the last release: about every second
 * steady-state resync, the RSS between releases within that growth (a
 * relative threshold of 10% once let it creep ~10 MiB a sync).
 */
import { getHeapSpaceStatistics } from 'node:v8';
import { releaseFreeNativeMemory } from '../native/index.js';
import type { SyncResult } from './reconcile/sync-types.js';

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

/** One full GC (when node exposes it) and a malloc_trim (MemoryReleaser decides when). */
export function releaseMemory(): Released {
  const started = performance.now();
  const gc = exposedGc();
  gc?.();
  releaseFreeNativeMemory();
  return { ms: Math.round((performance.now() - started) * 10) / 10, fullGc: gc !== undefined };
}

/** Map entries a resync wrote and deleted above which the full GC runs after it. */
export const RELEASE_CHANGED_ENTRIES = 16384;
/** Growth of the heap in use since the last release above which the full GC runs after a resync. */
export const RELEASE_GROWTH_BYTES = 24 * 1024 * 1024;

/** What a full sync changed, as its SyncResult counts it. */
export type FullSyncChanges = Pick<SyncResult, 'servicesWritten' | 'servicesDeleted' | 'backendsWritten' | 'backendsDeleted' | 'auxWritten' | 'auxDeleted'> & { drift: readonly unknown[] };

/** When the agent returns memory: after the initial sync, and after a resync that churned enough to matter. */
export class MemoryReleaser {
  /** process.memoryUsage().heapUsed right after the last release. */
  private heapAfterRelease = 0;

  constructor(private readonly heapUsed: () => number = () => process.memoryUsage().heapUsed) {}

  /** After the initial sync: always. */
  afterInitialSync(): Released {
    return this.releaseNow();
  }

  /**
   * After a later full sync (a resync): releases when it wrote or deleted
   * RELEASE_CHANGED_ENTRIES or more, repaired drift, or the heap grew by
   * RELEASE_GROWTH_BYTES since the last release; undefined when it did not.
   */
  afterResync(r: FullSyncChanges): Released | undefined {
    const changed = r.servicesWritten + r.servicesDeleted + r.backendsWritten + r.backendsDeleted + r.auxWritten + r.auxDeleted;
    if (changed < RELEASE_CHANGED_ENTRIES && r.drift.length === 0 && this.heapUsed() < this.heapAfterRelease + RELEASE_GROWTH_BYTES) return undefined;
    return this.releaseNow();
  }

  private releaseNow(): Released {
    const r = releaseMemory();
    this.heapAfterRelease = this.heapUsed();
    return r;
  }
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
 * After a sync has written the maps: a minor GC now, if the young generation
 * is filling, so the allocation of the next sync does not pay for one while
 * a change waits. Returns whether it collected (never without --expose-gc).
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
