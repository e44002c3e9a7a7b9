/**
 * agent/net: addresses and CIDRs as the API server and kube-proxy read them
 * (Go's ParseIPSloppy / ParseCIDRSloppy: IPv4 leading zeros read as decimal,
 * no IPv6 zone, IPv4-mapped IPv6 is IPv4), their byte form in the map keys,
 * and kube-proxy's listen addresses.
 */
import assert from 'node:assert/strict';
import { isIPv4 as nodeIsIPv4 } from 'node:net';
import { describe, it } from 'node:test';
import {
  cidrContains,
  compareAddrKeys,
  formatIPv4,
  formatIPv6,
  ipv4Canonical,
  IPV4_INVALID,
  IPV4_NONCANONICAL,
  ipv6Groups,
  isCanonicalIPv4,
  looksLikeIPv6,
  mappedIPv4,
  networkText,
  parseCIDR,
  parseIP,
  parseIPv4,
} from '../../agent/net/ip.js';
import { formatAddress, parseBindAddress } from '../../agent/net/listen-address.js';
import { rng } from '../support/rng.js';
import { decodeAddr, decodeSrcRangeKey, encodeAddr, encodeIPv4Num, encodeSrcRangeKey } from '../../agent/maps/layout.js';

const NOT_ADDRESSES: unknown[] = [
  '',
  'x',
  '1.2.3',
  '1.2.3.4.5',
  '1.2.3.256',
  '1..2.3',
  '1.2.3.',
  '.1.2.3',
  '1234.1.1.1',
  ' 1.2.3.4',
  '1.2.3.4 ',
  '1.2.3.-4',
  '1.2.3.4/32',
  ':',
  ':::',
  '1::2::3',
  '2001:db8::g',
  '12345::',
  '[::1]',
  'fe80::1%eth0',
  '::ffff:1.2.3.4%0',
  undefined,
  null,
  5,
  {},
];

describe('IPv4', () => {
  it('ipv4Canonical gives the u32 of a canonical dotted quad, and tells leading zeros from garbage', () => {
    assert.equal(ipv4Canonical('0.0.0.0'), 0);
    assert.equal(ipv4Canonical('10.0.0.1'), 0x0a000001);
    assert.equal(ipv4Canonical('198.18.255.7'), 0xc612ff07);
    assert.equal(ipv4Canonical('255.255.255.255'), 0xffffffff);
    for (const s of ['010.0.0.1', '1.2.3.00', '00.0.0.0', '1.02.3.4']) assert.equal(ipv4Canonical(s), IPV4_NONCANONICAL, s);
    for (const s of NOT_ADDRESSES) assert.equal(ipv4Canonical(s), IPV4_INVALID, String(s));
    for (const s of ['::1', '::ffff:1.2.3.4', '0001.2.3.4']) assert.equal(ipv4Canonical(s), IPV4_INVALID, s);
  });

  it('isCanonicalIPv4 agrees with node:net isIPv4, on fixed and random strings', () => {
    const fixed = [
      '0.0.0.0',
      '1.2.3.4',
      '255.255.255.255',
      '010.0.0.1',
      '256.0.0.1',
      '1.2.3',
      ...NOT_ADDRESSES.filter((s): s is string => typeof s === 'string'),
    ];
    const r = rng(19);
    // Quads made wrong now and then: a part missing or extra, out of range, with a leading zero, empty, or a stray character.
    const part = () => {
      const x = r();
      if (x < 0.7) return String(Math.floor(r() * 256));
      if (x < 0.8) return String(256 + Math.floor(r() * 800));
      if (x < 0.9) return `0${Math.floor(r() * 100)}`;
      return x < 0.95 ? '' : 'x';
    };
    const random = Array.from({ length: 20000 }, () => Array.from({ length: r() < 0.9 ? 4 : 3 + Math.floor(r() * 3) }, part).join('.'));
    let valid = 0;
    for (const s of [...fixed, ...random]) {
      assert.equal(isCanonicalIPv4(s), nodeIsIPv4(s), s);
      if (nodeIsIPv4(s)) valid++;
    }
    assert.ok(valid > 2000 && valid < 18000, `${valid} valid addresses among the random strings`);
  });

  it('parseIPv4 reads leading zeros as decimal (ParseIPSloppy) and prints the canonical quad', () => {
    assert.deepEqual(parseIPv4('10.0.0.1'), { text: '10.0.0.1', num: 0x0a000001 });
    assert.deepEqual(parseIPv4('010.000.0.1'), { text: '10.0.0.1', num: 0x0a000001 });
    assert.deepEqual(parseIPv4('192.168.001.010'), { text: '192.168.1.10', num: 0xc0a8010a });
    for (const s of [...NOT_ADDRESSES, '::1']) assert.equal(parseIPv4(s), null, String(s));
  });

  it('formatIPv4 prints a u32 dotted, the high bit included', () => {
    assert.equal(formatIPv4(0), '0.0.0.0');
    assert.equal(formatIPv4(0xc6120001), '198.18.0.1');
    assert.equal(formatIPv4(0xffffffff), '255.255.255.255');
  });
});

