/**
 * Comments name files that exist: every repository path a comment in
 * agent/, bpf/, test/, native/, sandbox/ or bench/ names (a top-level folder
 * of the repository, then a path ending in a known extension, as in
 * `agent/maps/registry.ts` or `docs/semantics.md#e-what-is-programmed`)
 * must be a file of the repository. A compiled name (`….js`) stands for its
 * TypeScript source. Comments are read with TypeScript's own scanner for .ts
 * and a small C scanner for .c and .h, so strings and code are left alone.
 *
 * A path of another project that starts like one of ours (Cilium's
 * `bpf/lib/…`) is written without the folder, or listed in ELSEWHERE with
 * the reason.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { findRepoRoot } from '../../agent/runtime/paths.js';

const root = findRepoRoot();
const SCANNED = ['agent', 'bpf', 'test', 'native', 'sandbox', 'bench'];
const NOT_SOURCE = new Set(['node_modules', 'dist', 'build', '.git']);
const EXTENSIONS = ['ts', 'js', 'mjs', 'h', 'c', 'md', 'yaml', 'yml', 'json', 'sh'];

/** Paths named on purpose that are not (or no longer) in this tree: `file` names `target` because … */
const ELSEWHERE: ReadonlyArray<{ file: string; target: string; why: string }> = [
  { file: 'bench/cold-sync.ts', target: 'agent/sync-loop.js', why: 'the sync loop of the older builds the benchmark also loads' },
  { file: 'bench/resync.ts', target: 'agent/sync-loop.js', why: 'the sync loop of the older builds the benchmark also loads' },
  { file: 'bench/resync.ts', target: 'agent/memory.js', why: 'the memory module of the older builds the benchmark also loads' },
];

/** The text of every comment of a TypeScript file, with the offset it starts at. */
export function tsComments(text: string, file = 'x.ts'): Array<[number, string]> {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const seen = new Map<number, string>();
  const add = (ranges: ts.CommentRange[] | undefined) => {
    for (const r of ranges ?? []) seen.set(r.pos, text.slice(r.pos, r.end));
  };
  const visit = (n: ts.Node) => {
    add(ts.getLeadingCommentRanges(text, n.pos));
    add(ts.getTrailingCommentRanges(text, n.end));
    ts.forEachChild(n, visit);
  };
  visit(sf);
  add(ts.getLeadingCommentRanges(text, sf.endOfFileToken.pos));
  return [...seen.entries()].sort((a, b) => a[0] - b[0]);
}

/** The text of every comment of a C file (string and character literals skipped). */
export function cComments(text: string): Array<[number, string]> {
  const out: Array<[number, string]> = [];
  for (let i = 0; i < text.length;) {
    const c = text[i];
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < text.length && text[j] !== c && text[j] !== '\n') j += text[j] === '\\' ? 2 : 1;
      i = j + 1;
    } else if (c === '/' && text[i + 1] === '/') {
      const e = text.indexOf('\n', i);
      const end = e < 0 ? text.length : e;
      out.push([i, text.slice(i, end)]);
      i = end;
    } else if (c === '/' && text[i + 1] === '*') {
      const e = text.indexOf('*/', i + 2);
      const end = e < 0 ? text.length : e + 2;
      out.push([i, text.slice(i, end)]);
      i = end;
    } else i++;
  }
  return out;
}

/** The repository paths a comment names: a top-level folder of `tops`, then a path with a known extension (an anchor dropped). */
export function pathsIn(comment: string, tops: readonly string[]): string[] {
  const re = new RegExp(
    `(?<![\\w./@-])((?:${tops.map((t) => t.replace(/[.-]/g, '\\$&')).join('|')})/[\\w.@/-]*\\.(?:${EXTENSIONS.join('|')}))(?![\\w*{])`,
    'g',
  );
  return [...comment.matchAll(re)].map((m) => m[1]);
}

/** Whether a named path is a file of the tree under `base` (`x.js` counts as `x.ts`). */
function exists(base: string, p: string): boolean {
  return existsSync(path.join(base, p)) || (/\.m?js$/.test(p) && existsSync(path.join(base, p.replace(/\.m?js$/, '.ts'))));
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    if (NOT_SOURCE.has(e.name)) continue;
    const p = `${dir}/${e.name}`;
    if (e.isDirectory()) sourceFiles(p, out);
    else if (/\.(ts|c|h)$/.test(e.name)) out.push(p);
  }
  return out;
}

/** `file:line path` for every path a comment of `file` names that is not in the tree under `base`. */
export function missingPaths(file: string, text: string, base: string, tops: readonly string[]): string[] {
  const missing: string[] = [];
  for (const [pos, comment] of file.endsWith('.ts') ? tsComments(text, file) : cComments(text)) {
    for (const p of pathsIn(comment, tops)) {
      if (exists(base, p) || ELSEWHERE.some((x) => x.file === file && x.target === p)) continue;
      const line = text.slice(0, pos + comment.indexOf(p)).split('\n').length;
      missing.push(`${file}:${line} ${p}`);
    }
  }
  return missing;
}

const TOPS = readdirSync(root, { withFileTypes: true })
  .filter((e) => e.isDirectory() && !NOT_SOURCE.has(e.name) && !e.name.startsWith('.'))
  .map((e) => e.name);

describe('paths named in comments', () => {
  it('the scanner finds a missing path in a comment, and only in a comment', () => {
    const tsText = [
      '// see agent/maps/registry.ts and agent/maps/gone.ts',
      "const s = 'agent/not-a-comment.ts'; /* docs/semantics.md#rules, docs/nowhere.md */",
      'const t = `bpf/in-a-template.h`; // dist/test/codebase/x.js is a build path, test/e2e/*.test.ts a glob',
      '/** compiled: agent/maps/registry.js */',
    ].join('\n');
    assert.deepEqual(missingPaths('x.ts', tsText, root, TOPS), ['x.ts:1 agent/maps/gone.ts', 'x.ts:2 docs/nowhere.md']);
    const c = ['#include "agent/in-a-string.h"', '/* bpf/include/kpr_types.h, bpf/include/kpr_gone.h */', "char q = '/'; // test/none.c"].join('\n');
    assert.deepEqual(missingPaths('x.c', c, root, TOPS), ['x.c:2 bpf/include/kpr_gone.h', 'x.c:3 test/none.c']);
  });

  it('every path a comment in agent/, bpf/, test/, native/, sandbox/ or bench/ names exists', () => {
    const files = SCANNED.filter((d) => existsSync(path.join(root, d))).flatMap((d) => sourceFiles(d));
    assert.ok(files.length > 100, `scanned ${files.length} files`);
    const missing = files.flatMap((f) => missingPaths(f, readFileSync(path.join(root, f), 'utf8'), root, TOPS));
    assert.deepEqual(missing, [], 'name the file where it is now (or list it in ELSEWHERE with the reason)');
  });

  it('every ELSEWHERE entry is still named by its file and still absent', () => {
    for (const x of ELSEWHERE) {
      assert.ok(readFileSync(path.join(root, x.file), 'utf8').includes(x.target), `${x.file} no longer names ${x.target}: drop the entry`);
      assert.ok(!exists(root, x.target), `${x.target} exists: drop the entry`);
    }
  });
});
