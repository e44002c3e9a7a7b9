/**
 * Rules of the agent's import graph (issues 19 and 33).
 *
 * The layers: the agent's modules are stacked in LAYERS, lowest first, and a
 * module imports only modules of its own layer or of a lower one. The graph
 * has no cycle, type-only imports included. Both are read with madge (a
 * devDependency), which resolves every import as tsc does; the same order is
 * written out in docs/contributing.md (*Layers*), checked against LAYERS here.
 *
 * Within the layers: the planner and the backend selection tables are pure
 * and know nothing of the kernel layouts (no arrow agent/plan/ or agent/lb/
 * → agent/maps/), agent/net is a leaf (it imports no other kpr module), and
 * the validation of watched objects (agent/k8s/validate.ts and
 * agent/k8s/validate/) stays pure: it imports only itself, agent/net/ and
 * client-node's models (read from the import lines, which name the npm
 * modules madge leaves out).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, describe, it } from 'node:test';
import madge from 'madge';
import { findRepoRoot } from '../../agent/runtime/paths.js';

const root = findRepoRoot();

/**
 * The layers, lowest first: each holds folders (a trailing /) and files,
 * as repository paths. A module may import its own layer's modules and
 * those of the layers before it, never a later layer's.
 */
const LAYERS: ReadonlyArray<{ layer: string; holds: readonly string[] }> = [
  { layer: 'net', holds: ['agent/net/'] },
  { layer: 'base', holds: ['native/', 'agent/log/', 'agent/input/', 'agent/http/', 'agent/runtime/', 'agent/bundle/'] },
  { layer: 'maps', holds: ['agent/maps/'] },
  { layer: 'datapath', holds: ['agent/datapath/', 'agent/snat-ports/'] },
  { layer: 'config', holds: ['agent/config/'] },
  { layer: 'k8s/plan/lb', holds: ['agent/k8s/', 'agent/plan/', 'agent/lb/'] },
  { layer: 'reconcile', holds: ['agent/reconcile/'] },
  { layer: 'sync', holds: ['agent/sync/'] },
  { layer: 'metrics/health', holds: ['agent/metrics/', 'agent/health/', 'agent/service-health/'] },
  { layer: 'agent/cli', holds: ['agent/agent.ts', 'agent/main.ts', 'agent/cli/', 'agent/cleanup/', 'agent/preflight/', 'agent/conntrack-sysctls/'] },
];

/** The source trees whose graph must have no cycle. */
const CYCLE_FREE = ['agent', 'native', 'sandbox', 'bench', 'image', 'test'];

/** madge over some source trees: TypeScript, specifiers resolved by the repository's tsconfig, type-only and dynamic imports kept. */
function readGraph(paths: string[], baseDir: string) {
  return madge(paths, {
    baseDir,
    fileExtensions: ['ts'],
    tsConfig: path.join(root, 'tsconfig.json'),
    detectiveOptions: { ts: { skipTypeImports: false, skipAsyncImports: false } },
  });
}

function layerOf(file: string): number {
  const i = LAYERS.findIndex((l) => l.holds.some((h) => (h.endsWith('/') ? file.startsWith(h) : file === h)));
  return i;
}

/** Every arrow from a module to one of a later layer. */
function upwardArrows(graph: Record<string, readonly string[]>): string[] {
  const out: string[] = [];
  for (const [file, targets] of Object.entries(graph)) {
    const from = layerOf(file);
    if (from < 0) continue;
    for (const t of targets) {
      const to = layerOf(t);
      if (to > from) out.push(`${file} (${LAYERS[from].layer}) → ${t} (${LAYERS[to].layer})`);
    }
  }
  return out;
}

// ---------------------------------------------------------------- the import lines, for the npm modules madge leaves out

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** The modules a source file imports (static, type-only, re-exports and dynamic import()), relative ones as repository paths of their .ts source. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specs: string[] = [];
  const patterns = [
    /^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/gm, // import … from '…' (one or more lines), export … from '…'
    /^\s*import\s*['"]([^'"]+)['"]/gm, // import '…' (side effects)
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g, // import('…')
  ];
  for (const re of patterns) for (const m of text.matchAll(re)) specs.push(m[1]);
  return specs.map((s) => (s.startsWith('.') ? path.relative(root, path.resolve(path.dirname(file), s)).replace(/\.js$/, '.ts') : s));
}

const lines = new Map(sourceFiles(path.join(root, 'agent')).map((f) => [path.relative(root, f), importsOf(f)]));

// ---------------------------------------------------------------- the tests

let graph: Record<string, string[]> = {};
let cycles: string[][] = [];

