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
import { BACKEND, BACKEND_ID_SIZE, BE_FLAG, FE_TYPE, IPPROTO, SVC_FLAG, SVC_KEY, SVC_META, SVC_VAL, VIP_FLAG, VIP_KEY, VIP_VAL, encodeIPv4Num, encodeSvcMeta } from '../agent/maps/layout.js';

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
  n = 0;

  constructor(
    private readonly map: BpfMap,
    private readonly writer: BatchWriter,
    readonly keySize: number,
    readonly valueSize: number,
  ) {
    this.keys = Buffer.alloc(BATCH_CHUNK * keySize);
    this.values = Buffer.alloc(BATCH_CHUNK * valueSize);
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
  const backends = new Batch(maps.backend, writer, BACKEND_ID_SIZE, BACKEND.size);
  const metas = new Batch(maps.svcMeta, writer, 4, SVC_META.size);
  const svc = new Batch(maps.svc, writer, SVC_KEY.size, SVC_VAL.size);
  const vips = new Batch(maps.vip, writer, VIP_KEY.size, VIP_VAL.size);
  const flushAll = (): void => {
    backends.flush();
    metas.flush();
    svc.flush();
    vips.flush();
  };
  const ids = new TupleIndex();
  const slotIds: number[] = [];
  let nextBackend = 1;
  let nextRevNat = 1;
  let svcEntries = 0;
  let frontends = 0;

  const putSvc = (cip: number, port: number, proto: number, slot: number, id: number, count: number, revNat: number, flags: number): void => {
    if (svc.full) flushAll();
    const k = svc.n * SVC_KEY.size;
    const v = svc.n++ * SVC_VAL.size;
    encodeIPv4Num(cip, svc.keys, k);
    svc.keys[k + 16] = port >>> 8;
    svc.keys[k + 17] = port & 0xff;
    svc.keys[k + 18] = slot & 0xff;
    svc.keys[k + 19] = slot >>> 8;
    svc.keys[k + 20] = proto;
    svc.values.writeUInt32LE(id, v);
    svc.values[v + 4] = count & 0xff;
    svc.values[v + 5] = count >>> 8;
    svc.values[v + 6] = revNat & 0xff;
    svc.values[v + 7] = revNat >>> 8;
    svc.values.writeUInt16LE(flags, v + 8);
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
              const o = backends.n * BACKEND.size;
              backends.keys.writeUInt32LE(id, backends.n++ * BACKEND_ID_SIZE);
              encodeIPv4Num(a, backends.values, o);
              backends.values[o + 16] = port >>> 8;
              backends.values[o + 17] = port & 0xff;
              backends.values[o + 18] = proto;
              backends.values[o + 19] = ep.nodeName === nodeName ? BE_FLAG.LOCAL : 0;
            }
            slotIds[n++] = id;
          }
        }
      }
      const revNat = nextRevNat++;
      if (metas.full) flushAll();
      metas.keys.writeUInt32LE(revNat, metas.n * 4);
      encodeSvcMeta({ name: key, portName: sp.name ?? '', type: FE_TYPE.CLUSTER_IP }, metas.values, metas.n++ * SVC_META.size);
      for (let s = 1; s <= n; s++) putSvc(cip, sp.port!, proto, s, slotIds[s - 1], 0, 0, 0);
      putSvc(cip, sp.port!, proto, 0, 0, n, revNat, SVC_FLAG.CLUSTER_IP);
      frontends++;
    }
    if (vips.full) flushAll();
    encodeIPv4Num(cip, vips.keys, vips.n * VIP_KEY.size);
    vips.values.writeUInt32LE(VIP_FLAG.REFUSE_UNKNOWN_PORT, vips.n++ * VIP_VAL.size);
  }
  flushAll();
  writer.wait();
  return { frontends, backends: nextBackend - 1, svcEntries };
}
