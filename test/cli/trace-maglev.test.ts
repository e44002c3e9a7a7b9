/**
 * `kpr trace` and the service views on a Maglev frontend (rule 40 of
 * docs/semantics.md), over maps held in memory: the table the pure module
 * computes, written as kpr_maglev holds it. The datapath's own pick for the
 * same tables is checked in test/bpf/maglev.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { traceFlow, type TraceMaps, type TraceQuery } from '../../agent/cli/trace-model.js';
import { algorithmName, flagNames } from '../../agent/cli/service-view.js';
import { IPPROTO, SCOPE, SVC_ALG, SVC_FLAG, encodeAddr, svcAlgFlags, type Backend, type MaglevRef, type SvcVal } from '../../agent/maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES } from '../../agent/maps/registry.js';
import { maglevTable, pickBackend } from '../../agent/lb/maglev.js';
import { maglevChunks, maglevSlotEntries } from '../../agent/lb/maglev-chunks.js';
import { tupleHash } from '../../agent/lb/maglev-hash.js';

const NODE = '198.18.1.1';
const BACKENDS = ['198.18.20.12', '198.18.20.10', '198.18.20.11'];
const FLAGS = SVC_FLAG.NODE_PORT | svcAlgFlags(SVC_ALG.MAGLEV);

/** A NodePort 30080 whose three backends sit in slots 1..3 in BACKENDS' order, with its Maglev table `withTable`. */
function maps(withTable: boolean): TraceMaps {
  const table = maglevTable(BACKENDS.map((address) => ({ address, port: 8080 })));
  const chunks = maglevChunks(
    maglevSlotEntries(table, (b) => BACKENDS.indexOf(b.address) + 1),
    MAGLEV_CHUNK_ENTRIES,
  );
  const master: SvcVal = { backendId: 0, count: BACKENDS.length, frontendId: 9, flags: FLAGS };
  return {
    svc: (addr, port, proto, scope, slot) =>
      addr !== NODE || port !== 30080 || proto !== IPPROTO.TCP || scope !== SCOPE.EXTERNAL || slot > BACKENDS.length
        ? undefined
        : slot === 0
          ? master
          : { backendId: 100 + slot, count: 0, frontendId: 0, flags: 0 },
    backend: (id): Backend | undefined =>
      id > 100 && id <= 100 + BACKENDS.length ? { addr: BACKENDS[id - 101], port: 8080, proto: IPPROTO.TCP, flags: 0 } : undefined,
    vipFlags: () => undefined,
    meta: () => undefined,
    sourceRangeAllows: () => true,
    affinity: () => undefined,
    affinityEntries: () => [],
    affinityMatch: () => false,
    conntrack: () => [],
    conntrackEntry: () => undefined,
    config: () => undefined,
    maglevRef: (frontendId, scope): MaglevRef | undefined =>
      withTable && frontendId === 9 && scope === SCOPE.EXTERNAL ? { tableId: 5, m: table.m } : undefined,
    maglevChunk: (tableId, chunk) => (tableId === 5 ? chunks[chunk] : undefined),
  };
}

const query = (from: TraceQuery['from']): TraceQuery => ({ to: { addr: NODE, port: 30080 }, proto: 'TCP', path: 'tc', role: 'ext', from, nowNs: 1n });

function addr16(a: string): Uint8Array {
  const b = Buffer.alloc(16);
  encodeAddr(a, b, 0);
  return new Uint8Array(b);
}

describe('kpr trace on a Maglev frontend', () => {
  it("names the backend the table gives a client's flow (the NodePort hash without the node's address), for many flows", () => {
    const table = maglevTable(BACKENDS.map((address) => ({ address, port: 8080 })));
    const m = maps(true);
    for (let i = 0; i < 50; i++) {
      const from = { addr: `198.18.100.${i + 2}`, port: 40000 + i * 7 };
      const t = traceFlow(query(from), m);
      const want =
        table.backends[
          pickBackend(table, tupleHash({ saddr: addr16(from.addr), daddr: new Uint8Array(16), sport: from.port, dport: 30080, proto: IPPROTO.TCP }))
        ];
      assert.equal(t.verdict.action, 'translated');
      assert.equal(t.verdict.backend, `${want.address}:8080`, `${from.addr}:${from.port}`);
      assert.ok(t.steps.some((s) => s.step === 'maglev' && s.result.includes(`table 5 (M=${table.m})`)));
      assert.deepEqual(t.frontend?.flags, ['node-port', 'lb-maglev']);
    }
  });

  it('without the client port: the table, and the verdict says the hash decides', () => {
    const t = traceFlow(query({ addr: '198.18.100.2' }), maps(true));
    assert.match(t.steps.find((s) => s.step === 'maglev')!.result, /give --from ADDR:PORT/);
    assert.match(t.verdict.summary, /Maglev hash/);
    assert.equal(t.verdict.backend, undefined);
  });

  it('without a table: random, and the fallback counter named', () => {
    const t = traceFlow(query({ addr: '198.18.100.2', port: 40000 }), maps(false));
    assert.match(t.steps.find((s) => s.step === 'maglev')!.result, /without a table.*reason="no_table"/);
  });

  it('flag names: lb-maglev for Maglev, nothing for random, the bits of an algorithm this build does not know', () => {
    assert.deepEqual(flagNames(FLAGS), ['node-port', 'lb-maglev']);
    assert.deepEqual(flagNames(SVC_FLAG.NODE_PORT), ['node-port']);
    assert.deepEqual(flagNames(SVC_FLAG.NODE_PORT | svcAlgFlags(7)), ['node-port', '0x7000']);
    assert.deepEqual([algorithmName(FLAGS), algorithmName(0), algorithmName(svcAlgFlags(7))], ['maglev', 'random', 'alg-7']);
  });
});

describe('kpr map dump of the Maglev maps', () => {
  it("decodes a table chunk (its slot numbers up to the table's end) and a table reference", async () => {
    const { DECODERS } = await import('../../agent/cli/map-decoders.js');
    const { encodeMaglevChunk, encodeMaglevKey, encodeMaglevRef, encodeMaglevRefKey } = await import('../../agent/maps/layout.js');
    const chunk = new Uint16Array(MAGLEV_CHUNK_ENTRIES);
    chunk.set([2, 1, 3, 1, 2]);
    const d = DECODERS.kpr_maglev;
    const key = d.key(encodeMaglevKey({ tableId: 5, chunk: 3 }), 0);
    assert.deepEqual(key, { tableId: 5, chunk: 3 });
    assert.deepEqual(d.value(encodeMaglevChunk(chunk), 0, key), { slots: [2, 1, 3, 1, 2] });
    const r = DECODERS.kpr_maglev_ref;
    const rkey = r.key(encodeMaglevRefKey({ frontendId: 9, scope: SCOPE.INTERNAL }), 0);
    assert.deepEqual(rkey, { id: 9, scope: 'internal' });
    assert.deepEqual(r.value(encodeMaglevRef({ tableId: 5, m: 1021 }), 0, rkey), { tableId: 5, m: 1021 });
  });
});
