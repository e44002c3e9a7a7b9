/**
 * Any pinned bpf object (map, program, link) by its pin path: which object a
 * pin holds now (its kernel id), and a handle that keeps one open, so it
 * outlives its pin (a pin removed, bpffs unmounted) and can be pinned again.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import { libbpf, libc } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';

const E = constants.errno;
const INFO_SIZE = 256; // > struct bpf_{map,prog,link}_info; each starts { __u32 type; __u32 id; }

function idOfFd(fd: number, what: string): number {
  const info = Buffer.alloc(INFO_SIZE);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(INFO_SIZE, 0);
  const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
  if (ret < 0) throw new KprBpfError({ op: 'obj info', path: what, errno: -ret });
  return info.readUInt32LE(4);
}

/** "bpf-map", "bpf-link", "bpf-prog"... from the fd's anon inode name. */
function kindOfFd(fd: number): string {
  try {
    return fs
      .readlinkSync(`/proc/self/fd/${fd}`)
      .replace(/^anon_inode:\[?/, '')
      .replace(/\]$/, '');
  } catch {
    return 'unknown';
  }
}

/** The kind and kernel id of the bpf object behind an fd (map, program, link ids are separate spaces). */
export function bpfObjectOfFd(fd: number): { kind: string; id: number } {
  return { kind: kindOfFd(fd), id: idOfFd(fd, `fd ${fd}`) };
}

/** What is pinned at `pinPath` now: its kind and kernel id; null when nothing is. */
export function pinnedObjectAt(pinPath: string): { kind: string; id: number } | null {
  const fd = libbpf().bpf_obj_get(pinPath);
  if (fd < 0) {
    if (-fd === E.ENOENT) return null;
    throw new KprBpfError({ op: 'obj get', path: pinPath, errno: -fd, detail: hintFor(-fd) });
  }
  try {
    return { kind: kindOfFd(fd), id: idOfFd(fd, pinPath) };
  } finally {
    libc().close(fd);
  }
}

/** An open fd on a pinned object: keeps it alive without its pin. */
export class HeldBpfObject {
  readonly id: number;
  readonly kind: string;
  #fd: number;

  private constructor(fd: number, what: string) {
    this.#fd = fd;
    this.id = idOfFd(fd, what);
    this.kind = kindOfFd(fd);
  }

  /** Opens the object pinned at `pinPath` (bpf_obj_get). */
  static open(pinPath: string): HeldBpfObject {
    const fd = libbpf().bpf_obj_get(pinPath);
    if (fd < 0) throw new KprBpfError({ op: 'obj get', path: pinPath, errno: -fd, detail: hintFor(-fd) });
    try {
      return new HeldBpfObject(fd, pinPath);
    } catch (err) {
      libc().close(fd);
      throw err;
    }
  }

  /** Pins the object (again) at `pinPath` (bpf_obj_pin). */
  pin(pinPath: string): void {
    if (this.#fd < 0) throw new KprBpfError({ op: 'obj pin', path: pinPath, errno: E.EBADF, detail: 'closed' });
    const ret = libbpf().bpf_obj_pin(this.#fd, pinPath);
    if (ret < 0) throw new KprBpfError({ op: 'obj pin', path: pinPath, errno: -ret, detail: hintFor(-ret) });
  }

  /** Closes this process's fd; a pinned object stays. */
  close(): void {
    if (this.#fd < 0) return;
    libc().close(this.#fd);
    this.#fd = -1;
  }
}
