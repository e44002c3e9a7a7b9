/**
 * "Once per object version": a warning about object X is logged when X's
 * version (its resourceVersion, or the text of what is wrong with it)
 * differs from the one last logged, and not again until it changes. The same
 * bad Service read by every sync is one line, not one per sync.
 *
 * Memory is bounded: callers forget objects that are gone (deleted, fixed),
 * and past `max` objects the least recently seen is forgotten (it is logged
 * again if it comes back: a repeat, never a loss). Versions longer than 64
 * characters are kept as a SHA-1, so a 100 KB reason costs 28 bytes.
 */
import { createHash } from 'node:crypto';

/** Default number of objects remembered. */
export const DEFAULT_MAX_OBJECTS = 20_000;

/** The version as remembered: itself when short, else its hash. */
function versionTag(version: string): string {
  return version.length <= 64 ? version : `#${createHash('sha1').update(version).digest('base64')}`;
}

export class OncePerVersion {
  private readonly seen = new Map<string, string>();

  constructor(private readonly max = DEFAULT_MAX_OBJECTS) {}

  /**
   * true when `object` at `version` has not been reported yet (the caller
   * logs it now); it is remembered as reported either way.
   */
  isNew(object: string, version: string): boolean {
    const tag = versionTag(version);
    const had = this.seen.get(object);
    // Refreshed on every sighting: an object still being reported is the last one forgotten.
    if (had !== undefined) this.seen.delete(object);
    this.seen.set(object, tag);
    if (this.seen.size > this.max) this.seen.delete(this.seen.keys().next().value!);
    return had !== tag;
  }

  /** The object is gone or fixed: a later problem with it is logged again, whatever its version. */
  forget(object: string): void {
    this.seen.delete(object);
  }

  /** Whether `object` is remembered. */
  has(object: string): boolean {
    return this.seen.has(object);
  }

  /** Objects remembered. */
  get size(): number {
    return this.seen.size;
  }
}
