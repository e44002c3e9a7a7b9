/**
 * Every place in the docs and the chart that names kpr's image names the one
 * `make image` produces: the repository `localhost/kpr` (what importing an
 * archive gives) or a registry's `…/kpr` (where `skopeo copy` put it), the
 * tag being the kpr version (package.json), which is the chart's appVersion
 * and so its default tag; the archives named are `kpr-VERSION[-ARCH].oci.tar`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { repoRoot } from '../support/paths.js';

const version = (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
const files = [
  'README.md',
  'charts/kpr/README.md',
  'charts/kpr/values.yaml',
  ...readdirSync(path.join(repoRoot, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const KPR_REPOSITORY = /^(?:localhost|[a-z0-9.-]+(?::\d+)?(?:\/[a-z0-9._-]+)*)\/kpr$/;

interface Ref {
  file: string;
  line: number;
  kind: string;
  value: string;
}

function references(): Ref[] {
  const refs: Ref[] = [];
  for (const file of files) {
    readFileSync(path.join(repoRoot, file), 'utf8')
      .split('\n')
      .forEach((text, i) => {
        const add = (kind: string, value: string) => refs.push({ file, line: i + 1, kind, value });
        for (const m of text.matchAll(/^\s*repository:\s*(\S+)/g)) add('repository', m[1]);
        for (const m of text.matchAll(/^\s*tag:\s*(\S+)/g)) add('tag', m[1]);
        for (const m of text.matchAll(/--set image\.repository=(\S+)/g)) add('repository', m[1]);
        for (const m of text.matchAll(/--set image\.tag=(\S+)/g)) add('tag', m[1]);
        for (const m of text.matchAll(/--image[= ](\S+?):([\w.-]+)/g)) {
          add('repository', m[1]);
          add('tag', m[2]);
        }
        for (const m of text.matchAll(/docker:\/\/(\S+?):([\w.-]+)/g)) {
          add('repository', m[1]);
          add('tag', m[2]);
        }
        for (const m of text.matchAll(/kpr-(\d[\w.]*?)(?:-(?:amd64|arm64))?\.oci\.tar/g)) add('archive version', m[1]);
      });
  }
  return refs;
}

test('the references are found (the scan reads what it should)', () => {
  const refs = references();
  assert.ok(
    refs.some((r) => r.file === 'charts/kpr/values.yaml' && r.kind === 'repository'),
    'values.yaml',
  );
  assert.ok(
    refs.some((r) => r.file === 'docs/platforms.md' && r.kind === 'repository'),
    'platforms.md values files',
  );
  assert.ok(
    refs.some((r) => r.file === 'docs/install.md' && r.kind === 'archive version'),
    'install.md archives',
  );
});

test("every image repository named is kpr's, every tag and archive the kpr version", () => {
  const wrong = references().filter((r) => {
    if (r.kind === 'repository') return !KPR_REPOSITORY.test(r.value);
    if (r.kind === 'tag') return r.value !== version && !(r.file === 'charts/kpr/values.yaml' && r.value === '""');
    return r.value !== version;
  });
  assert.deepEqual(
    wrong.map((r) => `${r.file}:${r.line} ${r.kind} ${r.value}`),
    [],
  );
});

test('the chart defaults to the name make image gives, at the chart appVersion = the kpr version', () => {
  const chart = YAML.parse(readFileSync(path.join(repoRoot, 'charts/kpr/Chart.yaml'), 'utf8')) as { appVersion: string };
  const values = YAML.parse(readFileSync(path.join(repoRoot, 'charts/kpr/values.yaml'), 'utf8')) as { image: { repository: string; tag: string } };
  assert.equal(String(chart.appVersion), version);
  assert.equal(values.image.repository, 'localhost/kpr');
  assert.equal(values.image.tag, '');
});

test('every values file of a documented platform sets the image', () => {
  const text = readFileSync(path.join(repoRoot, 'docs/platforms.md'), 'utf8');
  const blocks = [...text.matchAll(/```yaml\n# (values-[\w-]+\.yaml)[^\n]*\n([\s\S]*?)```/g)];
  assert.ok(blocks.length >= 5, `${blocks.length} values files`);
  const missing = blocks.filter(([, , body]) => !(YAML.parse(body) as { image?: { repository?: string } })?.image?.repository).map(([, name]) => name);
  assert.deepEqual(missing, []);
});
