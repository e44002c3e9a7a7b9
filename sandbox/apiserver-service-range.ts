/**
 * One service ClusterIP range of the sandbox API server (an entry of
 * kube-apiserver's --service-cluster-ip-range: "198.19.0.0/16" or
 * "2001:db8:19::/112"), as addresses by offset, in the text form the real
 * one stores (IPv6 compressed, lower case).
 */
import net from 'node:net';

export type IPFamily = 'IPv4' | 'IPv6';

export class ServiceRange {
  readonly family: IPFamily;
  private readonly base: bigint;
  /** Number of addresses in the range. */
  readonly size: bigint;

  constructor(readonly cidr: string) {
    const [ip, bitsText] = cidr.trim().split('/');
    const bits = Number(bitsText);
    if (net.isIPv4(ip)) this.family = 'IPv4';
    else if (net.isIPv6(ip)) this.family = 'IPv6';
    else throw new Error(`service range ${cidr}: not an IP range`);
    const width = this.family === 'IPv4' ? 32 : 128;
    if (!Number.isInteger(bits) || bits < 0 || bits > width) throw new Error(`service range ${cidr}: bad prefix length`);
    this.size = 1n << BigInt(width - bits);
    this.base = (toBigInt(ip) >> BigInt(width - bits)) << BigInt(width - bits);
  }

  /** The address at `offset` from the start of the range. */
  at(offset: bigint): string {
    return fromBigInt(this.base + offset, this.family);
  }
}

/** The family of an IP address text, or undefined when it is none. */
export function familyOf(ip: string): IPFamily | undefined {
  return net.isIPv4(ip) ? 'IPv4' : net.isIPv6(ip) ? 'IPv6' : undefined;
}

function toBigInt(ip: string): bigint {
  if (net.isIPv4(ip)) return ip.split('.').reduce((n, o) => (n << 8n) | BigInt(Number(o)), 0n);
  const [head, tail = ''] = ip.includes('::') ? ip.split('::') : [ip, undefined as unknown as string];
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const h = groups(head);
  const t = ip.includes('::') ? groups(tail) : [];
  const all = ip.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return all.reduce((n, g) => (n << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function fromBigInt(n: bigint, family: IPFamily): string {
  if (family === 'IPv4') return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => ((n >> BigInt(112 - 16 * i)) & 0xffffn).toString(16));
  // RFC 5952: the longest run of two or more zero groups (the first of equals) becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}
