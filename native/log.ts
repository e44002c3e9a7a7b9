/**
 * Routes libbpf's print callback into a JS logger.
 *
 * libbpf calls `int print(enum libbpf_print_level, const char *fmt, va_list ap)`.
 * On x86_64 `va_list` is a one-element array of struct __va_list_tag, so the
 * callback receives a pointer to it. The message is formatted with libc's
 * vsnprintf on a private copy of that 24-byte struct (the equivalent of
 * va_copy), so a message longer than the buffer can be formatted again.
 *
 * The koffi callback is registered once and kept for the life of the process
 * (module-level reference, never unregistered): libbpf may call it at any time.
 */
import koffi from 'koffi';
import { libbpf, libc, printFnPointerType, type NativePtr } from './libbpf.js';

export type LibbpfLogLevel = 'warn' | 'info' | 'debug';
export type LibbpfLogger = (level: LibbpfLogLevel, msg: string) => void;

const LEVELS: readonly LibbpfLogLevel[] = ['warn', 'info', 'debug'];
/** sizeof(struct __va_list_tag) on x86_64. */
const VA_LIST_SIZE = 24;

let current: LibbpfLogger | null = null;
let registered: unknown = null; // keeps the koffi callback alive forever
let libbpfDefault: NativePtr | null = null;
let fmtBuf = Buffer.alloc(4096);

function vaCopy(ap: NativePtr): Buffer {
  return Buffer.from(new Uint8Array(koffi.view(ap, VA_LIST_SIZE)));
}

/** Formats (fmt, ap) with vsnprintf without consuming the caller's va_list. */
function format(fmt: NativePtr, ap: NativePtr): string {
  const c = libc();
  let n = c.vsnprintf(fmtBuf, fmtBuf.length, fmt, vaCopy(ap));
  if (n < 0) return '<libbpf: unformattable message>';
  if (n >= fmtBuf.length) {
    fmtBuf = Buffer.alloc(n + 1);
    n = c.vsnprintf(fmtBuf, fmtBuf.length, fmt, vaCopy(ap));
    if (n < 0) return '<libbpf: unformattable message>';
    const s = fmtBuf.toString('utf8', 0, Math.min(n, fmtBuf.length - 1));
    if (fmtBuf.length > 65536) fmtBuf = Buffer.alloc(4096); // don't hold on to huge buffers
    return s;
  }
  return fmtBuf.toString('utf8', 0, n);
}

function onPrint(level: number, fmt: NativePtr, ap: NativePtr): number {
  const fn = current;
  if (!fn) return 0;
  try {
    const msg = format(fmt, ap).replace(/\n+$/, '');
    fn(LEVELS[level] ?? 'debug', msg);
  } catch {
    // Never let an exception unwind into libbpf's C frames.
  }
  return 0;
}

type Mode = 'default' | 'callback' | 'silent';
let mode: Mode = 'default';

function install(next: Mode): void {
  if (next === mode) return;
  const lib = libbpf();
  let prev: NativePtr | null;
  if (next === 'callback') {
    if (!registered) registered = koffi.register(onPrint, printFnPointerType() as never);
    prev = lib.libbpf_set_print(registered);
  } else if (next === 'silent') {
    prev = lib.libbpf_set_print_raw(null);
  } else {
    prev = lib.libbpf_set_print_raw(libbpfDefault);
  }
  if (mode === 'default') libbpfDefault = prev; // libbpf's own stderr printer
  mode = next;
}

/**
 * Routes every libbpf message (all levels; filter in `fn`) to `fn`.
 * `null` restores libbpf's default printer (warn/info to stderr).
 */
export function setLibbpfLogger(fn: LibbpfLogger | null): void {
  current = fn;
  install(fn ? 'callback' : 'default');
}

/** Silences libbpf entirely (no stderr output, no logger). */
export function silenceLibbpf(): void {
  current = null;
  install('silent');
}

/**
 * Runs `fn` with libbpf's messages collected instead of printed, then puts
 * the previous printer back. For calls whose failures are expected and
 * answered by their return code (a netlink EEXIST or ENOENT makes libbpf
 * print the kernel's extack message as a warning); the collected messages
 * go into the error when the failure was not one of those.
 */
export function captureLibbpfMessages<T>(fn: () => T): { value: T; messages: string[] } {
  const prevMode = mode;
  const prevFn = current;
  const messages: string[] = [];
  current = (_level, msg) => messages.push(msg);
  install('callback');
  try {
    return { value: fn(), messages };
  } finally {
    current = prevFn;
    install(prevMode);
  }
}
