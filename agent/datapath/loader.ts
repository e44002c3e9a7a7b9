/**
 * Brings the datapath up. Three objects share one set of pinned maps:
 *  - kpr_sock.bpf.o: cgroup socket hooks, attached through pinned links;
 *  - kpr_tc.bpf.o: tc programs, attached per interface by TcAttacher;
 *  - kpr_sock_term.bpf.o: the UDP socket iterator (kernel 6.5+; optional:
 *    without it UdpTerminator uses netlink sock_diag).
 * What happens to the maps a previous run pinned is migration-plan.ts's
 * decision: adopted as they are (each object opened with every map's pin
 * path set, so they are reused, contents and all, and the programs are
 * swapped into the links a previous run left: no window without
 * translation), migrated live to a new set (migration.ts), or, when they
 * are of a newer layout than this release knows, left alone: the agent
 * refuses to start.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import {
  BATCH_WRITER_LIBRARY,
  BpfIterator,
  BpfMap,
  BpfObject,
  cgroupId,
  DEFAULT_BPFFS_ROOT,
  detachPinnedLink,
  ensureBpffs,
  type CgroupAttachment,
} from '../../native/index.js';
import { MAP_NAMES, encodeConfig, mapCodecs, type KprConfig } from '../maps/layout.js';
import { MAPS, MAP_BY_NAME } from '../maps/registry.js';
import type { Logger } from '../log/log.js';
import { isRing, linkPinPath, mapPinName, mapStagingDir, objectPins } from './pins.js';
import { checkPinDirs } from './pin-dir-ownership.js';
import type { KernelFeature, KernelFeatures } from './kernel-features.js';
import { SOCK_TERM_OBJECT } from './kernel-probes.js';
import { describeRefusal, planPins, type PinPlan, type WantedMap } from './migration-plan.js';
import { liveMapIds, pinDirPath, scanMapPins } from './pin-scan.js';
import { Migration, setMigratingFlag, type MigrationReasonLine, type MigrationSummary } from './migration.js';

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
  /** A map pinned at one of kpr's names is not kpr's map (another type, key or value): the migration starts it empty. */
  onIncompatiblePin?: (map: string) => void;
  /** max_entries by map name (agent/datapath/map-sizes.ts), instead of the compiled sizes. */
  mapSizes?: Readonly<Record<string, number>>;
}

/** Pins of a layout version newer than this release knows: the agent does not start (a downgrade); nothing was touched. */
export class PinLayoutRefusal extends Error {}

export type DatapathMapSet = { [K in keyof typeof MAP_NAMES]: BpfMap };

/** A migration the loader started, ended by finish() once every program runs on the new set. */
export interface PendingMigration {
  /** The maps that made the set migrate, and why. */
  reasons: MigrationReasonLine[];
  /**
   * Copies the old state maps in, ends the read-through (KPR_CFG_F_MIGRATING
   * off in kpr_config: the caller writes its node settings again), moves the
   * pins into maps/, and swaps in programs that no longer hold the old maps:
   * the socket programs here, the tc programs through `swapTc`. Call it once
   * attachSockPrograms() ran and the tc programs were attached; again after
   * a failure.
   */
  finish(swapTc: (tcObject: BpfObject) => void): MigrationSummary;
}

export interface Datapath {
  /** Handles of their own (opened from the pins): they outlive the objects a migration replaces. */
  maps: DatapathMapSet;
  /** The tc programs' object (replaced when a migration finishes). */
  tcObject: BpfObject;
  /** Undefined when the kernel cannot run it (before 6.5) or it was not asked for; see udpIteratorError. */
  udpIterator?: BpfIterator;
  /** Why udpIterator is missing. */
  udpIteratorError?: string;
  /** The socket programs' cgroup links; empty until attachSockPrograms() while a migration waits for the initial sync. */
  attachments: CgroupAttachment[];
  /**
   * Set while a migration is under way (migration.ts): the socket programs
   * are not attached at load then, the previous agent's programs (on the old
   * set) serving until the agent has filled the new set and calls
   * attachSockPrograms(); cleared by its finish().
   */
  migration: PendingMigration | null;
  /** max_entries of each sized map (the configured sizes: a map pinned at another size is migrated to it). */
  mapSizes: Record<string, number>;
  /** Whether the programs read through to the old maps (KPR_CFG_F_MIGRATING, for the node settings). */
  migrating(): boolean;
  /** Attaches (or swaps in) the socket programs on --cgroup-path; returns the links. */
  attachSockPrograms(): CgroupAttachment[];
  /**
   * Attaches one socket program again through its pinned link (a link
   * detached behind the agent is unpinned and a new one pinned; see
   * attachment-check.ts); returns the attachment, which replaces the old one
   * in `attachments`.
   */
  reattachSockProgram(program: string): CgroupAttachment;
  /**
   * Whether --cgroup-path is a newer cgroup than the one the programs are
   * attached to (rmdir'd and created again): then they are attached to it
   * (true). Throws while the path is gone.
   */
  reattachIfCgroupRecreated(): boolean;
  /** Releases this process's handles; pinned maps and links stay. */
  close(): void;
}

