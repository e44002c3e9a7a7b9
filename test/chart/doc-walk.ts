/**
 * The commands the docs give, read as an operator would copy them: the
 * ```sh blocks of a page or under a heading, sh's word splitting, and the
 * values files of docs/platforms.md. The migration tests and doc-helm.test.ts
 * run what this returns.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../sandbox/repo.js';

export const docs = (file: string): string => readFileSync(path.join(repoRoot, 'docs', file), 'utf8');

/** The words of one shell command line as sh splits them (quotes, backslashes, a trailing comment). */
export function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error(`unclosed ' in: ${line}`);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      word ??= '';
      for (i++; line[i] !== '"'; i++) {
        if (i >= line.length) throw new Error(`unclosed " in: ${line}`);
        if (line[i] === '\\' && '"\\$`'.includes(line[i + 1])) i++;
        word += line[i];
      }
    } else if (c === '\\') {
      word = (word ?? '') + line[++i];
    } else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === '#' && word === undefined) {
      break;
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}

export interface DocCommand {
  /** The last `## ` heading above the command. */
  section: string;
  /** The ```sh block's number, counted from the start heading. */
  block: number;
  line: string;
  /** The block's leading comment line ("# on each server, one at a time"), without the "# ". */
  note?: string;
}

/**
 * The commands of the ```sh blocks from `heading` (default: the top of the
 * page) on, continuation lines joined: to the end of the page, or with
 * `within` to the next heading of the same or a higher level. A block's
 * leading comment-only line is its note, not a command.
 */
export function commandsFrom(page: string, heading?: string, opts: { within?: boolean } = {}): DocCommand[] {
  const start = heading === undefined ? -1 : page.indexOf(`\n${heading}\n`);
  if (heading !== undefined) assert.ok(start >= 0, `no section ${heading}`);
  const level = heading === undefined ? 0 : /^#+/.exec(heading)![0].length;
  const out: DocCommand[] = [];
  let section = heading ?? '';
  let block = 0;
  let note: string | undefined;
  let inSh = false;
  let pending = '';
  let first = true;
  for (const raw of page.slice(start + 1).split('\n')) {
    const t = raw.trim();
    if (!inSh && !first && opts.within) {
      const h = /^(#+) /.exec(raw);
      if (h && h[1].length <= level) break;
    }
    first = false;
    if (!inSh && t.startsWith('## ')) section = t;
    if (t === '```sh') {
      inSh = true;
      block++;
      note = undefined;
      continue;
    }
    if (inSh && t === '```') {
      inSh = false;
      continue;
    }
    if (!inSh || t === '') continue;
    if (t.startsWith('#')) {
      note = t.replace(/^#\s*/, '');
      continue;
    }
    if (t.endsWith('\\')) {
      pending += t.slice(0, -1) + ' ';
      continue;
    }
    out.push({ section, block, line: pending + t, ...(note ? { note } : {}) });
    pending = '';
  }
  return out;
}

/** The ```yaml block of docs/platforms.md that starts with `# <name>`. */
export function platformsValues(name: string): string {
  const m = new RegExp('```yaml\\n# ' + name.replace('.', '\\.') + '\\n([\\s\\S]*?)```').exec(docs('platforms.md'));
  assert.ok(m, `docs/platforms.md has no ${name} block`);
  return m[1];
}
