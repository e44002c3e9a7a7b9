/**
 * Copies one map's entries into another, converting each key and value from
 * the source's layout to the target's (agent/maps/layout-convert.ts), in
 * batches: what a live migration fills the new set with.
 */
import { constants } from 'node:os';
import { BPF_ANY, BPF_NOEXIST, KprBpfError, possibleCpus, type BpfMap } from '../../native/index.js';
import { layoutConverter } from '../maps/layout-convert.js';
import type { StructLayout } from '../maps/struct-codec.js';

const CHUNK = 4096;
const { EEXIST, E2BIG, ENOSPC } = constants.errno;

export interface Layouts {
  key: StructLayout;
  value: StructLayout;
}

/**
 * - all: every entry is written, in batches (nothing writes the target yet);
 * - missing: entries the target already has are kept (the new programs made
 *   them after the swap: they are newer than the source's). The kernel's
 *   batch update takes no BPF_NOEXIST, so these go one at a time.
 */
export type CopyMode = 'all' | 'missing';

export interface CopyResult {
  /** Entries read from the source. */
  entries: number;
  copied: number;
  /** Left alone because the target had them (mode missing). */
  kept: number;
  /** Did not fit the target (a smaller map, or an array index beyond its size). */
  dropped: number;
}

const round8 = (n: number) => Math.ceil(n / 8) * 8;

export function copyMapEntries(src: BpfMap, from: Layouts, dst: BpfMap, to: Layouts, mode: CopyMode): CopyResult {
  const keyConv = layoutConverter(from.key, to.key);
  const valConv = layoutConverter(from.value, to.value);
  const cpus = src.perCpu ? possibleCpus() : 1;
  const srcSlot = src.perCpu ? round8(src.valueSize) : src.valueSize;
  const dstSlot = dst.perCpu ? round8(dst.valueSize) : dst.valueSize;
  const isArray = dst.typeName === 'array' || dst.typeName === 'percpu_array';
  const res: CopyResult = { entries: 0, copied: 0, kept: 0, dropped: 0 };
  let full = false;
  let keys = Buffer.alloc(0);
  let values = Buffer.alloc(0);
  src.forEachBatch(CHUNK, (count, sk, sv) => {
    res.entries += count;
    if (full) {
      res.dropped += count;
      return;
    }
    if (keys.length < count * dst.keySize) keys = Buffer.alloc(count * dst.keySize);
    if (values.length < count * dst.valueStride) values = Buffer.alloc(count * dst.valueStride);
    let n = 0;
    for (let i = 0; i < count; i++) {
      keyConv(sk, i * src.keySize, keys, n * dst.keySize);
      if (isArray && keys.readUInt32LE(n * dst.keySize) >= dst.maxEntries) {
        res.dropped++;
        continue;
      }
      for (let c = 0; c < cpus; c++) valConv(sv, i * src.valueStride + c * srcSlot, values, n * dst.valueStride + c * dstSlot);
      n++;
    }
    const w = writeAll(dst, keys, values, n, mode);
    res.copied += w.written;
    res.kept += w.existing;
    res.dropped += n - w.written - w.existing;
    full = w.full;
  });
  return res;
}

/** `count` entries into `dst`: one batch (mode all, stopping when the map is full) or one at a time with BPF_NOEXIST (mode missing). */
function writeAll(dst: BpfMap, keys: Buffer, values: Buffer, count: number, mode: CopyMode): { written: number; existing: number; full: boolean } {
  const ks = dst.keySize;
  const vs = dst.valueStride;
  if (mode === 'missing') {
    let written = 0;
    let existing = 0;
    for (let i = 0; i < count; i++) {
      try {
        dst.update(keys.subarray(i * ks, (i + 1) * ks), values.subarray(i * vs, (i + 1) * vs), BPF_NOEXIST);
        written++;
      } catch (err) {
        if (err instanceof KprBpfError && err.errno === EEXIST) existing++;
        else if (err instanceof KprBpfError && (err.errno === E2BIG || err.errno === ENOSPC)) return { written, existing, full: true };
        else throw err;
      }
    }
    return { written, existing, full: false };
  }
  try {
    dst.updateBatch(keys, values, count, BPF_ANY);
    return { written: count, existing: 0, full: false };
  } catch (err) {
    if (err instanceof KprBpfError && err.processed !== undefined && (err.errno === E2BIG || err.errno === ENOSPC))
      return { written: err.processed, existing: 0, full: true };
    throw err;
  }
}