/** A socket program that writes kpr_revnat (and kpr_affinity): connect and sendmsg; recvmsg and getpeername only read. */
function isWriter(prog: string): boolean {
  return /^kpr_(connect|sendmsg)/.test(prog);
}

function sibling(bpfObject: string, name: string): string {
  return path.join(path.dirname(bpfObject), name);
}

/** The batch writer library (native/batch_writer.c): built next to the BPF objects. */
export function batchWriterPath(bpfObject: string): string {
  return sibling(bpfObject, BATCH_WRITER_LIBRARY);
}

function datapathObjects(opts: DatapathOptions): string[] {
  return [opts.bpfObject, sibling(opts.bpfObject, 'kpr_tc.bpf.o'), sibling(opts.bpfObject, SOCK_TERM_OBJECT)];
}

/** Every registry map as the objects define it at the configured sizes (unloaded objects, read and closed). */
function wantedMaps(opts: DatapathOptions): WantedMap[] {
  const out = new Map<string, WantedMap>();
  for (const file of datapathObjects(opts)) {
    if (!existsSync(file)) continue;
    const obj = BpfObject.open(file, { maxEntries: opts.mapSizes ?? {} });
    try {
      for (const d of obj.mapDefs()) {
        const spec = MAP_BY_NAME.get(d.name);
        if (!spec || out.has(d.name)) continue;
        const older = new Map(spec.older.map((o) => [o.version, { keySize: o.key.size, valueSize: o.value.size }]));
        out.set(d.name, { ...d, version: spec.version, older });
      }
    } finally {
      obj.close();
    }
  }
  return [...out.values()];
}

/**
 * Loads and attaches everything. `features` (the probed registry) decides
 * what is tried: socket programs whose hook the kernel lacks are not loaded
 * (and a link a previous run pinned for them is detached); the UDP socket
 * iterator is loaded here, which is the probe of bpf_sock_destroy. Throws
 * PinLayoutRefusal, touching nothing, when a map is pinned at a newer layout.
 */
