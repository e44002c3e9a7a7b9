/**
 * Cgroup attachment through pinned bpf_links.
 *
 * A pinned link keeps the program attached after the agent exits. On the next
 * start, attachCgroup finds the pin, checks it is the same cgroup and attach
 * type, and atomically swaps the new program into it
 * (bpf_link__update_program): the datapath never has a gap and never gets a
 * second attachment.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import koffi from 'koffi';
import { libbpf, type NativePtr } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import { attachTypeName, type BpfProgram } from './bpf-program.js';

const E = constants.errno;
const ENOLINK = 67;
const BPF_LINK_TYPE_CGROUP = 3;
const LINK_INFO_SIZE = 256; // > sizeof(struct bpf_link_info); the zeroed tail is accepted

export interface CgroupAttachment {
  program: string;
  cgroupPath: string;
  cgroupId: bigint;
  linkPinPath: string;
  linkId: number;
  progId: number;
  /** The program's cgroup attach type (BPF_CGROUP_INET4_CONNECT...), what bpf_prog_query asks the cgroup about. */
  attachType: number;
  /** True when an existing pinned link was reused and its program swapped. */
  replaced: boolean;
}

export interface LinkInfo {
  type: number;
  typeName: string;
  id: number;
  progId: number;
  /** For cgroup links. */
  cgroupId?: bigint;
  attachType?: number;
}

export function linkInfoByFd(fd: number, what: string): LinkInfo {
  const info = Buffer.alloc(LINK_INFO_SIZE);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(LINK_INFO_SIZE, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'link info', path: what, errno: -ret });
  const type = info.readUInt32LE(0);
  const out: LinkInfo = {
    type,
    typeName: libbpf().libbpf_bpf_link_type_str(type) ?? `unknown(${type})`,
    id: info.readUInt32LE(4),
    progId: info.readUInt32LE(8),
  };
  if (type === BPF_LINK_TYPE_CGROUP) {
    out.cgroupId = info.readBigUInt64LE(16);
    out.attachType = info.readUInt32LE(24);
  }
  return out;
}

/** The cgroup v2 id of a cgroup directory (its kernfs inode number). */
export function cgroupId(cgroupPath: string): bigint {
  return fs.statSync(cgroupPath, { bigint: true }).ino;
}

function openLink(pinPath: string): NativePtr {
  const link = libbpf().bpf_link__open(pinPath);
  if (!link) {
    const errno = koffi.errno() || E.EINVAL;
    const detail = errno === E.EINVAL ? 'pinned object is not a bpf link' : hintFor(errno);
    throw new KprBpfError({ op: 'link open', path: pinPath, errno, detail });
  }
  // bpf_link__open accepts any pinned bpf object (its info call does not check
  // the kind), so make sure the fd really is a link before trusting its info.
  const kind = fdKind(libbpf().bpf_link__fd(link));
  if (kind !== 'bpf-link') {
    libbpf().bpf_link__destroy(link);
    throw new KprBpfError({ op: 'link open', path: pinPath, errno: E.EINVAL, detail: `pinned object is not a bpf link (it is a ${kind})` });
  }
  return link;
}

/** "bpf-link", "bpf-map", "bpf-prog"... from the fd's anon inode name. */
function fdKind(fd: number): string {
  try {
    const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
    return target.replace(/^anon_inode:\[?/, '').replace(/\]$/, '');
  } catch {
    return 'unknown';
  }
}

/** Inspects the pinned link at `pinPath` (null when there is none). */
export function pinnedLinkInfo(pinPath: string): LinkInfo | null {
  if (!fs.existsSync(pinPath)) return null;
  const lib = libbpf();
  const link = openLink(pinPath);
  try {
    return linkInfoByFd(lib.bpf_link__fd(link), pinPath);
  } finally {
    lib.bpf_link__destroy(link);
  }
}

/**
 * Attaches `prog` to the cgroup at `cgroupPath` through a link pinned at
 * `linkPinPath`, or swaps `prog` into the link already pinned there.
 */
