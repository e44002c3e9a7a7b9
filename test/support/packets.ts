/**
 * Builds and checks Ethernet/IPv4/IPv6 + TCP/UDP/SCTP packets for
 * BPF_PROG_TEST_RUN tests, with real checksums (SCTP: CRC32c), so a test can
 * tell a correct rewrite from a merely plausible one.
 */
import { isIPv4 } from 'node:net';
import { encodeAddr } from '../../agent/maps/layout.js';

export interface PacketSpec {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  proto: 'TCP' | 'UDP' | 'SCTP';
  /** TCP flags byte (default SYN). */
  tcpFlags?: number;
  payload?: Buffer;
  /** UDP: send a zero checksum (IPv4 allows "no checksum"). */
  udpNoChecksum?: boolean;
}

export const TCP_SYN = 0x02;
export const TCP_ACK = 0x10;
export const TCP_FIN = 0x01;
export const TCP_RST = 0x04;

function sum16(buf: Buffer, acc = 0): number {
  for (let i = 0; i + 1 < buf.length; i += 2) acc += buf.readUInt16BE(i);
  if (buf.length % 2) acc += buf[buf.length - 1] << 8;
  return acc;
}

function fold(acc: number): number {
  while (acc > 0xffff) acc = (acc & 0xffff) + (acc >>> 16);
  return acc;
}

function ipBytes(addr: string): Buffer {
  const b = Buffer.alloc(16);
  encodeAddr(addr, b, 0);
  return isIPv4(addr) ? b.subarray(12) : b;
}

/** One's-complement checksum of the L4 segment with its pseudo header. */
function l4Checksum(src: Buffer, dst: Buffer, proto: number, segment: Buffer): number {
  const pseudo =
    src.length === 4
      ? Buffer.concat([src, dst, Buffer.from([0, proto]), u16(segment.length)])
      : Buffer.concat([src, dst, u32(segment.length), Buffer.from([0, 0, 0, proto])]);
  return ~fold(sum16(segment, sum16(pseudo))) & 0xffff;
}

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

