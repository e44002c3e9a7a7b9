/**
 * Pins the calling thread to one CPU (sched_setaffinity(2) with pid 0 moves
 * only the caller): a worker thread that must run its BPF work on a given
 * CPU, as BPF_PROG_TEST_RUN of a tc program runs on the caller's CPU (its
 * cpu field serves other program types only).
 */
import { constants } from 'node:os';
import koffi from 'koffi';
import { libc } from './libbpf.js';
import { KprBpfError } from './errors.js';

export function pinThreadToCpu(cpu: number): void {
  if (!Number.isInteger(cpu) || cpu < 0 || cpu >= 8192)
    throw new KprBpfError({ op: 'sched_setaffinity', errno: constants.errno.EINVAL, detail: `cpu ${cpu} out of range` });
  const mask = Buffer.alloc(1024); // cpu_set_t: 8,192 bits
  mask[cpu >> 3] = 1 << (cpu & 7);
  if (libc().sched_setaffinity(0, mask.length, mask) !== 0) throw new KprBpfError({ op: 'sched_setaffinity', errno: koffi.errno(), detail: `cpu ${cpu}` });
}
