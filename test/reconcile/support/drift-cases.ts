/**
 * Drift: changes made to the maps behind the agent's back, as a fault
 * injection with bpftool did them, each with what a periodic read-back must
 * count. Written against the DatapathMaps interface only, so the same cases
 * run on the in-memory fake (with the live-reader replay) and on real kernel
 * maps (test/reconcile/read-back/drift-repair.test.ts).
 */
import type { DatapathMaps } from '../../../agent/maps/datapath-maps.js';
import { IPPROTO, SCOPE, type SvcKey, type SvcVal } from '../../../agent/maps/layout.js';
import type { PlanFrontend } from '../../../agent/plan/types.js';
import type { DriftCount } from '../../../agent/reconcile/reconciler.js';

const PODS = ['198.18.0.10', '198.18.0.11', '198.18.0.12'];

/** A ClusterIP with TCP and UDP ports over three pods, and a LoadBalancer with affinity and a source range. */
export function driftPlans(): Map<string, PlanFrontend[]> {
  const clusterIP = (port: number, protocol: 'TCP' | 'UDP', target: number): PlanFrontend => ({
    service: 'e2e/web',
    portName: protocol === 'TCP' ? 'http' : 'dns',
    type: 'ClusterIP',
    address: '198.19.0.10',
    port,
    protocol,
    backends: PODS.map((address) => ({ address, port: target })),
    trafficPolicy: 'Cluster',
    affinityTimeoutSeconds: 0,
    sourceRanges: [],
  });
  return new Map([
    [
      'e2e/lb',
      [
        {
          service: 'e2e/lb',
          portName: 'http',
          type: 'LoadBalancer',
          address: '198.18.200.1',
          port: 80,
          protocol: 'TCP',
          backends: [
            { address: '198.18.0.20', port: 8080 },
            { address: '198.18.0.21', port: 8080 },
          ],
          trafficPolicy: 'Cluster',
          affinityTimeoutSeconds: 10800,
          sourceRanges: ['198.18.50.0/24'],
        },
      ],
    ],
    ['e2e/web', [clusterIP(80, 'TCP', 8080), clusterIP(53, 'UDP', 5353)]],
  ]);
}

export function masterOf(m: DatapathMaps, addr: string, port: number, proto: number): [SvcKey, SvcVal] {
  const e = m.dumpServices().find(([k]) => k.addr === addr && k.port === port && k.proto === proto && k.slot === 0 && k.scope === SCOPE.EXTERNAL);
  if (!e) throw new Error(`no master ${addr}:${port}/${proto}`);
  return e;
}

function backendIdOf(m: DatapathMaps, addr: string, port: number, proto: number): number {
  const e = m.dumpBackends().find(([, b]) => b.addr === addr && b.port === port && b.proto === proto);
  if (!e) throw new Error(`no backend ${addr}:${port}/${proto}`);
  return e[0];
}

export interface DriftCase {
  name: string;
  corrupt(m: DatapathMaps): void;
  /** What the read-back must count (any order). */
  drift: DriftCount[];
}

const WEB = ['198.19.0.10', 80, IPPROTO.TCP] as const;
/** driftPlans' LoadBalancer frontend (session affinity, a source range). */
export const LB = ['198.18.200.1', 80, IPPROTO.TCP] as const;

