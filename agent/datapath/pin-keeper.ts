/**
 * Keeps kpr's pins pointing at the objects the agent's programs use. The
 * agent holds an fd on every map (its loaded objects) and every link it
 * pinned (cgroup links, tcx links), so removing a pin, or unmounting the
 * bpffs they live on, never detaches a program or frees a map while the
 * agent runs. Each check (every interface rescan) compares what each pin
 * path holds now with the agent's own object (kind and kernel id) and pins
 * the agent's object again where the pin is missing or holds another object
 * (a map of another type or size pinned over kpr's). A bpffs that is gone is
 * the operator's to re-mount: the check fails (logged once, counted) until
 * the path is on a bpf filesystem again, then re-pins everything.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, DEFAULT_BPFFS_ROOT, HeldBpfObject, bpfObjectOfFd, isBpffs, pinnedObjectAt } from '../../native/index.js';
import type { Logger } from '../log/log.js';
import { checkPinDirs } from './pin-dir-ownership.js';

export type PinnedKind = 'map' | 'link';
export type PinRepairReason = 'missing' | 'replaced';

export interface PinRepair {
  pin: string;
  object: PinnedKind;
  reason: PinRepairReason;
  /** What the pin held instead (replaced). */
  found?: string;
}

interface Kept {
  object: PinnedKind;
  kind: string;
  id: number;
  pin(at: string): void;
  close(): void;
}

/** The nearest existing directory at or above `p`. */
function nearestExisting(p: string): string {
  let dir = path.resolve(p);
  while (!fs.existsSync(dir) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
}

/** What the object pinned at `pin` is, for the log line of a replaced pin. */
function describePinned(pin: string, kind: string): string {
  if (kind !== 'bpf-map') return kind;
  try {
    const m = BpfMap.openPinned(pin);
    try {
      return `map ${m.name || '(unnamed)'} id ${m.id}: ${m.typeName}, key ${m.keySize} B, value ${m.valueSize} B, max_entries ${m.maxEntries}`;
    } finally {
      m.close();
    }
  } catch (err) {
    return `${kind} (${(err as Error).message})`;
  }
}

export class PinKeeper {
  private readonly kept = new Map<string, Kept>();

  constructor(
    private readonly bpffsDir: string,
    private readonly log: Logger,
    private readonly onRepair: (object: PinnedKind, reason: PinRepairReason) => void = () => {},
  ) {}

  /** The agent's own map, pinned at `pin`. */
  keepMap(pin: string, map: BpfMap): void {
    this.kept.get(pin)?.close();
    this.kept.set(pin, { object: 'map', ...bpfObjectOfFd(map.fd), pin: (at) => map.pin(at), close: () => {} });
  }

  /** The link pinned at `pin` now (just attached): held open from here on. */
  keepLink(pin: string): void {
    const held = HeldBpfObject.open(pin);
    this.kept.get(pin)?.close();
    this.kept.set(pin, { object: 'link', kind: held.kind, id: held.id, pin: (at) => held.pin(at), close: () => held.close() });
  }

  /**
   * The links under `dir` that should be kept are exactly `pins` (the tc
   * attacher's current tcx links): new ones are held, ones it removed
   * released, and those in `renewed` (attached anew, e.g. to a re-created
   * interface of the same name) held again from their pin.
   */
  syncLinksUnder(dir: string, pins: string[], renewed: string[] = []): void {
    const want = new Set(pins);
    for (const [pin, k] of this.kept) {
      if (k.object === 'link' && path.dirname(pin) === dir && !want.has(pin)) {
        k.close();
        this.kept.delete(pin);
      }
    }
    for (const pin of want) {
      if (this.kept.has(pin) && !renewed.includes(pin)) continue;
      try {
        this.keepLink(pin);
      } catch (err) {
        this.log.debug('tcx link pin not held', { pin, error: (err as Error).message });
      }
    }
  }

  /**
   * Compares every pin with the agent's object and re-pins where it differs.
   * Throws while the bpffs directory is not on a bpf filesystem, and (before
   * re-pinning) when a pin directory fails the ownership checks of
   * agent/datapath/pin-dir-ownership.ts.
   */
  check(): PinRepair[] {
    const where = nearestExisting(this.bpffsDir);
    if (!isBpffs(where)) {
      throw new Error(
        `${this.bpffsDir} is not on a bpf filesystem (${where} is not bpffs; unmounted?): the datapath keeps serving through the agent's open maps and links, which are pinned again once bpffs is back`,
      );
    }
    const repaired: PinRepair[] = [];
    let dirsChecked = false;
    for (const [pin, k] of this.kept) {
      let now: { kind: string; id: number } | null;
      try {
        now = pinnedObjectAt(pin);
      } catch (err) {
        now = { kind: `unreadable (${(err as Error).message})`, id: -1 };
      }
      if (now && now.kind === k.kind && now.id === k.id) continue;
      if (now && k.object === 'link' && now.kind === k.kind) {
        // Another link at a link pin: attached anew by kpr (another agent on these pins,
        // during a rolling update). It is the live one: held from now on, not overwritten.
        try {
          this.keepLink(pin);
          this.log.debug('link pin holds a newer link; holding that one', { pin, id: now.id, was: k.id });
          continue;
        } catch {
          /* gone again: pinned back below */
        }
      }
      const repair: PinRepair = { pin, object: k.object, reason: now ? 'replaced' : 'missing' };
      if (now) repair.found = describePinned(pin, now.kind);
      // Re-created directories (bpffs re-mounted, the directory removed) pass the start-up ownership checks first.
      if (!dirsChecked) checkPinDirs(this.bpffsDir, DEFAULT_BPFFS_ROOT, this.log);
      dirsChecked = true;
      fs.mkdirSync(path.dirname(pin), { recursive: true });
      if (now) fs.rmSync(pin, { force: true });
      k.pin(pin);
      this.onRepair(k.object, repair.reason);
      repaired.push(repair);
    }
    if (repaired.some((r) => r.reason === 'replaced')) {
      this.log.error("pinned objects replaced by others; pinned the agent's own again", { pins: repaired });
    } else if (repaired.length) {
      this.log.warn("pins missing; pinned the agent's objects again", { count: repaired.length, pins: repaired.map((r) => r.pin) });
    }
    return repaired;
  }

  /** Releases the held link fds (maps belong to their objects). Pins stay. */
  close(): void {
    for (const k of this.kept.values()) k.close();
    this.kept.clear();
  }
}
