/**
 * docs/conformance.md is what test/conformance/upstream-tests.ts says
 * (regenerate it with `node dist/test/conformance/table.js`), and the list
 * holds together: one entry per upstream file and name, a note wherever the
 * status needs one, and a conformance test file for every upstream file with
 * an entry to run.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';
import { CONFORMANCE_DOC, renderConformanceDoc } from '../conformance/table.js';
import { UPSTREAM_FILES, UPSTREAM_TESTS } from '../conformance/upstream-tests.js';

const root = findRepoRoot();

describe('the conformance table', () => {
  it('docs/conformance.md is generated from the upstream list', () => {
    assert.equal(readFileSync(path.join(root, CONFORMANCE_DOC), 'utf8'), renderConformanceDoc(), 'run: node dist/test/conformance/table.js');
  });

  it('lists each upstream test once', () => {
    const keys = UPSTREAM_TESTS.map((e) => `${e.file}: ${e.name}`);
    assert.deepEqual(
      keys.filter((k, i) => keys.indexOf(k) !== i),
      [],
    );
  });

  it('says why for every "difference" and "n/a"', () => {
    for (const e of UPSTREAM_TESTS) {
      if (e.status === 'difference' || e.status === 'n/a') assert.ok(e.note && e.note.length > 10, `${e.file} "${e.name}" needs a note`);
    }
  });

  it('has a conformance test file for every upstream file with a test to run (registerUpstream registers each entry there)', () => {
    for (const file of UPSTREAM_FILES) {
      const runs = UPSTREAM_TESTS.some((e) => e.file === file && (e.status === 'pass' || e.status === 'difference'));
      const source = path.join(root, 'test', 'conformance', file.replace(/\.go$/, '.test.ts').replace(/_/g, '-'));
      if (runs) {
        assert.ok(existsSync(source), `${file} has passing entries but no ${path.relative(root, source)}`);
        assert.match(
          readFileSync(source, 'utf8'),
          new RegExp(`registerUpstream\\('${file.replace('.', '\\.')}'`),
          `${path.relative(root, source)} registers ${file}`,
        );
      }
    }
  });
});
