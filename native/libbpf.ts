/**
 * Raw koffi declarations of the libbpf (v1.x) and libc functions kpr uses.
 * The libraries are loaded and every function handle is created once, on the
 * first call of `libbpf()` / `libc()`; callers keep the returned table and
 * never declare functions per call.
 *
 * Pointers to libbpf objects are opaque koffi externals; NULL comes back as
 * `null`. Byte buffers are passed as `void *` so Node Buffers go in place
 * (no copy), which is what makes the batch operations cheap.
 */
import koffi from 'koffi';

/** An opaque native pointer (a koffi External); never inspected in JS. */
export type NativePtr = object;

export interface LibbpfFns {
  // ------------------------------------------------------------- object API
  bpf_object__open_file(path: string, opts: null): NativePtr | null;
  bpf_object__load(obj: NativePtr): number;
  bpf_object__close(obj: NativePtr): void;
  bpf_object__name(obj: NativePtr): string;
  bpf_object__next_map(obj: NativePtr, prev: NativePtr | null): NativePtr | null;
  bpf_object__find_map_by_name(obj: NativePtr, name: string): NativePtr | null;
  bpf_object__find_program_by_name(obj: NativePtr, name: string): NativePtr | null;
  bpf_object__next_program(obj: NativePtr, prev: NativePtr | null): NativePtr | null;

  bpf_map__name(map: NativePtr): string;
  bpf_map__fd(map: NativePtr): number;
  bpf_map__type(map: NativePtr): number;
  bpf_map__key_size(map: NativePtr): number;
  bpf_map__value_size(map: NativePtr): number;
  bpf_map__max_entries(map: NativePtr): number;
  /** Before load only: the max_entries the map is created with (and a pin must have to be reused). */
  bpf_map__set_max_entries(map: NativePtr, maxEntries: number): number;
  bpf_map__set_pin_path(map: NativePtr, path: string | null): number;
  bpf_map__is_pinned(map: NativePtr): boolean;
  /** Before load: the map is `fd` (a dup of it) instead of a new one; libbpf takes the map's name and definition from the kernel's. */
  bpf_map__reuse_fd(map: NativePtr, fd: number): number;
  bpf_map__map_flags(map: NativePtr): number;

  bpf_program__name(prog: NativePtr): string;
  bpf_program__fd(prog: NativePtr): number;
  bpf_program__type(prog: NativePtr): number;
  bpf_program__expected_attach_type(prog: NativePtr): number;
  bpf_program__attach_cgroup(prog: NativePtr, cgroupFd: number): NativePtr | null;
  bpf_program__attach_iter(prog: NativePtr, opts: null): NativePtr | null;

  bpf_link__open(path: string): NativePtr | null;
  bpf_link__fd(link: NativePtr): number;
  bpf_link__pin(link: NativePtr, path: string): number;
  bpf_link__update_program(link: NativePtr, prog: NativePtr): number;
  bpf_link__detach(link: NativePtr): number;
  bpf_link__disconnect(link: NativePtr): void;
  bpf_link__destroy(link: NativePtr): number;

  libbpf_get_error(ptr: NativePtr | null): number;
  libbpf_num_possible_cpus(): number;
  libbpf_bpf_map_type_str(t: number): string | null;
  libbpf_bpf_prog_type_str(t: number): string | null;
  libbpf_bpf_attach_type_str(t: number): string | null;
  libbpf_bpf_link_type_str(t: number): string | null;
  /** Installs a registered koffi callback; returns the previous function pointer. */
  libbpf_set_print(fn: unknown): NativePtr | null;
  /** Same symbol, for re-installing a raw pointer returned by a previous call. */
  libbpf_set_print_raw(fn: NativePtr | null): NativePtr | null;

