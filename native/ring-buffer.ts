/**
 * RingBuffer: the consumer of a BPF_MAP_TYPE_RINGBUF through libbpf's
 * ring_buffer__new / ring_buffer__consume / ring_buffer__free. Records are
 * handed to `onRecord` on the main thread, from inside consume(). Waiting
 * for records (epoll_wait on libbpf's epoll fd) runs on libuv's thread pool
 * as a koffi async call, so a reader never blocks the event loop and wakes
 * as soon as the kernel signals data.
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
/** sizeof(struct epoll_event) on x86_64 (packed: u32 events, u64 data). */
const EPOLL_EVENT_SIZE = 12;

/**
 * Called once per record, in ring order. `record` is a view of the ring's
 * memory, valid only until the call returns (decode or copy it there).
 */
export type RingRecordHandler = (record: Buffer) => void;

export class RingBuffer {
  readonly name: string;
  #rb: NativePtr | null;
  #callback: koffi.IKoffiRegisteredCallback | null;
  readonly #epollFd: number;
  readonly #events = Buffer.alloc(EPOLL_EVENT_SIZE * 4);
  #waiting: Promise<boolean> | null = null;
  /** What onRecord threw during the current consume() (libbpf's C frames must not see it). */
  #thrown: { error: unknown } | null = null;

  /** A consumer of `map` (a ring buffer map; the handle must stay open while this one is). */
  constructor(map: BpfMap, onRecord: RingRecordHandler) {
    if (map.type !== BPF_MAP_TYPE.RINGBUF) {
      throw new KprBpfError({ op: 'ring buffer new', map: map.name, errno: E.EINVAL, detail: `${map.name} is a ${map.typeName} map, not a ring buffer` });
    }
    const lib = libbpfRing();
    this.name = map.name;
    const onSample = (_ctx: unknown, data: unknown, size: number): number => {
      if (this.#thrown) return 0;
      try {
        onRecord(Buffer.from(koffi.view(data, size)));
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
    this.#epollFd = lib.ring_buffer__epoll_fd(rb);
  }

  get closed(): boolean {
    return this.#rb === null;
  }

  /**
   * Hands every record ready now to onRecord, without waiting; returns how
   * many. Throws what onRecord threw (the records after it are consumed
   * but not handed on).
   */
  consume(): number {
    const rb = this.#live('ring buffer consume');
    this.#thrown = null;
    const n = libbpfRing().ring_buffer__consume(rb);
    const thrown = this.#thrown as { error: unknown } | null;
    this.#thrown = null;
    if (thrown) throw thrown.error;
    if (n < 0) throw new KprBpfError({ op: 'ring buffer consume', map: this.name, errno: -n });
    return n;
  }

  /**
   * Resolves true once a record is ready (or one was already), false after
   * `timeoutMs` without one. One wait at a time: a second call while one is
   * pending gets the same promise.
   */
  wait(timeoutMs: number): Promise<boolean> {
    this.#live('ring buffer wait');
    this.#waiting ??= new Promise<boolean>((resolve, reject) => {
      libbpfRing().epoll_wait.async(this.#epollFd, this.#events, 4, Math.max(0, Math.floor(timeoutMs)), (err, ret) => {
        this.#waiting = null;
        // epoll_wait's errno stays on the pool thread; the only failure it can have here is EINTR,
        // which is a wait that ended early: the caller's consume() reads whatever is ready.
        if (err) reject(err instanceof Error ? err : new Error(String(err)));
        else resolve(ret > 0);
      });
    });
    return this.#waiting;
  }

  /** Frees the ring (after a wait in flight has returned) and unregisters the callback. */
  async close(): Promise<void> {
    const rb = this.#rb;
    if (!rb) return;
    await this.#waiting?.catch(() => false);
    if (!this.#rb) return;
    this.#rb = null;
    libbpfRing().ring_buffer__free(rb);
    if (this.#callback) koffi.unregister(this.#callback);
    this.#callback = null;
  }

  #live(op: string): NativePtr {
    if (!this.#rb) throw new KprBpfError({ op, map: this.name, errno: E.EBADF, detail: 'ring buffer is closed' });
    return this.#rb;
  }
}
