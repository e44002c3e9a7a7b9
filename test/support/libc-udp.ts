/**
 * Plain libc UDP sockets for tests that need to know a socket's cookie
 * (SO_COOKIE) and see the errno its owner gets, independently of what kpr
 * reports: a connected socket is made in the calling thread's current network
 * namespace (wrap the call in withNetns to make it elsewhere).
 */
import koffi from 'koffi';
import { isIPv4 } from 'node:net';
import { libc } from '../../native/libbpf.js';
import { encodeAddr } from '../../agent/maps/layout.js';

const AF_INET = 2;
const AF_INET6 = 10;
const SOCK_DGRAM = 2;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SO_COOKIE = 57;
const MSG_DONTWAIT = 0x40;

export interface LibcUdp {
  /** A non-blocking UDP socket bound to addr:port (IPv4 or IPv6 by the address), to receive what the others send. */
  bind(addr: string, port: number): number;
  /** A non-blocking UDP socket connected to addr:port (IPv4). */
  connect4(addr: string, port: number): number;
  /** The same over AF_INET6 (addr may be IPv4-mapped). */
  connect6(addr: string, port: number): number;
  cookie(fd: number): bigint;
  localPort(fd: number): number;
  /** Sends one byte: 0, or the errno of the failure. */
  send(fd: number): number;
  /** Receives without waiting: the errno (EAGAIN when nothing is pending), 0 when a datagram came. */
  recvErrno(fd: number): number;
  close(fd: number): void;
}

export function libcSockets(): LibcUdp {
  const lib = koffi.load('libc.so.6');
  const connect = lib.func('int connect(int fd, const void *addr, unsigned int len)') as (fd: number, a: Buffer, l: number) => number;
  const getsockname = lib.func('int getsockname(int fd, void *addr, void *len)') as (fd: number, a: Buffer, l: Buffer) => number;
  const bindFn = lib.func('int bind(int fd, const void *addr, unsigned int len)') as (fd: number, a: Buffer, l: number) => number;
  const lc = libc();
  const open = (family: number, sa: Buffer, call: typeof connect, what: string) => {
    const fd = lc.socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw new Error(`socket: errno ${koffi.errno()}`);
    if (call(fd, sa, sa.length) !== 0) {
      const errno = koffi.errno();
      lc.close(fd);
      throw new Error(`${what}: errno ${errno}`);
    }
    return fd;
  };
  const sockaddr4 = (addr: string, port: number) => {
    const sa = Buffer.alloc(16);
    sa.writeUInt16LE(AF_INET, 0);
    sa.writeUInt16BE(port, 2);
    const a16 = Buffer.alloc(16);
    encodeAddr(addr, a16, 0);
    a16.copy(sa, 4, 12, 16);
    return sa;
  };
  const sockaddr6 = (addr: string, port: number) => {
    const sa = Buffer.alloc(28);
    sa.writeUInt16LE(AF_INET6, 0);
    sa.writeUInt16BE(port, 2);
    encodeAddr(addr, sa, 8);
    return sa;
  };
  return {
    bind(addr, port) {
      return isIPv4(addr) ? open(AF_INET, sockaddr4(addr, port), bindFn, 'bind') : open(AF_INET6, sockaddr6(addr, port), bindFn, 'bind');
    },
    connect4(addr, port) {
      return open(AF_INET, sockaddr4(addr, port), connect, 'connect');
    },
    connect6(addr, port) {
      return open(AF_INET6, sockaddr6(addr, port), connect, 'connect');
    },
    cookie(fd) {
      const v = Buffer.alloc(8);
      const len = Buffer.alloc(4);
      len.writeUInt32LE(8, 0);
      if (lc.getsockopt(fd, SOL_SOCKET, SO_COOKIE, v, len) !== 0) throw new Error(`SO_COOKIE: errno ${koffi.errno()}`);
      return v.readBigUInt64LE(0);
    },
    localPort(fd) {
      const sa = Buffer.alloc(28);
      const len = Buffer.alloc(4);
      len.writeUInt32LE(sa.length, 0);
      if (getsockname(fd, sa, len) !== 0) throw new Error(`getsockname: errno ${koffi.errno()}`);
      return sa.readUInt16BE(2);
    },
    send(fd) {
      return lc.send(fd, Buffer.from([0x6b]), 1, MSG_DONTWAIT) === 1 ? 0 : koffi.errno();
    },
    recvErrno(fd) {
      return lc.recv(fd, Buffer.alloc(64), 64, MSG_DONTWAIT) >= 0 ? 0 : koffi.errno();
    },
    close(fd) {
      lc.close(fd);
    },
  };
}
