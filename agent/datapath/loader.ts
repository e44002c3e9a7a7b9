/**
 * Brings the datapath up. Three objects share one set of pinned maps:
 *  - kpr_sock.bpf.o: cgroup socket hooks, attached through pinned links;
 *  - kpr_tc.bpf.o: tc programs, attached per interface by TcAttacher;
 *  - kpr_sock_term.bpf.o: the UDP socket iterator (kernel 6.5+; optional:
 *    without it UdpTerminator uses netlink sock_diag).
 * Each object is opened with every map's pin path set, so a previous run's
 * maps are reused, contents and all, and programs are swapped into the
 * links a previous run left (no window without translation).
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { BATCH_WRITER_LIBRARY, BpfIterator, BpfObject, cgroupId, DEFAULT_BPFFS_ROOT, detachPinnedLink, ensureBpffs, type BpfMap, type CgroupAttachment, type PinnedSizeMismatch } from '../../native/index.js';
import { MAP_NAMES, encodeConfig, mapCodecs, type KprConfig } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import type { Logger } from '../log.js';
import { linkPinPath, objectPins, ringPinDir } from './pins.js';
import { checkPinDirs } from './pin-dir-ownership.js';
import type { KernelFeature, KernelFeatures } from './kernel-features.js';
import { SOCK_TERM_OBJECT } from './kernel-probes.js';

/** The cgroup socket programs, by name in bpf/kpr_sock.bpf.c. */
export const SOCK_PROGRAMS = [
  'kpr_connect4',
  'kpr_sendmsg4',
  'kpr_recvmsg4',
  'kpr_getpeername4',
  'kpr_connect6',
  'kpr_sendmsg6',
  'kpr_recvmsg6',
  'kpr_getpeername6',
] as const;

/** The socket programs that need a hook some kernels lack, by the feature that says whether it is there. */
const OPTIONAL_SOCK_PROGRAMS: Partial<Record<(typeof SOCK_PROGRAMS)[number], KernelFeature>> = {
  kpr_recvmsg4: 'cgroup-recvmsg',
  kpr_recvmsg6: 'cgroup-recvmsg',
  kpr_getpeername4: 'cgroup-getpeername',
  kpr_getpeername6: 'cgroup-getpeername',
};

export interface DatapathOptions {
  /** kpr_sock.bpf.o; the other objects are found beside it. */
  bpfObject: string;
  bpffsDir: string;
  cgroupPath: string;
  /** Load kpr_sock_term.bpf.o (default true; false when --udp-termination netlink will not use it). */
  loadUdpIterator?: boolean;
  /** A pinned map load could not adopt (another type, key or value) was replaced by a new, empty one. */
  onIncompatiblePin?: (map: string) => void;
  /**
   * max_entries by map name (agent/datapath/map-sizes.ts), instead of the
   * compiled sizes. A map already pinned at another size keeps its pinned
   * size (see pinnedSizes); the rest are created at these.
   */
  mapSizes?: Readonly<Record<string, number>>;
}

/** A map in use at another size than configured: its pin predates the setting (resizing a pinned map is not done yet). */
export type MapSizeMismatch = Omit<PinnedSizeMismatch, 'pin'>;

export type DatapathMapSet = { [K in keyof typeof MAP_NAMES]: BpfMap };

export interface Datapath {
  maps: DatapathMapSet;
  tcObject: BpfObject;
  /** Undefined when the kernel cannot run it (before 6.5) or it was not asked for; see udpIteratorError. */
  udpIterator?: BpfIterator;
  /** Why udpIterator is missing. */
  udpIteratorError?: string;
  /**
   * The socket programs' cgroup links; empty until attachSockPrograms() when
   * the load replaced an incompatible pin (see replacedPins).
   */
  attachments: CgroupAttachment[];
  /**
   * Maps whose pin load could not adopt and replaced with a new, empty map.
   * The socket programs are then not attached at load: the previous agent's
   * programs (still attached, on the original maps) keep serving until the
   * agent has filled the new maps and calls attachSockPrograms().
   */
  replacedPins: string[];
  /** max_entries each sized map was loaded with (configured, or its pin's where they differ). */
  mapSizes: Record<string, number>;
  /** Maps kept at their pinned size, which is not the configured one. */
  sizeMismatches: MapSizeMismatch[];
  /** Attaches (or swaps in) the socket programs on --cgroup-path; returns the links. */
  attachSockPrograms(): CgroupAttachment[];
  /**
   * Whether --cgroup-path is a newer cgroup than the one the programs are
   * attached to (rmdir'd and created again): then they are attached to it
   * (true). Throws while the path is gone.
   */
  reattachIfCgroupRecreated(): boolean;
  /** Releases this process's handles; pinned maps and links stay. */
  close(): void;
}

