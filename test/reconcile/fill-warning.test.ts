/** FillWarning (agent/reconcile/fill-warning.ts): one warning over 90%, one line back under 85%, nothing in between. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FillWarning } from '../../agent/reconcile/fill-warning.js';

test('a limit over 90% is warned once, said again only after it went back under 85%', () => {
  const lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> = [];
  const w = new FillWarning({
    warn: (msg: string, fields?: object) => lines.push({ level: 'warn', msg, fields: fields as Record<string, unknown> }),
    info: (msg: string, fields?: object) => lines.push({ level: 'info', msg, fields: fields as Record<string, unknown> }),
  } as never);
  const at = (used: number) =>
    w.observe([
      { limit: 'svc_map', used, capacity: 1000 },
      { limit: 'backend_map', used: 10, capacity: 1000 },
    ]);
  at(100);
  at(899);
  assert.equal(lines.length, 0);
  at(900);
  assert.deepEqual(
    lines.map((l) => [l.level, l.fields.limit, l.fields.percent]),
    [['warn', 'svc_map', 90]],
  );
  assert.match(lines[0].msg, /^svc_map is 90% full \(900 of 1000\): Services that do not fit will be refused/);
  at(1000);
  at(860);
  at(950);
  assert.equal(lines.length, 1, 'hovering between 85% and 100%: no new line');
  at(849);
  assert.deepEqual(
    lines.map((l) => l.level),
    ['warn', 'info'],
  );
  assert.match(lines[1].msg, /back under 85% full \(849 of 1000\)/);
  at(901);
  assert.equal(lines.length, 3);
  w.observe(undefined);
  w.observe([{ limit: 'src_range_map', used: 0, capacity: 0 }]);
  assert.equal(lines.length, 3, 'no fill report or an empty capacity: nothing');
});
