/**
 * Attachments are state, and state is repaired: whether each of kpr's
 * socket programs still runs on --cgroup-path, asked of the kernel
 * (bpf_prog_query on the cgroup, one query per attach type), and the
 * program attached again where it does not. A pinned link can lose its
 * attachment while the pin and the link object stay (`bpftool link detach`,
 * BPF_LINK_DETACH, 5.9+): the link then names no cgroup, and re-using it is
 * impossible, so the repair unpins it and pins a new link (native/attach.ts
 * attachCgroup). A link of kpr's that runs another agent's program (a
 * second agent on the same pins swapped its program in, as during a rolling
 * update) is in place, not missing: repairing it would make two agents
 * swap the link back and forth. The tc side of the same check is
 * TcAttacher.verify().
 *
 * Run by the node datapath at every interface rescan (every 2 s) and at
 * every periodic resync; what it finds feeds kpr_attachments_repaired_total
 * and /healthz's "attachments" (agent/health/attachment-health.ts).
 */
import { existsSync } from 'node:fs';
import { cgroupId, pinnedLinkInfo, queryCgroupPrograms, type CgroupAttachment, type LinkInfo } from '../../native/index.js';

/** Where an attachment lives: the socket programs' cgroup, a tcx link, a clsact filter. */
export type AttachHook = 'cgroup' | 'tcx' | 'tc';
export const ATTACH_HOOKS: readonly AttachHook[] = ['cgroup', 'tcx', 'tc'];

export interface AttachmentRef {
  hook: AttachHook;
  /** The cgroup path or the interface name. */
  target: string;
  program: string;
}

/** An attachment found missing and attached again. */
export interface AttachmentRepaired extends AttachmentRef {
  /** What the check found instead. */
  found: string;
}

/** An attachment found missing that could not be attached again (retried at the next check). */
export interface AttachmentMissing extends AttachmentRef {
  found: string;
  error: string;
}

export interface CgroupCheck {
  checked: number;
  repaired: Array<AttachmentRepaired & { attachment: CgroupAttachment }>;
  missing: AttachmentMissing[];
}

/** The socket programs' attachments as the datapath holds them, and how one is attached again. */
export interface SockAttachments {
  cgroupPath: string;
  /** The attachments made (empty while a map migration waits for the initial sync). */
  attachments(): CgroupAttachment[];
  /** Attaches `program` again through its pinned link (a detached link is replaced by a new one). */
  reattach(program: string): CgroupAttachment;
}

function linkAt(pin: string): LinkInfo | null {
  try {
    return pinnedLinkInfo(pin);
  } catch {
    return null; // not a link (pin_check puts the agent's own back)
  }
}

function currentCgroupId(path: string): bigint | undefined {
  try {
    return cgroupId(path);
  } catch {
    return undefined;
  }
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Checks every socket program's attachment on the cgroup and repairs what is missing. */
export function checkCgroupAttachments(s: SockAttachments): CgroupCheck {
  const list = s.attachments();
  const out: CgroupCheck = { checked: list.length, repaired: [], missing: [] };
  if (list.length === 0) return out;
  const ref = (a: CgroupAttachment): AttachmentRef => ({ hook: 'cgroup', target: s.cgroupPath, program: a.program });
  if (!existsSync(s.cgroupPath)) {
    const found = `cgroup ${s.cgroupPath} does not exist`;
    const error = 'the socket programs went with the removed cgroup; attached again once it is back';
    out.missing = list.map((a) => ({ ...ref(a), found, error }));
    return out;
  }
  const running = new Map<number, number[] | Error>();
  for (const a of list) {
    if (running.has(a.attachType)) continue;
    try {
      running.set(a.attachType, queryCgroupPrograms(s.cgroupPath, a.attachType));
    } catch (err) {
      running.set(a.attachType, err as Error);
    }
  }
  for (const a of list) {
    const ids = running.get(a.attachType)!;
    if (ids instanceof Error) {
      out.missing.push({ ...ref(a), found: 'the cgroup cannot be queried', error: ids.message });
      continue;
    }
    if (ids.includes(a.progId)) continue;
    const link = linkAt(a.linkPinPath);
    // Another agent on these pins (a rolling update) swapped its program into kpr's link: in place, not missing.
    if (link && link.cgroupId !== 0n && link.cgroupId === currentCgroupId(s.cgroupPath) && ids.includes(link.progId)) continue;
    const found = !link
      ? `program ${a.progId} is not attached to the cgroup (no link pinned at ${a.linkPinPath})`
      : link.cgroupId === 0n
        ? `program ${a.progId} is not attached to the cgroup: link ${link.id} is detached`
        : `program ${a.progId} is not attached to the cgroup (link ${link.id} runs program ${link.progId} on cgroup id ${link.cgroupId})`;
    try {
      const attachment = s.reattach(a.program);
      out.repaired.push({ ...ref(a), found, attachment });
    } catch (err) {
      out.missing.push({ ...ref(a), found, error: message(err) });
    }
  }
  return out;
}
