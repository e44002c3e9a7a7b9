/**
 * The xtables lock that the iptables-legacy tools take around every change
 * (iptables-nft does not use it: nf_tables changes are transactions). Its
 * path is XTABLES_LOCKFILE when set, else /run/xtables.lock, as in iptables
 * itself; every process that changes the node's legacy tables (kubelet,
 * kube-proxy, CNIs) must share the same file. In a container the node's file
 * is mounted there (hostPath /run/xtables.lock, FileOrCreate), as kube-proxy's
 * DaemonSet does; with a read-only /run and no mount, iptables-legacy-restore
 * exits 4 ("can't open lock file").
 */
import { accessSync, constants, existsSync } from 'node:fs';
import path from 'node:path';

export const XTABLES_LOCK_DEFAULT = '/run/xtables.lock';

export function xtablesLockPath(env: NodeJS.ProcessEnv = process.env): { path: string; from: string } {
  const p = env.XTABLES_LOCKFILE;
  return p ? { path: p, from: 'XTABLES_LOCKFILE' } : { path: XTABLES_LOCK_DEFAULT, from: 'the default; XTABLES_LOCKFILE is not set' };
}

/**
 * Why iptables-legacy could not open the lock (it opens it with O_CREAT, so
 * an existing file is enough and a missing one needs a writable directory),
 * or undefined. Checks without creating anything, so a dry run changes nothing.
 */
export function xtablesLockProblem(lockPath: string): string | undefined {
  if (existsSync(lockPath)) return undefined;
  const dir = path.dirname(lockPath);
  try {
    accessSync(dir, constants.W_OK);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    return (
      `the xtables lock ${lockPath} does not exist and ${dir} is not writable (${code}): iptables-legacy-restore would exit 4 ("can't open lock file"); ` +
      `mount the node's ${XTABLES_LOCK_DEFAULT} at that path (hostPath, type FileOrCreate; the chart does) or point XTABLES_LOCKFILE at the node's lock file`
    );
  }
}
