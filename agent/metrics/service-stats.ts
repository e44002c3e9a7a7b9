/**
 * The per-frontend counters (kpr_svc_stats, per CPU, indexed by frontend
 * id) summed per Service port: every frontend of a port (its ClusterIP,
 * NodePort, LoadBalancer and external IPs, both scopes) adds to one series,
 * named from kpr_svc_meta. Read with one batch call per map; shared by the
 * Prometheus collector and `kpr service list`.
 */
import { sumPerCpuU64, type BpfMap } from '../../native/index.js';
import { mapCodecs, type SvcMeta } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';

/** What one frontend, or one Service port, counted. */
export interface ServiceCounts {
  balanced: bigint;
  refused: bigint;
  droppedNoEndpoint: bigint;
  droppedNoLocalEndpoint: bigint;
  droppedSourceRange: bigint;
}

export const COUNT_FIELDS = MAPS.svcStats.value.placed.filter((f) => f.prop).map((f) => ({ prop: f.prop as keyof ServiceCounts, offset: f.offset }));

export function zeroCounts(): ServiceCounts {
  return { balanced: 0n, refused: 0n, droppedNoEndpoint: 0n, droppedNoLocalEndpoint: 0n, droppedSourceRange: 0n };
}

function isZero(c: ServiceCounts): boolean {
  return c.balanced === 0n && c.refused === 0n && c.droppedNoEndpoint === 0n && c.droppedNoLocalEndpoint === 0n && c.droppedSourceRange === 0n;
}

function add(into: ServiceCounts, c: ServiceCounts): void {
  for (const { prop } of COUNT_FIELDS) into[prop] += c[prop];
}

/** Every frontend id with a non-zero counter, its counters summed over the CPUs. */
export function readFrontendCounts(stats: BpfMap): Map<number, ServiceCounts> {
  const keyCodec = mapCodecs(MAPS.svcStats).key;
  const slot = stats.valueStride / stats.possibleCpus();
  const out = new Map<number, ServiceCounts>();
  stats.forEachBatch(8192, (count, keys, values) => {
    for (let i = 0; i < count; i++) {
      const v = values.subarray(i * stats.valueStride, (i + 1) * stats.valueStride);
      const c = zeroCounts();
      for (const { prop, offset } of COUNT_FIELDS) c[prop] = sumPerCpuU64(v, slot, offset);
      if (!isZero(c)) out.set(keyCodec.decode(keys, i * keyCodec.size), c);
    }
  });
  return out;
}

/** Every name of kpr_svc_meta, by frontend id. */
export function readFrontendNames(meta: BpfMap): Map<number, SvcMeta> {
  const c = mapCodecs(MAPS.svcMeta);
  const out = new Map<number, SvcMeta>();
  meta.forEachBatch(8192, (count, keys, values) => {
    for (let i = 0; i < count; i++) out.set(c.key.decode(keys, i * c.key.size), c.value.decode(values, i * c.value.size));
  });
  return out;
}

export interface ServicePortCounts {
  namespace: string;
  service: string;
  portName: string;
  /** "TCP", "UDP", "SCTP"; "" for a frontend named before kpr_svc_meta carried the protocol. */
  protocol: string;
  counts: ServiceCounts;
}

const PROTOCOLS = new Map<number, string>([
  [6, 'TCP'],
  [17, 'UDP'],
  [132, 'SCTP'],
]);

/** The Service-port series beyond `limit` go into one series named OTHER_SERIES (the cardinality cap). */
export const OTHER_SERIES = '_other';

/**
 * Frontend counts summed per Service port, sorted by namespace, name, port
 * name and protocol; ports after the first `limit` summed into one series
 * with namespace and service OTHER_SERIES. Ids without a name (a frontend
 * gone before the read) are counted there too, so totals stay whole.
 */
export function countsByServicePort(counts: Map<number, ServiceCounts>, names: Map<number, SvcMeta>, limit: number): ServicePortCounts[] {
  const byPort = new Map<string, ServicePortCounts>();
  const other: ServicePortCounts = { namespace: OTHER_SERIES, service: OTHER_SERIES, portName: '', protocol: '', counts: zeroCounts() };
  let unnamed = false;
  for (const [id, c] of counts) {
    const m = names.get(id);
    if (!m) {
      add(other.counts, c);
      unnamed = true;
      continue;
    }
    const slash = m.name.indexOf('/');
    const protocol = PROTOCOLS.get(m.proto) ?? '';
    const key = `${m.name}\u0000${m.portName}\u0000${protocol}`;
    let s = byPort.get(key);
    if (!s) {
      s = {
        namespace: slash < 0 ? '' : m.name.slice(0, slash),
        service: slash < 0 ? m.name : m.name.slice(slash + 1),
        portName: m.portName,
        protocol,
        counts: zeroCounts(),
      };
      byPort.set(key, s);
    }
    add(s.counts, c);
  }
  const sorted = [...byPort.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, s]) => s);
  const kept = sorted.slice(0, limit);
  for (const s of sorted.slice(limit)) add(other.counts, s.counts);
  if (unnamed || sorted.length > limit) kept.push(other);
  return kept;
}
