/** struct bpf_map_batch_opts, as libbpf's batch calls take it, and the errno of a batch the kernel does not do. */

/** ENOTSUPP: kernel-internal, leaks from the bpf() syscall (e.g. a map type without batch operations). */
export const ENOTSUPP = 524;

/** sizeof(struct bpf_map_batch_opts) in libbpf 1.x: { size_t sz; __u64 elem_flags; __u64 flags; }. */
const BATCH_OPTS_SIZE = 24;

export function batchOpts(elemFlags: number): Buffer {
  const b = Buffer.alloc(BATCH_OPTS_SIZE);
  b.writeBigUInt64LE(BigInt(BATCH_OPTS_SIZE), 0);
  b.writeBigUInt64LE(BigInt(elemFlags), 8);
  return b;
}

/** The options of a batch call without element flags (shared: libbpf only reads them). */
export const NO_FLAGS_OPTS = batchOpts(0);
