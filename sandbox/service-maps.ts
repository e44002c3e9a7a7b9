/**
 * The real datapath's maps pinned under a directory and filled with
 * ClusterIP Services directly, without an agent: what the CLI tests and the
 * CLI's benchmark (bench/service-list-ab.ts) read with `kpr`.
 */
import { mkdirSync } from 'node:fs';
import { BpfMap, BpfObject, ensureBpffs } from '../native/index.js';
import { mapPinDir, mapPinPath, objectPins } from '../agent/datapath/pins.js';
import {
  BACKEND,
  BACKEND_ID_SIZE,
  FE_TYPE,
  IPPROTO,
  MAP_NAMES,
  SCOPE,
  SVC_FLAG,
  SVC_KEY,
  SVC_META,
  SVC_VAL,
  encodeBackend,
  encodeBackendId,
  encodeSvcKey,
  encodeSvcMeta,
  encodeSvcVal,
} from '../agent/maps/layout.js';
import { bpfObjectPath } from './repo.js';

/** Creates and pins every map of the datapath object under `bpffsDir`, as the agent names the pins; `maxEntries` by map name in place of the compiled sizes. */
export function pinDatapathMaps(bpffsDir: string, maxEntries: Record<string, number> = {}): void {
  ensureBpffs(bpffsDir);
  mkdirSync(mapPinDir(bpffsDir), { recursive: true });
  const obj = BpfObject.open(bpfObjectPath, { ...objectPins(bpffsDir), maxEntries });
  try {
    obj.load();
  } finally {
    obj.close();
  }
}

export interface ServiceFill {
  services: number;
  backendsPerService: number;
  /** Service i's ClusterIP (port 80/TCP; frontend id i + 1). */
  svcAddr(i: number): string;
  /** Backend j of Service i (port 8080; id i × backendsPerService + j + 1). */
  backendAddr(i: number, j: number): string;
  /** "namespace/name" of Service i in kpr_svc_meta (its port named "http"). */
  name(i: number): string;
  /** Session affinity timeout of Service i in seconds (0: none). */
  affinity?(i: number): number;
}

/** Writes `f`'s Services to kpr_svc, kpr_backend and kpr_svc_meta pinned under `bpffsDir`, one batch each. */
export function fillServiceMaps(bpffsDir: string, f: ServiceFill): void {
  const open = (name: string) => BpfMap.openPinned(mapPinPath(bpffsDir, name));
  const svc = open(MAP_NAMES.svc);
  const be = open(MAP_NAMES.backend);
  const meta = open(MAP_NAMES.svcMeta);
  try {
    const perService = f.backendsPerService;
    const nSvc = f.services * (perService + 1);
    const sk = Buffer.alloc(nSvc * SVC_KEY.size);
    const sv = Buffer.alloc(nSvc * SVC_VAL.size);
    const nBe = f.services * perService;
    const bk = Buffer.alloc(nBe * BACKEND_ID_SIZE);
    const bv = Buffer.alloc(nBe * BACKEND.size);
    const mk = Buffer.alloc(f.services * BACKEND_ID_SIZE);
    const mv = Buffer.alloc(f.services * SVC_META.size);
    let s = 0;
    let b = 0;
    for (let i = 0; i < f.services; i++) {
      const base = { addr: f.svcAddr(i), port: 80, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL };
      const affinity = f.affinity?.(i) ?? 0;
      const flags = SVC_FLAG.CLUSTER_IP | (affinity ? SVC_FLAG.AFFINITY : 0);
      encodeSvcKey({ ...base, slot: 0 }, sk, s * SVC_KEY.size);
      encodeSvcVal({ backendId: affinity, count: perService, frontendId: i + 1, flags }, sv, s++ * SVC_VAL.size);
      for (let j = 0; j < perService; j++) {
        const id = i * perService + j + 1;
        encodeSvcKey({ ...base, slot: j + 1 }, sk, s * SVC_KEY.size);
        encodeSvcVal({ backendId: id, count: 0, frontendId: 0, flags: 0 }, sv, s++ * SVC_VAL.size);
        encodeBackendId(id, bk, b * BACKEND_ID_SIZE);
        encodeBackend({ addr: f.backendAddr(i, j), port: 8080, proto: IPPROTO.TCP, flags: 0 }, bv, b++ * BACKEND.size);
      }
      encodeBackendId(i + 1, mk, i * BACKEND_ID_SIZE);
      encodeSvcMeta({ name: f.name(i), portName: 'http', type: FE_TYPE.CLUSTER_IP, proto: IPPROTO.TCP }, mv, i * SVC_META.size);
    }
    be.updateBatch(bk, bv, nBe);
    svc.updateBatch(sk, sv, nSvc);
    meta.updateBatch(mk, mv, f.services);
  } finally {
    for (const m of [svc, be, meta]) m.close();
  }
}
