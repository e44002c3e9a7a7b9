/**
 * Reconciler: the entries beyond plain ClusterIP slots — INTERNAL-scope entry
 * sets (eTP=Local short-circuit, rule 25 of docs/semantics.md), ClientIP affinity (master timeout
 * and kpr_aff_match pairs, rule 27 of docs/semantics.md), kpr_vip refcounting, kpr_svc_meta names,
 * backend LOCAL flags, IPv6 — with the live-reader invariants checked after
 * every single applied entry, exact (zero-write) no-op syncs, adoption of all
 * of it, and failures at every call.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PlanFrontend, Protocol } from '../../agent/plan/types.js';
import { BE_FLAG, FE_TYPE, IPPROTO, SCOPE, SVC_FLAG, VIP_FLAG } from '../../agent/maps/layout.js';
import { MemoryDatapathMaps } from '../../agent/maps/memory-datapath-maps.js';
import { Reconciler } from '../../agent/reconcile/reconciler.js';
import { quiet, plans, setup, syncChecked } from './support/reconcile-harness.js';

const be = (s: string) => {
  const i = s.lastIndexOf(':');
  const local = s.endsWith('*');
  return { address: s.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(s.slice(i + 1).replace('*', '')), ...(local ? { local: true as const } : {}) };
};

function fe(
  service: string,
  address: string,
  port: number,
  backends: string[],
  o: Partial<PlanFrontend> & { internal?: string[]; protocol?: Protocol } = {},
): PlanFrontend {
  const { internal, ...rest } = o;
  return {
    service,
    portName: 'http',
    type: 'ClusterIP',
    address,
    port,
    protocol: 'TCP',
    backends: backends.map(be),
    trafficPolicy: 'Cluster',
    affinityTimeoutSeconds: 0,
    sourceRanges: [],
    ...(internal ? { internalBackends: internal.map(be) } : {}),
    ...rest,
  };
}

/** Syncs the same plans again: nothing may be written. */
function assertNoOp(maps: MemoryDatapathMaps, r: Reconciler, p: Map<string, PlanFrontend[]>): void {
  const calls = maps.mutationCalls;
  const res = r.sync(p, { full: true });
  assert.equal(res.ok, true);
  assert.equal(maps.mutationCalls, calls, `no-op sync wrote: ${JSON.stringify(maps.calls.slice(-5))}`);
  assert.deepEqual([res.servicesWritten, res.servicesDeleted, res.backendsWritten, res.backendsDeleted, res.auxWritten, res.auxDeleted], [0, 0, 0, 0, 0, 0]);
}

const methods = (maps: MemoryDatapathMaps, from = 0) => maps.calls.slice(from).map((c) => `${c.method}(${c.entries})`);

/** "addr:port/scope" → backends "ip:port" in slot order, with the master's frontendId and flags. */
function entrySets(maps: MemoryDatapathMaps): Record<string, { rn: number; flags: number; timeout: number; backends: string[] }> {
  const out: Record<string, { rn: number; flags: number; timeout: number; backends: string[] }> = {};
  for (const [k, v] of maps.services.values()) {
    if (k.slot !== 0) continue;
    const backends: string[] = [];
    for (let s = 1; s <= v.count; s++) {
      const slot = [...maps.services.values()].find(
        ([x]) => x.addr === k.addr && x.port === k.port && x.proto === k.proto && x.scope === k.scope && x.slot === s,
      )!;
      const b = maps.backends.get(slot[1].backendId)!;
      backends.push(`${b.addr}:${b.port}`);
    }
    out[`${k.addr}:${k.port}/${k.scope === SCOPE.INTERNAL ? 'INTERNAL' : 'EXTERNAL'}`] = { rn: v.frontendId, flags: v.flags, timeout: v.backendId, backends };
  }
  return out;
}

