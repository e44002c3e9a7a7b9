/**
 * DatapathMaps over the real pinned BPF maps: encodes with the layout codecs
 * and hands whole batches to the kernel in one call each.
 */
import type { BpfMap } from '../../native/index.js';
import type { DatapathMaps } from './datapath-maps.js';
import {
  BACKEND4,
  BACKEND_ID_SIZE,
  SVC4_KEY,
  SVC4_VAL,
  decodeBackend4,
  decodeBackendId,
  decodeSvc4Key,
  decodeSvc4Val,
  encodeBackend4,
  encodeBackendId,
  encodeSvc4Key,
  encodeSvc4Val,
  type Backend4,
  type Svc4Key,
  type Svc4Val,
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
    private readonly svc4: BpfMap,
    private readonly backend4: BpfMap,
  ) {}

  dumpServices(): Array<[Svc4Key, Svc4Val]> {
    const { count, keys, values } = this.svc4.lookupBatch();
    return unpacked(count, keys, values, SVC4_KEY.size, SVC4_VAL.size, decodeSvc4Key, decodeSvc4Val);
  }

  dumpBackends(): Array<[number, Backend4]> {
    const { count, keys, values } = this.backend4.lookupBatch();
    return unpacked(count, keys, values, BACKEND_ID_SIZE, BACKEND4.size, decodeBackendId, decodeBackend4);
  }

  updateServices(entries: Array<[Svc4Key, Svc4Val]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, SVC4_KEY.size, ([k], b, o) => encodeSvc4Key(k, b, o));
    const values = packed(entries, SVC4_VAL.size, ([, v], b, o) => encodeSvc4Val(v, b, o));
    this.svc4.updateBatch(keys, values, entries.length);
  }

  deleteServices(keys: Svc4Key[]): void {
    if (keys.length === 0) return;
    this.svc4.deleteBatch(packed(keys, SVC4_KEY.size, (k, b, o) => encodeSvc4Key(k, b, o)), keys.length, { ignoreMissing: true });
  }

  updateBackends(entries: Array<[number, Backend4]>): void {
    if (entries.length === 0) return;
    const keys = packed(entries, BACKEND_ID_SIZE, ([id], b, o) => encodeBackendId(id, b, o));
    const values = packed(entries, BACKEND4.size, ([, v], b, o) => encodeBackend4(v, b, o));
    this.backend4.updateBatch(keys, values, entries.length);
  }

  deleteBackends(ids: number[]): void {
    if (ids.length === 0) return;
    this.backend4.deleteBatch(packed(ids, BACKEND_ID_SIZE, (id, b, o) => encodeBackendId(id, b, o)), ids.length, { ignoreMissing: true });
  }
}
