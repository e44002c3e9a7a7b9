/**
 * Reads Kubernetes manifests for `kpr plan`: files or directories (walked in
 * name order), YAML or JSON (JSON is YAML), several documents per file, and
 * `List` kinds flattened. A file that cannot be read or parsed is an error
 * naming the file; what parses but is not an object is returned as skipped.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import yaml from 'js-yaml';
import { CliError } from './pinned-maps.js';
import type { SkippedObject } from '../plan/types.js';

/** One parsed document, with where it came from (for messages). */
export interface Manifest {
  obj: Record<string, any>;
  source: string;
}

const MANIFEST_EXT = new Set(['.yaml', '.yml', '.json']);

function filesUnder(p: string): string[] {
  let st;
  try {
    st = statSync(p);
  } catch (err) {
    throw new CliError(`${p}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : (err as Error).message}`);
  }
  if (!st.isDirectory()) return [p];
  const out: string[] = [];
  for (const name of readdirSync(p).sort()) {
    const child = path.join(p, name);
    if (statSync(child).isDirectory()) out.push(...filesUnder(child));
    else if (MANIFEST_EXT.has(path.extname(name).toLowerCase())) out.push(child);
  }
  return out;
}

function parseFile(file: string): unknown[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CliError(`${file}: cannot read: ${(err as Error).message}`);
  }
  try {
    return yaml.loadAll(text, undefined, { filename: file, json: true });
  } catch (err) {
    const e = err as Error & { reason?: string; mark?: { line: number; column: number } };
    const where = e.mark ? ` (line ${e.mark.line + 1}, column ${e.mark.column + 1})` : '';
    throw new CliError(`${file}: invalid YAML/JSON: ${e.reason ?? e.message}${where}`);
  }
}

function isObject(v: unknown): v is Record<string, any> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Every object in `paths`, in order; non-objects go to `skipped`. Throws CliError naming the file on unreadable input. */
export function loadManifests(paths: readonly string[], skipped: SkippedObject[]): Manifest[] {
  const out: Manifest[] = [];
  for (const file of paths.flatMap(filesUnder)) {
    const docs = parseFile(file);
    docs.forEach((doc, i) => {
      const source = `${file}#${i + 1}`;
      if (doc === null || doc === undefined) return; // an empty document ("---" at the end)
      const pending: unknown[] = [doc];
      while (pending.length) {
        const d = pending.shift();
        if (!isObject(d)) {
          skipped.push({ object: `document ${source}`, reason: `not a Kubernetes object (${Array.isArray(d) ? 'a list' : typeof d})` });
          continue;
        }
        if (typeof d.kind === 'string' && d.kind.endsWith('List') && Array.isArray(d.items)) {
          pending.push(...d.items);
          continue;
        }
        out.push({ obj: d, source });
      }
    });
  }
  return out;
}
