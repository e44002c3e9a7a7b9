/**
 * test/ mirrors the source tree (issue 33): a test of code in agent/X/ lives
 * in test/X/ (agent/reconcile/read-back/ → test/reconcile/read-back/), a
 * test of a top-level source folder (native/, bpf/, sandbox/, bench/, image/)
 * in test/<that folder>/; only the cross-cutting folders of CROSS_CUTTING
 * stand apart, and any folder may hold a support/ folder of helpers.
 *
 * Tests that need root are marked, not separated: a test file that loads BPF
 * or creates network namespaces calls one of MARKS itself (requireRoot of
 * test/support/preflight.ts, requireBpf of test/support/bpf-fixtures.ts),
 * which fails with a clear message without root, never skips. (This file
 * never writes a mark's call out: `make test-unit` leaves out the files that
 * do.) Such a file is found by what it
 * imports (type-only imports aside): a name of native/ that reaches the kernel
 * (anything but the pure names of PURE_NATIVE), one of sandbox/netns.ts that
 * runs `ip` (anything but PURE_NETNS), a namespace import of either, or any
 * value of a helper module (test/, sandbox/) that itself imports
 * such a name; or by its own text running `ip netns` or `unshare`. `make
 * test-unit` runs the unmarked test files of its folders.
 *
 * And the files the kernel matrix runs (test/kernels/matrix.ts,
 * KERNEL_SUITES) and the folders `make test-unit` names exist.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';
import { KERNEL_SUITES } from '../kernels/matrix.js';

const root = findRepoRoot();

/** Folders of test/ that test no one source folder (the agent end to end, the docs, the chart, the kernels, the image), and shared data. */
export const CROSS_CUTTING = ['e2e', 'conformance', 'image-e2e', 'kernels', 'chart', 'codebase', 'support', 'fuzz', 'fixtures', 'supply-chain'];

/** Top-level source folders besides agent/: test/<name>/ tests them. */
export const SOURCE_ROOTS = ['native', 'bpf', 'sandbox', 'bench', 'image'];

/** What native/ exports that never reaches the kernel: errors, names of constants, pure arithmetic, the libbpf logger hooks. */
export const PURE_NATIVE = new Set([
  'KprBpfError',
  'errnoName',
  'mapTypeName',
  'attachTypeName',
  'BPF_ANY',
  'BPF_NOEXIST',
  'BPF_EXIST',
  'BPF_F_LOCK',
  'BPF_MAP_TYPE',
  'BPF_ATTACH_TYPE',
  'BPF_TC',
  'KPR_TC_FILTER',
  'TCX',
  'BPF_FS_MAGIC',
  'DEFAULT_BPFFS_ROOT',
  'BATCH_WRITER_LIBRARY',
  'possibleCpus',
  'sumPerCpuU64',
  'perCpuSlots',
  'isPerCpuMapType',
  'valueStrideFor',
  'captureLibbpfMessages',
  'setLibbpfLogger',
  'silenceLibbpf',
]);

/** What sandbox/netns.ts exports that runs nothing. */
export const PURE_NETNS = new Set(['newRunId', 'nsPath']);

/** The modules whose names are the kernel's (by name, PURE_* aside). */
function kernelModule(target: string): Set<string> | undefined {
  if (target.startsWith('native/')) return PURE_NATIVE;
  if (target === 'sandbox/netns.ts') return PURE_NETNS;
  return undefined;
}

/**
 * Helper modules that may carry the kernel into a test (modules of these
 * trees that are not tests). Not bench/: its modules mix pure scenario code
 * with the namespaces a bench runs in, and its tests import the pure parts.
 */
const HELPER_TREES = ['test/', 'sandbox/'];

/** Marks, with the modules they come from. */
const MARKS = [
  { name: 'requireRoot', from: 'test/support/preflight.ts' },
  { name: 'requireBpf', from: 'test/support/bpf-fixtures.ts' },
];

interface ImportLine {
  /** Repository path of the .ts source (relative specifiers), or the bare specifier. */
  target: string;
  /** The value names imported ('*' for a namespace or a dynamic import; empty for type-only or side-effect imports). */
  names: string[];
}