describe('Reconciler: scopes (eTP=Local short-circuit, rule 25 of docs/semantics.md)', () => {
  const local = () =>
    fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80*'], { type: 'NodePort', trafficPolicy: 'Local', internal: ['10.0.0.1:80*', '10.0.0.2:80'] });

  it('an external frontend with internalBackends gets an INTERNAL entry set sharing its frontendId', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(local()), true);
    assert.deepEqual(entrySets(maps), {
      // eTP=Local: LOCAL_ONLY tells the tc path to keep the client address (and drop when empty);
      // LOCAL_BACKEND: a backend runs on this node (hairpin possible, rule 36).
      '192.168.1.10:30080/EXTERNAL': { rn: 1, flags: SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY | SVC_FLAG.LOCAL_BACKEND, timeout: 0, backends: ['10.0.0.1:80'] },
      '192.168.1.10:30080/INTERNAL': {
        rn: 1,
        flags: SVC_FLAG.NODE_PORT | SVC_FLAG.LOCAL_ONLY | SVC_FLAG.LOCAL_BACKEND,
        timeout: 0,
        backends: ['10.0.0.1:80', '10.0.0.2:80'],
      },
    });
    assertNoOp(maps, r, plans(local()));
  });

  it('internalBackends equal to backends write no INTERNAL set', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80'], { type: 'NodePort', internal: ['10.0.0.1:80'] })), true);
    assert.deepEqual(Object.keys(entrySets(maps)), ['192.168.1.10:30080/EXTERNAL']);
  });

  it('when internalBackends go away the INTERNAL set is removed, master first, and its backends after', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(local()), true);
    const from = maps.ops.length;
    syncChecked(maps, r, plans(fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80*'], { type: 'NodePort', trafficPolicy: 'Local' })), true);
    const kinds = maps.ops.slice(from).map((o) => (o.kind === 'svc-delete' ? `svc-delete slot ${o.key.slot} scope ${o.key.scope}` : o.kind));
    assert.deepEqual(kinds, ['svc-delete slot 0 scope 1', 'svc-delete slot 1 scope 1', 'svc-delete slot 2 scope 1', 'backend-delete']);
    assert.deepEqual(Object.keys(entrySets(maps)), ['192.168.1.10:30080/EXTERNAL']);
  });

  it('an INTERNAL set that changes alone rewrites only its own entries', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(local()), true);
    const from = maps.calls.length;
    syncChecked(
      maps,
      r,
      plans(fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80*'], { type: 'NodePort', trafficPolicy: 'Local', internal: ['10.0.0.1:80*', '10.0.0.3:80'] })),
      true,
    );
    assert.deepEqual(methods(maps, from), ['updateBackends(1)', 'updateServices(1)', 'deleteBackends(1)']);
  });
});

