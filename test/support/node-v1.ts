/**
 * Puts a node programmed by this release's agent (stopped) on the datapath
 * of a layout-v1 release, as a node running that release would be: the
 * programs built against test/fixtures/bpf-v1/kpr_types.h
 * (build/fixtures/v1/), every map pinned under its v1 name and holding the
 * v1 layout. Maps of a layout this release changed get a new v1 map, filled
 * by converting the current one member by member (the reverse of what the
 * agent's migration does); the others are the very same maps. The v1
 * programs are swapped into kpr's cgroup links and tc attachments in
 * place, then this release's pins are removed. For the upgrade test: the
 * node is then what a node upgraded from such a release looks like.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, BpfObject, attachCgroup } from '../../native/index.js';
import { MAP_BY_NAME, layoutsAt } from '../../agent/maps/registry.js';
import { copyMapEntries } from '../../agent/datapath/map-copy.js';
import { linkPinPath, mapPinName, mapPinPath, tcLinkPinDir } from '../../agent/datapath/pins.js';
import { TcAttacher } from '../../agent/datapath/tc-attacher.js';
import type { TcAttachSetting } from '../../agent/datapath/tc-hooks.js';
import { SOCK_PROGRAMS } from '../../agent/datapath/loader.js';
import type { Logger } from '../../agent/log/log.js';
import { repoRoot } from './paths.js';

export const FIXTURE_V1_DIR = path.join(repoRoot, 'build', 'fixtures', 'v1');

export interface NodeV1Options {
  bpffsDir: string;
  cgroupPath: string;
  netns: string;
  externalInterfaces: string[];
  podInterfaces: string[];
  tcAttach: TcAttachSetting;
}

const quiet: Logger = { error: () => {}, warn: () => {}, info: () => {}, debug: () => {}, child: () => quiet } as unknown as Logger;

export function runNodeOnLayoutV1(o: NodeV1Options): void {
  for (const f of ['kpr_sock.bpf.o', 'kpr_tc.bpf.o']) {
    if (!fs.existsSync(path.join(FIXTURE_V1_DIR, f))) throw new Error(`the upgrade test needs ${path.join(FIXTURE_V1_DIR, f)}: run \`make build\``);
  }
  const current = new Map<string, BpfMap>();
  const objects: BpfObject[] = [];
  try {
    const pinPaths: Record<string, string> = {};
    const maxEntries: Record<string, number> = {};
    for (const spec of MAP_BY_NAME.values()) {
      const m = BpfMap.openPinned(mapPinPath(o.bpffsDir, spec.name));
      current.set(spec.name, m);
      pinPaths[spec.name] = path.join(path.dirname(mapPinPath(o.bpffsDir, spec.name)), mapPinName(spec.name, 1));
      maxEntries[spec.name] = m.maxEntries;
    }
    const open = (file: string) => {
      const obj = BpfObject.open(path.join(FIXTURE_V1_DIR, file), { pinPaths, maxEntries });
      objects.push(obj);
      obj.load();
      return obj;
    };
    const sock = open('kpr_sock.bpf.o');
    const tc = open('kpr_tc.bpf.o');
    // The changed maps: new v1 maps (pinned by the load), filled from the current ones.
    for (const spec of MAP_BY_NAME.values()) {
      if (spec.version === 1) continue;
      const v1 = layoutsAt(spec, 1);
      if (!v1) throw new Error(`${spec.name}: the registry has no layout v1`);
      const target = BpfMap.openPinned(pinPaths[spec.name]!);
      try {
        copyMapEntries(current.get(spec.name)!, { key: spec.key, value: spec.value }, target, v1, 'all');
      } finally {
        target.close();
      }
    }
    for (const prog of SOCK_PROGRAMS) {
      const link = linkPinPath(o.bpffsDir, prog);
      if (fs.existsSync(link)) attachCgroup(sock.program(prog), o.cgroupPath, link);
    }
    const attacher = new TcAttacher({
      tcObject: tc,
      pinDir: tcLinkPinDir(o.bpffsDir),
      netns: o.netns,
      externalInterfaces: o.externalInterfaces,
      podInterfaces: o.podInterfaces,
      attachMode: o.tcAttach,
      log: quiet,
    });
    attacher.sync();
    for (const spec of MAP_BY_NAME.values()) if (spec.version !== 1) fs.rmSync(mapPinPath(o.bpffsDir, spec.name));
  } finally {
    for (const m of current.values()) m.close();
    for (const obj of objects) obj.close();
  }
}
