/**
 * Manifests for the sandbox API server: YAML or JSON files, or directories of
 * them, read as multi-document YAML (*List kinds unpacked), each object of a
 * served kind created or updated.
 */
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import YAML from 'yaml';
import { resourceFor } from './apiserver-resources.js';
import type { KubeObject } from './apiserver-selectors.js';

export interface LoadManifestsResult {
  /** Objects created or updated, as stored. */
  objects: KubeObject[];
  /** "Kind ns/name (file)" of documents of kinds this server does not serve. */
  skipped: string[];
}

async function collectManifestFiles(p: string): Promise<string[]> {
  const st = await fsp.stat(p);
  if (!st.isDirectory()) return [p];
  const out: string[] = [];
  for (const e of (await fsp.readdir(p, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const full = path.join(p, e.name);
    if (e.isDirectory()) out.push(...(await collectManifestFiles(full)));
    else if (/\.(ya?ml|json)$/i.test(e.name)) out.push(full);
  }
  return out;
}

/** Applies (creates or updates, through `apply`) the objects in `paths`, in file order; skips kinds not served. */
export async function loadManifests(paths: string | string[], apply: (obj: KubeObject) => KubeObject): Promise<LoadManifestsResult> {
  const result: LoadManifestsResult = { objects: [], skipped: [] };
  const files: string[] = [];
  for (const p of Array.isArray(paths) ? paths : [paths]) files.push(...(await collectManifestFiles(p)));
  const applyDoc = (doc: any, file: string): void => {
    if (doc === null || doc === undefined || typeof doc !== 'object') return;
    if (typeof doc.kind === 'string' && doc.kind.endsWith('List') && Array.isArray(doc.items)) {
      for (const item of doc.items) applyDoc(item, file);
      return;
    }
    const def = typeof doc.kind === 'string' ? resourceFor(doc.kind) : undefined;
    if (!def || def.kind !== doc.kind || (doc.apiVersion !== undefined && doc.apiVersion !== def.apiVersion)) {
      const ns = doc.metadata?.namespace ? `${doc.metadata.namespace}/` : '';
      result.skipped.push(`${doc.kind ?? '?'} ${ns}${doc.metadata?.name ?? '?'} (${file})`);
      return;
    }
    result.objects.push(apply(doc));
  };
  for (const f of files) {
    const text = await fsp.readFile(f, 'utf8');
    for (const parsed of YAML.parseAllDocuments(text)) {
      if (parsed.errors.length) throw parsed.errors[0];
      applyDoc(parsed.toJS(), f);
    }
  }
  return result;
}
