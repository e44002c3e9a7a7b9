/**
 * Running a synchronous piece of work inside another network namespace.
 * setns(2) moves only the calling thread; JavaScript and koffi calls run on
 * the main thread, so the switch covers exactly `fn` and is undone before any
 * other JavaScript runs. A socket opened meanwhile belongs to the other
 * namespace for its whole life, so `fn` opens one only on purpose (a
 * sock_diag socket, native/sock-diag.ts) and closes it before returning.
 */
import fs from 'node:fs';
import { libc } from './libbpf.js';
import { KprBpfError } from './errors.js';
import koffi from 'koffi';

const CLONE_NEWNET = 0x40000000;

function setns(fd: number, what: string): void {
  if (libc().setns(fd, CLONE_NEWNET) !== 0) {
    throw new KprBpfError({ op: 'setns', path: what, errno: koffi.errno() });
  }
}

export function withNetns<T>(nsPath: string, fn: () => T): T {
  const home = fs.openSync('/proc/thread-self/ns/net', 'r');
  try {
    const target = fs.openSync(nsPath, 'r');
    try {
      setns(target, nsPath);
    } finally {
      fs.closeSync(target);
    }
    try {
      return fn();
    } finally {
      setns(home, "the agent's own network namespace");
    }
  } finally {
    fs.closeSync(home);
  }
}

/** Interface index by name in the current namespace; 0 when there is none. */
export function ifIndex(name: string): number {
  return libc().if_nametoindex(name);
}

const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOL_SOCKET = 1;
const SO_NETNS_COOKIE = 71;

/** The cookie of the current network namespace (what bpf_get_netns_cookie returns for its sockets). */
export function currentNetnsCookie(): bigint {
  const lc = libc();
  const fd = lc.socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) throw new KprBpfError({ op: 'socket', errno: koffi.errno() });
  try {
    const val = Buffer.alloc(8);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(8, 0);
    if (lc.getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, val, len) !== 0) {
      throw new KprBpfError({ op: 'getsockopt SO_NETNS_COOKIE', errno: koffi.errno() });
    }
    return val.readBigUInt64LE(0);
  } finally {
    lc.close(fd);
  }
}
