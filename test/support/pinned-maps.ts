/**
 * The agent's datapath maps through their pins, as any other process on the
 * node (bpftool, a second agent) would reach them: the tests read and change
 * what the kernel holds with this.
 */
import { BpfMap } from '../../native/index.js';
import { BpfDatapathMaps, type DatapathMapSet } from '../../agent/maps/bpf-datapath-maps.js';
import { MAP_NAMES, decodeCtKey, decodeCtVal, type CtKey, type CtVal } from '../../agent/maps/layout.js';
import { mapPinDir, mapPinPath, mapPinPathsIn } from '../../agent/datapath/pins.js';

/** Every map the reconciler writes, opened from the pins in `pinDir` (at this release's layout versions); close() closes them all. */
export function openPinnedMapSet(pinDir: string): { set: Omit<DatapathMapSet, 'writer'>; close(): void } {
  const opened: BpfMap[] = [];
  const pins = mapPinPathsIn(pinDir);
  const open = (name: string) => {
    const m = BpfMap.openPinned(pins[name]!);
    opened.push(m);
    return m;
  };
  const close = () => {
    for (const m of opened) m.close();
  };
  try {
    const set = {
      svc: open(MAP_NAMES.svc),
      backend: open(MAP_NAMES.backend),
      vip: open(MAP_NAMES.vip),
      affinityMatch: open(MAP_NAMES.affinityMatch),
      svcMeta: open(MAP_NAMES.svcMeta),
      srcRange: open(MAP_NAMES.srcRange),
      maglev: open(MAP_NAMES.maglev),
      maglevRef: open(MAP_NAMES.maglevRef),
    };
    return { set, close };
  } catch (err) {
    close();
    throw err;
  }
}

/** Opens the agent's maps under `bpffsDir`, runs `fn` on them and closes them again. */
export function withPinnedMaps<T>(bpffsDir: string, fn: (m: BpfDatapathMaps) => T): T {
  const { set, close } = openPinnedMapSet(mapPinDir(bpffsDir));
  try {
    return fn(new BpfDatapathMaps(set));
  } finally {
    close();
  }
}

/** Backends of the frontend addr:port (its master, slot 0, of any scope) in the pinned kpr_svc map; undefined when not programmed. */
export function frontendBackendCount(bpffsDir: string, addr: string, port = 80): number | undefined {
  return withPinnedMaps(bpffsDir, (m) => m.dumpServices().find(([k]) => k.addr === addr && k.port === port && k.slot === 0)?.[1].count);
}

/** Every kpr_ct entry pinned under `bpffsDir`, decoded. */
export function pinnedConntrack(bpffsDir: string): Array<{ key: CtKey; val: CtVal }> {
  const m = BpfMap.openPinned(mapPinPath(bpffsDir, MAP_NAMES.ct));
  try {
    return [...m.entries()].map(([k, v]) => ({ key: decodeCtKey(k), val: decodeCtVal(v) }));
  } finally {
    m.close();
  }
}
