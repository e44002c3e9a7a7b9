/**
 * The floor of the cold path: the bench scenario's kernel entries written
 * with no Kubernetes semantics at all, to tell what the agent's first sync
 * costs beyond touching every endpoint once.
 *
 * One pass over the cached Services in key order: the ClusterIP and each
 * port, the slice port of the same name, every ready endpoint's address
 * parsed once, its tuple → backend id through the reconciler's own
 * TupleIndex, the backend row, slot and master entries, the name and the
 * address's entry encoded straight into reused batch buffers, queued to the
 * same writer thread as the agent's. No validation, dual stack, topology,
 * terminating endpoints, traffic policies, affinity, duplicate frontends,
 * diff or mirror: it handles exactly the shape bench/scenario.ts builds
 * (single-stack IPv4 ClusterIP, one slice per Service, canonical addresses,
 * every endpoint ready) and writes exactly the entries the agent writes for
 * it (test/bench/cold-floor.test.ts compares the maps byte for byte).
 */
import type { BatchWriter, BpfMap } from '../native/index.js';
import { BATCH_CHUNK } from '../agent/maps/bpf-datapath-maps.js';
import { ipv4Canonical } from '../agent/net/ip.js';
import { backendTupleKey } from '../agent/reconcile/desired-frontend.js';
import { TupleIndex } from '../agent/reconcile/tuple-index.js';
import { BE_FLAG, FE_TYPE, IPPROTO, SVC_FLAG, VIP_FLAG, encodeIPv4Num, mapCodecs } from '../agent/maps/layout.js';
import { MAPS, type MapSpec } from '../agent/maps/registry.js';

// The registry's offsets (the agent's packers use the same).
const SK = MAPS.svc.key.at;
const SV = MAPS.svc.value.at;
const BE = MAPS.backend.value.at;
const encodeSvcMeta = mapCodecs(MAPS.svcMeta).value.encode;

/** The maps the floor writes (the agent's layouts). */
export interface FloorMaps {
  svc: BpfMap;
  backend: BpfMap;
  vip: BpfMap;
  svcMeta: BpfMap;
}

/** What the watch caches hold, as the agent's SyncLoop reads them. */
export interface FloorSource {
  serviceKeys(): Iterable<string>;
  serviceByKey(key: string): FloorService | undefined;
  endpointSlicesByKey(key: string): readonly FloorSlice[];
}

interface FloorService {
  spec?: { clusterIP?: string; ports?: Array<{ name?: string; port?: number; protocol?: string }> };
}

interface FloorSlice {
  ports?: Array<{ name?: string; port?: number; protocol?: string }>;
  endpoints?: Array<{ firstAddress?: string; conditions?: { ready?: boolean }; nodeName?: string }>;
}

export interface FloorResult {
  frontends: number;
  backends: number;
  svcEntries: number;
}

/** One map's batch being filled: records of fixed size, handed to the writer when full (at the agent's batch size). */
class Batch {
  readonly keys: Buffer;
  readonly values: Buffer;
  readonly keySize: number;
  readonly valueSize: number;
  n = 0;

  constructor(
    private readonly map: BpfMap,
    private readonly writer: BatchWriter,
    spec: MapSpec,
  ) {
    this.keySize = spec.key.size;
    this.valueSize = spec.value.size;
    this.keys = Buffer.alloc(BATCH_CHUNK * this.keySize);
    this.values = Buffer.alloc(BATCH_CHUNK * this.valueSize);
  }

  get full(): boolean {
    return this.n === BATCH_CHUNK;
  }

  /** Queues what is filled (the writer copies it) and starts over on zeroed buffers. */
  flush(): void {
    if (this.n === 0) return;
    this.map.queueUpdateBatch(this.writer, this.keys, this.values, this.n);
    this.keys.fill(0, 0, this.n * this.keySize);
    this.values.fill(0, 0, this.n * this.valueSize);
    this.n = 0;
  }
}

/**
 * Writes the scenario's entries (each round: backends before the service
 * entries that name them, masters after their slots) and waits for the
 * writer. Returns what was written.
 */
