/**
 * Gives the C heap's free memory back to the kernel (glibc malloc_trim(3)).
 * libbpf's object loading (ELF sections, the kernel's BTF for CO-RE) and the
 * agent's batch buffers are freed by their owners, but glibc keeps the freed
 * pages in its arenas, where they count in the agent's RSS until trimmed.
 * Returns whether any memory was released.
 */
import { libc } from './libbpf.js';

export function releaseFreeNativeMemory(): boolean {
  return libc().malloc_trim(0) === 1;
}
