/**
 * tc programs attached with tcx links (kernel 6.6+), pinned like the cgroup
 * links: the program stays on the interface when the agent exits, and a new
 * agent swaps its program into the pinned link atomically (bpf_link_update),
 * so packets never cross the interface unprocessed during a restart.
 *
 * libbpf 1.1 predates bpf_program__attach_tcx, so the link is made with the
 * low-level bpf_link_create; the kernel resolves the ifindex in the calling
 * thread's network namespace (see withNetns).
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import { libbpf, libc, libcNameIndex } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import type { BpfProgram } from './bpf-program.js';

const E = constants.errno;
const LINK_INFO_SIZE = 256;
const BPF_LINK_TYPE_TCX = 11;
const ENOLINK = 67;

export const TCX = { INGRESS: 46, EGRESS: 47 } as const;
export type TcxDirection = (typeof TCX)[keyof typeof TCX];

export interface TcxAttachment {
  program: string;
  ifname: string;
  ifindex: number;
  direction: TcxDirection;
  linkPinPath: string;
  /** True when a pinned link was reused and its program swapped. */
  replaced: boolean;
}

export interface TcxLinkInfo {
  id: number;
  progId: number;
  ifindex: number;
  attachType: number;
}

/** The tcx link behind an fd; null when the fd is another kind of link. */
export function tcxLinkInfo(fd: number, what: string): TcxLinkInfo | null {
  const info = Buffer.alloc(LINK_INFO_SIZE);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(LINK_INFO_SIZE, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'link info', path: what, errno: -ret });
  if (info.readUInt32LE(0) !== BPF_LINK_TYPE_TCX) return null;
  return { id: info.readUInt32LE(4), progId: info.readUInt32LE(8), ifindex: info.readUInt32LE(16), attachType: info.readUInt32LE(20) };
}

/** The tcx link pinned at `pinPath`; null when there is no pin or it is another kind of link. */
export function pinnedTcxLinkInfo(pinPath: string): TcxLinkInfo | null {
  if (!fs.existsSync(pinPath)) return null;
  const fd = libbpf().bpf_obj_get(pinPath);
  if (fd < 0) throw new KprBpfError({ op: 'link open', path: pinPath, errno: -fd, detail: hintFor(-fd) });
  try {
    return tcxLinkInfo(fd, pinPath);
  } finally {
    libc().close(fd);
  }
}

function progId(prog: BpfProgram): number {
  return prog.id;
}

/**
 * Attaches `prog` at `direction` of interface `ifname` (in the current
 * network namespace) through a link pinned at `linkPinPath`, reusing the
 * pinned link when it is the same interface and direction.
 */
export function attachTcx(prog: BpfProgram, ifname: string, direction: TcxDirection, linkPinPath: string): TcxAttachment {
  const lib = libbpf();
  const ifindex = libc().if_nametoindex(ifname);
  if (!ifindex) throw new KprBpfError({ op: 'attach tcx', map: prog.name, errno: E.ENODEV, detail: `no interface ${ifname}` });
  const result = (replaced: boolean): TcxAttachment => ({ program: prog.name, ifname, ifindex, direction, linkPinPath, replaced });

  if (fs.existsSync(linkPinPath)) {
    const fd = lib.bpf_obj_get(linkPinPath);
    if (fd >= 0) {
      let reusable = false;
      try {
        const info = tcxLinkInfo(fd, linkPinPath);
        if (info && info.ifindex === ifindex && info.attachType === direction) {
          reusable = true;
          if (info.progId !== progId(prog)) {
            const ret = lib.bpf_link_update(fd, prog.fd, null);
            if (ret === -ENOLINK)
              reusable = false; // the interface went away
            else if (ret < 0) throw new KprBpfError({ op: 'link update', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
          }
        }
      } finally {
        libc().close(fd);
      }
      if (reusable) return result(true);
    }
    // A pin for another interface (same name, new index) or a dead link: replace it.
    fs.unlinkSync(linkPinPath);
  }

  const fd = lib.bpf_link_create(prog.fd, ifindex, direction, null);
  if (fd < 0) throw new KprBpfError({ op: 'attach tcx', map: prog.name, errno: -fd, detail: `${ifname}${hintFor(-fd) ? '; ' + hintFor(-fd) : ''}` });
  try {
    const ret = lib.bpf_obj_pin(fd, linkPinPath);
    if (ret < 0) throw new KprBpfError({ op: 'link pin', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
  } finally {
    libc().close(fd); // pinned: stays attached; not pinned: closing detaches
  }
  return result(false);
}

/** Interface names and indexes of the current network namespace (if_nameindex(3)). */
export function listInterfaces(): Array<{ name: string; index: number }> {
  return libcNameIndex();
}

/** Ids of the programs attached at `direction` of an interface of the current namespace. */
export function queryTcxPrograms(ifname: string, direction: TcxDirection): number[] {
  const ifindex = libc().if_nametoindex(ifname);
  if (!ifindex) throw new KprBpfError({ op: 'query tcx', errno: E.ENODEV, detail: `no interface ${ifname}` });
  return queryTcxProgramsByIndex(ifindex, direction, ifname);
}

/**
 * queryTcxPrograms by interface index (current namespace): bpf_prog_query
 * with BPF_TCX_INGRESS/EGRESS. At most 64 ids (the kernel's limit per tcx hook).
 */
export function queryTcxProgramsByIndex(ifindex: number, direction: TcxDirection, what = `ifindex ${ifindex}`): number[] {
  const cap = 64;
  const flags = Buffer.alloc(4);
  const ids = Buffer.alloc(cap * 4);
  const cnt = Buffer.alloc(4);
  cnt.writeUInt32LE(cap, 0);
  const ret = libbpf().bpf_prog_query(ifindex, direction, 0, flags, ids, cnt);
  if (ret < 0) throw new KprBpfError({ op: 'query tcx', errno: -ret, detail: what });
  const n = cnt.readUInt32LE(0);
  return Array.from({ length: Math.min(n, cap) }, (_, i) => ids.readUInt32LE(i * 4));
}

/**
 * Whether this kernel has tcx (6.6+): a query of the tcx ingress hook of the
 * loopback interface of the current namespace succeeds there and fails with
 * EINVAL on kernels that do not know the attach type.
 */
export function tcxSupported(): boolean {
  const ifindex = libc().if_nametoindex('lo');
  if (!ifindex) return false;
  const flags = Buffer.alloc(4);
  const cnt = Buffer.alloc(4);
  return libbpf().bpf_prog_query(ifindex, TCX.INGRESS, 0, flags, null as unknown as Buffer, cnt) >= 0;
}
