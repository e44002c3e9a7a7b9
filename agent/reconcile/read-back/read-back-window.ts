/**
 * The read-back of one map in steps, event syncs writing between them (a
 * "read-back window"; why it is exact: read-back.ts): its kernel side in
 * resumable batches, its mirror side hashed a batch at a time, both summed
 * as they come, the touched keys' records taken out at the end in steps.
 * Each map's table (tables/) says its record sizes, its kernel cursor and
 * how its mirror side is walked.
 */
import type { DatapathMaps } from '../../maps/datapath-maps.js';
import { RecordHashes, TouchedKeys } from './fingerprint.js';
import type { KernelMirror } from '../kernel-mirror.js';
import type { ReadBackVerdict } from '../sync-types.js';
import { tableOf } from '../tables/index.js';
import type { ReadBackWindow, SlicedMap } from '../tables/table.js';

/** Records whose touched check one read-back step does, per record of its batch it could have read or hashed instead (a check is ~1/10 of a read and hash). */
const SUM_STEPS_PER_BATCH = 8;

export class SlicedReadBack {
  /** The sliced read-back of one map under way, if any. */
  private window: ReadBackWindow | undefined;
  /** Per map, the record hashes of its two sides, reused by every window on it (RecordHashes.clear). */
  private readonly sides = new Map<string, { kernel: RecordHashes; mirror: RecordHashes }>();

  constructor(
    private readonly maps: DatapathMaps,
    private readonly mirror: KernelMirror,
    private readonly batch: number,
  ) {}

  /**
   * The keys of `map` to record as touched: those of the open read-back
   * window's map, while its records are still being read (once both sides
   * are, what a sync writes no longer changes them: the set is final).
   */
  touched(map: string): TouchedKeys | undefined {
    const w = this.window;
    return w?.map === map && !w.sums ? w.touched : undefined;
  }

  /** Ends a sliced read-back left unfinished: keys are no longer recorded. */
  end(): void {
    this.window = undefined;
  }

  /** One step of `map`'s read-back ('pending' until its last). Throws if a dump fails (the caller ends the window) or `map` is not one the reconciler owns. */
  step(map: string): ReadBackVerdict {
    const how = tableOf(map)?.sliced;
    if (!how) throw new Error(`not a map the reconciler owns: ${map}`);
    return this.slice(map, how);
  }

  /**
   * One slice of a map's sliced read-back: the next kernel batch, or the
   * next mirror entries, about `batch` records; once both sides are
   * complete, their fingerprints without the touched keys.
   */
  private slice(map: string, how: SlicedMap<KernelMirror>): ReadBackVerdict {
    const m = this.maps;
    const batch = Math.max(1, this.batch);
    let w = this.window;
    if (!w || w.map !== map || w.generation !== this.mirror.generation) {
      let sides = this.sides.get(map);
      if (!sides) this.sides.set(map, (sides = { kernel: new RecordHashes(), mirror: new RecordHashes() }));
      sides.kernel.clear();
      sides.mirror.clear();
      w = this.window = {
        map,
        generation: this.mirror.generation,
        cursor: how.cursor(m, batch),
        kernel: sides.kernel,
        mirror: sides.mirror,
        touched: new TouchedKeys(),
        iter: null,
        membersOf: 0,
        members: null,
        nextId: 0,
        mirrorDone: false,
        sums: null,
      };
    }
    let work = 0;
    while (w.cursor && work < batch) {
      const d = w.cursor.next();
      if (!d) {
        w.cursor = null;
        break;
      }
      if (d.restart) {
        // A walk by key lost its place (an LPM trie's: the key it resumes from was deleted by a sync): read this map again.
        this.window = undefined;
        return 'pending';
      }
      how.normalise?.(d);
      w.kernel.addBatch(d.count, d.keys, how.keySize, d.values, how.valSize, d.valueStride);
      work += Math.max(1, d.count);
    }
    if (w.cursor) return 'pending';
    if (!w.mirrorDone) {
      w.mirrorDone = how.hashMirror(this.mirror, w, batch - work);
      if (!w.mirrorDone) return 'pending';
    }
    // Both sides summed as they came; the touched keys' records (the set final from here on) come out of the sums in steps too (210,000 records a side for the slots at 10,000 Services × 10).
    const s = (w.sums ??= { kernel: w.kernel.totals(), mirror: w.mirror.totals(), side: 0, at: 0 });
    let left = batch * SUM_STEPS_PER_BATCH - work;
    while (s.side < 2 && left > 0) {
      const side = s.side === 0 ? w.kernel : w.mirror;
      const end = Math.min(side.length, s.at + left);
      side.subtractTouched(w.touched, s.side === 0 ? s.kernel : s.mirror, s.at, end);
      left -= end - s.at;
      s.at = end;
      if (end >= side.length) {
        s.side++;
        s.at = 0;
      }
    }
    if (s.side < 2) return 'pending';
    this.window = undefined;
    const { kernel, mirror } = s;
    return kernel.a === mirror.a && kernel.b === mirror.b && kernel.count === mirror.count ? 'match' : 'drift';
  }
}
