/**
 * The reconciler's table list (agent/reconcile/tables/): the apply order it
 * makes is the safe order (docs in tables/index.ts), step by step, and every
 * map the reconciler owns has a table, read back in the resync's order.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAP_NAMES } from '../../agent/maps/layout.js';
import { APPLY_ORDER, CAPACITY_KEYS, READ_BACK_MAPS, TABLES } from '../../agent/reconcile/tables/index.js';

describe('reconciler tables', () => {
  it('apply in the safe order: writes 1–6, then deletes 7–11, each kind before what names it', () => {
    assert.deepEqual(
      APPLY_ORDER.map((p) => `${p.step} ${p.op} ${p.map}`),
      [
        `1 write ${MAP_NAMES.backend}`,
        `2 write ${MAP_NAMES.affinityMatch}`,
        `2 write ${MAP_NAMES.srcRange}`,
        `3 write ${MAP_NAMES.svc}`,
        `3 write ${MAP_NAMES.maglev}`,
        `3 write ${MAP_NAMES.maglevRef}`,
        `4 write ${MAP_NAMES.svcMeta}`,
        `5 write ${MAP_NAMES.svc}`,
        `6 write ${MAP_NAMES.vip}`,
        `7 delete ${MAP_NAMES.svc}`,
        `7 delete ${MAP_NAMES.maglevRef}`,
        `8 delete ${MAP_NAMES.affinityMatch}`,
        `8 delete ${MAP_NAMES.srcRange}`,
        `8 delete ${MAP_NAMES.maglev}`,
        `9 delete ${MAP_NAMES.vip}`,
        `10 delete ${MAP_NAMES.svcMeta}`,
        `11 delete ${MAP_NAMES.backend}`,
      ],
    );
  });

  it('cover the maps the reconciler owns, read back in the resync order, the limited ones with their capacity', () => {
    assert.deepEqual(READ_BACK_MAPS, [
      MAP_NAMES.svc,
      MAP_NAMES.backend,
      MAP_NAMES.vip,
      MAP_NAMES.svcMeta,
      MAP_NAMES.affinityMatch,
      MAP_NAMES.srcRange,
      MAP_NAMES.maglev,
      MAP_NAMES.maglevRef,
    ]);
    assert.equal(new Set(TABLES.map((t) => t.map)).size, TABLES.length);
    assert.deepEqual(Object.fromEntries(CAPACITY_KEYS), {
      [MAP_NAMES.svc]: 'svc',
      [MAP_NAMES.backend]: 'backend',
      [MAP_NAMES.affinityMatch]: 'affinityMatch',
      [MAP_NAMES.srcRange]: 'srcRange',
    });
  });
});
