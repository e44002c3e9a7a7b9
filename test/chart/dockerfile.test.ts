/**
 * The Dockerfile cannot be built here (no Docker engine), so it is held to
 * the documented build: every build step is a Makefile target that exists,
 * every base image is pinned by digest with its version tag beside it, the
 * runtime stage holds only what bin/kpr-agent and bin/kpr run (their two
 * bundles and the commit they were built from; no tests, sandbox, bench or
 * npm), and the Node major is the same in the image, package.json's engines
 * and the bundle's esbuild target.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../sandbox/repo.js';

/** Instructions with their continuation lines joined. */
function instructions(text: string): Array<{ op: string; args: string }> {
  const out: Array<{ op: string; args: string }> = [];
  let cur = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!cur && (line === '' || line.startsWith('#'))) continue;
    cur += (cur ? ' ' : '') + line.replace(/\\$/, '').trim();
    if (line.endsWith('\\')) continue;
    const m = /^(\w+)\s+(.*)$/.exec(cur);
    if (m) out.push({ op: m[1].toUpperCase(), args: m[2] });
    cur = '';
  }
  return out;
}

/** Explicit targets of the Makefile ("name:" rules; not variables, not pattern rules). */
function makeTargets(): Set<string> {
  const targets = new Set<string>();
  for (const line of readFileSync(path.join(repoRoot, 'Makefile'), 'utf8').split('\n')) {
    const m = /^([A-Za-z0-9_.\-/ ]+?)\s*:(?![=:])/.exec(line);
    if (m) for (const t of m[1].split(/\s+/)) targets.add(t);
  }
  return targets;
}

const dockerfile = readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8');
const ins = instructions(dockerfile);

test('every base image is pinned by digest, with its version tag beside it; both stages use the same one', () => {
  const froms = ins.filter((i) => i.op === 'FROM').map((i) => i.args.split(/\s+/)[0]);
  for (const image of froms) assert.match(image, /^node:22\.\d+\.\d+-bookworm-slim@sha256:[0-9a-f]{64}$/, `${image}: tag and digest`);
  assert.equal(new Set(froms).size, 1, 'build and runtime on the same base');
});

test('the runtime stage holds what the agent and the CLI run, and nothing else: no dist/test, dist/sandbox, dist/bench, no npm', () => {
  const runtime = ins.slice(ins.findIndex((i, n) => n > 0 && i.op === 'FROM'));
  const distSources = runtime.filter((i) => i.op === 'COPY' && /\/src\/dist/.test(i.args)).flatMap((i) => i.args.split(/\s+/).filter((a) => a.startsWith('/src/dist')));
  assert.deepEqual(distSources.sort(), ['/src/dist/build-info.json', '/src/dist/kpr-agent.mjs', '/src/dist/kpr.mjs']);
  for (const c of runtime.filter((i) => i.op === 'COPY')) assert.doesNotMatch(c.args, /\/src\/dist(\s|\/?$)|\/src\/(test|sandbox|bench)\b|dist\/(test|sandbox|bench)/, c.args);
  // bin/ starts the two bundles; each is self-contained (no relative import left to a module the image lacks) and is copied.
  for (const b of ['kpr-agent', 'kpr']) {
    const m = /"\$here\/\.\.\/(dist\/[\w/.-]+\.m?js)"/.exec(readFileSync(path.join(repoRoot, 'bin', b), 'utf8'));
    assert.ok(m, `bin/${b} runs a file under dist/`);
    assert.ok(distSources.includes(`/src/${m[1]}`), `bin/${b} runs ${m[1]}, which is not copied into the image`);
    const file = path.join(repoRoot, m[1]);
    assert.ok(existsSync(file), `${m[1]} exists (make build: the esbuild bundle)`);
    const relative = [...readFileSync(file, 'utf8').matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g)].map((r) => r[1]);
    assert.deepEqual(relative, [], `${m[1]} imports no module by a relative path`);
  }
  assert.ok(existsSync(path.join(repoRoot, 'dist', 'build-info.json')), 'make build writes dist/build-info.json (the COPY needs it)');
  // No package manager in the runtime image.
  assert.ok(runtime.some((i) => i.op === 'RUN' && /rm -rf [^&]*\/usr\/local\/lib\/node_modules\b/.test(i.args) && /\/usr\/local\/bin\/npm\b/.test(i.args) && /\/usr\/local\/bin\/npx\b/.test(i.args) && /corepack/.test(i.args)));
});

test("the Node major is one: the image's, package.json's engines, and the bundle's esbuild target", () => {
  const imageMajor = /^node:(\d+)\./.exec(ins.find((i) => i.op === 'FROM')!.args)![1];
  const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8'));
  assert.equal(pkg.engines.node, `>=${imageMajor}`);
  const makefile = readFileSync(path.join(repoRoot, 'Makefile'), 'utf8');
  assert.match(makefile, new RegExp(`--target=node${imageMajor}\\b`));
});

test('every base image is pinned to a version (no :latest, no bare name)', () => {
  const froms = ins.filter((i) => i.op === 'FROM').map((i) => i.args.split(/\s+/)[0]);
  assert.ok(froms.length >= 2, 'multi-stage');
  for (const image of froms) {
    assert.match(image, /(:[0-9][\w.-]*|@sha256:[0-9a-f]{64})$/, `${image} is not pinned to a version`);
    assert.doesNotMatch(image, /:latest$/);
    assert.match(image, /^node:(22|24)\.\d+\.\d+-bookworm/, `${image}: a Node LTS on Debian bookworm (libbpf1)`);
  }
});

test('the build stage runs Makefile targets that exist, and `make build` is one of them', () => {
  const targets = makeTargets();
  const buildStageEnd = ins.findIndex((i, n) => n > 0 && i.op === 'FROM');
  const buildRuns = ins.slice(0, buildStageEnd).filter((i) => i.op === 'RUN');
  assert.ok(buildRuns.length > 0);
  for (const run of buildRuns) {
    const m = /^make\s+([\w.-]+)$/.exec(run.args);
    assert.ok(m, `build step "${run.args}" is not a single make target`);
    assert.ok(targets.has(m[1]), `make target "${m[1]}" does not exist in the Makefile`);
  }
  assert.ok(buildRuns.some((r) => r.args === 'make build'));
});

test('the runtime stage has libbpf1 and the built artefacts, and .dockerignore keeps the sources', () => {
  const runtime = ins.slice(ins.findIndex((i, n) => n > 0 && i.op === 'FROM'));
  assert.ok(runtime.some((i) => i.op === 'RUN' && /apt-get install .*\blibbpf1\b/.test(i.args)));
  const copies = runtime.filter((i) => i.op === 'COPY').map((i) => i.args);
  for (const want of ['/src/dist', '/src/build/*.bpf.o', '/src/build/libkpr_batch_writer.so', '/src/node_modules', '/src/bin', '/src/package.json']) {
    assert.ok(copies.some((c) => c.includes(want)), `runtime copies ${want}`);
  }
  // Everything the build stage COPYs from the context exists and is not ignored.
  const ignored = readFileSync(path.join(repoRoot, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const build = ins.slice(0, ins.findIndex((i, n) => n > 0 && i.op === 'FROM'));
  for (const c of build.filter((i) => i.op === 'COPY' && !i.args.startsWith('--from'))) {
    const sources = c.args.split(/\s+/).slice(0, -1);
    for (const s of sources) {
      assert.ok(existsSync(path.join(repoRoot, s)), `COPY source ${s} exists`);
      assert.ok(!ignored.includes(s), `COPY source ${s} is not in .dockerignore`);
    }
  }
});
