/**
 * The raw cursors of MemoryDatapathMaps: a map's records in resumable
 * batches, as the kernel's hash-map batch lookup returns them. Entries sit in
 * RAW_BUCKETS buckets by a hash of their key; each batch copies whole buckets
 * from where the last one stopped (at least one bucket, however large), so an
 * entry no one touches during the walk is returned exactly once, and one
 * inserted or deleted between batches is seen or not depending on whether its
 * bucket was already visited. The sliced read-back
 * (reconcile/read-back/read-back-window.ts) is tested against this model.
 */
import type { Codec } from './struct-codec.js';
import type { RawCursor, RawDump } from './datapath-maps.js';

/** Buckets of the raw cursors' hash-table model (a BPF hash map's n_buckets, fixed). */
export const RAW_BUCKETS = 1024;

function bucketOf(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return (h >>> 0) % RAW_BUCKETS;
}

/** A batch cursor over entries identified by string, bucketed by bucketOf, each encoded as its map's key and value. */
export function bucketCursor<T, K, V>(
  batchEntries: number,
  entries: () => Iterable<[string, T]>,
  codecs: { key: Codec<K>; value: Codec<V> },
  record: (e: T) => [K, V],
): RawCursor {
  const keySize = codecs.key.size;
  const valSize = codecs.value.size;
  let bucket = 0;
  return {
    next(): RawDump | null {
      if (bucket >= RAW_BUCKETS) return null;
      const byBucket = new Map<number, T[]>();
      for (const [id, e] of entries()) {
        const b = bucketOf(id);
        if (b < bucket) continue;
        const list = byBucket.get(b);
        if (list) list.push(e);
        else byBucket.set(b, [e]);
      }
      const taken: T[] = [];
      for (; bucket < RAW_BUCKETS; bucket++) {
        const list = byBucket.get(bucket) ?? [];
        if (taken.length > 0 && taken.length + list.length > batchEntries) break;
        taken.push(...list);
      }
      const keys = Buffer.alloc(taken.length * keySize);
      const values = Buffer.alloc(taken.length * valSize);
      for (let i = 0; i < taken.length; i++) {
        const [k, v] = record(taken[i]);
        codecs.key.encode(k, keys, i * keySize);
        codecs.value.encode(v, values, i * valSize);
      }
      return { count: taken.length, keys, values, valueStride: valSize };
    },
  };
}

/** Every entry of `entries` encoded as its map's records, in one batch (the in-memory maps' raw dumps). */
export function rawDump<T, K, V>(entries: Iterable<T>, codecs: { key: Codec<K>; value: Codec<V> }, record: (e: T) => [K, V]): RawDump {
  const list = [...entries];
  const keySize = codecs.key.size;
  const valSize = codecs.value.size;
  const keys = Buffer.alloc(list.length * keySize);
  const values = Buffer.alloc(list.length * valSize);
  for (let i = 0; i < list.length; i++) {
    const [k, v] = record(list[i]);
    codecs.key.encode(k, keys, i * keySize);
    codecs.value.encode(v, values, i * valSize);
  }
  return { count: list.length, keys, values, valueStride: valSize };
}
