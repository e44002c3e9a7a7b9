/**
 * Keeps kpr's tc programs on the interfaces they belong to: attaches to new
 * matching interfaces (pods come and go), leaves attached ones alone,
 * forgets interfaces that vanished and removes kpr's program from an
 * interface that no longer matches. The first sync also takes over what a
 * previous agent left: its attachments are replaced in place (never removed
 * first, so packets never pass untranslated), and those on interfaces this
 * agent does not want, or made in the other mode, are removed once the new
 * ones are in place. All work happens in the node's network namespace (the
 * agent's own, or --netns).
 *
 * How a program is put on an interface (a tcx link, or a cls_bpf filter on
 * a clsact qdisc for kernels before 6.6) is the TcHookMode's business
 * (tc-hooks.ts); the mode is chosen once, at construction.
 */
import { listInterfaces, withNetns, type BpfObject } from '../../native/index.js';
import type { Logger } from '../log/log.js';
import { selectInterfaces, type InterfaceRole } from './interfaces.js';
import type { AttachmentMissing, AttachmentRepaired } from './attachment-check.js';
import {
  chooseTcAttachMode,
  hookMode,
  MODE_LABEL,
  TC_PROGRAMS,
  type TcAttachMode,
  type TcAttachSetting,
  type TcAttachmentSeen,
  type TcHookMode,
} from './tc-hooks.js';

export { TC_PROGRAMS } from './tc-hooks.js';

export interface TcAttacherOptions {
  tcObject: BpfObject;
  /** Directory for the tcx link pins, one per interface. */
  pinDir: string;
  /** Network namespace path, or undefined for the agent's own. */
  netns?: string;
  externalInterfaces: string[];
  podInterfaces: string[];
  /** --tc-attach: auto (tcx when the kernel has it, else tc), tcx or tc. */
  attachMode?: TcAttachSetting;
  log: Logger;
  /** Tests: whether tcx is available (default: asks the kernel, in the node namespace). */
  tcxAvailable?: () => boolean;
}

interface Attached {
  role: InterfaceRole;
  ifname: string;
  ifindex: number;
  progId: number;
}

export class TcAttacher {
  /** By interface name; the index tells a re-created interface of the same name. */
  private readonly attached = new Map<string, Attached>();
  private readonly hooks: TcHookMode;
  private readonly other: TcHookMode;
  private firstSync = true;
  private failures = 0;
  private readonly lastFailure = new Map<string, string>();
  /** Where the programs come from (replaced by swapObject). */
  private tcObject: BpfObject;
  /**
   * Attachments verify() found missing and could not attach again, by
   * interface: reported (attachment health) until a rescan attaches the
   * interface again, or it goes or stops matching.
   */
  private readonly broken = new Map<string, AttachmentMissing>();
  /** Broken attachments a rescan attached again, reported by the next verify(). */
  private readonly mended: AttachmentRepaired[] = [];

  constructor(private readonly opts: TcAttacherOptions) {
    this.tcObject = opts.tcObject;
    const choice = this.inNodeNetns(() => chooseTcAttachMode(opts.attachMode ?? 'auto', opts.tcxAvailable));
    this.hooks = hookMode(choice.mode, opts.pinDir);
    this.other = hookMode(choice.mode === 'tcx' ? 'tc' : 'tcx', opts.pinDir);
    const line = {
      mode: choice.mode,
      attachment: MODE_LABEL[choice.mode],
      setting: opts.attachMode ?? 'auto',
      tcxAvailable: choice.tcxAvailable,
      reason: choice.reason,
    };
    if (choice.mode === 'tcx' && !choice.tcxAvailable) opts.log.error('tc attach mode', line);
    else opts.log.info('tc attach mode', line);
  }

  /** How kpr's tc programs are attached: tcx links or clsact filters. */
  mode(): TcAttachMode {
    return this.hooks.mode;
  }

  /** Interfaces that could not be attached since start (counted per attempt). */
  attachFailures(): number {
    return this.failures;
  }

  private inNodeNetns<T>(fn: () => T): T {
    return this.opts.netns ? withNetns(this.opts.netns, fn) : fn();
  }