export const DRIFT_CASES: DriftCase[] = [
  {
    name: 'a deleted master slot',
    corrupt: (m) => m.deleteServices([masterOf(m, ...WEB)[0]]),
    drift: [{ map: 'kpr_svc', kind: 'missing', entries: 1 }],
  },
  {
    name: 'a slot re-pointed at a UDP backend',
    corrupt: (m) => {
      const [k] = masterOf(m, ...WEB);
      m.updateServices([
        [
          { ...k, slot: 2 },
          { backendId: backendIdOf(m, PODS[1], 5353, IPPROTO.UDP), count: 0, frontendId: 0, flags: 0 },
        ],
      ]);
    },
    drift: [{ map: 'kpr_svc', kind: 'changed', entries: 1 }],
  },
  {
    name: 'a backend port changed to 9999',
    corrupt: (m) => {
      const id = backendIdOf(m, PODS[1], 8080, IPPROTO.TCP);
      m.updateBackends([[id, { addr: PODS[1], port: 9999, proto: IPPROTO.TCP, flags: 0 }]]);
    },
    drift: [{ map: 'kpr_backend', kind: 'changed', entries: 1 }],
  },
  {
    name: 'a master count lowered 3 → 1',
    corrupt: (m) => {
      const [k, v] = masterOf(m, ...WEB);
      m.updateServices([[k, { ...v, count: 1 }]]);
    },
    drift: [{ map: 'kpr_svc', kind: 'changed', entries: 1 }],
  },
  {
    name: 'a bogus frontend inserted',
    corrupt: (m) => {
      const key: SvcKey = { addr: '198.19.0.99', port: 80, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL };
      m.updateServices([
        [
          { ...key, slot: 1 },
          { backendId: backendIdOf(m, PODS[0], 8080, IPPROTO.TCP), count: 0, frontendId: 0, flags: 0 },
        ],
        [key, { backendId: 0, count: 1, frontendId: 999, flags: 0 }],
      ]);
    },
    drift: [{ map: 'kpr_svc', kind: 'extra', entries: 2 }],
  },
  {
    name: 'the kpr_vip entry deleted',
    corrupt: (m) => m.deleteVips(['198.19.0.10']),
    drift: [{ map: 'kpr_vip', kind: 'missing', entries: 1 }],
  },
  {
    name: 'every kpr_svc_meta entry deleted',
    corrupt: (m) => m.deleteSvcMeta(m.dumpSvcMeta().map(([id]) => id)),
    drift: [{ map: 'kpr_svc_meta', kind: 'missing', entries: 3 }],
  },
  {
    name: 'a backend row deleted',
    corrupt: (m) => m.deleteBackends([backendIdOf(m, PODS[2], 8080, IPPROTO.TCP)]),
    drift: [{ map: 'kpr_backend', kind: 'missing', entries: 1 }],
  },
  {
    name: 'a source-range entry deleted',
    corrupt: (m) => m.deleteSrcRanges(m.dumpSrcRanges().filter((r) => r.frontendId === masterOf(m, ...LB)[1].frontendId)),
    drift: [{ map: 'kpr_src_range', kind: 'missing', entries: 1 }],
  },
  {
    name: 'a source-range entry added',
    corrupt: (m) => m.updateSrcRanges([{ frontendId: masterOf(m, ...LB)[1].frontendId, cidr: '198.18.60.0/24' }]),
    drift: [{ map: 'kpr_src_range', kind: 'extra', entries: 1 }],
  },
  {
    name: 'an affinity pair deleted',
    corrupt: (m) =>
      m.deleteAffinityMatches(
        m
          .dumpAffinityMatches()
          .filter((a) => a.frontendId === masterOf(m, ...LB)[1].frontendId)
          .slice(0, 1),
      ),
    drift: [{ map: 'kpr_aff_match', kind: 'missing', entries: 1 }],
  },
];

/**
 * What the maps serve, independent of ids: per entry set its master (count,
 * flags, affinity timeout), backends by tuple in slot order, names, ranges
 * and affinity pairs of its frontendId; the service addresses; entry counts
 * (so nothing extra hides).
 */
export function servedView(m: DatapathMaps): unknown {
  const services = m.dumpServices();
  const backends = new Map(m.dumpBackends());
  const meta = new Map(m.dumpSvcMeta());
  const ranges = m.dumpSrcRanges();
  const affs = m.dumpAffinityMatches();
  const slot = new Map(services.map(([k, v]) => [`${k.addr}|${k.port}|${k.proto}|${k.scope}|${k.slot}`, v.backendId]));
  const tuple = (id: number | undefined) => {
    const b = id === undefined ? undefined : backends.get(id);
    return b ? `${b.addr}:${b.port}/${b.proto}${b.flags ? `+${b.flags}` : ''}` : `<missing ${id}>`;
  };
  const frontends: Record<string, unknown> = {};
  for (const [k, v] of services) {
    if (k.slot !== 0) continue;
    const list: string[] = [];
    for (let s = 1; s <= v.count; s++) list.push(tuple(slot.get(`${k.addr}|${k.port}|${k.proto}|${k.scope}|${s}`)));
    frontends[`${k.addr}:${k.port}/${k.proto}#${k.scope}`] = {
      count: v.count,
      flags: v.flags,
      timeout: v.backendId,
      backends: list,
      meta: meta.get(v.frontendId),
      ranges: ranges
        .filter((r) => r.frontendId === v.frontendId)
        .map((r) => r.cidr)
        .sort(),
      affinity: affs
        .filter((a) => a.frontendId === v.frontendId)
        .map((a) => tuple(a.backendId))
        .sort(),
    };
  }
  return {
    frontends,
    vips: m.dumpVips().sort(),
    entries: { svc: services.length, backend: backends.size, meta: meta.size, ranges: ranges.length, affinity: affs.length },
  };
}

/** Drift counts in a stable order, for deepEqual. */
export function sortedDrift(d: readonly DriftCount[]): DriftCount[] {
  return [...d].sort((a, b) => `${a.map}/${a.kind}`.localeCompare(`${b.map}/${b.kind}`));
}
