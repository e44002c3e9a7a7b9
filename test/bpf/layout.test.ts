/**
 * The registry (agent/maps/registry.ts) must match the C side byte for byte.
 * This reads the BTF that clang emitted into the compiled objects (the ones
 * the agent loads) and compares, for every map of the registry, its type,
 * capacity, key and value (name and size; every struct member's offset,
 * size and C type), and that the objects pin no map the registry lacks.
 * A ring buffer has no key or value; the record it carries (struct
 * kpr_event) is in no object's BTF (only inlined code uses it), so it is
 * checked against the BTF of its header compiled on its own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  BE_FLAG,
  CFG_FLAG,
  CT_DIR,
  CT_FLAG,
  EVENT_FLAG,
  EVENT_HOOK,
  EVENT_TYPE,
  FE_TYPE,
  STAT,
  STAT_MAX,
  SCOPE,
  SNAT_PORT_RANGE,
  SVC_ALG,
  SVC_ALG_MASK,
  SVC_ALG_SHIFT,
  SVC_FLAG,
  VIP_FLAG,
} from '../../agent/maps/layout.js';
import { MAP_BY_NAME, MAP_NAMES, MAPS, RINGS } from '../../agent/maps/registry.js';
import { PREV_MAPS } from '../../agent/datapath/migration.js';
import type { FieldKind, StructLayout } from '../../agent/maps/struct-codec.js';
import { mapTypeName } from '../../native/index.js';
import { bpfObjectPath, repoRoot } from '../support/paths.js';

interface BtfType {
  id: number;
  kind: string;
  name?: string;
  size?: number;
  type_id?: number;
  nr_elems?: number;
  members?: Array<{ name: string; type_id: number; bits_offset: number }>;
  vars?: Array<{ type_id: number }>;
}

function loadBtf(object: string): Map<number, BtfType> {
  const out = execFileSync('bpftool', ['-j', 'btf', 'dump', 'file', object], { encoding: 'utf8' });
  const types = (JSON.parse(out) as { types: BtfType[] }).types;
  return new Map(types.map((t) => [t.id, t]));
}

function type(btf: Map<number, BtfType>, id: number): BtfType {
  const t = btf.get(id);
  assert.ok(t, `BTF type ${id} missing`);
  return t;
}

function sizeOf(btf: Map<number, BtfType>, id: number): number {
  const t = type(btf, id);
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

/** The C typedef a member of this kind is declared with (array members: any). */
const TYPEDEF: Partial<Record<FieldKind, string>> = { u8: '__u8', u16: '__u16', be16: '__be16', u32: '__u32', u64: '__u64' };

type BtfMember = NonNullable<BtfType['members']>[number];

/**
 * The member the registry names for a struct member: itself, or for an
 * anonymous union (kpr_svc_val's first word: backend_id or
 * affinity_timeout_s) its first member, at the union's offset. Every member
 * of such a union must fill it, so that each is a whole reading of the same
 * bytes and the registry's one field covers them all.
 */
function readingOf(btf: Map<number, BtfType>, m: BtfMember, struct: string): BtfMember {
  const t = type(btf, m.type_id);
  if ((m.name !== '' && m.name !== '(anon)') || t.kind !== 'UNION') return m; // bpftool names it (anon)
  for (const u of t.members!) assert.equal(sizeOf(btf, u.type_id), t.size, `${struct}: union member ${u.name} fills the union`);
  return { ...t.members![0], bits_offset: m.bits_offset };
}

/** A registry layout against the BTF type a map's key or value points to. */
function checkLayout(btf: Map<number, BtfType>, layout: StructLayout, id: number, what: string): void {
  const t = type(btf, id);
  assert.equal(sizeOf(btf, id), layout.size, `sizeof ${what}`);
  if (layout.scalar) {
    assert.deepEqual([t.kind, t.name], ['TYPEDEF', layout.cName], `${what} is a ${layout.cName}`);
    return;
  }
  assert.deepEqual([t.kind, t.name], ['STRUCT', layout.cName], `${what} is struct ${layout.cName}`);
  const members = t.members!.map((m) => readingOf(btf, m, layout.cName));
  const btfFields = members.map((m) => ({ c: m.name, offset: m.bits_offset / 8, size: sizeOf(btf, m.type_id) }));
  assert.deepEqual(layout.fields, btfFields, `members of struct ${layout.cName}`);
  members.forEach((m, i) => {
    const want = TYPEDEF[layout.placed[i].kind];
    if (want) assert.equal(type(btf, m.type_id).name, want, `${layout.cName}.${m.name} is a ${want}`);
  });
}

