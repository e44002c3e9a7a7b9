/**
 * tc programs attached the classic way, for kernels without tcx (before
 * 6.6): a clsact qdisc on the interface and a cls_bpf filter in
 * direct-action mode at its ingress hook, through libbpf's bpf_tc_* calls
 * (netlink inside libbpf; nothing is shelled out).
 *
 * kpr's filter always sits at one fixed handle and priority, so it is
 * recognisable (query, replace, detach touch only that filter, never another
 * one on the same hook) and a restarting agent replaces the program in place
 * (BPF_TC_F_REPLACE on the same handle/priority: the kernel swaps the
 * program of the existing filter, so the hook is never without it).
 *
 * A filter is not a bpf link: nothing is pinned, and it stays on the
 * interface until it is detached or the interface goes away.
 *
 * libbpf opens its netlink socket per call and resolves the ifindex in the
 * calling thread's network namespace (see withNetns).
 */
import { constants } from 'node:os';
import { libbpf, libbpfTc, libc, type BpfTcHook, type BpfTcOpts } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import type { BpfProgram } from './bpf-program.js';
import { captureLibbpfMessages } from './log.js';

const E = constants.errno;

export const BPF_TC = { INGRESS: 1, EGRESS: 2 } as const;
export type BpfTcAttachPoint = (typeof BPF_TC)[keyof typeof BPF_TC];
const BPF_TC_F_REPLACE = 1;

/**
 * kpr's filter: handle 0x6b7072 ("kpr" in ASCII) at priority 0x6b70
 * (27504). The priority is below the ones tc picks on its own (from 49152
 * down), so kpr runs before filters added without one, and unusual enough
 * not to share a priority with another tool (a filter of another kind or
 * protocol at the same priority would make the attach fail with EINVAL).
 */
export const KPR_TC_FILTER = { handle: 0x6b7072, priority: 0x6b70 } as const;

export interface TcFilterId {
  handle: number;
  priority: number;
}

export interface TcFilterAttachment {
  program: string;
  ifname: string;
  ifindex: number;
  progId: number;
  handle: number;
  priority: number;
  /** True when kpr's filter was already there and its program was swapped. */
  replaced: boolean;
  /** True when this call created the clsact qdisc (false: the interface had one). */
  qdiscCreated: boolean;
}

function hookOf(ifindex: number, attachPoint: BpfTcAttachPoint): BpfTcHook {
  return { sz: libbpfTc().sizes.hook, ifindex, attach_point: attachPoint, parent: 0 };
}

function optsOf(init: Partial<BpfTcOpts>): BpfTcOpts {
  return { sz: libbpfTc().sizes.opts, prog_fd: 0, flags: 0, prog_id: 0, handle: 0, priority: 0, ...init };
}

function ifindexOf(ifname: string, op: string): number {
  const ifindex = libc().if_nametoindex(ifname);
  if (!ifindex) throw new KprBpfError({ op, errno: E.ENODEV, detail: `no interface ${ifname}` });
  return ifindex;
}

/** The kernel's own words on the last failure (libbpf prints its netlink extack message). */
let lastKernelMessage = '';

/** Runs a bpf_tc_* call with libbpf's messages held back (expected failures are answered by the return code). */
function quiet(call: () => number): number {
  const { value, messages } = captureLibbpfMessages(call);
  lastKernelMessage = messages
    .map((m) => m.replace(/^libbpf: /, '').trim())
    .filter(Boolean)
    .join('; ');
  return value;
}

function failure(op: string, ifname: string, ret: number): KprBpfError {
  const hint = hintFor(-ret);
  const extra = [lastKernelMessage, hint].filter(Boolean).join('; ');
  return new KprBpfError({ op, errno: -ret, detail: `${ifname}${extra ? '; ' + extra : ''}` });
}

/**
 * The clsact qdisc of an interface (by index, current namespace): created
 * when missing. Returns true when this call created it.
 */
export function ensureClsact(ifindex: number, what = `ifindex ${ifindex}`): boolean {
  const ret = quiet(() => libbpfTc().bpf_tc_hook_create(hookOf(ifindex, BPF_TC.INGRESS)));
  if (ret === -E.EEXIST) return false;
  if (ret < 0) throw failure('tc hook create', what, ret);
  return true;
}

/**
 * The program id of the filter at `id` on a hook of the interface with this
 * index; null when there is no such filter (or no clsact qdisc at all).
 */
