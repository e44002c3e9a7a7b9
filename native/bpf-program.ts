/**
 * BpfProgram: one program of a loaded BpfObject (owned by the object).
 */
import { constants } from 'node:os';
import koffi from 'koffi';
import { libbpf, libbpfTc, libc, type NativePtr } from './libbpf.js';
import { KprBpfError } from './errors.js';

const PROG_INFO_LEN = 16; // enough for { __u32 type; __u32 id; ... }

/** enum bpf_attach_type values kpr uses. */
export const BPF_ATTACH_TYPE = {
  CGROUP_INET4_CONNECT: 10,
  CGROUP_UDP4_SENDMSG: 14,
  CGROUP_INET_SOCK_CREATE: 2,
  CGROUP_UDP4_RECVMSG: 19,
  CGROUP_UDP6_RECVMSG: 20,
  CGROUP_INET4_GETPEERNAME: 29,
  CGROUP_INET6_GETPEERNAME: 30,
} as const;

export function attachTypeName(t: number): string {
  return libbpf().libbpf_bpf_attach_type_str(t) ?? `unknown(${t})`;
}

export class BpfProgram {
  readonly name: string;
  readonly type: number;
  readonly typeName: string;
  readonly expectedAttachType: number;
  readonly attachTypeName: string;
  #ptr: NativePtr | null;

  /** @internal Created by BpfObject.program(). */
  constructor(ptr: NativePtr) {
    const lib = libbpf();
    this.#ptr = ptr;
    this.name = lib.bpf_program__name(ptr);
    this.type = lib.bpf_program__type(ptr);
    this.typeName = lib.libbpf_bpf_prog_type_str(this.type) ?? `unknown(${this.type})`;
    this.expectedAttachType = lib.bpf_program__expected_attach_type(ptr);
    this.attachTypeName = attachTypeName(this.expectedAttachType);
  }

  /** @internal The libbpf struct bpf_program pointer. */
  get ptr(): NativePtr {
    if (!this.#ptr) throw new KprBpfError({ op: 'program', map: this.name, errno: constants.errno.EBADF, detail: 'object is closed' });
    return this.#ptr;
  }

  /** The program fd (valid once the object is loaded). */
  get fd(): number {
    const fd = libbpf().bpf_program__fd(this.ptr);
    if (fd < 0) throw new KprBpfError({ op: 'program fd', map: this.name, errno: -fd, detail: 'program is not loaded' });
    return fd;
  }

  /** Kernel id of the loaded program. */
  get id(): number {
    return progIdByFd(this.fd, this.name);
  }

  /** @internal */
  _invalidate(): void {
    this.#ptr = null;
  }
}

export function progIdByFd(fd: number, what: string): number {
  const info = Buffer.alloc(PROG_INFO_LEN);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(PROG_INFO_LEN, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'program info', map: what, errno: -ret });
  return info.readUInt32LE(4);
}

// struct bpf_prog_info: nr_map_ids (u32) and map_ids (u64, a user pointer) after load_time and created_by_uid.
const INFO_NR_MAP_IDS = 52;
const INFO_MAP_IDS = 56;
const INFO_WITH_MAP_IDS = 64;

/**
 * The ids of the maps the loaded program `progId` uses (its map references,
 * as the verifier bound them); null when there is no such program any more.
 */
export function programMapIds(progId: number): number[] | null {
  const fd = libbpfTc().bpf_prog_get_fd_by_id(progId);
  if (fd === -constants.errno.ENOENT) return null;
  if (fd < 0) throw new KprBpfError({ op: 'prog get fd by id', errno: -fd, detail: `id ${progId}` });
  try {
    for (let room = 16; ; room *= 4) {
      const ids = koffi.alloc('uint32_t', room);
      try {
        const info = Buffer.alloc(INFO_WITH_MAP_IDS);
        info.writeUInt32LE(room, INFO_NR_MAP_IDS);
        info.writeBigUInt64LE(BigInt(koffi.address(ids)), INFO_MAP_IDS);
        const len = Buffer.alloc(4);
        len.writeUInt32LE(INFO_WITH_MAP_IDS, 0);
        const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
        if (ret < 0) throw new KprBpfError({ op: 'program info', errno: -ret, detail: `id ${progId}` });
        const n = info.readUInt32LE(INFO_NR_MAP_IDS);
        if (n > room) continue; // the kernel wrote `room` and says how many there are
        return [...(koffi.decode(ids, koffi.array('uint32_t', room)) as Uint32Array).subarray(0, n)];
      } finally {
        koffi.free(ids);
      }
    }
  } finally {
    libc().close(fd);
  }
}