/** The import lines of a source text (static, re-exports, dynamic import()), type-only names left out. */
export function importLines(file: string, text: string): ImportLine[] {
  const resolve = (spec: string) =>
    spec.startsWith('.') ? path.posix.normalize(path.posix.join(path.posix.dirname(file), spec)).replace(/\.js$/, '.ts') : spec;
  const out: ImportLine[] = [];
  for (const m of text.matchAll(/^\s*(import|export)\s+(type\s+)?([^;'"]*?)\s*\bfrom\s*['"]([^'"]+)['"]/gm)) {
    const [, , typeOnly, clause, spec] = m;
    if (typeOnly) {
      out.push({ target: resolve(spec), names: [] });
      continue;
    }
    const names: string[] = [];
    if (/\*/.test(clause)) names.push('*');
    const braces = /\{([\s\S]*)\}/.exec(clause);
    if (braces) {
      for (const part of braces[1].split(',')) {
        const p = part.trim();
        if (p && !p.startsWith('type ')) names.push(p.split(/\s+as\s+/)[0].trim());
      }
    }
    const dflt = /^([A-Za-z_$][\w$]*)\s*(,|$)/.exec(clause.trim());
    if (dflt && dflt[1] !== 'type') names.push('default');
    out.push({ target: resolve(spec), names });
  }
  for (const m of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) out.push({ target: resolve(m[1]), names: ['*'] });
  return out;
}

/** Runs `ip netns …` or unshare itself. */
const SPAWNS_NAMESPACES = /\bip netns\b|['"]netns['"],\s*['"]add['"]|\bunshare\b/;

/** Whether an import line brings the kernel in, given the helper modules already known to. */
function reachesKernel(line: ImportLine, kernelHelpers: ReadonlySet<string>): boolean {
  const pure = kernelModule(line.target);
  if (pure) return line.names.some((n) => n === '*' || !pure.has(n));
  return kernelHelpers.has(line.target) && line.names.length > 0;
}

function walk(dir: string, keep: (rel: string) => boolean): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : walk(p, keep);
    const rel = path.relative(root, p).split(path.sep).join('/');
    return keep(rel) ? [rel] : [];
  });
}

const isTs = (rel: string) => rel.endsWith('.ts') && !rel.endsWith('.d.ts');
const isTest = (rel: string) => rel.endsWith('.test.ts');
const sources = new Map<string, string>();
for (const tree of HELPER_TREES) for (const f of walk(path.join(root, tree), isTs)) sources.set(f, readFileSync(path.join(root, f), 'utf8'));
const imports = new Map([...sources].map(([f, text]) => [f, importLines(f, text)]));

/** The helper modules that reach the kernel, directly or through another helper (a fixed point). */
export function kernelHelpersOf(graph: ReadonlyMap<string, readonly ImportLine[]>, texts: ReadonlyMap<string, string>): Set<string> {
  const found = new Set<string>();
  for (let grew = true; grew;) {
    grew = false;
    for (const [file, lines] of graph) {
      if (isTest(file) || found.has(file)) continue;
      if (lines.some((l) => reachesKernel(l, found)) || SPAWNS_NAMESPACES.test(texts.get(file) ?? '')) {
        found.add(file);
        grew = true;
      }
    }
  }
  return found;
}

/** Whether a test file loads BPF or creates namespaces, by its imports and its text. */
export function isKernelFacing(lines: readonly ImportLine[], text: string, kernelHelpers: ReadonlySet<string>): boolean {
  return lines.some((l) => reachesKernel(l, kernelHelpers)) || SPAWNS_NAMESPACES.test(text);
}

/** Whether a test file calls one of MARKS, imported from its module. */
export function isMarked(lines: readonly ImportLine[], text: string): boolean {
  return MARKS.some((m) => lines.some((l) => l.target === m.from && l.names.includes(m.name)) && new RegExp(`\\b${m.name}\\(\\)`).test(text));
}

/** The folders of test/ (repository paths) that correspond to no source folder and are not cross-cutting. */
export function strayTestDirs(dirs: readonly string[], isSourceDir: (rel: string) => boolean): string[] {
  return dirs.filter((d) => {
    const parts = d.split('/').slice(1);
    if (parts.length === 0) return false;
    if (CROSS_CUTTING.includes(parts[0])) return false;
    const own = parts.at(-1) === 'support' ? parts.slice(0, -1) : parts;
    if (own.length === 0) return true;
    if (SOURCE_ROOTS.includes(own[0])) return !isSourceDir(own.join('/'));
    return !isSourceDir(['agent', ...own].join('/'));
  });
}

function testDirs(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => {
      const p = path.join(dir, e.name);
      return [path.relative(root, p).split(path.sep).join('/'), ...testDirs(p)];
    });
}

const isDir = (rel: string) => existsSync(path.join(root, rel)) && statSync(path.join(root, rel)).isDirectory();

