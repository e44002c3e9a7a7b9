/**
 * The two ways kpr puts a tc program on an interface's ingress, behind one
 * small interface so TcAttacher has one algorithm for both:
 *
 *  - tcx: a bpf link (kernel 6.6+), pinned under <bpffs>/links/tc/ as
 *    "<role>-<ifname>-ingress"; a new agent swaps its program into the
 *    pinned link (bpf_link_update).
 *  - tc: a direct-action cls_bpf filter on a clsact qdisc (any kernel kpr
 *    runs on) at kpr's fixed handle/priority; a new agent replaces the
 *    filter's program in place (BPF_TC_F_REPLACE). Nothing is pinned: the
 *    filter's handle/priority is what marks it as kpr's.
 *
 * Every function runs in the calling thread's network namespace.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  attachTcFilter,
  attachTcx,
  detachPinnedLink,
  detachTcFilterByIndex,
  pinnedTcxLinkInfo,
  progNameById,
  queryTcFilterByIndex,
  queryTcxProgramsByIndex,
  tcxSupported,
  TCX,
  KPR_TC_FILTER,
  type BpfProgram,
} from '../../native/index.js';
import type { InterfaceRole } from './interfaces.js';

export type TcAttachMode = 'tcx' | 'tc';
export type TcAttachSetting = 'auto' | TcAttachMode;
export const TC_ATTACH_SETTINGS: readonly TcAttachSetting[] = ['auto', 'tcx', 'tc'];

export const TC_PROGRAMS: Record<InterfaceRole, string> = { external: 'kpr_tc_ext', pod: 'kpr_tc_pod' };

/** What each mode is called where people read it (CLI, logs). */
export const MODE_LABEL: Record<TcAttachMode, string> = { tcx: 'tcx link', tc: 'clsact filter' };

/** One of kpr's programs on an interface, as the kernel reports it. */
export interface TcAttachmentSeen {
  mode: TcAttachMode;
  ifname: string;
  ifindex: number;
  progId: number;
  /** From the pin name (tcx) or the program's name (tc); undefined when neither says. */
  role?: InterfaceRole;
  /** tcx: the link pin. */
  pin?: string;
}

export interface TcHookMode {
  readonly mode: TcAttachMode;
  /** Attaches `prog` at the ingress of `ifname`, replacing kpr's previous program there in place. */
  attach(prog: BpfProgram, role: InterfaceRole, ifname: string): { replaced: boolean; progId: number };
  /** The interface carrying kpr's attachment was renamed (same index, same role): keep the attachment, under the new name. */
  rename(role: InterfaceRole, from: string, to: string): void;
  /** Removes kpr's attachment; `ifindex` undefined when the interface is gone (then only bookkeeping, e.g. a pin, is left). */
  detach(role: InterfaceRole, ifname: string, ifindex: number | undefined): void;
  /** kpr's attachments of this mode present now, a previous agent's included. */
  list(interfaces: Array<{ name: string; index: number }>): TcAttachmentSeen[];
  /** Removes one attachment `list` returned. */
  remove(seen: TcAttachmentSeen): void;
  /**
   * Whether program `progId` still runs at the ingress of the interface with
   * this index, as the kernel says (a cheap query, no change): null when it
   * does, else what was found instead (for the log line of the repair).
   */
  missing(role: InterfaceRole, ifname: string, ifindex: number, progId: number): string | null;
}

/** The mode to use and why (logged at start). */
export function chooseTcAttachMode(
  setting: TcAttachSetting,
  tcxAvailable: () => boolean = tcxSupported,
): { mode: TcAttachMode; reason: string; tcxAvailable: boolean } {
  const tcx = tcxAvailable();
  if (setting === 'tcx')
    return { mode: 'tcx', tcxAvailable: tcx, reason: tcx ? '--tc-attach tcx' : '--tc-attach tcx, but this kernel has no tcx (6.6+): attaching will fail' };
  if (setting === 'tc') return { mode: 'tc', tcxAvailable: tcx, reason: '--tc-attach tc' };
  return tcx
    ? { mode: 'tcx', tcxAvailable: tcx, reason: 'auto: the kernel has tcx links (6.6+)' }
    : { mode: 'tc', tcxAvailable: tcx, reason: 'auto: the kernel has no tcx links (before 6.6); using a clsact qdisc with a cls_bpf filter' };
}

// ------------------------------------------------------------------- tcx

/** Pin file names: "<role>-<ifname>-ingress". */
export function tcxPinName(role: InterfaceRole, ifname: string): string {
  return `${role}-${ifname}-ingress`;
}

function parseTcxPin(file: string): { role: InterfaceRole; ifname: string } | null {
  const m = /^(external|pod)-(.+)-ingress$/.exec(file);
  return m ? { role: m[1] as InterfaceRole, ifname: m[2] } : null;
}

function dropPin(pin: string): void {
  try {
    detachPinnedLink(pin);
  } catch {
    fs.rmSync(pin, { force: true });
  }
}