function sibling(bpfObject: string, name: string): string {
  return path.join(path.dirname(bpfObject), name);
}

/** The batch writer library (native/batch_writer.c): built next to the BPF objects. */
export function batchWriterPath(bpfObject: string): string {
  return sibling(bpfObject, BATCH_WRITER_LIBRARY);
}

/**
 * Loads and attaches everything. `features` (the probed registry) decides
 * what is tried: socket programs whose hook the kernel lacks are not loaded
 * (and a link a previous run pinned for them is detached); the UDP socket
 * iterator is loaded here, which is the probe of bpf_sock_destroy.
 */
export function loadDatapath(opts: DatapathOptions, log: Logger, features: KernelFeatures): Datapath {
  ensureBpffs(opts.bpffsDir);
  // Before any pin is reused: the directories and pins must be root's (agent/datapath/pin-dir-ownership.ts).
  checkPinDirs(opts.bpffsDir, DEFAULT_BPFFS_ROOT, log);
  const pins = objectPins(opts.bpffsDir);
  const opened: BpfObject[] = [];
  const requested = { ...opts.mapSizes };
  let sized = pinnedSizes(opts, pins, requested);
  const replacedPins = replaceIncompatiblePins(opts, pins, log, sized.sizes);
  // Every pin went (another map was incompatible): every map is created at the configured size.
  if (replacedPins.length > 0) sized = { sizes: requested, mismatches: [] };
  for (const m of sized.mismatches) {
    log.warn(`map ${m.name} is pinned with max_entries ${m.pinned}, configured ${m.requested}: kept at ${m.pinned} (a pinned map is not resized; remove the pins to apply the new size)`, { map: m.name, pinned: m.pinned, requested: m.requested });
  }
  const maxEntries = sized.sizes;
  const open = (file: string, skipPrograms: string[] = []) => {
    const obj = BpfObject.open(file, { ...pins, skipPrograms, maxEntries });
    opened.push(obj);
    obj.load();
    return obj;
  };
  try {
    const skipped = SOCK_PROGRAMS.filter((p) => {
      const f = OPTIONAL_SOCK_PROGRAMS[p];
      return f !== undefined && !features.present(f);
    });
    const sock = open(opts.bpfObject, skipped);
    const tcObject = open(sibling(opts.bpfObject, 'kpr_tc.bpf.o'));
    let udpIterator: BpfIterator | undefined;
    let udpIteratorError: string | undefined;
    if (!(opts.loadUdpIterator ?? true)) {
      udpIteratorError = 'not loaded (--udp-termination netlink)';
    } else if (features.probed('bpf-sock-destroy')) {
      // Decided already (treated as absent through KPR_DISABLE_KERNEL_FEATURES).
      udpIteratorError = features.status('bpf-sock-destroy').detail;
    } else {
      try {
        const term = open(sibling(opts.bpfObject, SOCK_TERM_OBJECT));
        udpIterator = BpfIterator.attach(term.program('kpr_sock_term'));
        features.record('bpf-sock-destroy', { present: true, detail: `${SOCK_TERM_OBJECT} loads (bpf_sock_destroy resolved)` });
      } catch (err) {
        // Expected before 6.5 (no bpf_sock_destroy); UdpTerminator says what it uses instead.
        udpIteratorError = (err as Error).message;
        features.record('bpf-sock-destroy', { present: false, detail: `${SOCK_TERM_OBJECT} does not load: ${udpIteratorError}` });
      }
    }
    for (const prog of skipped) {
      try {
        if (detachPinnedLink(linkPinPath(opts.bpffsDir, prog))) log.info('detached the pinned link of a socket program this kernel cannot run', { program: prog });
      } catch (err) {
        log.warn('could not detach a pinned link', { program: prog, error: (err as Error).message });
      }
    }
    const attachable = SOCK_PROGRAMS.filter((p) => !skipped.includes(p));
    const dp: Datapath = {
      maps: Object.fromEntries(Object.entries(MAP_NAMES).map(([k, name]) => [k, sock.map(name)])) as DatapathMapSet,
      tcObject,
      udpIterator,
      ...(udpIteratorError !== undefined ? { udpIteratorError } : {}),
      attachments: [],
      replacedPins,
      mapSizes: { ...maxEntries },
      sizeMismatches: sized.mismatches.map(({ name, pinned, requested: r }) => ({ name, pinned, requested: r })),
      attachSockPrograms: () => {
        dp.attachments = attachable.map((prog) => sock.attachCgroup(prog, opts.cgroupPath, linkPinPath(opts.bpffsDir, prog)));
        log.info('datapath attached', {
          cgroup: opts.cgroupPath,
          bpffs: opts.bpffsDir,
          programs: dp.attachments.map((a) => ({ program: a.program, link: a.linkId, replaced: a.replaced })),
        });
        return dp.attachments;
      },
      reattachIfCgroupRecreated: () => {
        if (!existsSync(opts.cgroupPath)) {
          throw new Error(`cgroup ${opts.cgroupPath} is gone (removed?): the socket programs went with it; attached again once the cgroup is back`);
        }
        const id = cgroupId(opts.cgroupPath);
        if (dp.attachments.length === 0 || dp.attachments.every((a) => a.cgroupId === id)) return false;
        // The links of the removed cgroup are dead: unpinned, then new ones on the new cgroup.
        for (const a of dp.attachments) {
          try {
            detachPinnedLink(a.linkPinPath);
          } catch {
            rmSync(a.linkPinPath, { force: true });
          }
        }
        dp.attachSockPrograms();
        return true;
      },
      close: () => {
        udpIterator?.close();
        for (const o of opened) o.close();
      },
    };
    if (replacedPins.length === 0) dp.attachSockPrograms();
    else log.warn('socket programs attached after the initial sync (a pinned map was replaced): the previous programs keep serving until then', { maps: replacedPins });
    return dp;
  } catch (err) {
    for (const o of opened) o.close();
    throw err;
  }
}