describe('Reconciler: ClientIP affinity (rule 27 of docs/semantics.md)', () => {
  const sticky = (backends: string[], o: Partial<PlanFrontend> & { internal?: string[] } = {}) =>
    fe('a/x', '10.96.0.1', 80, backends, { affinityTimeoutSeconds: 10800, ...o });

  it('the master carries AFFINITY and the timeout; every (backend, frontendId) pair is in kpr_aff_match, written before the slots', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(sticky(['10.0.0.1:80', '10.0.0.2:80'])), true);
    assert.deepEqual(entrySets(maps)['10.96.0.1:80/EXTERNAL'], {
      rn: 1,
      flags: SVC_FLAG.CLUSTER_IP | SVC_FLAG.AFFINITY,
      timeout: 10800,
      backends: ['10.0.0.1:80', '10.0.0.2:80'],
    });
    assert.deepEqual(
      [...maps.affinityMatches.values()],
      [
        { backendId: 1, frontendId: 1 },
        { backendId: 2, frontendId: 1 },
      ],
    );
    assert.deepEqual(methods(maps), [
      'updateBackends(2)',
      'updateAffinityMatches(2)',
      'updateServices(2)',
      'updateSvcMeta(1)',
      'updateServices(1)',
      'updateVips(1)',
    ]);
    assertNoOp(maps, r, plans(sticky(['10.0.0.1:80', '10.0.0.2:80'])));
  });

  it('a backend that leaves loses its pair after the slots stop naming it, so affinity to it breaks', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(sticky(['10.0.0.1:80', '10.0.0.2:80'])), true);
    const from = maps.calls.length;
    syncChecked(maps, r, plans(sticky(['10.0.0.2:80'])), false);
    assert.deepEqual(methods(maps, from), ['updateServices(1)', 'updateServices(1)', 'deleteServices(1)', 'deleteAffinityMatches(1)', 'deleteBackends(1)']);
    assert.deepEqual([...maps.affinityMatches.values()], [{ backendId: 2, frontendId: 1 }]);
  });

  it('a slot re-pointed to a new backend gets its pair before the slot is written (checked after every entry)', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(sticky(['10.0.0.1:80'])), true);
    syncChecked(maps, r, plans(sticky(['10.0.0.9:80'])), false);
    assert.deepEqual(
      [...maps.affinityMatches.values()].map((k) => maps.backends.get(k.backendId)!.addr),
      ['10.0.0.9'],
    );
  });

  it('pairs cover both scopes when the INTERNAL set differs', () => {
    const { maps, r } = setup();
    const p = plans(
      sticky(['10.0.0.1:80*'], { type: 'LoadBalancer', address: '203.0.113.7', trafficPolicy: 'Local', internal: ['10.0.0.1:80*', '10.0.0.2:80'] }),
    );
    syncChecked(maps, r, p, true);
    assert.equal(maps.affinityMatches.size, 2);
    assertNoOp(maps, r, p);
  });

  it('turning affinity off removes every pair after the master drops the flag', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(sticky(['10.0.0.1:80', '10.0.0.2:80'])), true);
    const from = maps.calls.length;
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80'])), false);
    assert.deepEqual(methods(maps, from), ['updateServices(1)', 'deleteAffinityMatches(2)']);
    assert.equal(entrySets(maps)['10.96.0.1:80/EXTERNAL'].timeout, 0);
  });

  it('a removed frontend takes its pairs and name with it', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(sticky(['10.0.0.1:80'])), true);
    syncChecked(maps, r, new Map([['a/x', []]]), false);
    assert.deepEqual([maps.services.size, maps.backends.size, maps.affinityMatches.size, maps.svcMeta.size, maps.vips.size], [0, 0, 0, 0, 0]);
  });
});

describe('Reconciler: kpr_vip (refuse unknown ports of a service address)', () => {
  it('one entry per ClusterIP address, refcounted over its frontends, removed with the last one', () => {
    const { maps, r } = setup();
    const f80 = fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80']);
    const f443 = fe('a/x', '10.96.0.1', 443, ['10.0.0.1:443']);
    syncChecked(maps, r, plans(f80, f443), true);
    assert.deepEqual([...maps.vips], [['10.96.0.1', VIP_FLAG.REFUSE_UNKNOWN_PORT]]);
    syncChecked(maps, r, plans(f80), true);
    assert.deepEqual([...maps.vips.keys()], ['10.96.0.1'], 'still one frontend on the address');
    const from = maps.ops.length;
    syncChecked(maps, r, new Map([['a/x', []]]), false);
    const kinds = maps.ops.slice(from).map((o) => o.kind);
    assert.ok(kinds.indexOf('vip-delete') > kinds.lastIndexOf('svc-delete'), `vip removed after the frontend: ${kinds}`);
    assert.equal(maps.vips.size, 0);
  });

  it('the entry is written after the frontends it protects', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, [])), true);
    const kinds = maps.ops.map((o) => o.kind);
    assert.deepEqual(kinds.slice(-1), ['vip-update']);
  });

  it('NodePort, LoadBalancer and externalIP addresses get no vip entry (the node and outside own them)', () => {
    const { maps, r } = setup();
    syncChecked(
      maps,
      r,
      plans(
        fe('a/x', '192.168.1.10', 30080, [], { type: 'NodePort' }),
        fe('a/x', '203.0.113.7', 80, [], { type: 'LoadBalancer' }),
        fe('a/x', '198.51.100.1', 80, [], { type: 'ExternalIP' }),
      ),
      true,
    );
    assert.equal(maps.vips.size, 0);
  });

  it('two Services sharing an address (different ports) share the entry', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, []), fe('b/y', '10.96.0.1', 81, [])), true);
    syncChecked(maps, r, new Map([['a/x', []]]), false);
    assert.deepEqual([...maps.vips.keys()], ['10.96.0.1']);
  });
});