describe('the agent import graph', () => {
  before(async () => {
    const agent = await readGraph(
      ['agent', 'native'].map((d) => path.join(root, d)),
      root,
    );
    graph = agent.obj();
    assert.deepEqual(agent.warnings().skipped, [], 'every import resolves to a file');
    cycles = (
      await readGraph(
        CYCLE_FREE.map((d) => path.join(root, d)),
        root,
      )
    ).circular();
  });

  function arrows(from: (file: string) => boolean, to: (target: string) => boolean): string[] {
    return Object.entries(graph).flatMap(([file, targets]) => (from(file) ? targets.filter(to).map((t) => `${file} → ${t}`) : []));
  }

  it('is read from every source file, type-only imports, re-exports and import() included', () => {
    assert.ok(Object.keys(graph).length > 150, `${Object.keys(graph).length} files`);
    assert.ok(graph['agent/config/agent-config.ts'].includes('agent/net/listen-address.ts'));
    assert.ok(graph['agent/maps/bpf-datapath-maps.ts'].includes('agent/maps/layout.ts'), 'a multi-line import');
    assert.ok(graph['agent/plan/index.ts'].includes('agent/plan/categorize-endpoints.ts'), 'a re-export');
    assert.ok(graph['agent/health/proxy-health.ts'].includes('agent/net/ip.ts'), 'a type-only import');
    assert.ok(graph['agent/maps/bpf-datapath-maps.ts'].includes('native/index.ts'), 'native/ is in the graph');
    // Every kpr module an import line names is an arrow of madge's graph: it misses none.
    const kpr = (s: string) => s.startsWith('agent/') || s.startsWith('native/');
    const missed = [...lines].flatMap(([file, specs]) => specs.filter((t) => kpr(t) && !graph[file]?.includes(t)).map((t) => `${file} → ${t}`));
    assert.deepEqual(missed, []);
  });

  it('places every module in one layer', () => {
    assert.deepEqual(
      Object.keys(graph).filter((f) => layerOf(f) < 0),
      [],
      'a module outside LAYERS: add its folder to a layer (and to docs/contributing.md)',
    );
    const holds = LAYERS.flatMap((l) => l.holds);
    assert.deepEqual(
      holds.filter((h, i) => holds.some((o, j) => j !== i && (o === h || (o.endsWith('/') && h.startsWith(o))))),
      [],
      'a path in two layers',
    );
  });

  it('has no arrow to a later layer (net → base → maps → datapath → config → k8s/plan/lb → reconcile → sync → metrics/health → agent/cli)', () => {
    assert.deepEqual(upwardArrows(graph), []);
  });

  it('has no cycle, type-only imports included (madge over agent/, native/, sandbox/, bench/, image/, test/)', () => {
    assert.deepEqual(cycles, []);
  });

  it('madge finds a cycle made of type-only imports (the check above can fail)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-import-cycle-'));
    try {
      writeFileSync(path.join(dir, 'a.ts'), "import type { B } from './b.js';\nexport interface A {\n  b?: B;\n}\n");
      writeFileSync(path.join(dir, 'b.ts'), "export type { A as B } from './a.js';\n");
      writeFileSync(path.join(dir, 'c.ts'), "import type { A } from './a.js';\nexport type C = A;\n");
      assert.deepEqual((await readGraph([dir], dir)).circular(), [['a.ts', 'b.ts']]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('upwardArrows names an arrow to a later layer and lets the others be', () => {
    const sample = {
      'agent/maps/x.ts': ['agent/reconcile/limits.ts', 'agent/net/ip.ts', 'agent/maps/y.ts'],
      'agent/agent.ts': ['agent/sync/sync-loop.ts'],
    };
    assert.deepEqual(upwardArrows(sample), ['agent/maps/x.ts (maps) → agent/reconcile/limits.ts (reconcile)']);
  });

  it('docs/contributing.md states the same layers in the same order', () => {
    const doc = readFileSync(path.join(root, 'docs', 'contributing.md'), 'utf8');
    const section = doc.split(/^## /m).find((s) => s.startsWith('Layers'));
    assert.ok(section, 'docs/contributing.md has a section "Layers"');
    const rows = section.split('\n').filter((l) => /^\| \d+ \|/.test(l));
    const stated = rows.map((r) => {
      const [, , layer, holds] = r.split('|').map((c) => c.trim());
      return { layer: layer.replace(/`/g, ''), holds: [...holds.matchAll(/`([^`]+)`/g)].map((m) => m[1]) };
    });
    assert.deepEqual(
      stated,
      LAYERS.map((l) => ({ layer: l.layer, holds: [...l.holds] })),
    );
  });

  it('has no arrow from agent/plan/ or agent/lb/ to agent/maps/ (the planner and the selection tables do not know the kernel layouts)', () => {
    assert.deepEqual(
      arrows(
        (f) => f.startsWith('agent/plan/') || f.startsWith('agent/lb/'),
        (t) => t.startsWith('agent/maps/'),
      ),
      [],
    );
  });

  it('has no arrow from agent/config/ to agent/metrics/ (flags are parsed without the metrics servers)', () => {
    assert.deepEqual(
      arrows(
        (f) => f.startsWith('agent/config/'),
        (t) => t.startsWith('agent/metrics/'),
      ),
      [],
    );
  });

  it("agent/k8s/validate/ is pure: it imports only itself, agent/net/ and client-node's models (no I/O, no state)", () => {
    const validation = (f: string) => f === 'agent/k8s/validate.ts' || f.startsWith('agent/k8s/validate/');
    const allowed = (t: string) => validation(t) || t.startsWith('agent/net/') || t === '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
    assert.ok(lines.get('agent/k8s/validate/service.ts')!.includes('agent/net/ip.ts'), 'the validation modules are read');
    const out = [...lines].flatMap(([file, targets]) => (validation(file) ? targets.filter((t) => !allowed(t)).map((t) => `${file} → ${t}`) : []));
    assert.deepEqual(out, []);
  });

  it('agent/net/ imports no other kpr module', () => {
    assert.deepEqual(
      arrows(
        (f) => f.startsWith('agent/net/'),
        (t) => !t.startsWith('agent/net/'),
      ),
      [],
    );
  });
});
