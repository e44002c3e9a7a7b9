/** What the kernel says of a map: bpf_obj_get_info_by_fd decoded, and libbpf's names of map types. */
import { libbpf } from './libbpf.js';
import { KprBpfError } from './errors.js';

/** sizeof(struct bpf_map_info) in the uapi header kpr is built against. */
const MAP_INFO_SIZE = 88;

export function mapTypeName(type: number): string {
  return libbpf().libbpf_bpf_map_type_str(type) ?? `unknown(${type})`;
}

export interface BpfMapInfo {
  id: number;
  type: number;
  /** libbpf's name for the type, e.g. "hash", "lru_hash", "percpu_array". */
  typeName: string;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  /** Kernel name (truncated to 15 characters by the kernel). */
  name: string;
}

/** bpf_obj_get_info_by_fd on a map fd, decoded from struct bpf_map_info. */
export function mapInfoByFd(fd: number, what = `fd ${fd}`): BpfMapInfo {
  const info = Buffer.alloc(MAP_INFO_SIZE);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(MAP_INFO_SIZE, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'map info', map: what, errno: -ret });
  const type = info.readUInt32LE(0);
  const nameRaw = info.subarray(24, 40);
  const nul = nameRaw.indexOf(0);
  return {
    type,
    id: info.readUInt32LE(4),
    keySize: info.readUInt32LE(8),
    valueSize: info.readUInt32LE(12),
    maxEntries: info.readUInt32LE(16),
    flags: info.readUInt32LE(20),
    name: nameRaw.toString('utf8', 0, nul < 0 ? 16 : nul),
    typeName: mapTypeName(type),
  };
}
