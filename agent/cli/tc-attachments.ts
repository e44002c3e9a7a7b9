/**
 * kpr's tc programs on this node's interfaces, as the kernel reports them,
 * for `kpr map list` and `kpr stats`: tcx links pinned under
 * <bpffs>/links/tc and clsact filters at kpr's handle/priority, each with
 * its interface and program id. Read in the node's network namespace (the
 * CLI's own, or --netns, as the agent's).
 */
import { listInterfaces, progNameById, withNetns } from '../../native/index.js';
import { tcLinkPinDir } from '../datapath/pins.js';
import { listTcAttachments, MODE_LABEL, type TcAttachMode } from '../datapath/tc-hooks.js';

export interface TcAttachmentRow {
  mode: TcAttachMode;
  /** "tcx link" or "clsact filter". */
  attachment: string;
  interface: string;
  ifindex: number;
  role: string | null;
  program: string | null;
  progId: number;
}

export interface TcAttachmentReport {
  attachments: TcAttachmentRow[];
  /** Set when the interfaces could not be read (the maps were). */
  error?: string;
}

export function tcAttachmentReport(bpffsDir: string, netns?: string): TcAttachmentReport {
  const read = (): TcAttachmentRow[] =>
    listTcAttachments(tcLinkPinDir(bpffsDir), listInterfaces()).map((s) => ({
      mode: s.mode,
      attachment: MODE_LABEL[s.mode],
      interface: s.ifname,
      ifindex: s.ifindex,
      role: s.role ?? null,
      program: s.progId ? progNameById(s.progId) : null,
      progId: s.progId,
    }));
  try {
    return { attachments: netns ? withNetns(netns, read) : read() };
  } catch (err) {
    return { attachments: [], error: (err as Error).message };
  }
}

/** The table section printed after the maps or counters. */
export function tcAttachmentSection(report: TcAttachmentReport, table: (header: string[], rows: string[][]) => string): string {
  if (report.error) return `\ntc attachments: could not be read: ${report.error}\n`;
  if (report.attachments.length === 0) return '\ntc attachments: none in this network namespace\n';
  return (
    '\n' +
    table(
      ['INTERFACE', 'MODE', 'ROLE', 'PROGRAM', 'PROG ID'],
      report.attachments.map((a) => [a.interface, a.attachment, a.role ?? '-', a.program ?? '-', String(a.progId)]),
    )
  );
}