  /** Attaches where needed; returns the interfaces newly attached. Never throws for one interface. */
  sync(): string[] {
    const { opts } = this;
    const fresh: string[] = [];
    this.inNodeNetns(() => {
      const interfaces = listInterfaces();
      const indexOf = new Map(interfaces.map((i) => [i.name, i.index]));
      const sel = selectInterfaces(
        interfaces.map((i) => i.name),
        opts.externalInterfaces,
        opts.podInterfaces,
      );
      const wanted = new Map<string, InterfaceRole>([...sel.external.map((n) => [n, 'external'] as const), ...sel.pod.map((n) => [n, 'pod'] as const)]);

      this.followRenames(wanted, indexOf);
      for (const ifname of this.broken.keys()) if (!wanted.has(ifname)) this.broken.delete(ifname);
      for (const [ifname, role] of wanted) {
        const ifindex = indexOf.get(ifname)!;
        const cur = this.attached.get(ifname);
        if (cur && cur.ifindex === ifindex && cur.role === role) continue;
        try {
          const a = this.hooks.attach(this.tcObject.program(TC_PROGRAMS[role]), role, ifname);
          this.attached.set(ifname, { role, ifname, ifindex, progId: a.progId });
          fresh.push(ifname);
          this.lastFailure.delete(ifname);
          const was = this.broken.get(ifname);
          if (was) {
            this.broken.delete(ifname);
            this.mended.push({ hook: was.hook, target: ifname, program: TC_PROGRAMS[role], found: was.found });
          }
          opts.log.info('tc program attached', {
            interface: ifname,
            role,
            program: TC_PROGRAMS[role],
            mode: this.hooks.mode,
            progId: a.progId,
            replaced: a.replaced,
          });
        } catch (err) {
          this.attached.delete(ifname);
          this.failures++;
          const error = (err as Error).message;
          // Retried every rescan: the same failure is a warning once, then debug.
          const level = this.lastFailure.get(ifname) === error ? 'debug' : 'warn';
          this.lastFailure.set(ifname, error);
          const was = this.broken.get(ifname);
          if (was) was.error = error;
          opts.log[level]('could not attach tc program', { interface: ifname, role, mode: this.hooks.mode, error });
        }
      }

      // Interfaces that vanished are forgotten; one that is still there but no
      // longer matches (renamed) loses kpr's program.
      const names = new Map(interfaces.map((i) => [i.index, i.name]));
      for (const [ifname, a] of this.attached) {
        if (wanted.has(ifname)) continue; // re-created under the same name: re-attached above
        this.attached.delete(ifname);
        this.lastFailure.delete(ifname);
        // Renamed to a name that matches too: attached above under the new name
        // (a clsact filter is the interface's, so only the old tcx pin goes).
        const renamedTo = names.get(a.ifindex);
        const takenOver = renamedTo !== undefined && this.attached.get(renamedTo)?.ifindex === a.ifindex;
        const still = renamedTo !== undefined && !takenOver ? a.ifindex : undefined;
        const reason =
          renamedTo === undefined
            ? 'interface gone'
            : takenOver
              ? `interface renamed to ${renamedTo}, attached under that name`
              : `interface renamed to ${renamedTo}, which does not match`;
        this.detach(this.hooks, a.role, ifname, still, reason);
      }

      if (this.firstSync) {
        this.firstSync = false;
        this.removeLeftovers(interfaces, wanted);
      }
    });
    return fresh;
  }

  /**
   * Asks the kernel whether each attachment this attacher made is still
   * there (tcx: bpf_prog_query on the interface's tcx ingress; tc:
   * bpf_tc_query of kpr's filter) and attaches again where it is not (a
   * tcx link detached behind the agent is replaced by a new pinned link; a
   * deleted filter or clsact qdisc is created again). Interfaces gone or
   * re-created are sync()'s business and skipped. `renewed`: the interfaces
   * whose tcx link is new (for the pin keeper).
   */
  verify(): { checked: number; repaired: AttachmentRepaired[]; renewed: string[] } {
    let checked = 0;
    const repaired: AttachmentRepaired[] = this.mended.splice(0);
    const renewed: string[] = repaired.map((r) => r.target);
    this.inNodeNetns(() => {
      const indexOf = new Map(listInterfaces().map((i) => [i.name, i.index]));
      for (const [ifname, a] of [...this.attached]) {
        if (indexOf.get(ifname) !== a.ifindex) continue;
        checked++;
        const program = TC_PROGRAMS[a.role];
        const found = this.hooks.missing(a.role, ifname, a.ifindex, a.progId);
        if (found === null) continue;
        try {
          const r = this.hooks.attach(this.tcObject.program(program), a.role, ifname);
          a.progId = r.progId;
          repaired.push({ hook: this.hooks.mode, target: ifname, program, found });
          renewed.push(ifname);
        } catch (err) {
          // Forgotten: every rescan tries to attach it again, and the health reports it until one succeeds.
          this.attached.delete(ifname);
          this.failures++;
          this.broken.set(ifname, { hook: this.hooks.mode, target: ifname, program, found, error: (err as Error).message });
        }
      }
    });
    return { checked, repaired, renewed };
  }

  /** Attachments found missing that could not be attached again (yet). */
  missing(): AttachmentMissing[] {
    return [...this.broken.values()].map((m) => ({ ...m }));
  }

