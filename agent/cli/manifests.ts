/**
 * Reads Kubernetes manifests for `kpr plan`: files or directories (walked in
 * name order), YAML or JSON (JSON is YAML), several documents per file, and
 * `List` kinds flattened. A file that cannot be read or parsed is an error
 * naming the file; what parses but is not an object is returned as skipped.
 *
 * Like kubectl, a directory contributes its *.yaml, *.yml and *.json entries
 * (and, unlike kubectl without -R, those of its sub-directories); each must be
 * a regular file (a FIFO or device named x.yaml is an error, not a hang),
 * at most MANIFEST_MAX_BYTES, with YAML nesting and aliases within
 * MANIFEST_YAML_LIMITS. A directory reached twice (a symlink loop) is walked once.
 */
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { InputFileError, readRegularFile } from '../input/bounded-read.js';
import { parseYamlDocuments, YamlInputError, type YamlLimits } from '../input/bounded-yaml.js';
import { CliError } from './pinned-maps.js';
import type { SkippedObject } from '../plan/types.js';

/** One parsed document, with where it came from (for messages). */
export interface Manifest {
  obj: Record<string, any>;
  source: string;
}

const MANIFEST_EXT = new Set(['.yaml', '.yml', '.json']);

/** Largest manifest file read. */
export const MANIFEST_MAX_BYTES = 64 * 1024 * 1024;
/**
 * Kubernetes objects nest a few dozen levels (a CRD schema maybe a hundred);
 * the YAML composer recurses, and 256 stays well inside Node's default stack.
 * Repeated keys: the last wins, as in js-yaml's JSON mode and the API server.
 */
export const MANIFEST_YAML_LIMITS: YamlLimits = { maxDepth: 256, maxAliasCount: 100, uniqueKeys: false, jsonFirst: true };

function statOrFail(p: string) {
  try {
    return statSync(p);
  } catch (err) {
    throw new CliError(`${p}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : (err as Error).message}`);
  }
}

function filesUnder(p: string, seen = new Set<string>()): string[] {
  const st = statOrFail(p);
  if (!st.isDirectory()) return [p];
  const id = `${st.dev}:${st.ino}`;
  if (seen.has(id)) return [];
  seen.add(id);
  const out: string[] = [];
  for (const name of readdirSync(p).sort()) {
    const child = path.join(p, name);
    let isDir = false;
    try {
      isDir = statSync(child).isDirectory();
    } catch {
      // a dangling symlink: ignored unless named like a manifest (then reading it says why it fails)
    }
    if (isDir) out.push(...filesUnder(child, seen));
    else if (MANIFEST_EXT.has(path.extname(name).toLowerCase())) out.push(child);
  }
  return out;
}

function parseFile(file: string): unknown[] {
  let text: string;
  try {
    text = readRegularFile(file, MANIFEST_MAX_BYTES);
  } catch (err) {
    if (err instanceof InputFileError) throw new CliError(`${file}: cannot read: ${err.reason}`);
    throw err;
  }
  try {
    return parseYamlDocuments(text, MANIFEST_YAML_LIMITS);
  } catch (err) {
    if (err instanceof YamlInputError) throw new CliError(`${file}: invalid YAML/JSON: ${err.message}`);
    throw err;
  }
}

function isObject(v: unknown): v is Record<string, any> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Every object in `paths`, in order; non-objects go to `skipped`. Throws CliError naming the file on unreadable input. */
export function loadManifests(paths: readonly string[], skipped: SkippedObject[]): Manifest[] {
  const out: Manifest[] = [];
  for (const file of paths.flatMap((p) => filesUnder(p))) {
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
