/**
 * Every `helm install` and `helm upgrade` the docs give (the ```sh blocks of
 * README.md, docs/*.md and charts/kpr/README.md), rendered with the real helm
 * as `helm template` with the same arguments: a placeholder or value the
 * chart's schema refuses fails here as it would on a cluster. A values file
 * (`-f NAME`) is docs/platforms.md's block of that name.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../../sandbox/repo.js';
import { helmIn } from './helm.js';
import { CHART } from './render.js';
import { commandsFrom, platformsValues, shellWords } from './doc-walk.js';

const PAGES = [
  'README.md',
  'charts/kpr/README.md',
  ...readdirSync(path.join(repoRoot, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** helm upgrade's flags that helm template does not take (they are about the release already installed). */
const UPGRADE_ONLY = new Set(['--reuse-values', '--reset-values', '--install', '-i', '--atomic', '--wait', '--cleanup-on-fail']);

function helmCommands(): Array<{ page: string; line: string; words: string[] }> {
  const out: Array<{ page: string; line: string; words: string[] }> = [];
  for (const page of PAGES) {
    for (const c of commandsFrom(readFileSync(path.join(repoRoot, page), 'utf8'))) {
      const words = shellWords(c.line);
      if (words[0] === 'helm' && (words[1] === 'install' || words[1] === 'upgrade')) out.push({ page, line: c.line, words });
    }
  }
  return out;
}

test('the docs give helm install/upgrade commands (this test has something to check)', () => {
  const pages = new Set(helmCommands().map((c) => c.page));
  for (const page of ['README.md', 'docs/install.md', 'charts/kpr/README.md']) assert.ok(pages.has(page), `${page} has a helm install in a sh block`);
});

test("every helm install and upgrade in the docs renders with the chart's schema", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-doc-helm-'));
  try {
    const failures: string[] = [];
    for (const { page, line, words } of helmCommands()) {
      const args = words
        .slice(2)
        .filter((w) => !UPGRADE_ONLY.has(w))
        .map((w) => (w === 'charts/kpr' ? CHART : w));
      for (let i = 0; i < args.length; i++) {
        if ((args[i] === '-f' || args[i] === '--values') && !args[i + 1].includes('/'))
          writeFileSync(path.join(dir, args[i + 1]), platformsValues(args[i + 1]));
      }
      const r = helmIn(dir, 'template', ...args);
      if (r.status !== 0) failures.push(`${page}: ${line}\n  ${r.stderr.trim()}`);
    }
    assert.deepEqual(failures, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
