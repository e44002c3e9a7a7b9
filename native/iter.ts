/**
 * BPF iterators (bpf_iter): a program attached as an iterator link runs once
 * per object (socket, task…) each time an iterator instance is read. kpr uses
 * the UDP socket iterator to destroy sockets connected to backends that left.
 */
import fs from 'node:fs';
import { constants } from 'node:os';
import koffi from 'koffi';
import { libbpf, type NativePtr } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import type { BpfProgram } from './bpf-program.js';

export class BpfIterator {
  #link: NativePtr | null;
  readonly program: string;

  private constructor(link: NativePtr, program: string) {
    this.#link = link;
    this.program = program;
  }

  /** Attaches an iter/* program; the link lives as long as this object. */
  static attach(prog: BpfProgram): BpfIterator {
    const link = libbpf().bpf_program__attach_iter(prog.ptr, null);
    if (!link) {
      const errno = koffi.errno() || constants.errno.EINVAL;
      throw new KprBpfError({ op: 'attach iter', map: prog.name, errno, detail: hintFor(errno) });
    }
    return new BpfIterator(link, prog.name);
  }

  /**
   * Runs the iterator to the end and returns what it printed (usually
   * nothing: kpr's iterators act, they don't report). The iteration covers
   * the network namespace current when this is called.
   */
  run(): Buffer {
    if (!this.#link) throw new KprBpfError({ op: 'iter run', map: this.program, errno: constants.errno.EBADF, detail: 'iterator is closed' });
    const lib = libbpf();
    const fd = lib.bpf_iter_create(lib.bpf_link__fd(this.#link));
    if (fd < 0) throw new KprBpfError({ op: 'iter create', map: this.program, errno: -fd, detail: hintFor(-fd) });
    const chunks: Buffer[] = [];
    try {
      const buf = Buffer.alloc(4096);
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, null);
        if (n <= 0) break;
        chunks.push(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      fs.closeSync(fd);
    }
    return Buffer.concat(chunks);
  }

  close(): void {
    if (this.#link) libbpf().bpf_link__destroy(this.#link);
    this.#link = null;
  }
}
