/**
 * The Dockerfile cannot be built here (no Docker engine), so it is held to
 * the documented build: every build step is a Makefile target that exists,
 * and every base image is pinned (a version tag or digest, never :latest).
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