describe('Reconciler: kpr_svc_meta, flags, LOCAL backends, IPv6', () => {
  it('names every frontendId with the Service, port name, frontend type and protocol', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, []), fe('a/x', '192.168.1.10', 30080, [], { type: 'NodePort' })), true);
    assert.deepEqual(
      [...maps.svcMeta.entries()].sort((a, b) => a[0] - b[0]),
      [
        [1, { name: 'a/x', portName: 'http', type: FE_TYPE.CLUSTER_IP, proto: IPPROTO.TCP }],
        [2, { name: 'a/x', portName: 'http', type: FE_TYPE.NODE_PORT, proto: IPPROTO.TCP }],
      ],
    );
  });

  it("a name at Kubernetes' limits is stored whole; one longer than the field is stored cut and not rewritten by the next sync", () => {
    const { maps, r } = setup();
    const longest = `${'n'.repeat(63)}/${'s'.repeat(63)}`;
    const tooLong = `${'n'.repeat(100)}/${'s'.repeat(100)}`;
    const p = plans(fe(longest, '10.96.0.1', 80, []), fe(tooLong, '10.96.0.2', 80, []));
    syncChecked(maps, r, p, true);
    const names = [...maps.svcMeta.values()].map((m) => m.name).sort();
    assert.deepEqual(names, [longest, tooLong.slice(0, 127)]);
    assertNoOp(maps, r, p);
  });

  it('flags: type, LOCAL_ONLY (dropWhenEmpty) and SOURCE_RANGES', () => {
    const { maps, r } = setup();
    syncChecked(
      maps,
      r,
      plans(
        fe('a/x', '203.0.113.7', 80, [], { type: 'LoadBalancer', trafficPolicy: 'Local', dropWhenEmpty: true, sourceRanges: ['198.51.100.0/24'] }),
        fe('a/x', '198.51.100.1', 80, [], { type: 'ExternalIP' }),
      ),
      true,
    );
    const sets = entrySets(maps);
    assert.equal(sets['203.0.113.7:80/EXTERNAL'].flags, SVC_FLAG.LOAD_BALANCER | SVC_FLAG.LOCAL_ONLY | SVC_FLAG.SOURCE_RANGES);
    assert.equal(sets['198.51.100.1:80/EXTERNAL'].flags, SVC_FLAG.EXTERNAL_IP);
  });

  it('backends on this node carry LOCAL, and their frontend LOCAL_BACKEND; losing the last local backend rewrites the backend value and the master only', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80*', '10.0.0.2:80'])), true);
    assert.deepEqual(
      [...maps.backends.values()].map((b) => b.flags),
      [BE_FLAG.LOCAL, 0],
    );
    assert.equal(entrySets(maps)['10.96.0.1:80/EXTERNAL'].flags, SVC_FLAG.CLUSTER_IP | SVC_FLAG.LOCAL_BACKEND);
    const from = maps.calls.length;
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80'])), true);
    assert.deepEqual(methods(maps, from), ['updateBackends(1)', 'updateServices(1)']);
    assert.deepEqual(
      [...maps.backends.values()].map((b) => b.flags),
      [0, 0],
    );
    assert.equal(entrySets(maps)['10.96.0.1:80/EXTERNAL'].flags, SVC_FLAG.CLUSTER_IP);
  });

  it('LOCAL_BACKEND (rule 36 of docs/semantics.md): a local backend in the INTERNAL set alone (eTP=Local, none local) marks the frontend too', () => {
    const { maps, r } = setup();
    syncChecked(
      maps,
      r,
      plans(fe('a/x', '192.168.1.10', 30080, ['10.0.0.2:80'], { type: 'NodePort', trafficPolicy: 'Local', internal: ['10.0.0.1:80*', '10.0.0.2:80'] })),
      true,
    );
    const sets = entrySets(maps);
    for (const scope of ['EXTERNAL', 'INTERNAL'])
      assert.equal(sets[`192.168.1.10:30080/${scope}`].flags & SVC_FLAG.LOCAL_BACKEND, SVC_FLAG.LOCAL_BACKEND, scope);
    syncChecked(maps, r, plans(fe('a/x', '10.96.0.2', 80, ['10.0.0.2:80'])), true);
    assert.equal(entrySets(maps)['10.96.0.2:80/EXTERNAL'].flags, SVC_FLAG.CLUSTER_IP, 'no local backend, no flag');
  });

  it('IPv6 frontends and backends (canonical text), one frontend per family', () => {
    const { maps, r } = setup();
    const p = plans(fe('a/x', 'fd00::10', 80, ['[fd00::1]:8080', '[fd00::2]:8080']), fe('a/x', '10.96.0.1', 80, ['10.0.0.1:8080']));
    syncChecked(maps, r, p, true);
    assert.deepEqual(entrySets(maps)['fd00::10:80/EXTERNAL'].backends, ['fd00::1:8080', 'fd00::2:8080']);
    assert.deepEqual([...maps.vips.keys()].sort(), ['10.96.0.1', 'fd00::10']);
    assertNoOp(maps, r, p);
  });
});