/** The map definitions (the .maps section's variables) of an object, by name: each member's BTF type. */
function mapDefs(btf: Map<number, BtfType>): Map<string, Map<string, BtfType>> {
  const sec = [...btf.values()].find((t) => t.kind === 'DATASEC' && t.name === '.maps');
  const out = new Map<string, Map<string, BtfType>>();
  for (const v of sec?.vars ?? []) {
    const variable = type(btf, v.type_id);
    const def = type(btf, variable.type_id!);
    out.set(variable.name!, new Map(def.members!.map((m) => [m.name, type(btf, m.type_id)])));
  }
  return out;
}

/** `__uint(name, n)` is a pointer to an array of n ints. */
const uintOf = (btf: Map<number, BtfType>, ptr: BtfType | undefined) => (ptr ? type(btf, ptr.type_id!).nr_elems : undefined);

const objectDir = path.dirname(bpfObjectPath);
/** The objects that share the pinned maps (they include kpr_maps.h). */
const objects = readdirSync(objectDir)
  .filter((f) => f.endsWith('.bpf.o'))
  .map((f) => path.join(objectDir, f))
  .filter((o) => mapDefs(loadBtf(o)).has(MAPS.svc.name));

test('every map of the registry matches the BTF of every compiled object that has the maps', () => {
  assert.ok(objects.includes(bpfObjectPath), `${bpfObjectPath} holds the maps`);
  for (const object of objects) {
    const btf = loadBtf(object);
    const defs = mapDefs(btf);
    // The read-through placeholders of a migration (bpf/include/kpr_migrate.h) are in the objects that read through (socket, tc).
    const prev = Object.values(PREV_MAPS).filter((p) => defs.has(p));
    assert.ok(prev.length === 0 || prev.length === Object.keys(PREV_MAPS).length, `${object}: all of the *_prev maps or none`);
    assert.deepEqual([...defs.keys()].sort(), [...Object.values(MAP_NAMES), ...prev].sort(), `${object}: the maps are the registry's`);
    for (const [name, placeholder] of Object.entries(PREV_MAPS)) {
      const def = defs.get(placeholder);
      if (!def) continue;
      const spec = MAP_BY_NAME.get(name)!;
      assert.equal(uintOf(btf, def.get('max_entries')), 1, `${placeholder}: a one-entry placeholder`);
      checkLayout(btf, spec.key, def.get('key')!.type_id!, `${placeholder} key`);
      checkLayout(btf, spec.value, def.get('value')!.type_id!, `${placeholder} value`);
    }
    for (const spec of Object.values(MAPS)) {
      const def = defs.get(spec.name)!;
      const at = `${path.basename(object)} ${spec.name}`;
      assert.equal(mapTypeName(uintOf(btf, def.get('type'))!), spec.type, `${at}: map type`);
      assert.equal(uintOf(btf, def.get('max_entries')), spec.maxEntries, `${at}: max_entries`);
      checkLayout(btf, spec.key, def.get('key')!.type_id!, `${at} key`);
      checkLayout(btf, spec.value, def.get('value')!.type_id!, `${at} value`);
    }
    for (const ring of Object.values(RINGS)) {
      const def = defs.get(ring.name)!;
      const at = `${path.basename(object)} ${ring.name}`;
      assert.equal(mapTypeName(uintOf(btf, def.get('type'))!), 'ringbuf', `${at}: map type`);
      assert.equal(uintOf(btf, def.get('max_entries')), ring.maxEntries, `${at}: max_entries (bytes)`);
      assert.deepEqual([...def.keys()].sort(), ['max_entries', 'type'], `${at}: no key or value`);
    }
  }
});

