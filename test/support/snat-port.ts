/**
 * The first SNAT port candidate kpr_snat.h computes for a client (its
 * kpr_snat_hash of the client's address and port, into kpr's range), so
 * BPF tests can say which port a flow leaves with. A mirror of the C for
 * tests only: test/bpf/tc-datapath.test.ts checks it against the program.
 */
import { encodeAddr, SNAT_PORT_RANGE } from '../../agent/maps/layout.js';

const SPAN = SNAT_PORT_RANGE.max - SNAT_PORT_RANGE.min + 1;

/** kpr_snat_hash: the C reads the 16-byte address as four u32 words and the port as a u16, in the host's (little-endian) order. */
export function snatHash(client: string, clientPort: number): number {
  const addr = Buffer.alloc(16);
  encodeAddr(client, addr, 0);
  const portWord = ((clientPort & 0xff) << 8) | (clientPort >>> 8);
  let h = (0x9e3779b9 ^ portWord) >>> 0;
  for (let i = 0; i < 4; i++) {
    h = (h ^ addr.readUInt32LE(i * 4)) >>> 0;
    h = Math.imul(h, 0xcc9e2d51) >>> 0;
    h = ((h << 15) | (h >>> 17)) >>> 0;
    h = Math.imul(h, 0x1b873593) >>> 0;
  }
  h = (h ^ (h >>> 16)) >>> 0;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h = (h ^ (h >>> 13)) >>> 0;
  return h;
}

/** The first candidate for client:clientPort (host order). */
export function firstSnatPort(client: string, clientPort: number): number {
  return SNAT_PORT_RANGE.min + (snatHash(client, clientPort) % SPAN);
}

/** A client port (above `from`) whose first candidate is `snatPort`: for tests that need two clients on one reply tuple. */
export function clientPortHashingTo(client: string, snatPort: number, from = 20000): number {
  for (let p = from; p < 65536; p++) if (firstSnatPort(client, p) === snatPort) return p;
  for (let p = 1; p < from; p++) if (firstSnatPort(client, p) === snatPort) return p;
  throw new Error(`no port of ${client} hashes to ${snatPort}`);
}
