/**
 * charts/kpr rendered by the real helm (helm.ts) into objects, for the chart
 * tests and the tests that run what the chart renders.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { helm } from './helm.js';

export const CHART = path.join(repoRoot, 'charts', 'kpr');

export type K8sObject = {
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [k: string]: any;
};

/** `helm template kpr charts/kpr --namespace kube-system -f <values> ...extra`, parsed. */
export function render(values: Record<string, unknown> = {}, extra: string[] = []): K8sObject[] {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-chart-'));
  try {
    const file = path.join(dir, 'values.yaml');
    writeFileSync(file, YAML.stringify(values));
    const r = helm('template', 'kpr', CHART, '--namespace', 'kube-system', '-f', file, ...extra);
    assert.equal(r.status, 0, `helm template failed: ${r.stderr}`);
    return YAML.parseAllDocuments(r.stdout)
      .map((d) => d.toJS())
      .filter(Boolean) as K8sObject[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The one object of `kind` (and `name`, when given). */
export function one(objs: K8sObject[], kind: string, name?: string): K8sObject {
  const found = objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  assert.equal(found.length, 1, `${kind}${name ? ` ${name}` : ''}: ${found.length} rendered`);
  return found[0];
}
