/**
 * The older layouts' decoders (agent/maps/layout-convert.ts over the
 * registry's `older` lists): a record written in layout v1 comes out, in
 * this release's layout, with the same meaning, byte for byte what this
 * release's codec writes; and back (the test fixture's direction), where a
 * value too wide for v1 is refused.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { layoutConverter, sameLayout } from '../../agent/maps/layout-convert.js';
import {
  codecOf,
  decodeAddr,
  decodeSrcRangeKey,
  encodeAddr,
  encodeSrcRangeKey,
  type AffinityKey,
  type CtVal,
  type RevNatVal,
  type SvcVal,
  type TermKey,
} from '../../agent/maps/layout.js';
import { MAPS, layoutsAt } from '../../agent/maps/registry.js';
import { structCodec, structLayout, type StructLayout } from '../../agent/maps/struct-codec.js';
import * as V1 from '../../agent/maps/layouts-v1.js';

const ADDR = { encode: encodeAddr, decode: decodeAddr };

/** v1 bytes of `v` (its codec), converted to this release's layout, decoded with this release's codec. */
function upgrade<T>(from: StructLayout<T>, to: StructLayout<T>, v: T): { bytes: Buffer; decoded: T } {
  const src = structCodec(from, ADDR).encode(v);
  const bytes = Buffer.alloc(to.size, 0xee);
  layoutConverter(from, to)(src, 0, bytes, 0);
  return { bytes, decoded: codecOf(to).decode(bytes) };
}

