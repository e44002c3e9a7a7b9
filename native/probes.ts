/**
 * Side-effect-free probes of what the running kernel supports: each creates
 * at most a scratch map it closes again, or queries an attach point without
 * attaching anything. A probe never throws; it says what it saw.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import { libbpf } from './libbpf.js';
import { errnoName } from './errors.js';
import { BPF_MAP_TYPE, BpfMap } from './bpf-map.js';
import { NO_FLAGS_OPTS } from './map-batch-opts.js';

const E = constants.errno;

export interface NativeProbe {
  present: boolean;
  detail: string;
}

function errText(op: string, ret: number): string {
  return `${op}: ${errnoName(-ret)} (errno ${-ret})`;
}

/** Whether a map of `type` can be created (a 4-byte key/value scratch map of 8 entries). */
export function probeMapType(type: number, what: string): NativeProbe {
  try {
    BpfMap.create(type, 4, 4, 8).close();
    return { present: true, detail: `${what} map created` };
  } catch (err) {
    return { present: false, detail: (err as Error).message };
  }
}

/** bpf_map_lookup_batch on a small hash map holding one entry: it must return that entry. */
export function probeBatchLookup(): NativeProbe {
  let map: BpfMap;
  try {
    map = BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 8);
  } catch (err) {
    return { present: false, detail: (err as Error).message };
  }
  try {
    map.update(Buffer.from([1, 0, 0, 0]), Buffer.from([2, 0, 0, 0]));
    const keys = Buffer.alloc(8 * 4);
    const values = Buffer.alloc(8 * 4);
    const count = Buffer.alloc(4);
    count.writeUInt32LE(8, 0);
    const out = Buffer.alloc(8);
    const ret = libbpf().bpf_map_lookup_batch(map.fd, null, out, keys, values, count, NO_FLAGS_OPTS);
    if (ret !== 0 && ret !== -E.ENOENT) return { present: false, detail: errText('bpf_map_lookup_batch', ret) };
    const n = count.readUInt32LE(0);
    if (n !== 1 || keys.readUInt32LE(0) !== 1 || values.readUInt32LE(0) !== 2) {
      return { present: false, detail: `bpf_map_lookup_batch returned ${n} entries, not the one written` };
    }
    return { present: true, detail: 'bpf_map_lookup_batch read back a hash map entry' };
  } catch (err) {
    return { present: false, detail: (err as Error).message };
  } finally {
    map.close();
  }
}

/**
 * Whether the kernel knows cgroup attach type `attachType`: bpf_prog_query on
 * `cgroupPath` succeeds for a known type (nothing attached, nothing changed)
 * and fails with EINVAL for one the kernel does not have.
 */
export function probeCgroupAttachType(cgroupPath: string, attachType: number, what: string): NativeProbe {
  let fd: number;
  try {
    fd = fs.openSync(cgroupPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  } catch (err) {
    return { present: false, detail: `cannot open ${cgroupPath}: ${(err as Error).message}` };
  }
  try {
    const flags = Buffer.alloc(4);
    const cnt = Buffer.alloc(4);
    const ids = Buffer.alloc(4 * 64);
    cnt.writeUInt32LE(64, 0);
    const ret = libbpf().bpf_prog_query(fd, attachType, 0, flags, ids, cnt);
    if (ret === 0 || ret === -E.ENOSPC) return { present: true, detail: `${what} attach type known (bpf_prog_query)` };
    return { present: false, detail: errText(`bpf_prog_query ${what}`, ret) };
  } finally {
    fs.closeSync(fd);
  }
}
