/**
 * The shell commands the docs give, as the chart tests run them: the ```sh
 * blocks of a page (continuation lines joined), a command line split into
 * words as sh splits it, and docs/platforms.md's values files.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../sandbox/repo.js';

/** docs/FILE's text. */
export const docs = (file: string) => readFileSync(path.join(repoRoot, 'docs', file), 'utf8');

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
  /** The `## ` heading it is under. */
  section: string;
  /** Which ```sh block of the page (from `heading` on), from 1. */
  block: number;
  line: string;
}

/** The commands of the ```sh blocks from `heading` (default: the top) to the end of the page, continuation lines joined. */
export function commandsFrom(page: string, heading?: string): DocCommand[] {
  const start = heading === undefined ? -1 : page.indexOf(`\n${heading}\n`);
  if (heading !== undefined) assert.ok(start >= 0, `no section ${heading}`);
  const out: DocCommand[] = [];
  let section = heading ?? '';
  let block = 0;
  let inSh = false;
  let pending = '';
  for (const raw of page.slice(start + 1).split('\n')) {
    const t = raw.trim();
    if (!inSh && t.startsWith('## ')) section = t;
    if (t === '```sh') {
      inSh = true;
      block++;
      continue;
    }
    if (inSh && t === '```') {
      inSh = false;
      continue;
    }
    if (!inSh || t === '') continue;
    if (t.endsWith('\\')) {
      pending += t.slice(0, -1) + ' ';
      continue;
    }
    out.push({ section, block, line: pending + t });
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
