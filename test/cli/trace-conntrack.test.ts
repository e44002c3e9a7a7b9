/**
 * `kpr trace --from ADDR:PORT` on a flow kpr_ct already holds, over maps held
 * in memory: the established flow's backend, and for a closing TCP flow what
 * its client's next SYN gets (kpr_tc.bpf.c; rule 37 of docs/semantics.md):
 * the same backend and SNAT port while the backend never answered it (no
 * SYN-ACK on its REPLY entry), a fresh choice once it did.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { traceFlow, type TraceMaps, type TraceQuery } from '../../agent/cli/trace-model.js';
import { CT_DIR, CT_FLAG, IPPROTO, SCOPE, SVC_FLAG, type CtKey, type CtVal } from '../../agent/maps/layout.js';

const NODE = '198.18.1.1';
const CLIENT = { addr: '198.18.100.2', port: 47000 };
const BACKEND = '198.18.20.10';
const SNAT_PORT = 62947;

const original: CtVal = {
  natSaddr: NODE,
  natDaddr: BACKEND,
  natSport: SNAT_PORT,
  natDport: 8080,
  backendId: 101,
  expiresNs: 10_000_000_000n,
  frontendId: 9,
  flags: CT_FLAG.SNAT | CT_FLAG.CLOSING,
};

/** A NodePort 30080 with one backend, and kpr_ct holding CLIENT's flow (`flags` on its ORIGINAL entry) and, if `replyFlags`, its REPLY entry. */
function maps(flags: number, replyFlags: number | null): TraceMaps {
  const origKey: CtKey = { saddr: CLIENT.addr, daddr: NODE, sport: CLIENT.port, dport: 30080, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL };
  const replyKey: CtKey = { saddr: BACKEND, daddr: NODE, sport: 8080, dport: SNAT_PORT, proto: IPPROTO.TCP, dir: CT_DIR.REPLY };
  const reply: CtVal | undefined =
    replyFlags === null
      ? undefined
      : {
          natSaddr: NODE,
          natDaddr: CLIENT.addr,
          natSport: 30080,
          natDport: CLIENT.port,
          backendId: 0,
          expiresNs: 10_000_000_000n,
          frontendId: 9,
          flags: replyFlags,
        };
  return {
    svc: (addr, port, proto, scope, slot) =>
      addr === NODE && port === 30080 && proto === IPPROTO.TCP && scope === SCOPE.EXTERNAL && slot <= 1
        ? slot === 0
          ? { backendId: 0, count: 1, frontendId: 9, flags: SVC_FLAG.NODE_PORT }
          : { backendId: 101, count: 0, frontendId: 0, flags: 0 }
        : undefined,
    backend: (id) => (id === 101 ? { addr: BACKEND, port: 8080, proto: IPPROTO.TCP, flags: 0 } : undefined),
    vipFlags: () => undefined,
    meta: () => undefined,
    sourceRangeAllows: () => true,
    affinity: () => undefined,
    affinityEntries: () => [],
    affinityMatch: () => false,
    conntrack: (from, to, proto) =>
      from.addr === CLIENT.addr && from.port === CLIENT.port && to.addr === NODE && to.port === 30080 && proto === IPPROTO.TCP
        ? [{ key: origKey, val: { ...original, flags } }]
        : [],
    conntrackEntry: (k) => (JSON.stringify(k) === JSON.stringify(replyKey) ? reply : undefined),
    config: () => undefined,
    maglevRef: () => undefined,
    maglevChunk: () => undefined,
  };
}

const query: TraceQuery = { to: { addr: NODE, port: 30080 }, proto: 'TCP', path: 'tc', role: 'ext', from: CLIENT, nowNs: 1n };

describe('kpr trace on a flow kpr_ct holds', () => {
  it('an open flow continues to its backend, with no word about a next SYN', () => {
    const t = traceFlow(query, maps(CT_FLAG.SNAT, CT_FLAG.SNAT | CT_FLAG.ANSWERED));
    assert.equal(t.verdict.action, 'continues');
    assert.equal(t.verdict.backend, `${BACKEND}:8080`);
    assert.doesNotMatch(t.verdict.summary, /SYN/);
  });

  it('a closing flow its client reset before the backend answered: the next SYN retries on the same backend and SNAT port', () => {
    const t = traceFlow(query, maps(CT_FLAG.SNAT | CT_FLAG.CLOSING, CT_FLAG.SNAT));
    assert.equal(t.verdict.action, 'continues');
    assert.match(t.verdict.summary, /never answered: a SYN from this port retries the connect on this backend and SNAT port/);
  });

  it('a closing flow the backend had answered, or whose REPLY entry is gone: the next SYN is balanced afresh', () => {
    for (const replyFlags of [CT_FLAG.SNAT | CT_FLAG.ANSWERED, null]) {
      const t = traceFlow(query, maps(CT_FLAG.SNAT | CT_FLAG.CLOSING, replyFlags));
      assert.equal(t.verdict.action, 'continues');
      assert.match(t.verdict.summary, /a new SYN from this port is balanced afresh: the flow is closing/, `reply flags ${replyFlags}`);
    }
  });
});