describe('Reconciler: adoption of every map', () => {
  const everything = () =>
    plans(
      fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80*', '10.0.0.2:80'], { affinityTimeoutSeconds: 60 }),
      fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80*'], {
        type: 'NodePort',
        trafficPolicy: 'Local',
        affinityTimeoutSeconds: 60,
        internal: ['10.0.0.1:80*', '10.0.0.2:80'],
      }),
      fe('b/y', 'fd00::10', 53, ['[fd00::1]:5353'], { protocol: 'UDP' }),
    );

  it('a restarted agent adopts scopes, pairs, vips and names and then writes nothing', () => {
    const first = setup();
    syncChecked(first.maps, first.r, everything(), true);
    const maps = new MemoryDatapathMaps();
    maps.prefill(first.maps.dumpServices(), first.maps.dumpBackends(), {
      vips: first.maps.dumpVips(),
      affinityMatches: first.maps.dumpAffinityMatches(),
      svcMeta: first.maps.dumpSvcMeta(),
    });
    const r = new Reconciler(maps, quiet);
    const a = r.adopt();
    assert.equal(a.inconsistencies, 0);
    assertNoOp(maps, r, everything());
  });

  it('orphan pairs, names and vips are counted on adopt and removed by the first full sync', () => {
    const first = setup();
    syncChecked(first.maps, first.r, everything(), true);
    const maps = new MemoryDatapathMaps();
    maps.prefill(first.maps.dumpServices(), first.maps.dumpBackends(), {
      vips: [...first.maps.dumpVips(), ['10.96.9.9', VIP_FLAG.REFUSE_UNKNOWN_PORT]],
      affinityMatches: [...first.maps.dumpAffinityMatches(), { backendId: 1, frontendId: 77 }],
      svcMeta: [...first.maps.dumpSvcMeta(), [77, { name: 'gone/svc', portName: '', type: 0, proto: 6 }]],
    });
    const r = new Reconciler(maps, quiet);
    assert.equal(r.adopt().details.orphanAuxEntries, 3);
    syncChecked(maps, r, everything(), true);
    assert.deepEqual(
      [maps.vips.has('10.96.9.9'), maps.svcMeta.has(77), [...maps.affinityMatches.values()].some((k) => k.frontendId === 77)],
      [false, false, false],
    );
  });

  it('a missing vip or pair under adopted masters is repaired by the first full sync', () => {
    const first = setup();
    syncChecked(first.maps, first.r, everything(), true);
    const maps = new MemoryDatapathMaps();
    maps.prefill(first.maps.dumpServices(), first.maps.dumpBackends(), { svcMeta: first.maps.dumpSvcMeta() });
    const r = new Reconciler(maps, quiet);
    r.adopt();
    syncChecked(maps, r, everything(), true);
    assert.deepEqual([maps.vips.size, maps.affinityMatches.size], [2, first.maps.affinityMatches.size]);
  });
});