describe('IPv6', () => {
  it('looksLikeIPv6 takes every IPv6 form, the dotted tail included, and no zone (Go net.ParseIP)', () => {
    for (const s of ['::', '::1', '2001:db8::1', '2001:DB8:0:0:0:0:0:1', '1:2:3:4:5:6:7:8', '::ffff:198.18.0.1', '::1.2.3.4', 'fe80::1'])
      assert.equal(looksLikeIPv6(s), true, s);
    for (const s of [...NOT_ADDRESSES, '1.2.3.4', 'fe80::%eth0', 'fe80::1%25eth0']) assert.equal(looksLikeIPv6(s), false, String(s));
  });

  it('ipv6Groups gives the 8 groups of any form; null for anything else', () => {
    assert.deepEqual(ipv6Groups('2001:db8::1'), [0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]);
    assert.deepEqual(ipv6Groups('2001:DB8:0000:0:0:0:0:0001'), [0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]);
    assert.deepEqual(ipv6Groups('::'), [0, 0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual(ipv6Groups('1::'), [1, 0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual(ipv6Groups('1:2:3:4:5:6:7:8'), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert.deepEqual(ipv6Groups('::ffff:198.18.0.1'), [0, 0, 0, 0, 0, 0xffff, 0xc612, 0x0001]);
    assert.deepEqual(ipv6Groups('64:ff9b::10.0.0.1'), [0x64, 0xff9b, 0, 0, 0, 0, 0x0a00, 0x0001]);
    for (const s of [...NOT_ADDRESSES, '1.2.3.4']) assert.equal(ipv6Groups(s), null, String(s));
  });

  it('mappedIPv4 finds ::ffff:a.b.c.d and nothing else', () => {
    assert.equal(mappedIPv4([0, 0, 0, 0, 0, 0xffff, 0xc612, 0x0001]), 0xc6120001);
    assert.equal(mappedIPv4([0, 0, 0, 0, 0, 0xffff, 0, 0]), 0);
    assert.equal(mappedIPv4([0, 0, 0, 0, 0, 0, 0xc612, 0x0001]), -1, 'IPv4-compatible (::a.b.c.d) is IPv6');
    assert.equal(mappedIPv4([0, 0, 0, 0, 1, 0xffff, 0xc612, 0x0001]), -1);
    assert.equal(mappedIPv4([0, 0, 0, 0, 0, 0xfffe, 0xc612, 0x0001]), -1);
  });

  it('formatIPv6 prints RFC 5952 (the first longest zero run of two or more), mapped addresses dotted as Go does', () => {
    assert.equal(formatIPv6([0, 0, 0, 0, 0, 0, 0, 0]), '::');
    assert.equal(formatIPv6([0, 0, 0, 0, 0, 0, 0, 1]), '::1');
    assert.equal(formatIPv6([1, 0, 0, 0, 0, 0, 0, 0]), '1::');
    assert.equal(formatIPv6([0x2001, 0xdb8, 0, 0, 1, 0, 0, 1]), '2001:db8::1:0:0:1');
    assert.equal(formatIPv6([0x2001, 0xdb8, 0, 1, 0, 0, 0, 1]), '2001:db8:0:1::1');
    assert.equal(formatIPv6([0x2001, 0xdb8, 0, 1, 1, 1, 1, 1]), '2001:db8:0:1:1:1:1:1', 'one zero group stays');
    assert.equal(formatIPv6([0xfe80, 0, 0, 0, 0xabcd, 0, 0, 0]), 'fe80::abcd:0:0:0');
    assert.equal(formatIPv6([0, 0, 0, 0, 0, 0xffff, 0xc612, 0x0001]), '198.18.0.1');
    assert.equal(formatIPv6([0, 0, 0, 0, 0, 0, 0x0102, 0x0304]), '::102:304');
  });

  it('ipv6Groups and formatIPv6 round-trip random addresses, and agree with the URL parser', () => {
    const r = rng(5952);
    for (let n = 0; n < 2000; n++) {
      // Runs of zeros are common in real addresses: half the groups are 0.
      const groups = Array.from({ length: 8 }, () => (r() < 0.5 ? 0 : Math.floor(r() * 0x10000)));
      const text = formatIPv6(groups);
      if (mappedIPv4(groups) >= 0) continue;
      assert.deepEqual(ipv6Groups(text), groups, text);
      assert.equal(text, new URL(`http://[${text}]/`).hostname.slice(1, -1), 'the URL parser prints RFC 5952 too');
    }
  });
});

describe('parseIP', () => {
  it('either family, canonical text and a sort key; IPv4-mapped IPv6 is IPv4', () => {
    assert.deepEqual(parseIP('198.18.0.1'), { family: 'IPv4', text: '198.18.0.1', key: 0xc6120001 });
    assert.deepEqual(parseIP('198.018.000.001'), { family: 'IPv4', text: '198.18.0.1', key: 0xc6120001 });
    assert.deepEqual(parseIP('::ffff:198.18.0.1'), { family: 'IPv4', text: '198.18.0.1', key: 0xc6120001 });
    assert.deepEqual(parseIP('::FFFF:c612:1'), { family: 'IPv4', text: '198.18.0.1', key: 0xc6120001 });
    assert.deepEqual(parseIP('2001:DB8:0:0::1'), { family: 'IPv6', text: '2001:db8::1', key: '20010db8000000000000000000000001' });
    assert.deepEqual(parseIP('::'), { family: 'IPv6', text: '::', key: '0'.repeat(32) });
    assert.deepEqual(parseIP('::1.2.3.4'), { family: 'IPv6', text: '::102:304', key: `${'0'.repeat(24)}01020304` });
  });

  it('rejects zones (the validator relies on it), surrounding space and everything else', () => {
    for (const s of NOT_ADDRESSES) assert.equal(parseIP(s), null, String(s));
    assert.equal(parseIP('fe80::1%eth0'), null);
    assert.deepEqual(parseIP('fe80::1'), { family: 'IPv6', text: 'fe80::1', key: `fe80${'0'.repeat(27)}1` }, 'without its zone it is an address');
  });

  it('sort keys order numerically within a family, IPv4 first (compareAddrKeys)', () => {
    const addrs = ['2001:db8::10', '10.0.0.10', '::1', '10.0.0.2', '2001:db8::9', '9.255.255.255', '255.0.0.0'];
    const sorted = [...addrs].sort((a, b) => compareAddrKeys(parseIP(a)!.key, parseIP(b)!.key));
    assert.deepEqual(sorted, ['9.255.255.255', '10.0.0.2', '10.0.0.10', '255.0.0.0', '::1', '2001:db8::9', '2001:db8::10']);
    assert.equal(compareAddrKeys(5, 5), 0);
    assert.equal(compareAddrKeys('0a', '0a'), 0);
  });
});

describe('CIDRs', () => {
  it('parseCIDR as IsValidCIDR (ParseCIDRSloppy) on the trimmed value: canonical address, host bits kept', () => {
    assert.deepEqual(parseCIDR(' 10.0.0.0/8\n'), { family: 'IPv4', text: '10.0.0.0/8', bits: 0x0a000000n, prefix: 8 });
    assert.equal(parseCIDR('10.1.2.3/8')!.text, '10.1.2.3/8');
    assert.equal(parseCIDR('010.001.0.0/16')!.text, '10.1.0.0/16');
    assert.equal(parseCIDR('0.0.0.0/0')!.prefix, 0);
    assert.deepEqual(parseCIDR('2001:DB8::/32'), { family: 'IPv6', text: '2001:db8::/32', bits: 0x20010db8n << 96n, prefix: 32 });
    assert.equal(parseCIDR('::/128')!.text, '::/128');
    for (const s of [
      '10.0.0.0',
      '10.0.0.0/',
      '10.0.0.0/33',
      '::/129',
      '10.0.0.0/-1',
      '10.0.0.0/ 8',
      '10.0.0.0/0x8',
      '10.0.0.0/1e1',
      '10.0.0.0/8/8',
      '10.0.0.0/1234',
      'fe80::%eth0/64',
      '/8',
      'x/8',
      5,
      null,
      undefined,
    ]) {
      assert.equal(parseCIDR(s), null, String(s));
    }
  });

  it('cidrContains: inside the prefix, same family only', () => {
    const v4 = parseCIDR('198.18.0.0/15')!;
    assert.equal(cidrContains(v4, parseIP('198.18.0.0')!), true);
    assert.equal(cidrContains(v4, parseIP('198.19.255.255')!), true);
    assert.equal(cidrContains(v4, parseIP('198.20.0.0')!), false);
    assert.equal(cidrContains(v4, parseIP('198.17.255.255')!), false);
    assert.equal(cidrContains(v4, parseIP('::ffff:198.18.1.1')!), true, 'a mapped address is IPv4');
    assert.equal(cidrContains(parseCIDR('0.0.0.0/0')!, parseIP('255.255.255.255')!), true);
    assert.equal(cidrContains(parseCIDR('0.0.0.0/0')!, parseIP('::1')!), false);
    const v6 = parseCIDR('2001:db8::/32')!;
    assert.equal(cidrContains(v6, parseIP('2001:db8:ffff:ffff:ffff:ffff:ffff:ffff')!), true);
    assert.equal(cidrContains(v6, parseIP('2001:db9::')!), false);
    assert.equal(cidrContains(v6, parseIP('32.1.13.184')!), false, 'the same bits in the other family');
    assert.equal(cidrContains(parseCIDR('2001:db8::1/128')!, parseIP('2001:db8::1')!), true);
    assert.equal(cidrContains(parseCIDR('2001:db8::1/128')!, parseIP('2001:db8::2')!), false);
  });

  it('networkText clears the host bits and prints the canonical network (the source-range map form)', () => {
    const net = (s: string) => networkText(parseCIDR(s)!);
    assert.equal(net('198.18.7.9/16'), '198.18.0.0/16');
    assert.equal(net('198.18.7.9/32'), '198.18.7.9/32');
    assert.equal(net('255.255.255.255/31'), '255.255.255.254/31');
    assert.equal(net('1.2.3.4/0'), '0.0.0.0/0');
    assert.equal(net('010.1.2.3/8'), '10.0.0.0/8');
    assert.equal(net('2001:db8:1:2::5/48'), '2001:db8:1::/48');
    assert.equal(net('2001:DB8::1/128'), '2001:db8::1/128');
    assert.equal(net('ffff:ffff::/1'), '8000::/1');
    assert.equal(net('::1/0'), '::/0');
  });
});

describe("addresses in map keys (maps/layout.ts, on net's parse)", () => {
  const bytes = (addr: string) => {
    const b = Buffer.alloc(16);
    encodeAddr(addr, b, 0);
    return b.toString('hex');
  };

  it('encodeAddr writes 16 bytes, IPv4 as ::ffff:a.b.c.d; decodeAddr reads them back canonical', () => {
    assert.equal(bytes('198.18.0.1'), '00000000000000000000ffffc6120001');
    assert.equal(bytes('::ffff:198.18.0.1'), '00000000000000000000ffffc6120001');
    assert.equal(bytes('2001:db8::1'), '20010db8000000000000000000000001');
    assert.equal(bytes('::'), '0'.repeat(32));
    for (const a of ['198.18.0.1', '2001:DB8::1', '::ffff:198.18.0.1', '::', '::1.2.3.4', 'fe80::abcd:0:0:0']) {
      const b = Buffer.alloc(20, 0xee);
      encodeAddr(a, b, 2);
      assert.equal(decodeAddr(b, 2), parseIP(a)!.text, a);
      assert.equal(b[1], 0xee);
      assert.equal(b[18], 0xee, 'nothing written outside the 16 bytes');
    }
  });

  it('encodeIPv4Num writes what encodeAddr writes for the address text', () => {
    for (const a of ['0.0.0.0', '10.0.0.1', '198.18.255.7', '255.255.255.255']) {
      const b = Buffer.alloc(16, 0xee);
      encodeIPv4Num(ipv4Canonical(a), b, 0);
      assert.equal(b.toString('hex'), bytes(a), a);
    }
  });

  it('encodeAddr throws RangeError for anything that is not a canonical address (leading zeros and zones included)', () => {
    for (const a of ['010.0.0.1', '1.2.3', '1.2.3.256', 'x', '', 'fe80::1%eth0', ' 1.2.3.4'])
      assert.throws(() => encodeAddr(a, Buffer.alloc(16), 0), RangeError, a);
  });

  it('source-range keys carry the prefix, IPv4 as /96+n', () => {
    for (const cidr of ['198.18.100.0/24', '0.0.0.0/0', '2001:db8::/32', '::/0']) {
      const key = encodeSrcRangeKey({ frontendId: 7, cidr });
      assert.deepEqual(decodeSrcRangeKey(key), { frontendId: 7, cidr });
    }
    assert.equal(encodeSrcRangeKey({ frontendId: 1, cidr: '198.18.100.0/24' }).readUInt32LE(0), 32 + 96 + 24);
    assert.equal(encodeSrcRangeKey({ frontendId: 1, cidr: '2001:db8::/32' }).readUInt32LE(0), 32 + 32);
  });
});

describe('listen addresses (kube-proxy --healthz-bind-address / --metrics-bind-address)', () => {
  it('IP:port and [IPv6]:port parse; empty disables', () => {
    assert.deepEqual(parseBindAddress('0.0.0.0:10256', '--x'), { host: '0.0.0.0', port: 10256 });
    assert.deepEqual(parseBindAddress('127.0.0.1:0', '--x'), { host: '127.0.0.1', port: 0 });
    assert.deepEqual(parseBindAddress('[::]:10256', '--x'), { host: '::', port: 10256 });
    assert.deepEqual(parseBindAddress('[::1]:10249', '--x'), { host: '::1', port: 10249 });
    assert.deepEqual(parseBindAddress('[2001:db8::1]:65535', '--x'), { host: '2001:db8::1', port: 65535 });
    assert.deepEqual(parseBindAddress('[fe80::1%eth0]:10256', '--x'), { host: 'fe80::1%eth0', port: 10256 }, 'a socket can bind a zoned address');
    assert.equal(parseBindAddress('', '--x'), undefined);
  });

  it('anything else is an error naming the flag and the value', () => {
    for (const bad of [
      '10256',
      ':10256',
      'localhost:10256',
      '0.0.0.0',
      '0.0.0.0:',
      '1.2.3.4:70000',
      '1.2.3.4:65536',
      '::1:80',
      '[::1]',
      '[::1]:',
      '[::1]:65536',
      '[1.2.3.4]:80',
      '0.0.0.0:port',
      '010.0.0.1:80',
      ' 0.0.0.0:80',
    ]) {
      assert.throws(
        () => parseBindAddress(bad, '--healthz-bind-address'),
        new RegExp(`invalid --healthz-bind-address "${bad.replace(/[[\]]/g, '\\$&')}"`),
        bad,
      );
    }
  });

  it('formatAddress brackets IPv6 and round-trips through parseBindAddress', () => {
    assert.equal(formatAddress('::1', 80), '[::1]:80');
    assert.equal(formatAddress('0.0.0.0', 10256), '0.0.0.0:10256');
    for (const [host, port] of [
      ['::1', 10249],
      ['198.18.0.1', 0],
      ['2001:db8::1', 65535],
    ] as const) {
      assert.deepEqual(parseBindAddress(formatAddress(host, port), '--x'), { host, port });
    }
  });
});