export function tcxMode(pinDir: string): TcHookMode {
  return {
    mode: 'tcx',
    attach(prog, role, ifname) {
      fs.mkdirSync(pinDir, { recursive: true });
      const a = attachTcx(prog, ifname, TCX.INGRESS, path.join(pinDir, tcxPinName(role, ifname)));
      return { replaced: a.replaced, progId: prog.id };
    },
    rename(role, from, to) {
      // tcx would refuse a second link of the same program on the interface: move the pin instead.
      fs.renameSync(path.join(pinDir, tcxPinName(role, from)), path.join(pinDir, tcxPinName(role, to)));
    },
    detach(role, ifname) {
      dropPin(path.join(pinDir, tcxPinName(role, ifname)));
    },
    list(interfaces) {
      if (!fs.existsSync(pinDir)) return [];
      const nameOf = new Map(interfaces.map((i) => [i.index, i.name]));
      const out: TcAttachmentSeen[] = [];
      for (const file of fs.readdirSync(pinDir).sort()) {
        const pin = path.join(pinDir, file);
        const parsed = parseTcxPin(file);
        let info: ReturnType<typeof pinnedTcxLinkInfo>;
        try {
          info = pinnedTcxLinkInfo(pin);
        } catch {
          info = null; // not a link (or unreadable): still kpr's pin, reported with index 0
        }
        const ifindex = info?.ifindex ?? 0;
        out.push({ mode: 'tcx', ifname: nameOf.get(ifindex) ?? parsed?.ifname ?? file, ifindex, progId: info?.progId ?? 0, role: parsed?.role, pin });
      }
      return out;
    },
    remove(seen) {
      if (seen.pin) dropPin(seen.pin);
    },
    missing(role, ifname, ifindex, progId) {
      // bpf_prog_query(BPF_TCX_INGRESS): the programs the hook runs now.
      const running = queryTcxProgramsByIndex(ifindex, TCX.INGRESS, ifname);
      if (running.includes(progId)) return null;
      const pin = path.join(pinDir, tcxPinName(role, ifname));
      let link: ReturnType<typeof pinnedTcxLinkInfo>;
      try {
        link = pinnedTcxLinkInfo(pin);
      } catch {
        link = null;
      }
      // Another agent on these pins swapped its program into kpr's link (a rolling update): in place.
      if (link && link.ifindex === ifindex && running.includes(link.progId)) return null;
      if (!link) return `program ${progId} is not on the tcx ingress hook (no link pinned at ${pin})`;
      if (link.ifindex === 0) return `program ${progId} is not on the tcx ingress hook: link ${link.id} is detached`;
      return `program ${progId} is not on the tcx ingress hook (link ${link.id} runs program ${link.progId} on ifindex ${link.ifindex})`;
    },
  };
}

// -------------------------------------------------------------------- tc

function roleOfProgram(progId: number): InterfaceRole | undefined {
  const name = progNameById(progId);
  return (Object.keys(TC_PROGRAMS) as InterfaceRole[]).find((r) => TC_PROGRAMS[r] === name);
}

export function classicMode(): TcHookMode {
  return {
    mode: 'tc',
    attach(prog, _role, ifname) {
      const a = attachTcFilter(prog, ifname);
      return { replaced: a.replaced, progId: a.progId };
    },
    rename() {
      // The filter belongs to the interface, whatever its name.
    },
    detach(_role, ifname, ifindex) {
      // A vanished interface took its qdisc and kpr's filter with it.
      if (ifindex !== undefined) detachTcFilterByIndex(ifindex, undefined, KPR_TC_FILTER, ifname);
    },
    list(interfaces) {
      const out: TcAttachmentSeen[] = [];
      for (const { name, index } of interfaces) {
        const progId = queryTcFilterByIndex(index, undefined, KPR_TC_FILTER, name);
        if (progId !== null) out.push({ mode: 'tc', ifname: name, ifindex: index, progId, role: roleOfProgram(progId) });
      }
      return out;
    },
    remove(seen) {
      detachTcFilterByIndex(seen.ifindex, undefined, KPR_TC_FILTER, seen.ifname);
    },
    missing(_role, ifname, ifindex, progId) {
      // bpf_tc_query at kpr's handle/priority: the filter's program, or none (filter or clsact qdisc deleted).
      const id = queryTcFilterByIndex(ifindex, undefined, KPR_TC_FILTER, ifname);
      if (id === progId) return null;
      // Another agent replaced the program of kpr's filter with its own (a rolling update): in place.
      if (id !== null && roleOfProgram(id) !== undefined) return null;
      return id === null ? `kpr's clsact filter is gone (filter or qdisc deleted)` : `kpr's clsact filter runs program ${id}, not ${progId}`;
    },
  };
}

export function hookMode(mode: TcAttachMode, pinDir: string): TcHookMode {
  return mode === 'tcx' ? tcxMode(pinDir) : classicMode();
}

/**
 * Every tc attachment of kpr in the current namespace, both modes: the tcx
 * links pinned under `pinDir` and the clsact filters at kpr's handle/priority.
 */
export function listTcAttachments(pinDir: string, interfaces: Array<{ name: string; index: number }>): TcAttachmentSeen[] {
  return [...tcxMode(pinDir).list(interfaces), ...classicMode().list(interfaces)];
}
