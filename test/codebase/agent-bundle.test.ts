/**
 * The agent bundle (make build → dist/kpr-agent.mjs): what bin/kpr-agent runs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../support/paths.js';
import shim, { URL as ShimURL } from '../../agent/bundle/whatwg-url.js';

const bundle = path.join(repoRoot, 'dist', 'kpr-agent.mjs');

test('the bundle carries the whatwg-url stand-in, not whatwg-url and its tr46 table, and still starts', () => {
  const text = readFileSync(bundle, 'utf8');
  assert.ok(text.includes('dist/agent/bundle/whatwg-url.js'), 'the stand-in is bundled');
  assert.ok(!/node_modules\/(whatwg-url|tr46)\//.test(text) && !text.includes('mappingTable'), 'no whatwg-url or tr46 code');
  const usage = execFileSync(process.execPath, [bundle, '--help'], { encoding: 'utf8' });
  assert.match(usage, /--kubeconfig/);
});

test("the stand-in hands node-fetch Node's own URL classes, both as named and as default export", () => {
  assert.equal(ShimURL, globalThis.URL);
  assert.equal(shim.URL, globalThis.URL);
  assert.equal(shim.URLSearchParams, globalThis.URLSearchParams);
  assert.equal(new shim.URL('http://198.18.0.1:6443/api').port, '6443');
});