describe('Reconciler: failures at every call of a sync touching every map', () => {
  const start = () =>
    plans(
      fe('a/x', '10.96.0.1', 80, ['10.0.0.1:80', '10.0.0.2:80'], { affinityTimeoutSeconds: 60 }),
      fe('a/x', '192.168.1.10', 30080, ['10.0.0.1:80'], { type: 'NodePort', trafficPolicy: 'Local', internal: ['10.0.0.1:80', '10.0.0.2:80'] }),
      fe('b/y', '10.96.0.2', 80, ['10.0.0.4:80']),
    );
  const next = () =>
    plans(
      fe('a/x', '10.96.0.1', 80, ['10.0.0.2:80', '10.0.0.5:80*'], { affinityTimeoutSeconds: 60 }),
      fe('a/x', '192.168.1.10', 30080, ['10.0.0.5:80*'], { type: 'NodePort' }),
      fe('c/z', '10.96.0.3', 80, ['10.0.0.6:80'], { affinityTimeoutSeconds: 5 }),
    );

  const reference = setup();
  reference.r.sync(start(), { full: true });
  const probe = reference.maps.mutationCalls;
  reference.r.sync(next(), { full: true });
  const callsInNext = reference.maps.mutationCalls - probe;

  it('the sync under test uses every kind of call', () => {
    const used = new Set(reference.maps.calls.slice(probe).map((c) => c.method));
    for (const m of [
      'updateBackends',
      'updateAffinityMatches',
      'updateServices',
      'updateSvcMeta',
      'updateVips',
      'deleteServices',
      'deleteAffinityMatches',
      'deleteVips',
      'deleteSvcMeta',
      'deleteBackends',
    ]) {
      assert.ok(used.has(m as never), `${m} not exercised: ${[...used]}`);
    }
  });

  for (let call = 1; call <= callsInNext; call++) {
    for (const afterEntries of [0, 1]) {
      it(`call ${call} fails after ${afterEntries} entries: every reader invariant holds and the retry converges`, () => {
        const { maps, r } = setup();
        r.sync(start(), { full: true });
        maps.failOnCall({ call: maps.mutationCalls + call, afterEntries });
        const res = syncChecked(maps, r, next(), true);
        assert.equal(res.ok, false);
        const retry = syncChecked(maps, r, new Map(), false);
        assert.equal(retry.ok, true);
        assert.deepEqual(entrySets(maps), entrySets(reference.maps));
        maps.clearLog();
        r.sync(next(), { full: true });
        assert.equal(maps.calls.length, 0, 'converged: nothing left to write');
      });
    }
  }
});

