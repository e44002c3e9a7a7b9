/**
 * The agent's datapath maps through their pins, as any other process on the
 * node (bpftool, a second agent) would reach them: the e2e tests read and
 * change what the kernel holds with this.
 */
import { BpfMap } from '../../native/index.js';
import { BpfDatapathMaps, type DatapathMapSet } from '../../agent/maps/bpf-datapath-maps.js';
import { MAP_NAMES } from '../../agent/maps/layout.js';
import { mapPinPath } from '../../agent/datapath/pins.js';

/** Opens every map the reconciler writes under `bpffsDir`, runs `fn` on them and closes them again. */
export function withPinnedMaps<T>(bpffsDir: string, fn: (m: BpfDatapathMaps) => T): T {
  const opened: BpfMap[] = [];
  const open = (name: string) => {
    const m = BpfMap.openPinned(mapPinPath(bpffsDir, name));
    opened.push(m);
    return m;
  };
  try {
    const set: DatapathMapSet = {
      svc: open(MAP_NAMES.svc),
      backend: open(MAP_NAMES.backend),
      vip: open(MAP_NAMES.vip),
      affinityMatch: open(MAP_NAMES.affinityMatch),
      svcMeta: open(MAP_NAMES.svcMeta),
      srcRange: open(MAP_NAMES.srcRange),
    };
    return fn(new BpfDatapathMaps(set));
  } finally {
    for (const m of opened) m.close();
  }
}