test('the record of every ring buffer matches its struct in the BTF of the headers', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-layout-'));
  try {
    const src = path.join(dir, 'records.bpf.c');
    const obj = path.join(dir, 'records.bpf.o');
    // One global of each record type puts the struct into BTF.
    writeFileSync(
      src,
      ['#include "kpr_types.h"', '#include "kpr_event.h"', ...Object.values(RINGS).map((r, i) => `struct ${r.record.cName} kpr_record_${i};`)].join('\n') +
        '\n',
    );
    const arch = os.arch() === 'arm64' ? 'aarch64' : 'x86_64';
    execFileSync('clang', [
      '-O2',
      '-g',
      '-target',
      'bpf',
      '-I',
      path.join(repoRoot, 'bpf', 'include'),
      '-I',
      `/usr/include/${arch}-linux-gnu`,
      '-c',
      src,
      '-o',
      obj,
    ]);
    const btf = loadBtf(obj);
    for (const ring of Object.values(RINGS)) {
      const t = [...btf.values()].find((x) => x.kind === 'STRUCT' && x.name === ring.record.cName);
      assert.ok(t, `struct ${ring.record.cName} in the headers' BTF`);
      checkLayout(btf, ring.record, t.id, `${ring.name} record`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the older layouts the registry reads match the BTF of the objects built against them (test/fixtures/bpf-<version>)', () => {
  const older = Object.values(MAPS).flatMap((spec) => spec.older.map((o) => ({ spec, ...o })));
  assert.ok(older.length > 0, 'the registry reads some older layout');
  for (const version of new Set(older.map((o) => o.version))) {
    const object = path.join(objectDir, 'fixtures', `v${version}`, path.basename(bpfObjectPath));
    assert.ok(existsSync(object), `${object}: run \`make build\``);
    const btf = loadBtf(object);
    const defs = mapDefs(btf);
    for (const o of older.filter((x) => x.version === version)) {
      const def = defs.get(o.spec.name)!;
      assert.ok(def, `${object} defines ${o.spec.name}`);
      checkLayout(btf, o.key, def.get('key')!.type_id!, `v${version} ${o.spec.name} key`);
      checkLayout(btf, o.value, def.get('value')!.type_id!, `v${version} ${o.spec.name} value`);
    }
    // Every map whose version is past this one reads it: no change goes unversioned.
    for (const spec of Object.values(MAPS).filter((m) => m.version > version)) {
      assert.ok(
        spec.older.some((x) => x.version === version),
        `${spec.name} (v${spec.version}) reads v${version}`,
      );
    }
  }
});

test('enum and flag constants match kpr_types.h', () => {
  const header = ['kpr_types.h', 'kpr_event.h'].map((h) => readFileSync(path.join(repoRoot, 'bpf', 'include', h), 'utf8')).join('\n');
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
  expect(SVC_ALG, 'KPR_SVC_ALG_');
  const define = (name: string) => Number(new RegExp(`^#define ${name} (\\S+)$`, 'm').exec(header)?.[1]);
  assert.equal(define('KPR_SVC_ALG_SHIFT'), SVC_ALG_SHIFT, 'KPR_SVC_ALG_SHIFT');
  assert.equal(define('KPR_SVC_ALG_MASK'), SVC_ALG_MASK, 'KPR_SVC_ALG_MASK');
  // The algorithm's bits are spare bits of the flags: no KPR_SVC_F_* may use them.
  for (const bit of Object.values(SVC_FLAG)) assert.equal(bit & (SVC_ALG_MASK << SVC_ALG_SHIFT), 0, `flag ${bit} clear of the algorithm bits`);
  expect(BE_FLAG, 'KPR_BE_F_');
  expect(VIP_FLAG, 'KPR_VIP_F_');
  expect(FE_TYPE, 'KPR_FE_');
  expect(CT_DIR, 'KPR_CT_DIR_');
  expect(CT_FLAG, 'KPR_CT_F_');
  expect(CFG_FLAG, 'KPR_CFG_F_');
  expect(EVENT_TYPE, 'KPR_EV_');
  expect(EVENT_HOOK, 'KPR_HOOK_');
  expect(EVENT_FLAG, 'KPR_EVF_');
  assert.equal(constants.get('KPR_STAT_MAX'), STAT_MAX);
  assert.deepEqual([constants.get('KPR_SNAT_PORT_MIN'), constants.get('KPR_SNAT_PORT_MAX')], [SNAT_PORT_RANGE.min, SNAT_PORT_RANGE.max], 'enum kpr_snat_ports');
});
