/**
 * The frames the tc-program benches run through BPF_PROG_TEST_RUN.
 */
import { IPPROTO } from '../agent/maps/layout.js';

/** Ethernet + IPv4 + TCP SYN from 198.18.100.2:40000 to node:port (checksums do not matter: the benched paths rewrite nothing). */
export function tcpSyn(node: string, port: number): Buffer {
  const b = Buffer.alloc(14 + 20 + 20);
  b.writeUInt16BE(0x0800, 12);
  b[14] = 0x45;
  b.writeUInt16BE(40, 16);
  b[22] = 64;
  b[23] = IPPROTO.TCP;
  Buffer.from([198, 18, 100, 2]).copy(b, 26);
  Buffer.from(node.split('.').map(Number)).copy(b, 30);
  b.writeUInt16BE(40000, 34);
  b.writeUInt16BE(port, 36);
  b[46] = 0x50;
  b[47] = 0x02;
  return b;
}