/** CRC32c (Castagnoli) as SCTP computes it (RFC 9260 appendix B). */
export function crc32c(buf: Buffer): number {
  let c = 0xffffffff;
  for (const b of buf) c = CRC32C_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** The CRC32c of an SCTP packet, its checksum field (bytes 8..11, little-endian on the wire) taken as zero. */
function sctpChecksum(l4: Buffer): number {
  const copy = Buffer.from(l4);
  copy.writeUInt32LE(0, 8);
  return crc32c(copy);
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

export function buildPacket(p: PacketSpec): Buffer {
  const v4 = isIPv4(p.src);
  const proto = p.proto === 'TCP' ? 6 : p.proto === 'UDP' ? 17 : 132;
  const payload = p.payload ?? Buffer.from('kpr');
  let l4: Buffer;
  if (p.proto === 'SCTP') {
    // Common header and one INIT chunk (RFC 9260 3.3.2): what opens an association.
    l4 = Buffer.alloc(12 + 20);
    l4.writeUInt16BE(p.sport, 0);
    l4.writeUInt16BE(p.dport, 2);
    l4[12] = 1; // INIT
    l4.writeUInt16BE(20, 14);
    l4.writeUInt32BE(0x6b707221, 16); // initiate tag
    l4.writeUInt32BE(65536, 20); // a_rwnd
    l4.writeUInt16BE(10, 24); // outbound streams
    l4.writeUInt16BE(10, 26); // inbound streams
    l4.writeUInt32BE(1, 28); // initial TSN
    l4.writeUInt32LE(sctpChecksum(l4), 8);
  } else if (p.proto === 'TCP') {
    l4 = Buffer.alloc(20 + payload.length);
    l4.writeUInt16BE(p.sport, 0);
    l4.writeUInt16BE(p.dport, 2);
    l4.writeUInt32BE(1, 4);
    l4[12] = 5 << 4;
    l4[13] = p.tcpFlags ?? TCP_SYN;
    l4.writeUInt16BE(65535, 14);
    payload.copy(l4, 20);
  } else {
    l4 = Buffer.alloc(8 + payload.length);
    l4.writeUInt16BE(p.sport, 0);
    l4.writeUInt16BE(p.dport, 2);
    l4.writeUInt16BE(l4.length, 4);
    payload.copy(l4, 8);
  }
  const src = ipBytes(p.src);
  const dst = ipBytes(p.dst);
  const csumOff = p.proto === 'TCP' ? 16 : 6;
  if (p.proto !== 'SCTP' && !(p.proto === 'UDP' && p.udpNoChecksum)) {
    const c = l4Checksum(src, dst, proto, l4);
    l4.writeUInt16BE(p.proto === 'UDP' && c === 0 ? 0xffff : c, csumOff);
  }
  const eth = Buffer.alloc(14);
  eth.fill(0x02, 0, 6);
  eth.fill(0x04, 6, 12);
  eth.writeUInt16BE(v4 ? 0x0800 : 0x86dd, 12);
  let l3: Buffer;
  if (v4) {
    l3 = Buffer.alloc(20);
    l3[0] = 0x45;
    l3.writeUInt16BE(20 + l4.length, 2);
    l3.writeUInt16BE(0x4000, 6); // DF
    l3[8] = 64;
    l3[9] = proto;
    src.copy(l3, 12);
    dst.copy(l3, 16);
    l3.writeUInt16BE(~fold(sum16(l3)) & 0xffff, 10);
  } else {
    l3 = Buffer.alloc(40);
    l3[0] = 0x60;
    l3.writeUInt16BE(l4.length, 4);
    l3[6] = proto;
    l3[7] = 64;
    src.copy(l3, 8);
    dst.copy(l3, 24);
  }
  return Buffer.concat([eth, l3, l4]);
}

export interface ParsedPacket {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  proto: number;
  ipChecksumOk: boolean;
  l4ChecksumOk: boolean;
  l4Checksum: number;
  payload: Buffer;
}

function addrText(b: Buffer): string {
  if (b.length === 4) return [...b].join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

export function parsePacket(pkt: Buffer): ParsedPacket {
  const v4 = pkt.readUInt16BE(12) === 0x0800;
  const l3 = pkt.subarray(14);
  const ihl = v4 ? (l3[0] & 0xf) * 4 : 40;
  const proto = v4 ? l3[9] : l3[6];
  const src = v4 ? l3.subarray(12, 16) : l3.subarray(8, 24);
  const dst = v4 ? l3.subarray(16, 20) : l3.subarray(24, 40);
  const l4Len = v4 ? l3.readUInt16BE(2) - ihl : l3.readUInt16BE(4);
  const l4 = Buffer.from(l3.subarray(ihl, ihl + l4Len));
  if (proto === 132) {
    const whole = l4.length >= 12; // a truncated common header has no checksum to check
    const stored = whole ? l4.readUInt32LE(8) : 0;
    return {
      src: addrText(Buffer.from(src)),
      dst: addrText(Buffer.from(dst)),
      sport: l4.readUInt16BE(0),
      dport: l4.readUInt16BE(2),
      proto,
      ipChecksumOk: v4 ? fold(sum16(l3.subarray(0, ihl))) === 0xffff : true,
      l4ChecksumOk: whole && stored === sctpChecksum(l4),
      l4Checksum: stored,
      payload: l4.subarray(12),
    };
  }
  const csumOff = proto === 6 ? 16 : 6;
  const stored = l4.readUInt16BE(csumOff);
  l4.writeUInt16BE(0, csumOff);
  let expect = l4Checksum(Buffer.from(src), Buffer.from(dst), proto, l4);
  if (proto === 17 && expect === 0) expect = 0xffff;
  return {
    src: addrText(Buffer.from(src)),
    dst: addrText(Buffer.from(dst)),
    sport: l4.readUInt16BE(0),
    dport: l4.readUInt16BE(2),
    proto,
    ipChecksumOk: v4 ? fold(sum16(l3.subarray(0, ihl))) === 0xffff : true,
    l4ChecksumOk: proto === 17 && stored === 0 ? true : stored === expect,
    l4Checksum: stored,
    payload: l4.subarray(proto === 6 ? 20 : 8),
  };
}
