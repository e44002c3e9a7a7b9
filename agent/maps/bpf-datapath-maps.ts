/**
 * DatapathMaps over the real pinned BPF maps: encodes with the layout codecs
 * and hands whole batches to the kernel in one call each.
 */
import type { BpfMap } from '../../native/index.js';
import type { DatapathMaps } from './datapath-maps.js';
import {
  BACKEND,
  BACKEND_ID_SIZE,
  SVC_KEY,
  SVC_VAL,
  decodeBackend,
  decodeBackendId,
  decodeSvcKey,
  decodeSvcVal,
  encodeBackend,
  encodeBackendId,
  encodeSvcKey,
  encodeSvcVal,
  type Backend,
  type SvcKey,
  type SvcVal,
} from './layout.js';

/** Encodes items into one contiguous buffer of fixed-size records. */
function packed<T>(items: readonly T[], size: number, encode: (item: T, buf: Buffer, off: number) => void): Buffer {
  const buf = Buffer.alloc(items.length * size);
  items.forEach((item, i) => encode(item, buf, i * size));
  return buf;
}

function unpacked<K, V>(
  count: number,
  keys: Buffer,
  values: Buffer,
  keySize: number,
  valueSize: number,
  decodeKey: (b: Buffer, off: number) => K,
  decodeValue: (b: Buffer, off: number) => V,
): Array<[K, V]> {
  const out: Array<[K, V]> = new Array(count);
  for (let i = 0; i < count; i++) out[i] = [decodeKey(keys, i * keySize), decodeValue(values, i * valueSize)];
  return out;
}

export class BpfDatapathMaps implements DatapathMaps {
  constructor(
    private readonly svcMap: BpfMap,
    private readonly backendMap: BpfMap,
  ) {}

  dumpServices(): Array<[SvcKey, SvcVal]> {
    const { count, keys, values } = this.svcMap.lookupBatch();
    return unpacked(count, keys, values, SVC_KEY.size, SVC_VAL.size, decodeSvcKey, decodeSvcVal);
  }

  dumpBackends(): Array<[number, Backend]> {
    const { count, keys, values } = this.backendMap.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, BACKEND.size, decodeBackendId, decodeBackend);
  }

  updateServices(entries: Array<[SvcKey, SvcVal]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, SVC_KEY.size, ([k], b, o) => encodeSvcKey(k, b, o));
    const values = packed(entries, SVC_VAL.size, ([, v], b, o) => encodeSvcVal(v, b, o));
    this.svcMap.updateBatch(keys, values, entries.length);
  }

  deleteServices(keys: SvcKey[]): void {
    if (keys.length === 0) return;
    this.svcMap.deleteBatch(packed(keys, SVC_KEY.size, (k, b, o) => encodeSvcKey(k, b, o)), keys.length, { ignoreMissing: true });
  }

  updateBackends(entries: Array<[number, Backend]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, BACKEND.size, ([, v], b, o) => encodeBackend(v, b, o));
    this.backendMap.updateBatch(keys, values, entries.length);
  }

  deleteBackends(ids: number[]): void {
    if (ids.length === 0) return;
    this.backendMap.deleteBatch(packed(ids, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), ids.length, { ignoreMissing: true });
  }
}
