/**
 * BPF_PROG_TEST_RUN through libbpf's bpf_prog_test_run_opts: runs a loaded
 * program on a crafted packet and returns its verdict and the packet as the
 * program left it. Used by the datapath tests.
 */
import koffi from 'koffi';
import { KprBpfError, hintFor } from './errors.js';
import type { BpfProgram } from './bpf-program.js';

let runFn: ((fd: number, opts: Record<string, unknown>) => number) | null = null;
let optsSize = 0;

function testRunFn() {
  if (runFn) return runFn;
  const lib = koffi.load('libbpf.so.1');
  const opts = koffi.struct('kpr_bpf_test_run_opts', {
    sz: 'size_t',
    data_in: 'void *',
    data_out: 'void *',
    data_size_in: 'uint32_t',
    data_size_out: 'uint32_t',
    ctx_in: 'void *',
    ctx_out: 'void *',
    ctx_size_in: 'uint32_t',
    ctx_size_out: 'uint32_t',
    retval: 'int32_t', // the kernel's __u32, read signed: TC_ACT_UNSPEC is -1
    repeat: 'int',
    duration: 'uint32_t',
    flags: 'uint32_t',
    cpu: 'uint32_t',
    batch_size: 'uint32_t',
  });
  optsSize = koffi.sizeof(opts);
  runFn = lib.func('int bpf_prog_test_run_opts(int prog_fd, _Inout_ kpr_bpf_test_run_opts *opts)');
  return runFn;
}

export interface TestRunResult {
  /** The program's return value (TC_ACT_*, XDP_*, ...), signed: TC_ACT_UNSPEC is -1. */
  retval: number;
  /** The packet after the program ran. */
  data: Buffer;
  durationNs: number;
}

export function testRun(prog: BpfProgram, packet: Buffer, opts: { repeat?: number } = {}): TestRunResult {
  return testRunFd(prog.fd, prog.name, packet, opts);
}

/**
 * The same by program fd: for a worker thread of the process that loaded the
 * program (fds are the process's), which has no BpfProgram of its own.
 */
export function testRunFd(fd: number, name: string, packet: Buffer, opts: { repeat?: number } = {}): TestRunResult {
  const run = testRunFn();
  const out = Buffer.alloc(packet.length + 256);
  const o: Record<string, unknown> = {
    sz: optsSize,
    data_in: packet,
    data_out: out,
    data_size_in: packet.length,
    data_size_out: out.length,
    ctx_in: null,
    ctx_out: null,
    ctx_size_in: 0,
    ctx_size_out: 0,
    retval: 0,
    repeat: opts.repeat ?? 1,
    duration: 0,
    flags: 0,
    cpu: 0,
    batch_size: 0,
  };
  const rc = run(fd, o);
  if (rc < 0) throw new KprBpfError({ op: 'prog test run', map: name, errno: -rc, detail: hintFor(-rc) });
  return { retval: o.retval as number, data: out.subarray(0, o.data_size_out as number), durationNs: o.duration as number };
}