describe('the test tree', () => {
  it('mirrors the source tree: every folder of test/ is a source folder, a support/ folder or a cross-cutting one', () => {
    const dirs = testDirs(path.join(root, 'test'));
    assert.ok(dirs.includes('test/reconcile/read-back'), dirs.join(', '));
    assert.deepEqual(strayTestDirs(dirs, isDir), [], `a test of agent/X/ lives in test/X/; cross-cutting folders: ${CROSS_CUTTING.join(', ')}`);
  });

  it('finds a folder that mirrors nothing (the check can fail)', () => {
    const sample = [
      'test/reconcile',
      'test/reconcile/read-back',
      'test/reconcile/support',
      'test/native',
      'test/e2e/x',
      'test/kernel-tests',
      'test/maps/nothing',
    ];
    assert.deepEqual(strayTestDirs(sample, isDir), ['test/kernel-tests', 'test/maps/nothing']);
  });

  it('marks every test that loads BPF or creates namespaces: it calls requireRoot or requireBpf itself', () => {
    const helpers = kernelHelpersOf(imports, sources);
    // The helpers the e2e suites and the BPF tests stand on are found.
    for (const h of ['test/support/bpf-fixtures.ts', 'test/support/tc-object.ts', 'sandbox/cluster.ts', 'sandbox/two-node.ts', 'test/conformance/harness.ts']) {
      assert.ok(helpers.has(h), `${h} reaches the kernel`);
    }
    // test/codebase/ reads the code and runs none of it (this file names the patterns it looks for).
    const tests = [...sources.keys()].filter((f) => f.startsWith('test/') && !f.startsWith('test/codebase/') && isTest(f));
    const facing = tests.filter((f) => isKernelFacing(imports.get(f)!, sources.get(f)!, helpers));
    assert.ok(facing.includes('test/reconcile/read-back/drift-repair.test.ts') && facing.includes('test/e2e/clusterip.test.ts'), facing.join(', '));
    assert.ok(!facing.includes('test/reconcile/read-back/readback-sliced.test.ts'), 'the in-memory read-back test needs no kernel');
    const unmarked = facing.filter((f) => !isMarked(imports.get(f)!, sources.get(f)!));
    assert.deepEqual(unmarked, [], `a test that loads BPF or creates namespaces calls one of ${MARKS.map((m) => `${m.name} (${m.from})`).join(', ')}`);
  });

  it('tells a kernel-facing test from a pure one, and a marked one from an unmarked one (the check can fail)', () => {
    const pure = "import { mapTypeName, type BpfMap } from '../../native/index.js';\nimport type { Sandbox } from '../../sandbox/netns.js';\n";
    const loads = "import { BpfObject } from '../../native/index.js';\n";
    const viaHelper = "import { loadTcObject } from '../support/tc-object.js';\n";
    const spawns = "spawnSync('ip', ['netns', 'add', name]);\n";
    const helpers = kernelHelpersOf(imports, sources);
    const facing = (text: string) => isKernelFacing(importLines('test/x/a.test.ts', text), text, helpers);
    assert.deepEqual([pure, loads, viaHelper, spawns].map(facing), [false, true, true, true]);
    const marked = `import { requireRoot } from '../support/preflight.js';\ntest('t', () => { ${MARKS[0].name}(); });\n`;
    const importedOnly = "import { requireRoot } from '../support/preflight.js';\n";
    assert.deepEqual(
      [marked, importedOnly, loads].map((t) => isMarked(importLines('test/x/a.test.ts', t), t)),
      [true, false, false],
    );
  });

  it('runs, in the kernel matrix, test files that exist (test/kernels/matrix.ts KERNEL_SUITES)', () => {
    assert.ok(KERNEL_SUITES.length > 20);
    assert.deepEqual(
      KERNEL_SUITES.filter((s) => !existsSync(path.join(root, 'test', s.replace(/\.js$/, '.ts')))),
      [],
    );
  });

  it("names, in the Makefile's UNIT_TEST_DIRS, folders of test/ that exist", () => {
    const line = /^UNIT_TEST_DIRS\s*:=(.*)$/m.exec(readFileSync(path.join(root, 'Makefile'), 'utf8'));
    assert.ok(line, 'the Makefile sets UNIT_TEST_DIRS');
    const named = line[1].trim().split(/\s+/);
    assert.deepEqual(
      named.filter((d) => !isDir(`test/${d}`)),
      [],
    );
  });
});
