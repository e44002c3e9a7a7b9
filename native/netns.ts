/**
 * Running a synchronous piece of work inside another network namespace.
 * setns(2) moves only the calling thread; JavaScript and koffi calls run on
 * the main thread, so the switch covers exactly `fn` and is undone before any
 * other JavaScript runs. Sockets opened meanwhile would belong to the other
 * namespace, so `fn` must not open any.
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
      setns(home, 'the agent\'s own network namespace');
    }
  } finally {
    fs.closeSync(home);
  }
}

/** Interface index by name in the current namespace; 0 when there is none. */
export function ifIndex(name: string): number {
  return libc().if_nametoindex(name);
}