  /**
   * The programs of `tcObject` in place of the current ones on every attached
   * interface (tcx link update, cls_bpf replace: no moment without a
   * program), and from then on. A failure leaves that interface's program as
   * it was (logged); returns the interfaces it failed on.
   */
  swapObject(tcObject: BpfObject): string[] {
    this.tcObject = tcObject;
    const failed: string[] = [];
    this.inNodeNetns(() => {
      for (const a of this.attached.values()) {
        try {
          const r = this.hooks.attach(tcObject.program(TC_PROGRAMS[a.role]), a.role, a.ifname);
          a.progId = r.progId;
        } catch (err) {
          failed.push(a.ifname);
          this.opts.log.warn('could not swap the tc program of an interface', {
            interface: a.ifname,
            role: a.role,
            mode: this.hooks.mode,
            error: (err as Error).message,
          });
        }
      }
    });
    return failed;
  }

  /** An attached interface renamed to a name that still matches in the same role keeps its attachment. */
  private followRenames(wanted: Map<string, InterfaceRole>, indexOf: Map<string, number>): void {
    for (const [oldName, a] of [...this.attached]) {
      if (indexOf.get(oldName) === a.ifindex) continue;
      const newName = [...indexOf].find(([n, i]) => i === a.ifindex && n !== oldName)?.[0];
      if (newName === undefined || wanted.get(newName) !== a.role || this.attached.has(newName)) continue;
      try {
        this.hooks.rename(a.role, oldName, newName);
        this.attached.delete(oldName);
        this.attached.set(newName, { ...a, ifname: newName });
        this.opts.log.info('tc interface renamed', { from: oldName, interface: newName, role: a.role, mode: this.hooks.mode });
      } catch (err) {
        this.opts.log.warn('could not follow a renamed interface', { from: oldName, interface: newName, mode: this.hooks.mode, error: (err as Error).message });
      }
    }
  }

  private detach(hooks: TcHookMode, role: InterfaceRole, ifname: string, ifindex: number | undefined, reason: string): void {
    try {
      hooks.detach(role, ifname, ifindex);
      // A pod's interface going is pod churn; an external one going is a node fault worth a warning
      // (kpr_tc_attached_interfaces drops; the program is attached again when the interface is back).
      if (ifindex === undefined)
        this.opts.log[role === 'external' ? 'warn' : 'debug']('tc interface gone; attached again if it comes back', {
          interface: ifname,
          role,
          mode: hooks.mode,
          reason,
        });
      else this.opts.log.info('tc program detached', { interface: ifname, role, mode: hooks.mode, reason });
    } catch (err) {
      this.opts.log.warn('could not detach tc program', { interface: ifname, role, mode: hooks.mode, error: (err as Error).message });
    }
  }

  /**
   * What a previous agent left that this one does not keep: attachments of
   * this mode on interfaces it does not want (other patterns, a vanished
   * interface's pin), and every attachment of the other mode (a switch
   * between tcx and tc). Runs after this sync's attachments are in place, so
   * an interface moving from one mode to the other is never uncovered (tcx
   * runs before clsact while both are there).
   */
  private removeLeftovers(interfaces: Array<{ name: string; index: number }>, wanted: Map<string, InterfaceRole>): void {
    const indexOf = new Map(interfaces.map((i) => [i.name, i.index]));
    const wantedHere = (s: TcAttachmentSeen) => wanted.has(s.ifname) && indexOf.get(s.ifname) === s.ifindex;
    // Ours now, or on a wanted interface this agent failed to attach: a
    // previous agent's program there is better than none.
    const keep = (s: TcAttachmentSeen) => wantedHere(s) && (s.role === undefined || s.role === wanted.get(s.ifname) || !this.attached.has(s.ifname));
    const seen = (hooks: TcHookMode): TcAttachmentSeen[] => {
      try {
        return hooks.list(interfaces);
      } catch (err) {
        this.opts.log.warn('could not list tc attachments', { mode: hooks.mode, error: (err as Error).message });
        return [];
      }
    };
    for (const s of seen(this.hooks)) {
      if (keep(s)) continue;
      this.removeSeen(
        this.hooks,
        s,
        wanted.has(s.ifname) ? 'left by a previous agent in another role' : 'left by a previous agent; the interface does not match',
      );
    }
    for (const s of seen(this.other)) {
      if (wantedHere(s) && !this.attached.has(s.ifname)) continue;
      this.removeSeen(this.other, s, `left by a previous agent in ${s.mode} mode; this agent attaches in ${this.hooks.mode} mode`);
    }
  }

  private removeSeen(hooks: TcHookMode, s: TcAttachmentSeen, reason: string): void {
    try {
      hooks.remove(s);
      this.opts.log.info('tc program detached', { interface: s.ifname, role: s.role, mode: s.mode, progId: s.progId, reason });
    } catch (err) {
      this.opts.log.warn('could not detach tc program', { interface: s.ifname, mode: s.mode, error: (err as Error).message });
    }
  }

  attachedInterfaces(): Array<{ role: InterfaceRole; ifname: string; ifindex: number; progId: number; mode: TcAttachMode }> {
    return [...this.attached.values()].map((a) => ({ ...a, mode: this.hooks.mode }));
  }
}
