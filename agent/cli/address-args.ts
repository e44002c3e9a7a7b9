/**
 * The CLI reads the addresses typed on its command line strictly. The agent
 * reads the API's addresses leniently, as kube-proxy does (an IPv4 octet
 * with leading zeros is decimal there: agent/net/ip.ts), but a person who
 * types `198.019.0.10` may mean octal (inet_aton reads `010` as 8 and
 * refuses `019`): the CLI refuses it with a usage error (exit 2) instead of
 * guessing which address was meant.
 */
import { UsageError } from './errors.js';

/** Dotted quads in `text` (an address, IP:PORT, [v6]:port with a dotted tail, or a CIDR). */
const DOTTED = /(?<![\d.])(\d+)\.(\d+)\.(\d+)\.(\d+)(?![\d.])/g;

/** Throws a UsageError when an IPv4 address in `text` (the value of `flag`) has an octet with a leading zero. */
export function rejectLeadingZeros(text: string, flag: string, command?: string): void {
  for (const m of text.matchAll(DOTTED)) {
    const octets = m.slice(1, 5);
    if (!octets.some((o) => o.length > 1 && o.startsWith('0'))) continue;
    throw new UsageError(
      `invalid ${flag} "${text}": ${m[0]} has an octet with a leading zero, which tools read differently (decimal or octal); write the address without leading zeros`,
      command,
    );
  }
}
