/**
 * Shared fixtures of the native binding tests: unique bpffs / cgroup names per
 * run, the compiled object, the cgroup v2 mount, and a clear failure when the
 * kernel does not allow BPF (these tests never skip).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { BpfMap, BPF_MAP_TYPE, ensureBpffs, KprBpfError } from '../../native/index.js';
import type { BpfDatapathMaps, DatapathMapSet } from '../../agent/maps/bpf-datapath-maps.js';
import { svcKeyId } from '../../agent/maps/memory-datapath-maps.js';
import type { MapState } from '../reconcile/support/datapath-state.js';
import {
  AFFINITY_MATCH_KEY,
  BACKEND,
  SRC_RANGE_KEY,
  SVC_KEY,
  SVC_META,
  SVC_VAL,
  VIP_KEY,
  VIP_VAL,
  decodeSvcKey,
  encodeSvcKey,
  encodeSvcVal,
} from '../../agent/maps/layout.js';
import { MAPS } from '../../agent/maps/registry.js';

/** dist/test/support/bpf-fixtures.js -> repository root. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const objPath = path.join(repoRoot, 'build', 'kpr_sock.bpf.o');

export function unique(prefix = 'kpr-test'): string {
  return `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** A fresh directory on /sys/fs/bpf, unique to this run. */
export function bpffsTempDir(): string {
  return ensureBpffs(path.join('/sys/fs/bpf', unique()));
}

export function rmrf(p: string): void {
  fs.rmSync(p, { recursive: true, force: true });
}

/** Fails (never skips) with a clear message when BPF is not usable here. */
export function requireBpf(): void {
  if (!fs.existsSync(objPath)) throw new Error(`native tests need ${objPath}: run \`make bpf\` first`);
  if (process.getuid?.() !== 0) throw new Error('native tests need root: BPF maps, programs and cgroup attach are privileged');
  try {
    BpfMap.create(BPF_MAP_TYPE.HASH, 4, 4, 1, 'kpr_probe').close();
  } catch (err) {
    const why = err instanceof KprBpfError ? err.message : String(err);
    throw new Error(`BPF is not permitted in this environment (${why}); the native tests need a kernel that allows bpf() as root`);
  }
}

/** The cgroup v2 mount point, parsed from /proc/mounts (hybrid hosts put it at /sys/fs/cgroup/unified). */
export function cgroup2Mount(): string {
  for (const line of fs.readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f[2] === 'cgroup2') return f[1].replace(/\\040/g, ' ');
  }
  throw new Error('no cgroup2 filesystem in /proc/mounts: cgroup attach needs cgroup v2');
}

export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0, 0);
  return b;
}

/** struct kpr_svc_key, from a running index (addresses in 198.19.0.0/16, ports from the index). */
export function svcKey(i: number): Buffer {
  return encodeSvcKey({ addr: `198.19.${(i >>> 8) & 0xff}.${i & 0xff}`, port: 1 + (i >>> 16), slot: 0, proto: 6, scope: 0 });
}

/** The index svcKey() was made from. */
export function svcKeyIndex(key: Buffer): number {
  const k = decodeSvcKey(key);
  const [, , a, b] = k.addr.split('.').map(Number);
  return ((k.port - 1) << 16) | (a << 8) | b;
}

/** struct kpr_svc_val. */
export function svcVal(backendId: number, count = 0): Buffer {
  return encodeSvcVal({ backendId, count, frontendId: 0, flags: 0 });
}

/** Standalone maps with kpr's layouts (the object's own maps are 262,144 entries; these can be made small). */
export function standaloneMapSet(svcMax: number): Omit<DatapathMapSet, 'writer'> {
  return {
    svc: BpfMap.create(BPF_MAP_TYPE.HASH, SVC_KEY.size, SVC_VAL.size, svcMax, 'kpr_svc'),
    backend: BpfMap.create(BPF_MAP_TYPE.HASH, 4, BACKEND.size, 65536, 'kpr_backend'),
    vip: BpfMap.create(BPF_MAP_TYPE.HASH, VIP_KEY.size, VIP_VAL.size, 65536, 'kpr_vip'),
    affinityMatch: BpfMap.create(BPF_MAP_TYPE.HASH, AFFINITY_MATCH_KEY.size, 1, 65536, 'kpr_aff_match'),
    svcMeta: BpfMap.create(BPF_MAP_TYPE.HASH, 4, SVC_META.size, 65536, 'kpr_svc_meta'),
    // kpr's is an LPM trie (created with BPF_F_NO_PREALLOC, which BpfMap.create does not take); no range is written here.
    srcRange: BpfMap.create(BPF_MAP_TYPE.HASH, SRC_RANGE_KEY.size, 1, 16, 'kpr_src_range'),
    maglev: BpfMap.create(BPF_MAP_TYPE.HASH, MAPS.maglev.key.size, MAPS.maglev.value.size, 64, 'kpr_maglev'),
    maglevRef: BpfMap.create(BPF_MAP_TYPE.HASH, MAPS.maglevRef.key.size, MAPS.maglevRef.value.size, 1024, 'kpr_maglev_ref'),
  };
}

export function closeMapSet(m: Omit<DatapathMapSet, 'writer'>): void {
  for (const map of Object.values(m)) (map as BpfMap).close();
}

/** What the kernel maps hold, in the shape the reconciler tests' checks read (kpr_aff_match left empty). */
export function kernelState(d: BpfDatapathMaps): MapState {
  return {
    services: new Map(d.dumpServices().map(([k, v]) => [svcKeyId(k), [k, v]])),
    backends: new Map(d.dumpBackends()),
    vips: new Map(d.dumpVips()),
    affinityMatches: new Map(),
    svcMeta: new Map(d.dumpSvcMeta()),
  };
}
