/** Facts about the running kernel that decide what the agent should pick. */
import os from 'node:os';
import type { UdpTerminationMode } from '../../agent/datapath/udp-terminator.js';

/** [major, minor] of `uname -r`. */
export function kernelMajorMinor(release = os.release()): [number, number] {
  const [major, minor] = release.split('.').map(Number);
  return [major, minor];
}

/** What --udp-termination auto picks here: the iterator from 6.5 (bpf_sock_destroy), netlink sock_diag before. */
export function expectedAutoUdpTermination(release = os.release()): UdpTerminationMode {
  const [major, minor] = kernelMajorMinor(release);
  return major > 6 || (major === 6 && minor >= 5) ? 'bpf_sock_destroy' : 'netlink';
}

/**
 * The errno a socket hook refusal gives the caller here: ECONNREFUSED where
 * the kernel has bpf_set_retval (5.18, bpf/include/kpr_refuse.h), EPERM before.
 */
export function expectedRefusal(release = os.release()): 'ECONNREFUSED' | 'EPERM' {
  const [major, minor] = kernelMajorMinor(release);
  return major > 5 || (major === 5 && minor >= 18) ? 'ECONNREFUSED' : 'EPERM';
}
