/**
 * A world for sliced read-back tests (unit and native): driftPlans'
 * Services, which the drift cases corrupt, and filler Services, which the
 * event syncs between read-back batches add, remove and change.
 */
import assert from 'node:assert/strict';
import { MAP_NAMES } from '../../../agent/maps/layout.js';
import type { Reconciler, ReadBackVerdict } from '../../../agent/reconcile/reconciler.js';
import type { PlanFrontend } from '../../../agent/plan/types.js';
import { LB, driftPlans, masterOf, type DriftCase } from './drift-cases.js';

/** The maps read back over several slices. */
export const SLICED: readonly string[] = [MAP_NAMES.svc, MAP_NAMES.backend, MAP_NAMES.vip, MAP_NAMES.svcMeta, MAP_NAMES.affinityMatch, MAP_NAMES.srcRange];

/** Drift of kpr_vip, kpr_svc_meta, kpr_aff_match and kpr_src_range on keys no event sync of World touches (driftPlans' Services only), beyond DRIFT_CASES'. */
export const SMALL_MAP_DRIFT_CASES: DriftCase[] = [
  {
    name: "the kpr_vip entry's flags cleared",
    corrupt: (m) => m.updateVips([['198.19.0.10', 0]]),
    drift: [{ map: MAP_NAMES.vip, kind: 'changed', entries: 1 }],
  },
  {
    name: 'a bogus kpr_vip entry inserted',
    corrupt: (m) => m.updateVips([['198.19.0.77', 1]]),
    drift: [{ map: MAP_NAMES.vip, kind: 'extra', entries: 1 }],
  },
  {
    name: 'a kpr_svc_meta port name changed',
    corrupt: (m) => {
      const [id, meta] = m.dumpSvcMeta().find(([, x]) => x.name === 'e2e/web' && x.portName === 'http')!;
      m.updateSvcMeta([[id, { ...meta, portName: 'evil' }]]);
    },
    drift: [{ map: MAP_NAMES.svcMeta, kind: 'changed', entries: 1 }],
  },
  {
    name: 'a bogus kpr_svc_meta entry inserted',
    corrupt: (m) => m.updateSvcMeta([[60000, { name: 'x/bogus', portName: '', type: 0, proto: 6 }]]),
    drift: [{ map: MAP_NAMES.svcMeta, kind: 'extra', entries: 1 }],
  },
  {
    name: 'a bogus kpr_aff_match pair inserted',
    corrupt: (m) => m.updateAffinityMatches([{ frontendId: masterOf(m, ...LB)[1].frontendId, backendId: 77_777 }]),
    drift: [{ map: MAP_NAMES.affinityMatch, kind: 'extra', entries: 1 }],
  },
];

/**
 * A filler ClusterIP Service: n pods (a distinct address range per
 * generation, so each change is new backends and re-pointed slots); every
 * other one with session affinity (its pairs in kpr_aff_match), every third
 * with a source range that changes with the generation (kpr_src_range).
 */
export function filler(i: number, n: number, gen: number): PlanFrontend[] {
  return [
    {
      service: `f/s${i}`,
      portName: 'http',
      type: 'ClusterIP',
      address: `198.19.2.${i + 1}`,
      port: 80,
      protocol: 'TCP',
      backends: Array.from({ length: n }, (_, p) => ({ address: `198.18.${3 + (gen % 50)}.${i * 4 + p + 1}`, port: 8080 })),
      trafficPolicy: 'Cluster',
      affinityTimeoutSeconds: i % 2 ? 10800 : 0,
      sourceRanges: i % 3 === 0 ? [`198.18.${100 + (gen % 50)}.0/24`, '198.18.99.0/24', `198.18.98.${(gen % 50) * 4}/30`] : [],
    },
  ];
}

/** driftPlans' Services (the drift cases corrupt them) and 12 fillers (the event syncs change only those). */
export class World {
  readonly fillers = new Map<string, PlanFrontend[]>();
  private gen = 0;
  readonly done = { add: 0, remove: 0, change: 0 };

  constructor(private readonly next: () => number) {
    for (let i = 0; i < 12; i++) this.fillers.set(`f/s${i}`, filler(i, 3, 0));
  }

  plans(): Map<string, PlanFrontend[]> {
    return new Map([...driftPlans(), ...this.fillers]);
  }

  /** One event sync: a filler added, removed or changed (endpoints and their count), chosen at random. */
  mutate(r: Reconciler): void {
    const i = Math.floor(this.next() * 16);
    const k = `f/s${i}`;
    const roll = this.next();
    let want: PlanFrontend[];
    if (!this.fillers.has(k)) {
      want = filler(i, 1 + Math.floor(this.next() * 4), ++this.gen);
      this.done.add++;
    } else if (roll < 0.3) {
      want = [];
      this.done.remove++;
    } else {
      want = filler(i, 1 + Math.floor(this.next() * 4), ++this.gen);
      this.done.change++;
    }
    if (want.length) this.fillers.set(k, want);
    else this.fillers.delete(k);
    const res = r.sync(new Map([[k, want]]), { full: false });
    assert.equal(res.ok, true, res.error);
  }
}

/** Reads `map` back slice by slice, `between` running after every 'pending'; the verdict and the number of slices. */
export function readBack(r: Reconciler, map: string, between: () => void): { verdict: ReadBackVerdict; slices: number } {
  let slices = 0;
  for (;;) {
    const v = r.readBackMatches(map);
    slices++;
    if (v !== 'pending') return { verdict: v, slices };
    between();
    assert.ok(slices < 10_000, 'the read-back ends');
  }
}
