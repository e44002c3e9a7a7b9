/**
 * The linter and the formatter over the tree (issue 33): `eslint .` with
 * eslint.config.js (type-aware, so it reads tsconfig.json) and
 * `prettier --check .` with .prettierrc.json (.prettierignore limits it to the
 * TypeScript). Each fails with the tool's own report. The binaries are the
 * devDependencies in node_modules/.bin; without them (`make deps-node` not
 * run) the test fails and says so rather than passing unchecked.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';

const root = findRepoRoot();

interface Run {
  code: number;
  output: string;
}

/** Runs node_modules/.bin/`tool` at the repository's root; never rejects. */
function run(tool: string, args: string[]): Promise<Run> {
  const bin = path.join(root, 'node_modules', '.bin', tool);
  if (!existsSync(bin)) return Promise.resolve({ code: -1, output: `${bin} is missing: run make deps-node (npm ci) to install the devDependencies` });
  return new Promise((resolve) => {
    execFile(bin, args, { cwd: root, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, output: `${stdout}${stderr}${err !== null && typeof err.code !== 'number' ? err.message : ''}` });
    });
  });
}

describe('lint and format', () => {
  // Both start at once: ESLint's type-aware pass is the long one.
  const eslint = run('eslint', ['--max-warnings', '0', '.']);
  const prettier = run('prettier', ['--check', '--log-level', 'warn', '.']);

  it('eslint . finds nothing (eslint.config.js)', async () => {
    const r = await eslint;
    assert.equal(r.code, 0, `eslint . failed (exit ${r.code}); fix the code or, for a rule that does not fit, the config:\n${r.output}`);
  });

  it('prettier --check . finds every TypeScript file formatted (.prettierrc.json)', async () => {
    const r = await prettier;
    assert.equal(r.code, 0, `prettier --check . failed (exit ${r.code}); run npx prettier --write . to format:\n${r.output}`);
  });
});