export function loadDatapath(opts: DatapathOptions, log: Logger, features: KernelFeatures): Datapath {
  ensureBpffs(opts.bpffsDir);
  // Before any pin is reused: the directories and pins must be root's (agent/datapath/pin-dir-ownership.ts).
  checkPinDirs(opts.bpffsDir, DEFAULT_BPFFS_ROOT, log);
  const maxEntries = { ...opts.mapSizes };
  const skipped = SOCK_PROGRAMS.filter((p) => {
    const f = OPTIONAL_SOCK_PROGRAMS[p];
    return f !== undefined && !features.present(f);
  });
  const plan = planPins(scanMapPins(opts.bpffsDir), wantedMaps(opts), liveMapIds(opts.bpffsDir, SOCK_PROGRAMS));
  if (plan.mode === 'refuse') {
    log.error('maps pinned by a newer kpr release; not starting', { maps: plan.newer });
    throw new PinLayoutRefusal(describeRefusal(plan.newer, opts.bpffsDir));
  }
  removeLeftovers(plan, opts.bpffsDir, log);
  dropIncompatibleRings(opts, log);
  const migration = plan.mode === 'migrate' ? startMigration(plan, opts, log) : null;

  const { pinPaths } = objectPins(opts.bpffsDir);
  // A migrating set is staged; the rings stay where they are, old and new programs writing to them alike.
  if (migration) for (const name of Object.keys(pinPaths)) if (!isRing(name)) pinPaths[name] = migration.stagedPin(name);
  const opened: BpfObject[] = [];
  const handles: BpfMap[] = [];
  const open = (file: string, skipPrograms: string[] = [], withPrev = true) => {
    const reuseMaps = migration && withPrev ? migration.prevMaps() : {};
    const obj = BpfObject.open(file, { pinPaths, skipPrograms, maxEntries, reuseMaps });
    opened.push(obj);
    obj.load();
    return obj;
  };
  try {
    let sock = open(opts.bpfObject, skipped);
    let tcObject = open(sibling(opts.bpfObject, 'kpr_tc.bpf.o'));
    const udp = loadUdpIterator(opts, features, (file) => open(file, [], false));
    for (const prog of skipped) {
      try {
        if (detachPinnedLink(linkPinPath(opts.bpffsDir, prog)))
          log.info('detached the pinned link of a socket program this kernel cannot run', { program: prog });
      } catch (err) {
        log.warn('could not detach a pinned link', { program: prog, error: (err as Error).message });
      }
    }
    const byName = new Map<string, BpfMap>();
    for (const [name, pin] of Object.entries(pinPaths)) {
      const m = BpfMap.openPinned(pin);
      handles.push(m);
      byName.set(name, m);
    }
    const maps = Object.fromEntries(Object.entries(MAP_NAMES).map(([k, name]) => [k, byName.get(name)!])) as DatapathMapSet;
    if (migration) {
      const copied = migration.copyOwnedMaps(byName);
      setMigratingFlag(maps.config, true);
      log.info('map migration: the new set is filled from the old one; the previous programs serve until the initial sync has written it', { copied });
    }
    // Readers of kpr_revnat first: swapped to the new set, they read through to the old map, while
    // the writers not swapped yet still write there; the other order would hide new entries from old readers.
    const attachable = SOCK_PROGRAMS.filter((p) => !skipped.includes(p)).sort((a, b) => Number(isWriter(a)) - Number(isWriter(b)));
    let reading = migration !== null;
    const dp: Datapath = {
      maps,
      tcObject,
      ...udp,
      attachments: [],
      migration: null,
      mapSizes: Object.fromEntries(Object.keys(opts.mapSizes ?? {}).map((n) => [n, byName.get(n)?.maxEntries ?? opts.mapSizes![n]!])),
      migrating: () => reading,
      attachSockPrograms: () => {
        dp.attachments = attachable.map((prog) => sock.attachCgroup(prog, opts.cgroupPath, linkPinPath(opts.bpffsDir, prog)));
        log.info('datapath attached', {
          cgroup: opts.cgroupPath,
          bpffs: opts.bpffsDir,
          programs: dp.attachments.map((a) => ({ program: a.program, link: a.linkId, replaced: a.replaced })),
        });
        return dp.attachments;
      },
      reattachSockProgram: (program) => {
        const a = sock.attachCgroup(program, opts.cgroupPath, linkPinPath(opts.bpffsDir, program));
        dp.attachments = dp.attachments.map((x) => (x.program === program ? a : x));
        return a;
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
        dp.udpIterator?.close();
        for (const o of opened) o.close();
        for (const m of handles) m.close();
        migration?.close();
      },
    };
    if (migration) {
      dp.migration = {
        reasons: migration.reasons,
        finish: (swapTc) => {
          const summary = migration.finish(byName, maps.config, () => {
            reading = false;
            // The programs once more, on the same (now promoted) maps, without the old ones.
            Object.assign(pinPaths, objectPins(opts.bpffsDir).pinPaths);
            const gen2 = [sock, tcObject];
            const nextSock = open(opts.bpfObject, skipped, false);
            const nextTc = open(sibling(opts.bpfObject, 'kpr_tc.bpf.o'), [], false);
            sock = nextSock;
            dp.attachSockPrograms();
            swapTc(nextTc);
            tcObject = nextTc;
            dp.tcObject = nextTc;
            for (const o of gen2) {
              o.close();
              opened.splice(opened.indexOf(o), 1);
            }
          });
          dp.migration = null;
          return summary;
        },
      };
      log.warn('socket programs attached after the initial sync (the maps migrate to a new set): the previous programs keep serving until then', {
        maps: migration.reasons,
      });
    } else {
      dp.attachSockPrograms();
    }
    return dp;
  } catch (err) {
    for (const o of opened) o.close();
    for (const m of handles) m.close();
    migration?.close();
    throw err;
  }
}

