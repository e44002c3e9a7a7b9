/**
 * The TypeScript codecs must match the C structs byte for byte. This reads the
 * BTF that clang emitted into the compiled object (the same object the agent
 * loads) and compares every mirrored struct's size and member offsets/sizes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ALL_LAYOUTS, BE_FLAG, CFG_FLAG, CT_DIR, CT_FLAG, FE_TYPE, STAT, STAT_MAX, SCOPE, SVC_FLAG, VIP_FLAG } from '../../agent/maps/layout.js';
import { bpfObjectPath, repoRoot } from '../support/paths.js';

interface BtfType {
  id: number;
  kind: string;
  name?: string;
  size?: number;
  type_id?: number;
  nr_elems?: number;
  members?: Array<{ name: string; type_id: number; bits_offset: number }>;
}

function loadBtf(): Map<number, BtfType> {
  const out = execFileSync('bpftool', ['-j', 'btf', 'dump', 'file', bpfObjectPath], { encoding: 'utf8' });
  const types = (JSON.parse(out) as { types: BtfType[] }).types;
  return new Map(types.map((t) => [t.id, t]));
}

function sizeOf(btf: Map<number, BtfType>, id: number): number {
  const t = btf.get(id);
  assert.ok(t, `BTF type ${id} missing`);
  switch (t.kind) {
    case 'TYPEDEF':
    case 'VOLATILE':
    case 'CONST':
      return sizeOf(btf, t.type_id!);
    case 'ARRAY':
      return sizeOf(btf, t.type_id!) * t.nr_elems!;
    default:
      assert.ok(t.size !== undefined, `BTF type ${id} (${t.kind}) has no size`);
      return t.size;
  }
}

test('every TypeScript struct layout matches the BTF of the compiled object', () => {
  const btf = loadBtf();
  for (const layout of ALL_LAYOUTS) {
    const struct = [...btf.values()].find((t) => t.kind === 'STRUCT' && t.name === layout.cName);
    assert.ok(struct, `struct ${layout.cName} not found in ${bpfObjectPath}`);
    assert.equal(layout.size, struct.size, `sizeof(struct ${layout.cName})`);
    const btfFields = struct.members!.map((m) => ({ c: m.name, offset: m.bits_offset / 8, size: sizeOf(btf, m.type_id) }));
    assert.deepEqual(layout.fields, btfFields, `members of struct ${layout.cName}`);
  }
});

test('enum and flag constants match kpr_types.h', () => {
  const header = readFileSync(path.join(repoRoot, 'bpf', 'include', 'kpr_types.h'), 'utf8');
  const constants = new Map<string, number>();
  for (const m of header.matchAll(/^\s*(KPR_[A-Z0-9_]+)\s*=\s*([^,\n]+),/gm)) {
    const expr = m[2].trim();
    const shift = /^1\s*<<\s*(\d+)$/.exec(expr);
    constants.set(m[1], shift ? 1 << Number(shift[1]) : Number(expr));
  }
  const expect = (group: Record<string, number>, prefix: string) => {
    for (const [name, value] of Object.entries(group)) {
      assert.equal(constants.get(`${prefix}${name}`), value, `${prefix}${name}`);
    }
    const cNames = [...constants.keys()].filter((n) => n.startsWith(prefix) && n !== `${prefix}MAX`);
    assert.equal(cNames.length, Object.keys(group).length, `every ${prefix}* constant is mirrored`);
  };
  expect(STAT, 'KPR_STAT_');
  expect(SCOPE, 'KPR_SCOPE_');
  expect(SVC_FLAG, 'KPR_SVC_F_');
  expect(BE_FLAG, 'KPR_BE_F_');
  expect(VIP_FLAG, 'KPR_VIP_F_');
  expect(FE_TYPE, 'KPR_FE_');
  expect(CT_DIR, 'KPR_CT_DIR_');
  expect(CT_FLAG, 'KPR_CT_F_');
  expect(CFG_FLAG, 'KPR_CFG_F_');
  assert.equal(constants.get('KPR_STAT_MAX'), STAT_MAX);
});
