/** IP addresses and CIDRs as the API server's validation parses them (agent/net/ip.ts does the parsing). */
import { parseCIDR, parseIP, type ParsedIP } from '../../net/ip.js';
import { fail, show } from './json-checks.js';

/** An IP address as the API server parses it (ParseIPSloppy: IPv4 leading zeros allowed; no IPv6 zone). */
export function ip(s: string, field: string): ParsedIP {
  const p = parseIP(s);
  if (!p) fail(field, `must be a valid IP address, not ${show(s)}`);
  return p;
}

/** ValidateNonSpecialIP / ValidateEndpointIP: no unspecified, loopback, link-local or link-local multicast address. */
export function nonSpecialIP(p: ParsedIP, s: string, field: string): void {
  let what = '';
  if (typeof p.key === 'number') {
    const a = p.key;
    if (a === 0) what = 'unspecified';
    else if (a >>> 24 === 127) what = 'in the loopback range (127.0.0.0/8)';
    else if (a >>> 16 === 0xa9fe) what = 'in the link-local range (169.254.0.0/16)';
    else if (a >>> 8 === 0xe00000) what = 'in the link-local multicast range (224.0.0.0/24)';
  } else {
    const k = p.key;
    if (/^0{32}$/.test(k)) what = 'unspecified';
    else if (/^0{31}1$/.test(k)) what = 'the loopback address (::1)';
    else if (/^fe[89ab]/.test(k)) what = 'in the link-local range (fe80::/10)';
    else if (k.startsWith('ff') && k[3] === '2') what = 'in the link-local multicast range (ff02::/16)';
  }
  if (what) fail(field, `may not be ${what}: ${show(s)}`);
}

/** IsValidCIDR (ParseCIDRSloppy) on the trimmed value, as loadBalancerSourceRanges allows. */
export function cidr(s: string, field: string): void {
  if (!parseCIDR(s)) fail(field, `must be a CIDR (e.g. 192.0.2.0/24 or 2001:db8::/64), not ${show(s)}`);
}
