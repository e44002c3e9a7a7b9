/**
 * Keeps kpr's tc programs on the interfaces they belong to: attaches to new
 * matching interfaces (pods come and go), leaves attached ones alone, and
 * drops pins of interfaces that disappeared. All work happens in the node's
 * network namespace (the agent's own, or --netns).
 */
import fs from 'node:fs';
import path from 'node:path';
import { attachTcx, detachPinnedLink, listInterfaces, TCX, withNetns, type BpfObject } from '../../native/index.js';
import type { Logger } from '../log.js';
import { selectInterfaces, type InterfaceRole } from './interfaces.js';

export const TC_PROGRAMS: Record<InterfaceRole, string> = { external: 'kpr_tc_ext', pod: 'kpr_tc_pod' };

export interface TcAttacherOptions {
  tcObject: BpfObject;
  /** Directory for the tcx link pins, one per interface. */
  pinDir: string;
  /** Network namespace path, or undefined for the agent's own. */
  netns?: string;
  externalInterfaces: string[];
  podInterfaces: string[];
  log: Logger;
}

/** Pin file names: "<role>-<ifname>-ingress". */
function pinName(role: InterfaceRole, ifname: string): string {
  return `${role}-${ifname}-ingress`;
}

export class TcAttacher {
  private readonly attached = new Map<string, { role: InterfaceRole; ifname: string }>();

  constructor(private readonly opts: TcAttacherOptions) {
    fs.mkdirSync(opts.pinDir, { recursive: true });
  }

  private inNodeNetns<T>(fn: () => T): T {
    return this.opts.netns ? withNetns(this.opts.netns, fn) : fn();
  }

  /** Attaches where needed; returns the interfaces newly attached. Never throws for one interface. */
  sync(): string[] {
    const { opts } = this;
    const fresh: string[] = [];
    this.inNodeNetns(() => {
      const names = listInterfaces().map((i) => i.name);
      const sel = selectInterfaces(names, opts.externalInterfaces, opts.podInterfaces);
      const wanted = new Map<string, { role: InterfaceRole; ifname: string }>();
      for (const ifname of sel.external) wanted.set(pinName('external', ifname), { role: 'external', ifname });
      for (const ifname of sel.pod) wanted.set(pinName('pod', ifname), { role: 'pod', ifname });
      for (const [pin, w] of wanted) {
        if (this.attached.has(pin)) continue;
        try {
          const a = attachTcx(opts.tcObject.program(TC_PROGRAMS[w.role]), w.ifname, TCX.INGRESS, path.join(opts.pinDir, pin));
          this.attached.set(pin, w);
          fresh.push(w.ifname);
          opts.log.info('tc program attached', { interface: w.ifname, role: w.role, program: a.program, replaced: a.replaced });
        } catch (err) {
          opts.log.warn('could not attach tc program', { interface: w.ifname, role: w.role, error: (err as Error).message });
        }
      }
      // Interfaces that vanished: their links are dead; drop the pins.
      for (const file of fs.readdirSync(opts.pinDir)) {
        if (wanted.has(file)) continue;
        this.attached.delete(file);
        try {
          detachPinnedLink(path.join(opts.pinDir, file));
        } catch {
          fs.rmSync(path.join(opts.pinDir, file), { force: true });
        }
      }
    });
    return fresh;
  }

  attachedInterfaces(): Array<{ role: InterfaceRole; ifname: string }> {
    return [...this.attached.values()];
  }
}
