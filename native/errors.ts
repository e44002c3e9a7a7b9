/**
 * KprBpfError: every failure of a libbpf / kernel operation, with the errno
 * name, number and the operation (and map) it came from, e.g.
 *   "bpf map update kpr_svc: E2BIG (errno 7)".
 */
import { constants } from 'node:os';

const ERRNO_NAMES = new Map<number, string>();
for (const [name, num] of Object.entries(constants.errno)) {
  if (!ERRNO_NAMES.has(num)) ERRNO_NAMES.set(num, name);
}
// Kernel-internal codes that still leak to user space from the bpf() syscall.
ERRNO_NAMES.set(524, 'ENOTSUPP');

export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}

export interface KprBpfErrorInit {
  /** Operation, e.g. "map update", "object load", "link pin". */
  op: string;
  /** Positive errno. */
  errno: number;
  /** Map name, when the operation was on a map. */
  map?: string;
  /** Path involved (object file, pin path, cgroup), if any. */
  path?: string;
  /** Extra human explanation appended to the message. */
  detail?: string;
  /** For batch operations: how many elements were processed before the failure. */
  processed?: number;
}

export class KprBpfError extends Error {
  /** errno name, e.g. "E2BIG". */
  readonly code: string;
  readonly errno: number;
  readonly op: string;
  readonly map?: string;
  readonly path?: string;
  readonly processed?: number;

  constructor(init: KprBpfErrorInit) {
    const errno = Math.abs(init.errno);
    const code = errnoName(errno);
    const subject = init.map ?? init.path;
    let msg = `bpf ${init.op}${subject ? ` ${subject}` : ''}: ${code} (errno ${errno})`;
    if (init.detail) msg += `: ${init.detail}`;
    super(msg);
    this.name = 'KprBpfError';
    this.code = code;
    this.errno = errno;
    this.op = init.op;
    if (init.map !== undefined) this.map = init.map;
    if (init.path !== undefined) this.path = init.path;
    if (init.processed !== undefined) this.processed = init.processed;
  }
}

export const EPERM_HINT = 'BPF needs root (CAP_BPF + CAP_NET_ADMIN + CAP_SYS_ADMIN for cgroup attach) and an unlocked kernel';

/** Adds a hint for permission errors, which are the most common setup problem. */
export function hintFor(errno: number): string | undefined {
  const e = Math.abs(errno);
  if (e === constants.errno.EPERM || e === constants.errno.EACCES) return EPERM_HINT;
  return undefined;
}
