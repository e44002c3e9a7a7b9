import { readFileSync } from 'node:fs';

/**
 * The cgroup v2 mount point, read from /proc/mounts. Hosts in hybrid mode
 * mount it at /sys/fs/cgroup/unified rather than /sys/fs/cgroup, so it is
 * never assumed.
 */
export function findCgroup2Mount(mounts: string = readFileSync('/proc/mounts', 'utf8')): string {
  for (const line of mounts.split('\n')) {
    const [, mountPoint, fsType] = line.split(' ');
    if (fsType === 'cgroup2') return mountPoint.replace(/\\040/g, ' ');
  }
  throw new Error('no cgroup v2 filesystem is mounted (see /proc/mounts); kpr needs cgroup v2 for its socket hooks');
}
