/**
 * The read-back's encoders of the mirror (each map's table in
 * agent/reconcile/tables/, over the fast packers) write exactly the registry codecs' bytes: what the
 * read-back hashes is what a write of the same entry puts in the kernel.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { mapCodecs } from '../../agent/maps/layout.js';
import { MAPS } from '../../agent/maps/registry.js';
import { BackendTable } from '../../agent/reconcile/backend-table.js';
import { backendTupleKey } from '../../agent/reconcile/desired-frontend.js';
import type { EntrySet } from '../../agent/reconcile/tables/services.js';
import { BACKEND_RECORD, backendRecord } from '../../agent/reconcile/tables/backends.js';
import { SVC_HEAD, SVC_RECORD, svcRecords } from '../../agent/reconcile/tables/services.js';
import { svcMetaRecord } from '../../agent/reconcile/tables/svc-meta.js';
import { vipRecord } from '../../agent/reconcile/tables/vips.js';
import { parseIP } from '../../agent/net/ip.js';

const svc = mapCodecs(MAPS.svc);
const be = mapCodecs(MAPS.backend);
const vip = mapCodecs(MAPS.vip);
const meta = mapCodecs(MAPS.svcMeta);

/** A record by the codecs: key then value. */
const record = (key: Buffer, val: Buffer) => Buffer.concat([key, val]);

describe("the mirror's records are the registry codecs' bytes", () => {
  it("kpr_svc: an entry set's master and slots (sparse), IPv4 and IPv6, both scopes", () => {
    const sets: EntrySet[] = [
      {
        fk: 'a',
        scope: 0,
        base: { addr: '198.18.7.9', port: 0x1234, proto: 17 },
        master: { backendId: 0x12345678, count: 3, frontendId: 0xdef1, flags: 0x7f },
        slots: [0, 7, 0xffffffff, 9],
        slotCount: 3,
      },
      {
        fk: 'b',
        scope: 1,
        base: { addr: '2001:db8::7:9', port: 0xfffe, proto: 6 },
        master: { backendId: 0, count: 0xffff, frontendId: 0xffff, flags: 0xffff },
        slots: [],
        slotCount: 0,
      },
      { fk: 'c', scope: 1, base: { addr: '198.19.0.1', port: 53, proto: 17 }, master: null, slots: [], slotCount: 0 },
    ];
    sets[2].slots[0x1ff] = 42; // a slot without master (adopted), numbered above 255
    sets[2].slotCount = 1;
    for (const f of sets) {
      const got: Buffer[] = [];
      const firsts: boolean[] = [];
      const n = svcRecords(f, (rec, first) => (got.push(Buffer.from(rec)), firsts.push(first)));
      const want: Buffer[] = [];
      if (f.master) want.push(record(svc.key.encode({ ...f.base, slot: 0, scope: f.scope }), svc.value.encode(f.master)));
      f.slots.forEach((id, slot) => {
        if (slot > 0 && id !== undefined)
          want.push(record(svc.key.encode({ ...f.base, slot, scope: f.scope }), svc.value.encode({ backendId: id, count: 0, frontendId: 0, flags: 0 })));
      });
      assert.equal(n, want.length);
      assert.deepEqual(got, want, f.fk);
      assert.deepEqual(
        firsts,
        want.map((_, i) => i === 0),
      );
      for (const r of got) assert.equal(r.length, SVC_RECORD);
      // The head hashed once per set is the same in every record of it.
      for (const r of got) assert.deepEqual(r.subarray(0, SVC_HEAD), got[0].subarray(0, SVC_HEAD));
    }
  });

  it('kpr_backend rows, IPv4 (from the u32) and IPv6, LOCAL or not', () => {
    const rows = new BackendTable();
    const backends = [
      { id: 1, addr: '198.19.255.254', port: 0x1f90, proto: 6, flags: 1 },
      { id: 0x12345, addr: '2001:db8:ffff::1', port: 0xffff, proto: 17, flags: 0 },
    ];
    for (const b of backends) {
      const ip = parseIP(b.addr)!;
      rows.insert(b.id, ip.family === 'IPv4' ? (ip.key as number) : -1, b.addr, b.port, b.proto, b.flags, backendTupleKey(ip.key, b.port, b.proto));
    }
    for (const b of backends) {
      const got = Buffer.from(backendRecord(rows, b.id));
      assert.equal(got.length, BACKEND_RECORD);
      assert.deepEqual(got, record(be.key.encode(b.id), be.value.encode({ addr: b.addr, port: b.port, proto: b.proto, flags: b.flags })));
    }
  });

  it('kpr_vip and kpr_svc_meta records', () => {
    const v = vipRecord('198.18.0.10', 1);
    assert.deepEqual(Buffer.from(v.subarray(0, vip.key.size + vip.value.size)), record(vip.key.encode('198.18.0.10'), vip.value.encode(1)));
    const names = { name: 'café/web', portName: 'http', type: 2, proto: 17 };
    const m = svcMetaRecord(0xbeef, names);
    assert.deepEqual(Buffer.from(m.subarray(0, meta.key.size + meta.value.size)), record(meta.key.encode(0xbeef), meta.value.encode(names)));
  });
});
