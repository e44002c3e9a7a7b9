/**
 * Rules of the agent's import graph, read from the source files' import
 * lines (issue 19): the planner is pure and knows nothing of the kernel
 * layouts (no arrow agent/plan/ → agent/maps/), the flag parser nothing of
 * the metrics servers (none agent/config/agent-config.ts → agent/metrics/), agent/net
 * is a leaf (it imports no other kpr module), and the validation of watched
 * objects (agent/k8s/validate.ts and agent/k8s/validate/) stays pure: it
 * imports only itself, agent/net/ and client-node's models.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';

const root = findRepoRoot();
const agentDir = path.join(root, 'agent');

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

const graph = new Map(sourceFiles(agentDir).map((f) => [path.relative(root, f), importsOf(f)]));

function arrows(from: (file: string) => boolean, to: (target: string) => boolean): string[] {
  return [...graph].flatMap(([file, targets]) => (from(file) ? targets.filter(to).map((t) => `${file} → ${t}`) : []));
}

describe('the agent import graph', () => {
  it('is read from every source file (the reader sees multi-line, type-only and re-exports)', () => {
    assert.ok(graph.size > 50, `${graph.size} files`);
    assert.ok(graph.get('agent/config/agent-config.ts')!.includes('agent/net/listen-address.ts'));
    assert.ok(graph.get('agent/maps/bpf-datapath-maps.ts')!.includes('agent/maps/layout.ts'), 'a multi-line import');
    assert.ok(graph.get('agent/plan/index.ts')!.includes('agent/plan/categorize-endpoints.ts'), 'a re-export');
    assert.ok(graph.get('agent/health/proxy-health.ts')!.includes('agent/net/ip.ts'), 'a type-only import');
  });

  it('has no arrow from agent/plan/ to agent/maps/ (the planner does not know the kernel layouts)', () => {
    assert.deepEqual(arrows((f) => f.startsWith('agent/plan/'), (t) => t.startsWith('agent/maps/')), []);
  });

  it('has no arrow from agent/config/agent-config.ts to agent/metrics/ (flags are parsed without the metrics servers)', () => {
    assert.deepEqual(arrows((f) => f === 'agent/config/agent-config.ts', (t) => t.startsWith('agent/metrics/')), []);
  });

  it('agent/k8s/validate/ is pure: it imports only itself, agent/net/ and client-node\'s models (no I/O, no state)', () => {
    const validation = (f: string) => f === 'agent/k8s/validate.ts' || f.startsWith('agent/k8s/validate/');
    const allowed = (t: string) => validation(t) || t.startsWith('agent/net/') || t === '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
    assert.ok(graph.get('agent/k8s/validate/service.ts')!.includes('agent/net/ip.ts'), 'the validation modules are read');
    assert.deepEqual(arrows(validation, (t) => !allowed(t)), []);
  });

  it('agent/net/ imports no other kpr module', () => {
    assert.deepEqual(arrows((f) => f.startsWith('agent/net/'), (t) => !t.startsWith('agent/net/') && (t.startsWith('agent/') || t.startsWith('native/') || t.startsWith('.'))), []);
  });
});