export function floorSync(source: FloorSource, maps: FloorMaps, writer: BatchWriter, nodeName: string): FloorResult {
  const backends = new Batch(maps.backend, writer, MAPS.backend);
  const metas = new Batch(maps.svcMeta, writer, MAPS.svcMeta);
  const svc = new Batch(maps.svc, writer, MAPS.svc);
  const vips = new Batch(maps.vip, writer, MAPS.vip);
  const flushAll = (): void => {
    backends.flush();
    metas.flush();
    svc.flush();
    vips.flush();
  };
  const ids = new TupleIndex();
  const slotIds: number[] = [];
  let nextBackend = 1;
  let nextFrontendId = 1;
  let svcEntries = 0;
  let frontends = 0;

  const putSvc = (cip: number, port: number, proto: number, slot: number, id: number, count: number, frontendId: number, flags: number): void => {
    if (svc.full) flushAll();
    const k = svc.n * svc.keySize;
    const v = svc.n++ * svc.valueSize;
    encodeIPv4Num(cip, svc.keys, k + SK.addr);
    svc.keys[k + SK.port] = port >>> 8;
    svc.keys[k + SK.port + 1] = port & 0xff;
    svc.keys[k + SK.slot] = slot & 0xff;
    svc.keys[k + SK.slot + 1] = slot >>> 8;
    svc.keys[k + SK.proto] = proto;
    svc.values.writeUInt32LE(id, v + SV.backend_id);
    svc.values[v + SV.count] = count & 0xff;
    svc.values[v + SV.count + 1] = count >>> 8;
    svc.values[v + SV.frontend_id] = frontendId & 0xff;
    svc.values[v + SV.frontend_id + 1] = frontendId >>> 8;
    svc.values.writeUInt16LE(flags, v + SV.flags);
    svcEntries++;
  };

  const keys = [...source.serviceKeys()].sort();
  for (const key of keys) {
    const spec = source.serviceByKey(key)?.spec;
    const cip = ipv4Canonical(spec?.clusterIP);
    if (cip < 0 || !spec?.ports) continue;
    const slices = source.endpointSlicesByKey(key);
    for (const sp of spec.ports) {
      const proto = sp.protocol === 'UDP' ? IPPROTO.UDP : IPPROTO.TCP;
      let n = 0;
      // A backend on this node: the agent flags the frontend LOCAL_BACKEND (possible hairpin, kpr_masq.h).
      let local = false;
      for (const slice of slices) {
        for (const p of slice.ports ?? []) {
          if (p.name !== sp.name || p.port === undefined) continue;
          const port = p.port;
          for (const ep of slice.endpoints ?? []) {
            if (ep.conditions?.ready === false) continue;
            const a = ipv4Canonical(ep.firstAddress);
            if (a < 0) continue;
            const tuple = backendTupleKey(a, port, proto) as number; // numeric for IPv4
            let id = ids.get(tuple);
            if (id < 0) {
              id = nextBackend++;
              ids.add(tuple, id);
              if (backends.full) flushAll();
              const o = backends.n * backends.valueSize;
              backends.keys.writeUInt32LE(id, backends.n++ * backends.keySize);
              encodeIPv4Num(a, backends.values, o + BE.addr);
              backends.values[o + BE.port] = port >>> 8;
              backends.values[o + BE.port + 1] = port & 0xff;
              backends.values[o + BE.proto] = proto;
              backends.values[o + BE.flags] = ep.nodeName === nodeName ? BE_FLAG.LOCAL : 0;
            }
            if (ep.nodeName === nodeName) local = true;
            slotIds[n++] = id;
          }
        }
      }
      const frontendId = nextFrontendId++;
      if (metas.full) flushAll();
      metas.keys.writeUInt32LE(frontendId, metas.n * metas.keySize);
      encodeSvcMeta(
        { name: key, portName: sp.name ?? '', type: FE_TYPE.CLUSTER_IP, proto: sp.protocol === 'UDP' ? IPPROTO.UDP : IPPROTO.TCP },
        metas.values,
        metas.n++ * metas.valueSize,
      );
      for (let s = 1; s <= n; s++) putSvc(cip, sp.port!, proto, s, slotIds[s - 1], 0, 0, 0);
      putSvc(cip, sp.port!, proto, 0, 0, n, frontendId, SVC_FLAG.CLUSTER_IP | (local ? SVC_FLAG.LOCAL_BACKEND : 0));
      frontends++;
    }
    if (vips.full) flushAll();
    encodeIPv4Num(cip, vips.keys, vips.n * vips.keySize + MAPS.vip.key.at.addr);
    vips.values.writeUInt32LE(VIP_FLAG.REFUSE_UNKNOWN_PORT, vips.n++ * vips.valueSize + MAPS.vip.value.at.flags);
  }
  flushAll();
  writer.wait();
  return { frontends, backends: nextBackend - 1, svcEntries };
}
