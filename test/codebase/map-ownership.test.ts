/**
 * What the reconciler knows about one map stays in one place (issue 33):
 * no map is named in more than MAX_FILES files of agent/reconcile/ (its
 * table module under agent/reconcile/tables/, the record encoder, the
 * limits' wording). A map is named by its pinned name (`kpr_aff_match`) or
 * its registry id (`MAPS.affinityMatch`, `MAP_NAMES.affinityMatch`),
 * comments included: a comment that names a map outside its table is where
 * the next change to the map would have to look. The same holds for a
 * map's part of the mirror: each table module owns its state (a class such
 * as SrcRangesMirror) that KernelMirror composes as a field, and no such
 * field (`.srcRanges`) is reached in more than MAX_FILES files (the module,
 * kernel-mirror.ts, one more): the other phases call the module's functions.
 * And agent/lb/ (selection tables, pure) imports nothing that touches the
 * kernel.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';
import { MAPS } from '../../agent/maps/registry.js';

const root = findRepoRoot();
const MAX_FILES = 3;

/**
 * Maps allowed above MAX_FILES for now, with the files they may be named
 * in; the list may only shrink. Empty: every map is within the limit.
 */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

const reconcileFiles = sourceFiles(path.join(root, 'agent', 'reconcile')).map((f) => ({ file: path.relative(root, f), text: readFileSync(f, 'utf8') }));

/** KernelMirror's fields that hold a table module's state: `readonly <field> = new <Name>Mirror(`. */
const mirrorText = readFileSync(path.join(root, 'agent', 'reconcile', 'kernel-mirror.ts'), 'utf8');
const MIRROR_FIELDS = [...mirrorText.matchAll(/^\s*readonly (\w+) = new (\w+Mirror)\(/gm)].map((m) => m[1]);

/** Files of agent/reconcile/ that reach a mirror field (`.field`, a registry id `MAPS.field` aside). */
function reaching(field: string): string[] {
  const reached = new RegExp(`(?<!\\bMAPS|\\bMAP_NAMES)\\.${field}\\b`);
  return reconcileFiles.filter((f) => reached.test(f.text)).map((f) => f.file);
}

describe('map ownership in agent/reconcile/', () => {
  it(`names no map in more than ${MAX_FILES} files`, () => {
    const offenders: string[] = [];
    for (const [id, spec] of Object.entries(MAPS)) {
      const named = new RegExp(`\\b${spec.name}\\b|\\bMAPS\\.${id}\\b|\\bMAP_NAMES\\.${id}\\b`);
      const files = reconcileFiles.filter((f) => named.test(f.text)).map((f) => f.file);
      const allowed = ALLOWED[spec.name];
      if (allowed) {
        const extra = files.filter((f) => !allowed.includes(f));
        if (extra.length > 0) offenders.push(`${spec.name}: named in ${extra.join(', ')} beyond its allow-list`);
      } else if (files.length > MAX_FILES) {
        offenders.push(`${spec.name}: named in ${files.length} files: ${files.join(', ')}`);
      }
    }
    assert.deepEqual(offenders, [], `a map's knowledge belongs in its table module (agent/reconcile/tables/):\n${offenders.join('\n')}`);
  });

  it('finds a map named outside its table (the check can fail)', () => {
    const named = /\bkpr_aff_match\b|\bMAPS\.affinityMatch\b|\bMAP_NAMES\.affinityMatch\b/;
    const files = reconcileFiles.filter((f) => named.test(f.text)).map((f) => f.file);
    assert.ok(files.includes('agent/reconcile/tables/affinity-matches.ts'), files.join(', '));
  });

  it(`reaches no table's part of the mirror in more than ${MAX_FILES} files`, () => {
    assert.ok(MIRROR_FIELDS.length >= 6, `KernelMirror's table states found: ${MIRROR_FIELDS.join(', ')}`);
    const offenders = MIRROR_FIELDS.flatMap((field) => {
      const files = reaching(field);
      return files.length > MAX_FILES ? [`${field}: reached in ${files.length} files: ${files.join(', ')}`] : [];
    });
    assert.deepEqual(offenders, [], `a map's mirror state is its table module's (agent/reconcile/tables/):\n${offenders.join('\n')}`);
  });

  it('finds a mirror field reached outside its table (the check can fail)', () => {
    assert.ok(MIRROR_FIELDS.includes('srcRanges'), MIRROR_FIELDS.join(', '));
    const files = reaching('srcRanges');
    assert.ok(files.includes('agent/reconcile/tables/src-ranges.ts') && files.includes('agent/reconcile/kernel-mirror.ts'), files.join(', '));
  });

  it('agent/lb/ imports nothing that touches the kernel (maps, native, datapath)', () => {
    const lb = sourceFiles(path.join(root, 'agent', 'lb'));
    assert.ok(lb.length > 0);
    for (const f of lb) {
      const text = readFileSync(f, 'utf8');
      for (const m of text.matchAll(/\bfrom\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) {
        const spec = m[1] ?? m[2];
        const target = spec.startsWith('.') ? path.relative(root, path.resolve(path.dirname(f), spec)) : spec;
        assert.ok(
          !/^(agent\/(maps|datapath|reconcile|sync)\/|native\/)/.test(target) && !spec.startsWith('node:'),
          `${path.relative(root, f)} imports ${spec}`,
        );
      }
    }
  });
});