/** The UDP socket iterator, when this kernel can run it and it was asked for. */
function loadUdpIterator(
  opts: DatapathOptions,
  features: KernelFeatures,
  open: (file: string) => BpfObject,
): { udpIterator?: BpfIterator; udpIteratorError?: string } {
  if (!(opts.loadUdpIterator ?? true)) return { udpIteratorError: 'not loaded (--udp-termination netlink)' };
  // Decided already (treated as absent through KPR_DISABLE_KERNEL_FEATURES).
  if (features.probed('bpf-sock-destroy')) return { udpIteratorError: features.status('bpf-sock-destroy').detail };
  try {
    const term = open(sibling(opts.bpfObject, SOCK_TERM_OBJECT));
    const udpIterator = BpfIterator.attach(term.program('kpr_sock_term'));
    features.record('bpf-sock-destroy', { present: true, detail: `${SOCK_TERM_OBJECT} loads (bpf_sock_destroy resolved)` });
    return { udpIterator };
  } catch (err) {
    // Expected before 6.5 (no bpf_sock_destroy); UdpTerminator says what it uses instead.
    const udpIteratorError = (err as Error).message;
    features.record('bpf-sock-destroy', { present: false, detail: `${SOCK_TERM_OBJECT} does not load: ${udpIteratorError}` });
    return { udpIteratorError };
  }
}

/**
 * A ring buffer pinned at kpr's name that the load would not reuse (another
 * type or size): its pin goes, so a new ring is created; the programs still
 * attached keep theirs while they run. Rings carry no state worth keeping.
 */
function dropIncompatibleRings(opts: DatapathOptions, log: Logger): void {
  const pinPaths = Object.fromEntries(Object.entries(objectPins(opts.bpffsDir).pinPaths).filter(([name]) => isRing(name)));
  for (const file of datapathObjects(opts)) {
    if (!existsSync(file)) continue;
    const obj = BpfObject.open(file, { pinPaths });
    try {
      for (const bad of obj.incompatiblePins()) {
        log.error('pinned maps are not the maps kpr defines; a new ring buffer replaces this one', { maps: [{ name: bad.name, why: bad.why }] });
        rmSync(bad.pin, { force: true });
        opts.onIncompatiblePin?.(bad.name);
      }
    } finally {
      obj.close();
    }
  }
}

/** Pins the plan leaves behind: other versions of a map nothing uses, what an interrupted migration staged and will not be reused. */
function removeLeftovers(plan: Exclude<PinPlan, { mode: 'refuse' }>, bpffsDir: string, log: Logger): void {
  if (!plan.remove.length) return;
  log.info('removing map pins nothing uses (other layout versions, or staged by a migration that did not finish)', {
    pins: plan.remove.map((r) => `${r.dir}/${r.file}`),
  });
  for (const r of plan.remove) rmSync(path.join(pinDirPath(bpffsDir, r.dir), r.file), { force: true });
}

function startMigration(plan: Extract<PinPlan, { mode: 'migrate' }>, opts: DatapathOptions, log: Logger): Migration {
  const foreign = plan.maps.filter((m) => m.reason === 'foreign');
  if (foreign.length) {
    log.error('pinned maps are not the maps kpr defines; they are left to the previous programs and the new set starts them empty', {
      maps: foreign.map((m) => ({ name: m.name, why: m.detail })),
    });
    for (const m of foreign) opts.onIncompatiblePin?.(m.name);
  }
  mkdirSync(mapStagingDir(opts.bpffsDir), { recursive: true, mode: 0o700 });
  const migration = new Migration(opts.bpffsDir, plan.maps, log);
  log.warn("maps migrate to a new set (layout version, size, or not kpr's map); connections keep being served", {
    maps: migration.reasons,
    staged: plan.maps.filter((m) => m.reuseStaged).map((m) => mapPinName(m.name, MAP_BY_NAME.get(m.name)!.version)),
  });
  return migration;
}

/** Writes the node-wide datapath settings (kpr_config). */
export function writeNodeConfig(configMap: BpfMap, cfg: KprConfig): void {
  configMap.update(CONFIG_KEY, encodeConfig(cfg));
}

/** kpr_config's one index (0). */
export const CONFIG_KEY = mapCodecs(MAPS.config).key.encode(0);