export function attachCgroup(prog: BpfProgram, cgroupPath: string, linkPinPath: string): CgroupAttachment {
  const lib = libbpf();
  const progId = prog.id;
  const cgId = cgroupId(cgroupPath);
  const result = (linkId: number, replaced: boolean): CgroupAttachment => ({
    program: prog.name,
    cgroupPath,
    cgroupId: cgId,
    linkPinPath,
    linkId,
    progId,
    attachType: prog.expectedAttachType,
    replaced,
  });

  if (fs.existsSync(linkPinPath)) {
    const link = openLink(linkPinPath);
    let defunct = false;
    try {
      const info = linkInfoByFd(lib.bpf_link__fd(link), linkPinPath);
      if (info.type !== BPF_LINK_TYPE_CGROUP) {
        throw new KprBpfError({ op: 'link update', path: linkPinPath, errno: E.EINVAL, detail: `pinned link is a ${info.typeName} link, not a cgroup link` });
      }
      // Cgroup id 0: the cgroup this link was attached to is gone (rmdir'd); the link is dead.
      if (info.cgroupId === 0n) defunct = true;
      else if (info.cgroupId !== cgId) {
        throw new KprBpfError({
          op: 'link update',
          path: linkPinPath,
          errno: E.EINVAL,
          detail: `pinned link is attached to cgroup id ${info.cgroupId}, not ${cgroupPath} (id ${cgId})`,
        });
      }
      if (info.attachType !== prog.expectedAttachType) {
        throw new KprBpfError({
          op: 'link update',
          path: linkPinPath,
          errno: E.EINVAL,
          detail: `pinned link has attach type ${attachTypeName(info.attachType ?? -1)}, program ${prog.name} needs ${prog.attachTypeName}`,
        });
      }
      if (!defunct && info.progId !== progId) {
        const ret = lib.bpf_link__update_program(link, prog.ptr);
        if (ret === -ENOLINK)
          defunct = true; // cgroup went away; the link is dead
        else if (ret < 0) throw new KprBpfError({ op: 'link update', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
      }
      if (!defunct) return result(info.id, true);
    } finally {
      // Closes our fd only: the pin keeps the link (and the program) attached.
      lib.bpf_link__destroy(link);
    }
    fs.unlinkSync(linkPinPath);
  }

  const link = cgroupLink(prog, cgroupPath);
  const ret = lib.bpf_link__pin(link, linkPinPath);
  if (ret < 0) {
    lib.bpf_link__destroy(link); // not pinned: closing the fd detaches it again
    throw new KprBpfError({ op: 'link pin', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
  }
  try {
    return result(linkInfoByFd(lib.bpf_link__fd(link), linkPinPath).id, false);
  } finally {
    lib.bpf_link__destroy(link); // pinned: stays attached
  }
}

/** A new (unpinned) link of `prog` on the cgroup directory `cgroupPath`; the caller pins or destroys it. */
function cgroupLink(prog: BpfProgram, cgroupPath: string): NativePtr {
  const cgFd = fs.openSync(cgroupPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    const link = libbpf().bpf_program__attach_cgroup(prog.ptr, cgFd);
    if (!link) {
      const errno = koffi.errno() || E.EINVAL;
      throw new KprBpfError({ op: 'attach cgroup', map: prog.name, errno, detail: `${cgroupPath}${hintFor(errno) ? '; ' + hintFor(errno) : ''}` });
    }
    return link;
  } finally {
    fs.closeSync(cgFd);
  }
}

/** A cgroup attachment that lasts only as long as this process holds it (an unpinned link). */
export interface TemporaryCgroupLink {
  /** Detaches the program (closing the link's last fd). */
  close(): void;
}

/** Attaches `prog` to `cgroupPath` through an unpinned link: close() (or this process exiting) detaches it. */
export function attachCgroupTemporarily(prog: BpfProgram, cgroupPath: string): TemporaryCgroupLink {
  const lib = libbpf();
  const link = cgroupLink(prog, cgroupPath);
  let open = true;
  return {
    close: () => {
      if (open) lib.bpf_link__destroy(link);
      open = false;
    },
  };
}

/**
 * Detaches the link pinned at `linkPinPath` and removes the pin.
 * Returns false when there was no pin.
 */
export function detachPinnedLink(linkPinPath: string): boolean {
  if (!fs.existsSync(linkPinPath)) return false;
  const lib = libbpf();
  const link = openLink(linkPinPath);
  try {
    const ret = lib.bpf_link__detach(link);
    if (ret < 0 && ret !== -ENOLINK) {
      throw new KprBpfError({ op: 'link detach', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
    }
    fs.unlinkSync(linkPinPath);
  } finally {
    lib.bpf_link__destroy(link);
  }
  return true;
}

/**
 * Detaches the link pinned at `linkPinPath` from its hook and leaves the pin
 * and the link object in place, as `bpftool link detach` does (libbpf's
 * bpf_link_detach, kernel 5.9+): the link then reports no target (cgroup
 * id 0, ifindex 0) and its program runs nowhere. Tests use it to break an
 * attachment the way an operator could; the agent repairs such links.
 */
export function detachLinkKeepPin(linkPinPath: string): void {
  const lib = libbpf();
  const link = openLink(linkPinPath);
  try {
    const ret = lib.bpf_link__detach(link);
    if (ret < 0) throw new KprBpfError({ op: 'link detach', path: linkPinPath, errno: -ret, detail: hintFor(-ret) });
  } finally {
    lib.bpf_link__destroy(link);
  }
}

/** Ids of the programs attached to a cgroup for one attach type (bpf_prog_query). */
export function queryCgroupPrograms(cgroupPath: string, attachType: number): number[] {
  const lib = libbpf();
  const cgFd = fs.openSync(cgroupPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    let cap = 64;
    for (;;) {
      const flags = Buffer.alloc(4);
      const ids = Buffer.alloc(cap * 4);
      const cnt = Buffer.alloc(4);
      cnt.writeUInt32LE(cap, 0);
      const ret = lib.bpf_prog_query(cgFd, attachType, 0, flags, ids, cnt);
      if (ret === -E.ENOSPC) {
        cap *= 4;
        continue;
      }
      if (ret < 0) throw new KprBpfError({ op: 'prog query', path: cgroupPath, errno: -ret, detail: hintFor(-ret) });
      const n = cnt.readUInt32LE(0);
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push(ids.readUInt32LE(i * 4));
      return out;
    }
  } finally {
    fs.closeSync(cgFd);
  }
}
