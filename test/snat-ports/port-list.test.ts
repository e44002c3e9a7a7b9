/**
 * net.ipv4.ip_local_reserved_ports as kpr merges its SNAT range into it and
 * takes it out again (pure): the kernel's list syntax, merging without
 * clobbering anyone's ports, releasing only what kpr owns, and the
 * preflight row.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  covers,
  formatPortList,
  parseLocalPortRange,
  parsePortList,
  planRelease,
  planReserve,
  PortListError,
  withoutRange,
  withRange,
} from '../../agent/snat-ports/port-list.js';
import { snatPortsCheck } from '../../agent/snat-ports/check.js';

const SNAT = { lo: 61000, hi: 65535 };

test("the kernel's list syntax: single ports and ranges, sorted and merged on the way back", () => {
  assert.deepEqual(parsePortList(''), []);
  assert.deepEqual(parsePortList('\n'), []);
  assert.deepEqual(parsePortList('5000,61000-65535\n'), [{ lo: 5000, hi: 5000 }, SNAT]);
  assert.equal(formatPortList(parsePortList('8080, 22,23-25,26,100-200,150-160')), '22-26,100-200,8080');
  assert.equal(formatPortList([]), '');
  for (const bad of ['x', '5-', '-5', '70000', '10-5', '1,,2-3-4']) assert.throws(() => parsePortList(bad), PortListError, bad);
});

test('adding the SNAT range keeps every port reserved before, inside the range or around it', () => {
  assert.equal(formatPortList(withRange([], SNAT)), '61000-65535');
  assert.equal(formatPortList(withRange(parsePortList('5000,10250'), SNAT)), '5000,10250,61000-65535');
  assert.equal(formatPortList(withRange(parsePortList('60990-61005,63000,65535'), SNAT)), '60990-65535');
  assert.equal(formatPortList(withRange(parsePortList('60999'), SNAT)), '60999-65535', 'adjacent ranges merge, as the kernel prints them');
});

test('taking the range out cuts ranges that straddle it and keeps the rest', () => {
  assert.equal(formatPortList(withoutRange(parsePortList('5000,61000-65535'), SNAT)), '5000');
  assert.equal(formatPortList(withoutRange(parsePortList('60990-65535'), SNAT)), '60990-60999');
  assert.equal(formatPortList(withoutRange(parsePortList('1-2,62000'), SNAT)), '1-2');
  assert.equal(formatPortList(withoutRange(parsePortList('100-200'), { lo: 150, hi: 160 })), '100-149,161-200');
});

test('reserve: written when not covered (kpr owns it then); kept as found when covered, owned only if kpr owned it before', () => {
  assert.deepEqual(planReserve(parsePortList('5000'), SNAT, false), { action: 'write', text: '5000,61000-65535', owned: true });
  assert.deepEqual(
    planReserve(parsePortList('61000-62000'), SNAT, false),
    { action: 'write', text: '61000-65535', owned: true },
    'partly reserved: the rest is added',
  );
  assert.deepEqual(planReserve(parsePortList('5000,61000-65535'), SNAT, false), { action: 'keep', owned: false }, 'someone else reserved it');
  assert.deepEqual(planReserve(parsePortList('5000,61000-65535'), SNAT, true), { action: 'keep', owned: true }, 'an earlier agent reserved it');
  assert.ok(covers(parsePortList('60000-65535'), SNAT));
  assert.ok(!covers(parsePortList('61000-65534'), SNAT));
});

test('release: only what kpr owns, leaving every other port; nothing to write when nothing is reserved there', () => {
  assert.equal(planRelease(parsePortList('5000,61000-65535'), SNAT, true), '5000');
  assert.equal(planRelease(parsePortList('61000-65535'), SNAT, true), '');
  assert.equal(planRelease(parsePortList('5000,61000-65535'), SNAT, false), undefined, "not kpr's");
  assert.equal(planRelease(parsePortList('5000'), SNAT, true), undefined, 'already released');
});

test("ip_local_port_range's text", () => {
  assert.deepEqual(parseLocalPortRange('32768\t60999\n'), { lo: 32768, hi: 60999 });
  assert.throws(() => parseLocalPortRange('32768'), PortListError);
});

test('preflight snat-ports: a warning exactly when the ephemeral ports reach into the range and it is not reserved', () => {
  const row = (reserved: string, eph: string) => snatPortsCheck({ reserved: parsePortList(reserved), localPortRange: parseLocalPortRange(eph) }, SNAT);
  assert.equal(row('', '32768 60999').ok, true, "Linux's default range stops below 61000");
  assert.equal(row('61000-65535', '1024 65535').ok, true);
  const warn = row('5000', '1024 65535');
  assert.equal(warn.ok, false);
  assert.equal(warn.severity, 'advisory');
  assert.match(warn.detail, /ephemeral ports 1024-65535 include 61000-65535/);
  assert.match(warn.fix!, /ip_local_reserved_ports/);
  assert.match(row('61000-62000', '32768 63000').detail, /include 61000-63000/, 'partly reserved still warns');
  assert.equal(snatPortsCheck({ reserved: { error: 'EACCES' }, localPortRange: { lo: 32768, hi: 60999 } }, SNAT).ok, false);
});