describe('older layouts are read into the current one', () => {
  it('every map this release changed reads its v1 layout, and only changed layouts differ', () => {
    for (const spec of Object.values(MAPS)) {
      if (spec.version === 1) {
        assert.deepEqual(spec.older, [], `${spec.name} is v1`);
        continue;
      }
      const v1 = layoutsAt(spec, 1)!;
      assert.ok(v1, `${spec.name} reads v1`);
      assert.ok(!sameLayout(v1.key, spec.key) || !sameLayout(v1.value, spec.value), `${spec.name}: v${spec.version} changes something`);
    }
  });

  it("kpr_svc_meta: v1's names (96 and 32 bytes) are copied whole into v2's 128 and 64", () => {
    const v = { name: `${'n'.repeat(63)}/${'s'.repeat(31)}`, portName: 'p'.repeat(31), type: 3, proto: 17 };
    const { bytes, decoded } = upgrade(V1.SVC_META_V1, MAPS.svcMeta.value, v);
    assert.deepEqual(decoded, v);
    assert.deepEqual(bytes, codecOf(MAPS.svcMeta.value).encode(v));
    // v2 holds Kubernetes' longest names, v1 cut them to one.
    const longest = { name: `${'n'.repeat(63)}/${'s'.repeat(63)}`, portName: 'p'.repeat(63), type: 0, proto: 6 };
    assert.deepEqual(codecOf(MAPS.svcMeta.value).decode(codecOf(MAPS.svcMeta.value).encode(longest)), longest);
    const cut = (last: string) => codecOf(V1.SVC_META_V1).decode(codecOf(V1.SVC_META_V1).encode({ ...longest, name: longest.name.slice(0, -1) + last })).name;
    assert.equal(cut('a'), cut('b'));
  });

  it('kpr_svc_val: the frontend id moves from a u16 at 6 to a u32 at 8, flags from 8 to 6', () => {
    const v: SvcVal = { backendId: 30, count: 3, frontendId: 65535, flags: 0x51 };
    const { bytes, decoded } = upgrade(V1.SVC_VAL_V1, MAPS.svc.value, v);
    assert.deepEqual(decoded, v);
    assert.deepEqual(bytes, codecOf(MAPS.svc.value).encode(v), 'what this release writes, padding zeroed');
  });

  it('kpr_ct_val: addresses, ports, backend id, deadline and flags where v1 had them; the id widened', () => {
    const v: CtVal = {
      natSaddr: '198.18.1.1',
      natDaddr: '2001:db8::10',
      natSport: 61001,
      natDport: 8080,
      backendId: 7,
      expiresNs: 123456789012n,
      frontendId: 4242,
      flags: 3,
    };
    const src = structCodec(V1.CT_VAL_V1, ADDR).encode(v);
    const { bytes, decoded } = upgrade(V1.CT_VAL_V1, MAPS.ct.value, v);
    assert.deepEqual(decoded, v);
    assert.deepEqual(bytes.subarray(0, 48), src.subarray(0, 48), 'the members the programs read from an old map during a migration stay put');
    assert.equal(bytes[MAPS.ct.value.at.flags], src[V1.CT_VAL_V1.at.flags]);
    assert.equal(MAPS.ct.value.at.flags, V1.CT_VAL_V1.at.flags);
  });

  it('kpr_revnat_val: address and port stay put (read through during a migration), the id widened', () => {
    const v: RevNatVal = { addr: '198.19.0.10', port: 53, frontendId: 9 };
    const { bytes, decoded } = upgrade(V1.REVNAT_VAL_V1, MAPS.revnat.value, v);
    assert.deepEqual(decoded, v);
    assert.equal(MAPS.revnat.value.at.port, V1.REVNAT_VAL_V1.at.port);
    assert.deepEqual(bytes, codecOf(MAPS.revnat.value).encode(v));
  });

  it('kpr_affinity_key, kpr_term_key: the same meaning, the same bytes as this release writes', () => {
    const a: AffinityKey = { netnsCookie: 4096n, client: '198.18.100.2', frontendId: 12 };
    assert.deepEqual(upgrade(V1.AFFINITY_KEY_V1, MAPS.affinity.key, a).decoded, a);
    // A v1 affinity key is the bytes of a v2 one (the programs look an old entry up with a new key during a migration).
    assert.deepEqual(structCodec(V1.AFFINITY_KEY_V1, ADDR).encode(a), codecOf(MAPS.affinity.key).encode(a));
    const t: TermKey = { addr: '198.18.10.10', port: 5353, frontendId: 65000, proto: 17 };
    const { bytes, decoded } = upgrade(V1.TERM_KEY_V1, MAPS.term.key, t);
    assert.deepEqual(decoded, t);
    assert.deepEqual(bytes, codecOf(MAPS.term.key).encode(t));
  });

  it('kpr_src_range_key: the LPM key keeps its prefix length arithmetic (32 bits of id, then the address)', () => {
    const k = { frontendId: 77, cidr: '198.18.100.0/24' };
    const current = encodeSrcRangeKey(k);
    const v1 = structCodec(V1.SRC_RANGE_KEY_V1, ADDR).encode({ prefixlen: current.readUInt32LE(0), frontendId: 77, addr: '198.18.100.0' } as never);
    const out = Buffer.alloc(MAPS.srcRange.key.size);
    layoutConverter(V1.SRC_RANGE_KEY_V1, MAPS.srcRange.key)(v1, 0, out, 0);
    assert.deepEqual(out, current);
    assert.deepEqual(decodeSrcRangeKey(out), k);
  });

  it("this release into v1 (the test fixture's direction): a frontend id past 16 bits does not fit", () => {
    const conv = layoutConverter(MAPS.svc.value, V1.SVC_VAL_V1);
    const src = codecOf(MAPS.svc.value).encode({ backendId: 1, count: 1, frontendId: 70000, flags: 0 });
    assert.throws(() => conv(src, 0, Buffer.alloc(V1.SVC_VAL_V1.size), 0), /kpr_svc_val.frontend_id: 70000 does not fit 16 bits/);
  });

  it('a member that cannot be converted fails when the converter is made', () => {
    const a = structLayout<unknown>()('a', [{ c: 'x', kind: 'addr' }]);
    const b = structLayout<unknown>()('a', [{ c: 'x', kind: 'u32' }]);
    assert.throws(() => layoutConverter(a, b), /a\.x \(addr\) cannot become a\.x \(u32\)/);
  });
});
