/**
 * The read-back: whether the kernel's maps hold what the mirror says,
 * compared by fingerprint of the raw records (fingerprint.ts, the mirror's
 * side encoded by each map's table: tables/) with no object per entry on either
 * side. A full sync's read-back dumps the two large maps whole (full); a
 * sliced resync reads each map back in slices (step).
 *
 * Every map the reconciler owns (tables/index.ts) — the slots and the
 * backends (210,000 entries each at 10,000 Services × 10), the service
 * addresses and the frontends' names (10,000 each), the affinity pairs (one
 * per backend of a frontend with session affinity: up to 262,144) and the
 * source ranges (up to 16,384) — is read back in steps of READ_BACK_BATCH records, with event syncs writing between them
 * (a "read-back window"):
 * the kernel's map is dumped in resumable batches, then the
 * mirror's entries are hashed the same way, each record kept as its key id
 * and record hash; every key of that map a sync writes or deletes while the
 * window is open is recorded as touched, and at the end both sides are
 * summed without the touched keys (fingerprint.ts). An untouched key's entry
 * is constant in the kernel and in the mirror during the window, and the
 * kernel's walk returns it exactly once (a hash map's batch walk,
 * BpfMap.lookupBatchCursor; the LPM trie's walk by key in post-order,
 * BpfMap.keyWalkCursor, which starts the map's window again when the key it
 * would resume from was deleted), so equal fingerprints mean no drift on an
 * untouched key; a touched key was
 * just written (or deleted) to what the mirror says by the sync that touched
 * it. Two different keys share a 52-bit key id with odds ~2^-52 per pair: an
 * untouched key that shares one with a touched key is left out on both
 * sides, so its drift, if it has any, is missed by this read-back only (the
 * next one has other touched keys), never reported falsely. A difference
 * leads to the decoded compare and repair in one step (repairDrift, the rare path).
 */
import type { DatapathMaps } from '../../maps/datapath-maps.js';
import type { TouchedKeys } from './fingerprint.js';
import { compareWithKernel } from './drift-compare.js';
import { KernelMirror, type KernelContents } from '../kernel-mirror.js';
import { SlicedReadBack } from './read-back-window.js';
import { TABLES } from '../tables/index.js';
import { READ_BACK_BATCH, type ReadBackVerdict, type ReconcileLogger, type SyncResult } from '../sync-types.js';

export class ReadBack {
  /** The read-back in steps. */
  private readonly sliced: SlicedReadBack;

  constructor(
    private readonly maps: DatapathMaps,
    private readonly mirror: KernelMirror,
    private readonly logger: ReconcileLogger,
    batch: number = READ_BACK_BATCH,
  ) {
    this.sliced = new SlicedReadBack(maps, mirror, batch);
  }

  /** The keys of `map` to record as touched: those of an open read-back window's map (read-back-window.ts). */
  touched(map: string): TouchedKeys | undefined {
    return this.sliced.touched(map);
  }

  /** Ends a sliced read-back left unfinished: keys are no longer recorded. */
  end(): void {
    this.sliced.end();
  }

  /** Sliced read-back: one step of map `map` (Reconciler.readBackMatches); 'unreadable' (logged) if a dump fails. */
  step(map: string): ReadBackVerdict {
    try {
      return this.sliced.step(map);
    } catch (err) {
      this.sliced.end();
      this.logger.warn('cannot read the maps back for drift repair', { map, error: err instanceof Error ? err.message : String(err) });
      return 'unreadable';
    }
  }

  /**
   * Step 0 of a full (or sweep) sync with readBack: dumps the maps, counts what differs from the
   * mirror (result.drift) and, if anything does, rebuilds the mirror from
   * the dump (what adopt() does at start), keeping the desired state. The
   * full diff that follows then writes the difference in the usual safe
   * order. A dump that fails leaves the mirror as it was (logged; the sync
   * goes on, the next period reads again).
   */
  full(result: SyncResult, decoded: boolean, dirty: Set<string>, frontendIdHints: Map<string, number>): void {
    const started = performance.now();
    let kernel: KernelContents;
    try {
      // The common case, no drift, decodes nothing of the two large maps.
      if (!decoded && this.matchesRaw()) {
        result.readBackMs = performance.now() - started;
        return;
      }
      result.readBackDecoded = true;
      kernel = KernelMirror.read(this.maps);
    } catch (err) {
      this.logger.warn('cannot read the maps back for drift repair', { error: err instanceof Error ? err.message : String(err) });
      return;
    }
    result.drift = compareWithKernel(this.mirror, kernel);
    if (result.drift.length > 0) {
      const before = new Map(this.mirror.frontendIdOwner);
      this.mirror.load(kernel, dirty);
      // A frontend whose masters all went keeps its frontendId if nothing else took it.
      for (const [fid, fk] of before) {
        if (!this.mirror.frontendIds.has(fid) && this.mirror.ownedFrontendId(fk) === 0) frontendIdHints.set(fk, fid);
      }
    }
    result.readBackMs = performance.now() - started;
  }

  /**
   * A full sync's read-back, the common case (no drift) decoding nothing of
   * the two large maps (each table's own check: tables/): whether every map
   * holds exactly the mirror's entries. Throws if a dump fails.
   */
  matchesRaw(): boolean {
    return TABLES.every((t) => t.matches(this.maps, this.mirror));
  }
}
