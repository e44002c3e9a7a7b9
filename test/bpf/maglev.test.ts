/**
 * Maglev selection in the tc datapath (BPF_PROG_TEST_RUN): the real program
 * and maps, tables computed by the agent's pure module (agent/lb/maglev.ts)
 * and written as the datapath reads them (kpr_maglev_ref, kpr_maglev).
 * What is checked is where each SYN goes: the backend the program DNATs
 * to, against the one the pure module picks for the same 5-tuple, across
 * two independently programmed map sets (two "nodes"), and across the
 * removal of a backend.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sumPerCpuU64, testRun, withNetns, type BpfMap } from '../../native/index.js';
import { nsPath, Sandbox } from '../../sandbox/netns.js';
import {
  CONFIG,
  IPPROTO,
  SCOPE,
  STAT,
  SVC_ALG,
  SVC_FLAG,
  encodeAddr,
  encodeConfig,
  encodeMaglevChunk,
  encodeMaglevKey,
  encodeMaglevRef,
  encodeMaglevRefKey,
  svcAlgFlags,
} from '../../agent/maps/layout.js';
import { MAGLEV_CHUNK_ENTRIES } from '../../agent/maps/registry.js';
import { maglevTable, pickBackend, type MaglevTable } from '../../agent/lb/maglev.js';
import { maglevChunks, maglevSlotEntries } from '../../agent/lb/maglev-chunks.js';
import { tupleHash } from '../../agent/lb/maglev-hash.js';
import { TCP_ACK, TCP_SYN, buildPacket, parsePacket } from '../support/packets.js';
import { loadTcObject, writeFrontend, type TcObject } from '../support/tc-object.js';
import { rng } from '../support/rng.js';
import { requireRoot } from '../support/preflight.js';

const TC_ACT_OK = 0;
const TC_ACT_REDIRECT = 7;
const NODE_V4 = '198.18.1.1';
const NODE_PORT = 30080;
const REV_NAT_ID = 7;
const BACKENDS = ['198.18.20.10', '198.18.20.11', '198.18.20.12', '198.18.20.13', '198.18.20.14'];
const BE_PORT = 8080;

interface Tuple {
  client: string;
  sport: number;
}

/** A node: its own network namespace and its own loaded object and maps. */
interface Node {
  ns: string;
  tc: TcObject;
}

const addr16 = (a: string): Uint8Array => {
  const b = Buffer.alloc(16);
  encodeAddr(a, b, 0);
  return new Uint8Array(b);
};

/** The backend the pure module picks for a client's flow to the NodePort (the destination address left out: a NodePort's is the node's own). */
function expected(table: MaglevTable, t: Tuple): string {
  const h = tupleHash({ saddr: addr16(t.client), daddr: new Uint8Array(16), sport: t.sport, dport: NODE_PORT, proto: IPPROTO.TCP });
  return table.backends[pickBackend(table, h)].address;
}

/**
 * Programs a Maglev NodePort on `node` as an agent would: backends in
 * `order` (slot i+1 = order[i], backend ids from `idBase`), the table
 * computed from them, stored as table `tableId`.
 */
function program(node: Node, order: readonly string[], idBase: number, tableId: number): MaglevTable {
  const { tc } = node;
  for (const m of [tc.svc, tc.backend, tc.obj.map('kpr_ct'), tc.obj.map('kpr_maglev'), tc.obj.map('kpr_maglev_ref')])
    for (const k of [...m.keys()]) m.delete(k);
  const table = maglevTable(order.map((address) => ({ address, port: BE_PORT })));
  const entries = maglevSlotEntries(table, (b) => order.indexOf(b.address) + 1);
  maglevChunks(entries, MAGLEV_CHUNK_ENTRIES).forEach((c, chunk) => tc.obj.map('kpr_maglev').update(encodeMaglevKey({ tableId, chunk }), encodeMaglevChunk(c)));
  tc.obj.map('kpr_maglev_ref').update(encodeMaglevRefKey({ frontendId: REV_NAT_ID, scope: SCOPE.EXTERNAL }), encodeMaglevRef({ tableId, m: table.m }));
  writeFrontend(
    tc,
    { addr: NODE_V4, port: NODE_PORT, proto: IPPROTO.TCP, frontendId: REV_NAT_ID, flags: SVC_FLAG.NODE_PORT | svcAlgFlags(SVC_ALG.MAGLEV) },
    order.map((a, i): [number, string, number] => [idBase + i, a, BE_PORT]),
  );
  return table;
}

/** The backend a SYN of tuple `t` is DNATed to on `node` (a new flow each time: distinct tuples). */
function backendOf(node: Node, t: Tuple, flags = TCP_SYN): string {
  const r = withNetns(nsPath(node.ns), () =>
    testRun(node.tc.obj.program('kpr_tc_ext'), buildPacket({ src: t.client, dst: NODE_V4, sport: t.sport, dport: NODE_PORT, proto: 'TCP', tcpFlags: flags })),
  );
  assert.ok([TC_ACT_OK, TC_ACT_REDIRECT].includes(r.retval), `verdict ${r.retval} for ${t.client}:${t.sport}`);
  return parsePacket(r.data).dst;
}

