/**
 * The BPF filesystem: detection (statfs f_type) and mounting (libc mount).
 */
import fs from 'node:fs';
import path from 'node:path';
import koffi from 'koffi';
import { libc } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';

export const BPF_FS_MAGIC = 0xcafe4a11;
export const DEFAULT_BPFFS_ROOT = '/sys/fs/bpf';
/** sizeof(struct statfs) on x86_64 is 120; extra room costs nothing. */
const STATFS_SIZE = 256;

/** True when `p` (which must exist) lives on a bpf filesystem. */
export function isBpffs(p: string): boolean {
  const buf = Buffer.alloc(STATFS_SIZE);
  if (libc().statfs(p, buf) !== 0) {
    const errno = koffi.errno();
    throw new KprBpfError({ op: 'statfs', path: p, errno, detail: hintFor(errno) });
  }
  // f_type is the first member (__fsword_t, a long on x86_64).
  return buf.readUInt32LE(0) >>> 0 === BPF_FS_MAGIC;
}

export interface EnsureBpffsOptions {
  /** Mount point of the bpf filesystem; `dir` must be inside it. Default /sys/fs/bpf. */
  root?: string;
}

/**
 * Makes sure `root` is a mounted bpf filesystem (mounting it if not) and that
 * the directory `dir` (inside root) exists. Returns the absolute `dir`.
 */
export function ensureBpffs(dir: string, opts: EnsureBpffsOptions = {}): string {
  const root = path.resolve(opts.root ?? DEFAULT_BPFFS_ROOT);
  const abs = path.resolve(dir);
  if (abs !== root && !abs.startsWith(root + path.sep)) {
    throw new Error(`bpffs: ${abs} is not inside the bpf filesystem root ${root}`);
  }
  fs.mkdirSync(root, { recursive: true });
  if (!isBpffs(root)) {
    if (libc().mount('bpf', root, 'bpf', 0, null) !== 0) {
      const errno = koffi.errno();
      throw new KprBpfError({ op: 'mount bpffs', path: root, errno, detail: hintFor(errno) });
    }
    if (!isBpffs(root)) throw new Error(`bpffs: mounted bpf on ${root} but statfs does not see it`);
  }
  fs.mkdirSync(abs, { recursive: true });
  return abs;
}

/** Unmounts a bpf filesystem mounted at `root` (libc umount2). Refuses non-bpffs mounts. */
export function unmountBpffs(root: string): void {
  if (!isBpffs(root)) throw new Error(`bpffs: ${root} is not a bpf filesystem mount`);
  if (libc().umount2(root, 0) !== 0) {
    const errno = koffi.errno();
    throw new KprBpfError({ op: 'umount bpffs', path: root, errno, detail: hintFor(errno) });
  }
}