export function queryTcFilterByIndex(
  ifindex: number,
  attachPoint: BpfTcAttachPoint = BPF_TC.INGRESS,
  id: TcFilterId = KPR_TC_FILTER,
  what = `ifindex ${ifindex}`,
): number | null {
  const opts = optsOf({ handle: id.handle, priority: id.priority });
  const ret = quiet(() => libbpfTc().bpf_tc_query(hookOf(ifindex, attachPoint), opts));
  // ENOENT: no filter there; EINVAL: the interface has no clsact qdisc.
  if (ret === -E.ENOENT || ret === -E.EINVAL) return null;
  if (ret < 0) throw failure('tc query', what, ret);
  return opts.prog_id;
}

/** queryTcFilterByIndex by interface name (current namespace). */
export function queryTcFilter(ifname: string, attachPoint: BpfTcAttachPoint = BPF_TC.INGRESS, id: TcFilterId = KPR_TC_FILTER): number | null {
  return queryTcFilterByIndex(ifindexOf(ifname, 'tc query'), attachPoint, id, ifname);
}

/**
 * Attaches `prog` as a direct-action cls_bpf filter at the ingress (or
 * egress) hook of `ifname` (current namespace) at kpr's handle/priority,
 * creating the clsact qdisc when the interface has none. An existing filter
 * at that handle/priority has its program replaced in place; filters at any
 * other handle or priority are left alone.
 */
export function attachTcFilter(
  prog: BpfProgram,
  ifname: string,
  attachPoint: BpfTcAttachPoint = BPF_TC.INGRESS,
  id: TcFilterId = KPR_TC_FILTER,
): TcFilterAttachment {
  const ifindex = ifindexOf(ifname, 'attach tc');
  const qdiscCreated = ensureClsact(ifindex, ifname);
  const before = queryTcFilterByIndex(ifindex, attachPoint, id, ifname);
  const opts = optsOf({ prog_fd: prog.fd, flags: BPF_TC_F_REPLACE, handle: id.handle, priority: id.priority });
  const ret = quiet(() => libbpfTc().bpf_tc_attach(hookOf(ifindex, attachPoint), opts));
  if (ret < 0) throw failure(`attach tc ${prog.name}`, ifname, ret);
  return { program: prog.name, ifname, ifindex, progId: opts.prog_id, handle: opts.handle, priority: opts.priority, replaced: before !== null, qdiscCreated };
}

/** Removes the filter at `id` from a hook of the interface with this index; false when it was not there. The qdisc stays. */
export function detachTcFilterByIndex(
  ifindex: number,
  attachPoint: BpfTcAttachPoint = BPF_TC.INGRESS,
  id: TcFilterId = KPR_TC_FILTER,
  what = `ifindex ${ifindex}`,
): boolean {
  const ret = quiet(() => libbpfTc().bpf_tc_detach(hookOf(ifindex, attachPoint), optsOf({ handle: id.handle, priority: id.priority })));
  if (ret === -E.ENOENT || ret === -E.EINVAL) return false;
  if (ret < 0) throw failure('tc detach', what, ret);
  return true;
}

/** detachTcFilterByIndex by interface name (current namespace). */
export function detachTcFilter(ifname: string, attachPoint: BpfTcAttachPoint = BPF_TC.INGRESS, id: TcFilterId = KPR_TC_FILTER): boolean {
  return detachTcFilterByIndex(ifindexOf(ifname, 'tc detach'), attachPoint, id, ifname);
}

const PROG_INFO_NAME_OFF = 64; // struct bpf_prog_info: name[16] after map_ids
const PROG_INFO_LEN = 80;

/** The name the kernel knows a loaded program by (at most 15 characters); null when the id is gone. */
export function progNameById(id: number): string | null {
  const fd = libbpfTc().bpf_prog_get_fd_by_id(id);
  if (fd === -E.ENOENT) return null;
  if (fd < 0) throw new KprBpfError({ op: 'prog get fd by id', errno: -fd, detail: `id ${id}` });
  try {
    const info = Buffer.alloc(PROG_INFO_LEN);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(PROG_INFO_LEN, 0);
    const ret = libbpf().bpf_obj_get_info_by_fd(fd, info, len);
    if (ret < 0) throw new KprBpfError({ op: 'program info', errno: -ret, detail: `id ${id}` });
    const raw = info.subarray(PROG_INFO_NAME_OFF, PROG_INFO_NAME_OFF + 16);
    const end = raw.indexOf(0);
    return raw.subarray(0, end < 0 ? 16 : end).toString('latin1');
  } finally {
    libc().close(fd);
  }
}