  // ---------------------------------------------------------- low-level fd API
  bpf_map_create(type: number, name: string | null, keySize: number, valueSize: number, maxEntries: number, opts: null): number;
  bpf_map_update_elem(fd: number, key: Buffer, value: Buffer, flags: bigint | number): number;
  bpf_map_lookup_elem(fd: number, key: Buffer, value: Buffer): number;
  bpf_map_delete_elem(fd: number, key: Buffer): number;
  bpf_map_lookup_and_delete_elem(fd: number, key: Buffer, value: Buffer): number;
  bpf_map_get_next_key(fd: number, key: Buffer | null, next: Buffer): number;
  bpf_map_lookup_batch(fd: number, inBatch: Buffer | null, outBatch: Buffer, keys: Buffer, values: Buffer, count: Buffer, opts: Buffer): number;
  bpf_map_update_batch(fd: number, keys: Buffer, values: Buffer, count: Buffer, opts: Buffer): number;
  bpf_map_delete_batch(fd: number, keys: Buffer, count: Buffer, opts: Buffer): number;
  bpf_obj_get(path: string): number;
  bpf_iter_create(linkFd: number): number;
  bpf_link_create(progFd: number, targetFd: number, attachType: number, opts: null): number;
  bpf_link_update(linkFd: number, newProgFd: number, opts: null): number;
  bpf_obj_pin(fd: number, path: string): number;
  bpf_obj_get_info_by_fd(fd: number, info: Buffer, infoLen: Buffer): number;
  bpf_prog_query(targetFd: number, type: number, queryFlags: number, attachFlags: Buffer, progIds: Buffer, progCnt: Buffer): number;

  // ------------------------------------ kernel feature probing (agent/datapath/kernel-probes.ts)
  bpf_program__set_autoload(prog: NativePtr, autoload: boolean): number;
}