describe('Reconciler: loadBalancerSourceRanges (kpr_src_range)', () => {
  const lb = (ranges: string[]) => fe('a/lb', '198.19.200.1', 80, ['10.0.0.1:80'], { type: 'LoadBalancer', sourceRanges: ranges });

  it('ranges are written before the master that enforces them, canonical and masked', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(lb(['198.18.100.7/24', '198.18.101.0/24'])), true);
    assert.deepEqual([...maps.srcRanges.values()].map((k) => `${k.frontendId} ${k.cidr}`).sort(), ['1 198.18.100.0/24', '1 198.18.101.0/24']);
    const kinds = maps.ops.map((o) => o.kind);
    const lastRange = kinds.lastIndexOf('range-update');
    const master = maps.ops.findIndex((o) => o.kind === 'svc-update' && o.key.slot === 0);
    assert.ok(lastRange < master, `ranges before the master: ${kinds}`);
    assert.equal(entrySets(maps)['198.19.200.1:80/EXTERNAL'].flags, SVC_FLAG.LOAD_BALANCER | SVC_FLAG.SOURCE_RANGES);
    assertNoOp(maps, r, plans(lb(['198.18.101.0/24', '198.18.100.0/24'])));
  });

  it('a changed range list writes only the difference; a removed frontend takes its ranges along, after its master', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(lb(['198.18.100.0/24', '198.18.101.0/24'])), true);
    const from = maps.ops.length;
    syncChecked(maps, r, plans(lb(['198.18.100.0/24', '198.18.102.0/24'])), true);
    assert.deepEqual(
      maps.ops
        .slice(from)
        .filter((o) => o.kind.startsWith('range'))
        .map((o) => `${o.kind} ${(o as { key: { cidr: string } }).key.cidr}`),
      ['range-update 198.18.102.0/24', 'range-delete 198.18.101.0/24'],
    );
    const gone = maps.ops.length;
    syncChecked(maps, r, new Map(), true);
    const kinds = maps.ops.slice(gone).map((o) => o.kind);
    assert.ok(kinds.indexOf('svc-delete') < kinds.indexOf('range-delete'), `master removed before its ranges: ${kinds}`);
    assert.equal(maps.srcRanges.size, 0);
  });

  it('ranges are adopted after a restart and orphans are removed by a full sync', () => {
    const { maps, r } = setup();
    syncChecked(maps, r, plans(lb(['198.18.100.0/24'])), true);
    maps.updateSrcRanges([{ frontendId: 99, cidr: '198.18.0.0/15' }]);
    const again = new Reconciler(maps, quiet);
    again.adopt();
    syncChecked(maps, again, plans(lb(['198.18.100.0/24'])), true);
    assert.deepEqual(
      [...maps.srcRanges.values()].map((k) => `${k.frontendId} ${k.cidr}`),
      ['1 198.18.100.0/24'],
    );
    assertNoOp(maps, again, plans(lb(['198.18.100.0/24'])));
  });

  it('an invalid range is reported, the valid ones kept', () => {
    const { maps, r } = setup();
    const res = syncChecked(maps, r, plans(lb(['198.18.100.0/24', 'not-a-cidr', '2001:db8::/32'])), true);
    assert.deepEqual(
      [...maps.srcRanges.values()].map((k) => k.cidr),
      ['198.18.100.0/24'],
    );
    assert.equal(res.skipped.filter((s) => /invalid source range/.test(s.reason)).length, 2);
  });

  it('an incremental re-plan reaches the maps when any one field changes, and writes nothing when none does', () => {
    const { maps, r } = setup();
    const base = (o: Partial<PlanFrontend> & { internal?: string[] } = {}, backends = ['10.0.0.1:80*', '10.0.0.2:80']) =>
      plans(fe('a/x', '10.96.0.1', 80, backends, { type: 'NodePort', ...o }));
    syncChecked(maps, r, base(), true);
    const step = (p: Map<string, PlanFrontend[]>) => {
      const from = maps.calls.length;
      assert.equal(syncChecked(maps, r, p, false).ok, true);
      return methods(maps, from);
    };
    assert.deepEqual(step(base()), [], 'the same plan again');
    // The backend's LOCAL flag, and the master's LOCAL_BACKEND with it (its only local backend left).
    assert.deepEqual(step(base({}, ['10.0.0.1:80', '10.0.0.2:80'])), ['updateBackends(1)', 'updateServices(1)'], 'a LOCAL flag');
    assert.deepEqual(step(base({ portName: 'web' }, ['10.0.0.1:80', '10.0.0.2:80'])), ['updateSvcMeta(1)'], 'the port name');
    assert.deepEqual(
      maps.dumpSvcMeta().map(([, m]) => m.portName),
      ['web'],
    );
    assert.ok(step(base({ portName: 'web', affinityTimeoutSeconds: 30 }, ['10.0.0.1:80', '10.0.0.2:80'])).includes('updateAffinityMatches(2)'), 'affinity');
    assert.ok(
      step(base({ portName: 'web', affinityTimeoutSeconds: 30, sourceRanges: ['198.18.0.0/16'] }, ['10.0.0.1:80', '10.0.0.2:80'])).includes(
        'updateSrcRanges(1)',
      ),
      'source ranges',
    );
    const internal = step(
      base({ portName: 'web', affinityTimeoutSeconds: 30, sourceRanges: ['198.18.0.0/16'], internal: ['10.0.0.2:80'] }, ['10.0.0.1:80', '10.0.0.2:80']),
    );
    assert.ok(
      internal.some((m) => m.startsWith('updateServices')),
      'an INTERNAL set',
    );
    assert.equal(entrySets(maps)['10.96.0.1:80/INTERNAL'].backends.length, 1);
  });
});
