/**
 * The service ranges (rule 33 of docs/semantics.md): validation of
 * --service-cluster-ip-range and of ServiceCIDR objects' spec.cidrs, and which
 * source is in force.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { effectiveServiceRanges, rangesFromFlag, rangesFromServiceCidrs } from '../../agent/plan/service-ranges.js';

const sc = (name: string, cidrs: unknown) => ({ metadata: { name }, spec: { cidrs } });

describe('service ranges', () => {
  it('the flag: one CIDR per family, canonical', () => {
    assert.deepEqual(rangesFromFlag(['198.18.0.0/16', '2001:db8::/108']), {
      ranges: [
        { cidr: '198.18.0.0/16', family: 'IPv4', source: 'flag' },
        { cidr: '2001:db8::/108', family: 'IPv6', source: 'flag' },
      ],
      problems: [],
    });
  });

  it('bad entries are reported and left out, the good ones kept', () => {
    const r = rangesFromFlag(['198.18.0.0/33', '198.19.0.1/16', '198.18.0.0/16', '198.20.0.0/16', '2001:db8::/64', '10.0.0.0/8']);
    assert.deepEqual(
      r.ranges.map((x) => x.cidr),
      ['198.18.0.0/16', '2001:db8::/64'],
    );
    assert.deepEqual(
      r.problems.map((p) => [p.value, p.reason]),
      [
        ['198.18.0.0/33', 'not a CIDR'],
        ['198.19.0.1/16', 'host bits set (the range is 198.19.0.0/16)'],
        ['198.20.0.0/16', 'a second IPv4 CIDR (at most one per IP family)'],
        ['10.0.0.0/8', 'more than two CIDRs (at most one per IP family)'],
      ],
    );
    assert.deepEqual(
      rangesFromFlag(['198.18.0.0/16', '198.19.0.0/16']).problems.map((p) => p.reason),
      ['a second IPv4 CIDR (at most one per IP family)'],
    );
  });

  it('ServiceCIDR objects: spec.cidrs of each, sources named, malformed objects reported', () => {
    const r = rangesFromServiceCidrs([
      sc('z-extra', ['198.19.128.0/17']),
      sc('kubernetes', ['198.19.0.0/17', '2001:db8:ffff::/108']),
      sc('broken', 'nope'),
      sc('junk', [42]),
    ]);
    assert.deepEqual(r.ranges, [
      { cidr: '198.19.0.0/17', family: 'IPv4', source: 'ServiceCIDR/kubernetes' },
      { cidr: '2001:db8:ffff::/108', family: 'IPv6', source: 'ServiceCIDR/kubernetes' },
      { cidr: '198.19.128.0/17', family: 'IPv4', source: 'ServiceCIDR/z-extra' },
    ]);
    assert.deepEqual(
      r.problems.map((p) => [p.source, p.reason]),
      [
        ['ServiceCIDR/broken', 'spec.cidrs is not a list'],
        ['ServiceCIDR/junk', 'not a CIDR'],
      ],
    );
  });

  it('in force: the ServiceCIDR objects when served and usable, else the flag', () => {
    const flag = ['198.18.0.0/16'];
    assert.deepEqual(
      effectiveServiceRanges(flag, undefined).ranges.map((r) => r.source),
      ['flag'],
      'kind not served',
    );
    assert.deepEqual(
      effectiveServiceRanges(flag, []).ranges.map((r) => r.source),
      ['flag'],
      'served, no object',
    );
    assert.deepEqual(
      effectiveServiceRanges(flag, [sc('bad', ['x'])]).ranges.map((r) => r.source),
      ['flag'],
      'served, nothing usable',
    );
    assert.deepEqual(effectiveServiceRanges(flag, [sc('kubernetes', ['198.19.0.0/16'])]).ranges, [
      { cidr: '198.19.0.0/16', family: 'IPv4', source: 'ServiceCIDR/kubernetes' },
    ]);
    assert.deepEqual(
      effectiveServiceRanges([], [sc('a', ['198.19.0.0/16']), sc('b', ['198.19.0.0/16'])]).ranges.map((r) => r.source),
      ['ServiceCIDR/a'],
      'one entry per CIDR',
    );
    assert.deepEqual(effectiveServiceRanges(['junk'], undefined), { ranges: [], problems: [{ source: 'flag', value: 'junk', reason: 'not a CIDR' }] });
  });
});
