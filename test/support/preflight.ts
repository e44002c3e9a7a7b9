/**
 * Tests that need the kernel fail loudly when they cannot have it: a missing
 * capability is a failure with a clear message, never a silent skip.
 */
export function requireRoot(): void {
  if (process.getuid?.() !== 0) {
    throw new Error('this test needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): run `sudo make test`');
  }
}
