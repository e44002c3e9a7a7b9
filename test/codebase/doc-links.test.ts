/**
 * The docs hold together: every relative link in README.md, CHANGELOG.md,
 * docs/*.md and charts/kpr/README.md names a file that exists and, with an
 * anchor, a heading of that file (GitHub's slugs); README.md stays a short
 * page whose index links every page of docs/.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';

const root = findRepoRoot();
const docPages = readdirSync(path.join(root, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => `docs/${f}`);
const FILES = ['README.md', 'CHANGELOG.md', 'charts/kpr/README.md', ...docPages];
const README_MAX_LINES = 250;

/** The text with fenced code blocks blanked (lines kept, so line numbers hold) and inline code spans removed. */
function withoutCode(text: string): string[] {
  let fence: string | undefined;
  return text.split('\n').map((line) => {
    const m = /^\s*(```+|~~~+)/.exec(line);
    if (fence !== undefined) {
      if (m && m[1][0] === fence[0] && m[1].length >= fence.length) fence = undefined;
      return '';
    }
    if (m) {
      fence = m[1];
      return '';
    }
    return line.replace(/(`+)[^`]*?\1/g, '');
  });
}

/** GitHub's anchor for a heading: link text kept, lower case, punctuation dropped, spaces to hyphens. */
export function githubSlug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a markdown file defines: its headings' slugs, a repeated one suffixed -1, -2, … as GitHub does. */
export function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  let fence: string | undefined;
  for (const line of text.split('\n')) {
    const f = /^\s*(```+|~~~+)/.exec(line);
    if (fence !== undefined) {
      if (f && f[1][0] === fence[0] && f[1].length >= fence.length) fence = undefined;
      continue;
    }
    if (f) {
      fence = f[1];
      continue;
    }
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!h) continue;
    const base = githubSlug(h[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

export interface Link {
  line: number;
  target: string;
}

/** The relative links of a markdown file (not in code; no scheme such as https: or mailto:). */
export function relativeLinksOf(text: string): Link[] {
  const links: Link[] = [];
  withoutCode(text).forEach((line, i) => {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      links.push({ line: i + 1, target });
    }
  });
  return links;
}

/** What is wrong with each broken link of `file` (repository-relative), as `file:line target: reason`. */
function brokenLinks(file: string): string[] {
  const text = readFileSync(path.join(root, file), 'utf8');
  const broken: string[] = [];
  for (const { line, target } of relativeLinksOf(text)) {
    const hash = target.indexOf('#');
    const rel = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
    const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
    const abs = rel === '' ? path.join(root, file) : path.resolve(path.dirname(path.join(root, file)), rel);
    const where = `${file}:${line} ${target}`;
    if (!abs.startsWith(root + path.sep)) {
      broken.push(`${where}: outside the repository`);
      continue;
    }
    if (!existsSync(abs)) {
      broken.push(`${where}: no such file`);
      continue;
    }
    if (anchor === undefined) continue;
    if (!abs.endsWith('.md')) {
      broken.push(`${where}: an anchor into a file that is not markdown`);
      continue;
    }
    if (!anchorsOf(readFileSync(abs, 'utf8')).has(anchor)) broken.push(`${where}: no heading with this anchor in ${path.relative(root, abs)}`);
  }
  return broken;
}

describe('doc links', () => {
  it('slugs headings as GitHub does', () => {
    assert.equal(githubSlug("kube-proxy's flags and config file"), 'kube-proxys-flags-and-config-file');
    assert.equal(githubSlug('`kpr service list -o json`'), 'kpr-service-list--o-json');
    assert.equal(githubSlug('1. Can this node run kpr? `kpr preflight`'), '1-can-this-node-run-kpr-kpr-preflight');
    assert.equal(githubSlug('Upgrades: versioned pins and live migration'), 'upgrades-versioned-pins-and-live-migration');
    assert.equal(githubSlug('A. What is considered at all'), 'a-what-is-considered-at-all');
    assert.deepEqual([...anchorsOf('# A\n## Notes\n```yaml\n# not a heading\n```\n## Notes\n')], ['a', 'notes', 'notes-1']);
  });

  it('finds relative links outside code only', () => {
    const text = '[a](x.md#y) and `[b](code.md)` and [c](https://example.com)\n```\n[d](fenced.md)\n```\n[e](#local) [f](../up.md)';
    assert.deepEqual(relativeLinksOf(text), [
      { line: 1, target: 'x.md#y' },
      { line: 5, target: '#local' },
      { line: 5, target: '../up.md' },
    ]);
  });

  it('every relative link names an existing file and, with an anchor, one of its headings', () => {
    assert.ok(docPages.length >= 10, `${docPages.length} pages in docs/`);
    const links = FILES.reduce((n, f) => n + relativeLinksOf(readFileSync(path.join(root, f), 'utf8')).length, 0);
    assert.ok(links >= 50, `${links} relative links found: the scan reads what it should`);
    assert.deepEqual(FILES.flatMap(brokenLinks), []);
  });

  it(`README.md is a short page (≤ ${README_MAX_LINES} lines) whose index links every page of docs/`, () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    const lines = readme.trimEnd().split('\n').length;
    assert.ok(lines <= README_MAX_LINES, `README.md is ${lines} lines: move reference to docs/`);
    const linked = new Set(relativeLinksOf(readme).map((l) => l.target.split('#')[0]));
    assert.deepEqual(
      docPages.filter((p) => !linked.has(p)),
      [],
      'pages of docs/ the README does not link',
    );
    assert.match(readme, /make demo/);
    assert.match(readme, /make test\b/);
  });
});
