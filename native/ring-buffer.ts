/**
 * RingBuffer: the consumer of a BPF_MAP_TYPE_RINGBUF through libbpf's
 * ring_buffer__new / ring_buffer__consume / ring_buffer__free. consume()
 * hands every record ready to `onRecord`, on the calling thread, and never
 * waits: the reader calls it on a timer. kpr's programs submit records
 * without a wakeup (bpf/include/kpr_monitor.h), so there is nothing to wait
 * for, and the datapath pays no notification per record.
 *
 * The sample callback is a koffi registered callback (libbpf keeps the
 * pointer for the ring's life): registered in the constructor, unregistered
 * by close() after ring_buffer__free, when libbpf can no longer call it.
 */
import { constants } from 'node:os';
import koffi from 'koffi';
import { libbpfRing, type NativePtr } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import { BPF_MAP_TYPE, type BpfMap } from './bpf-map.js';

const E = constants.errno;

/**
 * Called once per record, in ring order. `record` is a copy in a buffer
 * reused for the next record: decode or copy it before returning.
 */
export type RingRecordHandler = (record: Buffer) => void;

export class RingBuffer {
  readonly name: string;
  #rb: NativePtr | null;
  #callback: koffi.IKoffiRegisteredCallback | null;
  /** What onRecord threw during the current consume() (libbpf's C frames must not see it). */
  #thrown: { error: unknown } | null = null;

  /** A consumer of `map` (a ring buffer map; the handle must stay open while this one is). */
  constructor(map: BpfMap, onRecord: RingRecordHandler) {
    if (map.type !== BPF_MAP_TYPE.RINGBUF) {
      throw new KprBpfError({ op: 'ring buffer new', map: map.name, errno: E.EINVAL, detail: `${map.name} is a ${map.typeName} map, not a ring buffer` });
    }
    const lib = libbpfRing();
    this.name = map.name;
    // Sized to the record (kpr's rings carry one record type: allocated once).
    let scratch = Buffer.alloc(0);
    const onSample = (_ctx: unknown, data: unknown, size: number): number => {
      if (this.#thrown) return 0;
      try {
        if (size !== scratch.length) scratch = Buffer.alloc(size);
        lib.memcpy(scratch, data, size);
        onRecord(scratch);
      } catch (error) {
        this.#thrown = { error };
      }
      return 0;
    };
    this.#callback = koffi.register(onSample, lib.sampleFnType as koffi.TypeSpec);
    const rb = lib.ring_buffer__new(map.fd, this.#callback, null, null);
    if (!rb) {
      const errno = koffi.errno() || E.EINVAL;
      koffi.unregister(this.#callback);
      this.#callback = null;
      throw new KprBpfError({ op: 'ring buffer new', map: map.name, errno, detail: hintFor(errno) });
    }
    this.#rb = rb;
  }

  get closed(): boolean {
    return this.#rb === null;
  }

  /**
   * Hands every record ready now to onRecord and returns how many were
   * consumed. Throws what onRecord threw (the records after it are
   * consumed but not handed on).
   */
  consume(): number {
    if (!this.#rb) throw new KprBpfError({ op: 'ring buffer consume', map: this.name, errno: E.EBADF, detail: 'ring buffer is closed' });
    this.#thrown = null;
    const n = libbpfRing().ring_buffer__consume(this.#rb);
    const thrown = this.#thrown as { error: unknown } | null;
    this.#thrown = null;
    if (thrown) throw thrown.error;
    if (n < 0) throw new KprBpfError({ op: 'ring buffer consume', map: this.name, errno: -n });
    return n;
  }

  /** Frees the ring and unregisters the callback; the map handle stays the caller's. */
  close(): void {
    const rb = this.#rb;
    if (!rb) return;
    this.#rb = null;
    libbpfRing().ring_buffer__free(rb);
    if (this.#callback) koffi.unregister(this.#callback);
    this.#callback = null;
  }
}