/**
 * Something other than kpr's map at one of kpr's map pins (another type, key,
 * value, or the size of a map without a run-time size: pinned over kpr's, or
 * left by an incompatible version) would fail the
 * load. kpr's pin directory is kpr's: every map pin in it is removed, so
 * every map is created anew and filled at the initial sync. All of them, not
 * only the bad one: the programs still attached (the previous agent's) keep
 * serving on the complete set of previous maps they hold, and the new
 * programs, on the new set, replace them once it is filled (conntrack and
 * affinity state start empty). Returns the names of the incompatible pins.
 */
function replaceIncompatiblePins(opts: DatapathOptions, pins: MapPins, log: Logger, maxEntries: Readonly<Record<string, number>>): string[] {
  const bad: Array<{ name: string; pin: string; why: string }> = [];
  for (const file of datapathObjects(opts)) {
    if (!existsSync(file)) continue;
    const obj = BpfObject.open(file, { ...pins, maxEntries });
    try {
      for (const b of obj.incompatiblePins()) if (!bad.some((x) => x.name === b.name)) bad.push(b);
    } finally {
      obj.close();
    }
  }
  if (bad.length === 0) return [];
  log.error('pinned maps are not the maps kpr defines; all of kpr\'s maps are created anew and filled at the initial sync, the previous programs serving on the previous maps until then', { maps: bad });
  for (const dir of [pins.pinMapsDir, ringPinDir(opts.bpffsDir)]) {
    if (existsSync(dir)) for (const file of readdirSync(dir)) rmSync(path.join(dir, file), { force: true });
  }
  for (const b of bad) opts.onIncompatiblePin?.(b.name);
  return bad.map((b) => b.name);
}

/** Where the objects pin their maps (objectPins). */
type MapPins = ReturnType<typeof objectPins>;

function datapathObjects(opts: DatapathOptions): string[] {
  return [opts.bpfObject, sibling(opts.bpfObject, 'kpr_tc.bpf.o'), sibling(opts.bpfObject, SOCK_TERM_OBJECT)];
}

/**
 * The sizes to load with: the configured ones, except where a map is already
 * pinned at another size and compatible otherwise. libbpf reuses a pin only
 * at the size asked for, and a pinned map cannot be resized in place, so
 * such a map keeps its pinned size (and its contents) until its pins are
 * removed; each is returned as a mismatch. Maps without a configured size
 * must match their compiled size (else replaceIncompatiblePins replaces them).
 */
export function pinnedSizes(opts: DatapathOptions, pins: MapPins, requested: Readonly<Record<string, number>>): { sizes: Record<string, number>; mismatches: PinnedSizeMismatch[] } {
  const sizes = { ...requested };
  const mismatches: PinnedSizeMismatch[] = [];
  for (const file of datapathObjects(opts)) {
    if (!existsSync(file)) continue;
    const obj = BpfObject.open(file, { ...pins, maxEntries: requested });
    try {
      for (const m of obj.pinnedSizeMismatches()) {
        // Only the run-time sized maps: a fixed map (an array indexed by a constant, say) at another size is incompatible.
        if (!(m.name in requested) || mismatches.some((x) => x.name === m.name)) continue;
        mismatches.push(m);
        sizes[m.name] = m.pinned;
      }
    } finally {
      obj.close();
    }
  }
  return { sizes, mismatches };
}

/** Writes the node-wide datapath settings (kpr_config). */
export function writeNodeConfig(configMap: BpfMap, cfg: KprConfig): void {
  configMap.update(CONFIG_KEY, encodeConfig(cfg));
}

/** kpr_config's one index (0). */
export const CONFIG_KEY = mapCodecs(MAPS.config).key.encode(0);