function tuples(n: number, seed: number): Tuple[] {
  const r = rng(seed);
  const out: Tuple[] = [];
  const seen = new Set<string>();
  while (out.length < n) {
    const t = { client: `198.18.${100 + Math.floor(r() * 50)}.${2 + Math.floor(r() * 250)}`, sport: 1024 + Math.floor(r() * 59000) };
    const k = `${t.client}:${t.sport}`;
    if (seen.has(k)) continue;
    seen.add(k);
    out.push(t);
  }
  return out;
}

function stat(node: Node, id: number): bigint {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(id);
  return sumPerCpuU64(node.tc.obj.map('kpr_stats').lookup(key)!);
}

describe('Maglev on the tc path (BPF_PROG_TEST_RUN)', () => {
  let sandbox: Sandbox;
  const nodes: Node[] = [];
  let a: Node, b: Node;
  const flows = tuples(240, 34);

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
    for (const name of ['node-a', 'node-b']) {
      const ns = sandbox.addNamespace(name);
      const tc = loadTcObject(`kpr-maglev-${name}`);
      nodes.push({ ns, tc });
      const cfg: BpfMap = tc.obj.map('kpr_config');
      assert.equal(CONFIG.size, cfg.valueSize);
      cfg.update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE_V4, snatV6: '', tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
      );
    }
    [a, b] = nodes;
  });

  after(async () => {
    for (const n of nodes) n.tc.close();
    await sandbox?.teardown();
  });

  test("each SYN goes to the backend the agent's pure table picks for its 5-tuple (240 tuples)", () => {
    const table = program(a, BACKENDS, 1, 3);
    const fallbacks0 = stat(a, STAT.MAGLEV_FALLBACK);
    const seen = new Set<string>();
    for (const t of flows) {
      const got = backendOf(a, t);
      assert.equal(got, expected(table, t), `${t.client}:${t.sport}`);
      seen.add(got);
    }
    assert.equal(seen.size, BACKENDS.length, 'every backend takes some flows');
    assert.equal(stat(a, STAT.MAGLEV_FALLBACK), fallbacks0, 'no random fallback');
  });

  test('two nodes programmed independently (other slot order, backend ids, table id) agree on every tuple', () => {
    program(a, BACKENDS, 1, 3);
    program(b, [...BACKENDS].reverse(), 100, 41);
    let same = 0;
    for (const t of flows) if (backendOf(a, t) === backendOf(b, t)) same++;
    assert.ok(same / flows.length >= 0.99, `agreement ${same}/${flows.length}`);
    assert.equal(same, flows.length);
  });

  test("removing one of N backends moves at most 1.2/N of the other backends' flows; an established flow keeps its backend", () => {
    program(a, BACKENDS, 1, 3);
    const before = new Map(flows.map((t) => [t, backendOf(a, t)]));
    const removed = BACKENDS[2];
    const kept = flows.find((t) => before.get(t) !== removed)!;
    // Reprogram without the backend, the other flows' conntrack left as it is: ACKs of the kept flow stay on its backend.
    const rest = BACKENDS.filter((x) => x !== removed);
    for (const m of [a.tc.obj.map('kpr_maglev'), a.tc.obj.map('kpr_maglev_ref')]) for (const k of [...m.keys()]) m.delete(k);
    const ct = a.tc.obj.map('kpr_ct');
    const ctEntries = [...ct.keys()].map((k) => [k, ct.lookup(k)!] as const);
    program(a, rest, 1, 4);
    for (const [k, v] of ctEntries) ct.update(k, v);
    assert.equal(backendOf(a, kept, TCP_ACK), before.get(kept), 'conntrack first: the established flow keeps its backend');
    for (const k of [...ct.keys()]) ct.delete(k);

    let others = 0;
    let moved = 0;
    for (const t of flows) {
      const now = backendOf(a, t);
      assert.notEqual(now, removed);
      if (before.get(t) === removed) continue;
      others++;
      if (now !== before.get(t)) moved++;
    }
    assert.ok(others > 100, `${others} flows on the other backends`);
    assert.ok(moved / others <= 1.2 / BACKENDS.length, `${moved}/${others} of the other flows moved (bound ${1.2 / BACKENDS.length})`);
  });

  test('a Maglev frontend without its table still balances, at random, and counts the fallback', () => {
    program(a, BACKENDS, 1, 3);
    for (const m of [a.tc.obj.map('kpr_maglev'), a.tc.obj.map('kpr_maglev_ref')]) for (const k of [...m.keys()]) m.delete(k);
    const fallbacks0 = stat(a, STAT.MAGLEV_FALLBACK);
    for (const t of flows.slice(0, 20)) assert.ok(BACKENDS.includes(backendOf(a, t)));
    assert.equal(stat(a, STAT.MAGLEV_FALLBACK) - fallbacks0, 20n);
  });
});