export interface LibcFns {
  statfs(path: string, buf: Buffer): number;
  mount(source: string, target: string, fstype: string, flags: number, data: null): number;
  umount2(target: string, flags: number): number;
  vsnprintf(buf: Buffer, size: number, fmt: NativePtr, ap: NativePtr): number;
  close(fd: number): number;
  setns(fd: number, nstype: number): number;
  sched_setaffinity(pid: number, size: number, mask: Buffer): number;
  if_nametoindex(name: string): number;
  if_nameindex(): NativePtr | null;
  if_freenameindex(ptr: NativePtr): void;
  socket(domain: number, type: number, protocol: number): number;
  getsockopt(fd: number, level: number, name: number, value: Buffer, len: Buffer): number;
  malloc_trim(pad: number): number;
  // ---- netlink sock_diag (native/sock-diag.ts)
  send(fd: number, buf: Buffer, len: number, flags: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  setsockopt(fd: number, level: number, name: number, value: Buffer, len: number): number;
}

/** int (*libbpf_print_fn_t)(enum libbpf_print_level, const char *fmt, va_list ap).
 * On x86_64 va_list is an array type, so as a parameter it decays to a pointer;
 * fmt is kept as a raw pointer so it can be handed back to vsnprintf unchanged. */
let printFnType: unknown = null;

let bpfTable: LibbpfFns | null = null;
let libcTable: LibcFns | null = null;

export function libbpf(): LibbpfFns {
  if (bpfTable) return bpfTable;
  const lib = koffi.load('libbpf.so.1');
  koffi.opaque('bpf_object');
  koffi.opaque('bpf_map');
  koffi.opaque('bpf_program');
  koffi.opaque('bpf_link');
  const pt = printFnPointerType();
  const f = (decl: string) => lib.func(decl);
  const t: LibbpfFns = {
    bpf_object__open_file: f('bpf_object *bpf_object__open_file(const char *path, const void *opts)'),
    bpf_object__load: f('int bpf_object__load(bpf_object *obj)'),
    bpf_object__close: f('void bpf_object__close(bpf_object *obj)'),
    bpf_object__name: f('const char *bpf_object__name(const bpf_object *obj)'),
    bpf_object__next_map: f('bpf_map *bpf_object__next_map(const bpf_object *obj, const bpf_map *prev)'),
    bpf_object__find_map_by_name: f('bpf_map *bpf_object__find_map_by_name(const bpf_object *obj, const char *name)'),
    bpf_object__next_program: f('bpf_program *bpf_object__next_program(const bpf_object *obj, bpf_program *prev)'),
    bpf_object__find_program_by_name: f('bpf_program *bpf_object__find_program_by_name(const bpf_object *obj, const char *name)'),

    bpf_map__name: f('const char *bpf_map__name(const bpf_map *map)'),
    bpf_map__fd: f('int bpf_map__fd(const bpf_map *map)'),
    bpf_map__type: f('int bpf_map__type(const bpf_map *map)'),
    bpf_map__key_size: f('uint32_t bpf_map__key_size(const bpf_map *map)'),
    bpf_map__value_size: f('uint32_t bpf_map__value_size(const bpf_map *map)'),
    bpf_map__max_entries: f('uint32_t bpf_map__max_entries(const bpf_map *map)'),
    bpf_map__set_max_entries: f('int bpf_map__set_max_entries(bpf_map *map, uint32_t max_entries)'),
    bpf_map__set_pin_path: f('int bpf_map__set_pin_path(bpf_map *map, const char *path)'),
    bpf_map__is_pinned: f('bool bpf_map__is_pinned(const bpf_map *map)'),
    bpf_map__reuse_fd: f('int bpf_map__reuse_fd(bpf_map *map, int fd)'),
    bpf_map__map_flags: f('uint32_t bpf_map__map_flags(const bpf_map *map)'),

    bpf_program__name: f('const char *bpf_program__name(const bpf_program *prog)'),
    bpf_program__fd: f('int bpf_program__fd(const bpf_program *prog)'),
    bpf_program__type: f('int bpf_program__type(const bpf_program *prog)'),
    bpf_program__expected_attach_type: f('int bpf_program__expected_attach_type(const bpf_program *prog)'),
    bpf_program__attach_cgroup: f('bpf_link *bpf_program__attach_cgroup(const bpf_program *prog, int cgroup_fd)'),
    bpf_program__attach_iter: f('bpf_link *bpf_program__attach_iter(const bpf_program *prog, const void *opts)'),

    bpf_link__open: f('bpf_link *bpf_link__open(const char *path)'),
    bpf_link__fd: f('int bpf_link__fd(const bpf_link *link)'),
    bpf_link__pin: f('int bpf_link__pin(bpf_link *link, const char *path)'),
    bpf_link__update_program: f('int bpf_link__update_program(bpf_link *link, bpf_program *prog)'),
    bpf_link__detach: f('int bpf_link__detach(bpf_link *link)'),
    bpf_link__disconnect: f('void bpf_link__disconnect(bpf_link *link)'),
    bpf_link__destroy: f('int bpf_link__destroy(bpf_link *link)'),

    libbpf_get_error: f('long libbpf_get_error(const void *ptr)'),
    libbpf_num_possible_cpus: f('int libbpf_num_possible_cpus(void)'),
    libbpf_bpf_map_type_str: f('const char *libbpf_bpf_map_type_str(int t)'),
    libbpf_bpf_prog_type_str: f('const char *libbpf_bpf_prog_type_str(int t)'),
    libbpf_bpf_attach_type_str: f('const char *libbpf_bpf_attach_type_str(int t)'),
    libbpf_bpf_link_type_str: f('const char *libbpf_bpf_link_type_str(int t)'),
    libbpf_set_print: lib.func('libbpf_set_print', 'void *', [pt as never]),
    libbpf_set_print_raw: lib.func('libbpf_set_print', 'void *', ['void *']),

    bpf_map_create: f('int bpf_map_create(int map_type, const char *map_name, uint32_t key_size, uint32_t value_size, uint32_t max_entries, const void *opts)'),
    bpf_map_update_elem: f('int bpf_map_update_elem(int fd, const void *key, const void *value, uint64_t flags)'),
    bpf_map_lookup_elem: f('int bpf_map_lookup_elem(int fd, const void *key, void *value)'),
    bpf_map_delete_elem: f('int bpf_map_delete_elem(int fd, const void *key)'),
    bpf_map_lookup_and_delete_elem: f('int bpf_map_lookup_and_delete_elem(int fd, const void *key, void *value)'),
    bpf_map_get_next_key: f('int bpf_map_get_next_key(int fd, const void *key, void *next_key)'),
    bpf_map_lookup_batch: f('int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, void *count, const void *opts)'),
    bpf_map_update_batch: f('int bpf_map_update_batch(int fd, const void *keys, const void *values, void *count, const void *opts)'),
    bpf_map_delete_batch: f('int bpf_map_delete_batch(int fd, const void *keys, void *count, const void *opts)'),
    bpf_obj_get: f('int bpf_obj_get(const char *pathname)'),
    bpf_iter_create: f('int bpf_iter_create(int link_fd)'),
    bpf_link_create: f('int bpf_link_create(int prog_fd, int target_fd, int attach_type, const void *opts)'),
    bpf_link_update: f('int bpf_link_update(int link_fd, int new_prog_fd, const void *opts)'),
    bpf_obj_pin: f('int bpf_obj_pin(int fd, const char *pathname)'),
    bpf_obj_get_info_by_fd: f('int bpf_obj_get_info_by_fd(int bpf_fd, void *info, void *info_len)'),
    bpf_prog_query: f('int bpf_prog_query(int target_fd, int type, uint32_t query_flags, void *attach_flags, void *prog_ids, void *prog_cnt)'),

    // kernel feature probing
    bpf_program__set_autoload: f('int bpf_program__set_autoload(bpf_program *prog, bool autoload)'),
  };
  bpfTable = t;
  return t;
}

// ------------------------------------------------------------------------
// Classic tc (clsact qdisc + cls_bpf filter), for kernels without tcx
// (before 6.6): libbpf's bpf_tc_* API and what native/tc-classic.ts needs
// around it. One block, declared on first use of libbpfTc().

/** struct bpf_tc_hook of libbpf 1.1's libbpf.h (sz first; `size_t :0` pads it to 24 bytes). */
export interface BpfTcHook {
  sz: number;
  ifindex: number;
  /** enum bpf_tc_attach_point: BPF_TC_INGRESS = 1, BPF_TC_EGRESS = 2, BPF_TC_CUSTOM = 4. */
  attach_point: number;
  parent: number;
}

/** struct bpf_tc_opts of libbpf 1.1's libbpf.h (sz first; padded to 32 bytes). */
export interface BpfTcOpts {
  sz: number;
  prog_fd: number;
  /** enum bpf_tc_flags: BPF_TC_F_REPLACE = 1. */
  flags: number;
  prog_id: number;
  handle: number;
  priority: number;
}

export interface LibbpfTcFns {
  /** Creates the clsact qdisc (for BPF_TC_INGRESS/EGRESS); -EEXIST when the interface has one. */
  bpf_tc_hook_create(hook: BpfTcHook): number;
  /** Fills opts (prog_id, handle, priority) from the kernel's answer. */
  bpf_tc_attach(hook: BpfTcHook, opts: BpfTcOpts): number;
  bpf_tc_detach(hook: BpfTcHook, opts: BpfTcOpts): number;
  /** Fills opts.prog_id for the filter at opts.handle/opts.priority; -ENOENT when there is none. */
  bpf_tc_query(hook: BpfTcHook, opts: BpfTcOpts): number;
  bpf_prog_get_fd_by_id(id: number): number;
  /** Sizes koffi laid the two structs out with (checked against libbpf.h by a test). */
  sizes: { hook: number; opts: number };
}

let tcTable: LibbpfTcFns | null = null;

export function libbpfTc(): LibbpfTcFns {
  if (tcTable) return tcTable;
  const lib = koffi.load('libbpf.so.1');
  const hook = koffi.struct('bpf_tc_hook', { sz: 'size_t', ifindex: 'int', attach_point: 'int', parent: 'uint32_t' });
  const opts = koffi.struct('bpf_tc_opts', { sz: 'size_t', prog_fd: 'int', flags: 'uint32_t', prog_id: 'uint32_t', handle: 'uint32_t', priority: 'uint32_t' });
  const f = (decl: string) => lib.func(decl);
  tcTable = {
    bpf_tc_hook_create: f('int bpf_tc_hook_create(bpf_tc_hook *hook)'),
    bpf_tc_attach: f('int bpf_tc_attach(const bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)'),
    bpf_tc_detach: f('int bpf_tc_detach(const bpf_tc_hook *hook, const bpf_tc_opts *opts)'),
    bpf_tc_query: f('int bpf_tc_query(const bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)'),
    bpf_prog_get_fd_by_id: f('int bpf_prog_get_fd_by_id(uint32_t id)'),
    sizes: { hook: koffi.sizeof(hook), opts: koffi.sizeof(opts) },
  };
  return tcTable;
}
// ------------------------------------------------------- end of classic tc

// ------------------------------------------------------------------------
// Ring buffer consumer (native/ring-buffer.ts): libbpf's ring_buffer__*.
// One block, declared on first use of libbpfRing().

/** int (*ring_buffer_sample_fn)(void *ctx, void *data, size_t size). */
export interface LibbpfRingFns {
  /** NULL (errno set) on failure; `sampleCb` is a callback registered with koffi.register(…, sampleFnType). */
  ring_buffer__new(mapFd: number, sampleCb: unknown, ctx: null, opts: null): NativePtr | null;
  /** Calls the sample callback for every record ready, without waiting; the count consumed, or a negative errno. */
  ring_buffer__consume(rb: NativePtr): number;
  ring_buffer__free(rb: NativePtr): void;
  /** libc memcpy: a record copied out of the ring into a reused Buffer (cheaper than a koffi.view, an external ArrayBuffer, per record). */
  memcpy(dst: Buffer, src: unknown, n: number): unknown;
  /** The koffi type of a sample callback pointer, for koffi.register. */
  sampleFnType: unknown;
}

let ringTable: LibbpfRingFns | null = null;

export function libbpfRing(): LibbpfRingFns {
  if (ringTable) return ringTable;
  const lib = koffi.load('libbpf.so.1');
  koffi.opaque('ring_buffer');
  const sampleFn = koffi.proto('int kpr_ring_sample_fn(void *ctx, void *data, size_t size)');
  const sampleFnType = koffi.pointer(sampleFn);
  ringTable = {
    ring_buffer__new: lib.func('ring_buffer__new', 'ring_buffer *', ['int', sampleFnType, 'void *', 'const void *']),
    ring_buffer__consume: lib.func('int ring_buffer__consume(ring_buffer *rb)'),
    ring_buffer__free: lib.func('void ring_buffer__free(ring_buffer *rb)'),
    memcpy: koffi.load('libc.so.6').func('void *memcpy(void *dst, const void *src, size_t n)'),
    sampleFnType,
  };
  return ringTable;
}
// ------------------------------------------------------- end of ring buffer

export function libc(): LibcFns {
  if (libcTable) return libcTable;
  const lib = koffi.load('libc.so.6');
  const t: LibcFns = {
    statfs: lib.func('int statfs(const char *path, void *buf)'),
    mount: lib.func('int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const void *data)'),
    umount2: lib.func('int umount2(const char *target, int flags)'),
    vsnprintf: lib.func('int vsnprintf(void *buf, size_t size, const void *fmt, void *ap)'),
    close: lib.func('int close(int fd)'),
    setns: lib.func('int setns(int fd, int nstype)'),
    sched_setaffinity: lib.func('int sched_setaffinity(int pid, size_t cpusetsize, const void *mask)'),
    if_nametoindex: lib.func('unsigned int if_nametoindex(const char *ifname)'),
    if_nameindex: lib.func('void *if_nameindex(void)'),
    if_freenameindex: lib.func('void if_freenameindex(void *ptr)'),
    socket: lib.func('int socket(int domain, int type, int protocol)'),
    getsockopt: lib.func('int getsockopt(int fd, int level, int optname, void *optval, void *optlen)'),
    malloc_trim: lib.func('int malloc_trim(size_t pad)'),
    // ---- netlink sock_diag (native/sock-diag.ts)
    send: lib.func('long send(int fd, const void *buf, size_t len, int flags)'),
    recv: lib.func('long recv(int fd, void *buf, size_t len, int flags)'),
    setsockopt: lib.func('int setsockopt(int fd, int level, int optname, const void *optval, unsigned int optlen)'),
  };
  libcTable = t;
  return t;
}

let nameIndexType: unknown = null;

/**
 * if_nameindex(3) decoded: every interface of the calling thread's network
 * namespace, however sparse the indexes (veth churn leaves large gaps).
 */
export function libcNameIndex(): Array<{ name: string; index: number }> {
  nameIndexType ??= koffi.struct('kpr_if_nameindex', { if_index: 'uint', if_name: 'const char *' });
  const lc = libc();
  const ptr = lc.if_nameindex();
  if (!ptr) return [];
  try {
    const size = koffi.sizeof(nameIndexType as never);
    const out: Array<{ name: string; index: number }> = [];
    for (let i = 0; ; i++) {
      const e = koffi.decode(ptr, i * size, nameIndexType as never) as { if_index: number; if_name: string | null };
      if (e.if_index === 0) break;
      out.push({ name: e.if_name ?? '', index: e.if_index });
    }
    return out;
  } finally {
    lc.if_freenameindex(ptr);
  }
}

/** The koffi pointer-to-callback type of libbpf's print function. */
export function printFnPointerType(): unknown {
  if (!printFnType) {
    printFnType = koffi.pointer(koffi.proto('int kpr_libbpf_print_fn(int level, const void *fmt, void *ap)'));
  }
  return printFnType;
}
