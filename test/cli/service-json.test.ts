/**
 * `kpr service list -o json` printed in chunks (agent/cli/service-commands.ts
 * jsonChunks): the same text as one JSON.stringify of the whole list, at
 * every chunk boundary.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jsonChunks } from '../../agent/cli/service-commands.js';

test('the chunks join to JSON.stringify(views, null, 2) and a newline', () => {
  for (const n of [0, 1, 2, 999, 1000, 1001, 2500]) {
    const views = Array.from({ length: n }, (_, i) => ({ service: `ns/svc-${i}`, port: 80, flags: ['cluster-ip'], backends: [{ id: i, address: '198.18.0.1', port: 8080 }] }));
    assert.equal([...jsonChunks(views)].join(''), JSON.stringify(views, null, 2) + '\n', `${n} views`);
  }
});
