/**
 * Brings the datapath up: open the object with every map's pin path set (so a
 * previous run's maps are reused, contents and all), load, and attach the
 * socket programs through pinned links, swapping the new programs into links a
 * previous run left (no window without translation).
 */
import { mkdirSync } from 'node:fs';
import { BpfObject, ensureBpffs, type BpfMap, type CgroupAttachment } from '../../native/index.js';
import { MAP_NAMES } from '../maps/layout.js';
import type { Logger } from '../log.js';
import { linkPinDir, linkPinPath, mapPinDir } from './pins.js';

/** The cgroup socket programs, by section name in bpf/kpr_sock.bpf.c. */
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

export interface DatapathOptions {
  bpfObject: string;
  bpffsDir: string;
  cgroupPath: string;
}

export interface Datapath {
  svcMap: BpfMap;
  backendMap: BpfMap;
  revnatMap: BpfMap;
  stats: BpfMap;
  attachments: CgroupAttachment[];
  /** Releases this process's handles; pinned maps and links stay. */
  close(): void;
}

export function loadDatapath(opts: DatapathOptions, log: Logger): Datapath {
  ensureBpffs(opts.bpffsDir);
  mkdirSync(mapPinDir(opts.bpffsDir), { recursive: true });
  mkdirSync(linkPinDir(opts.bpffsDir), { recursive: true });
  const obj = BpfObject.open(opts.bpfObject, { pinMapsDir: mapPinDir(opts.bpffsDir) });
  try {
    obj.load();
    const attachments = SOCK_PROGRAMS.map((prog) => obj.attachCgroup(prog, opts.cgroupPath, linkPinPath(opts.bpffsDir, prog)));
    log.info('datapath attached', {
      cgroup: opts.cgroupPath,
      bpffs: opts.bpffsDir,
      programs: attachments.map((a) => ({ program: a.program, link: a.linkId, replaced: a.replaced })),
    });
    return {
      svcMap: obj.map(MAP_NAMES.svc),
      backendMap: obj.map(MAP_NAMES.backend),
      revnatMap: obj.map(MAP_NAMES.revnat),
      stats: obj.map(MAP_NAMES.stats),
      attachments,
      close: () => obj.close(),
    };
  } catch (err) {
    obj.close();
    throw err;
  }
}
