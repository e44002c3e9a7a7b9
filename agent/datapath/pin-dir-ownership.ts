/**
 * Ownership checks of the agent's bpffs directories, run at start before any
 * pin is reused. /sys/fs/bpf is often mode 1777 (a fresh bpffs mount is), so
 * an unprivileged user can create the agent's --bpffs directory (or one on the
 * way to it) first and plant pins in it: maps the agent would adopt as its
 * own, links it would swap programs into.
 *
 * Rules (uid "ours" is root or the agent's own euid):
 *  - the bpffs mount root, and any bpffs mount point on the way: a directory
 *    owned by us; writable by group/others only with the sticky bit (1777,
 *    the kernel's default for a bpffs mount);
 *  - every other directory from the root down to --bpffs, and --bpffs/maps,
 *    --bpffs/links (created here, mode 0700, when missing) and their
 *    sub-directories: a real directory (lstat: a symlink is refused), owned by
 *    us, not writable by group or others. One that fails this is REPAIRED
 *    (chown to us, chmod 0700, a warning) when it is empty, and REFUSED when it
 *    holds anything, since someone else could have planted it;
 *  - staging/ (a live migration's new set), the same, when it is there;
 *  - every pin under maps/, links/ and staging/: owned by us, not writable by group or
 *    others, not a symlink; otherwise refused.
 * A refusal is a PinDirOwnershipError naming the path, its owner and mode; the
 * agent does not start.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../log/log.js';
import { linkPinDir, mapPinDir, mapStagingDir, ringPinDir } from './pins.js';

export class PinDirOwnershipError extends Error {}

/** Mode bits as `ls -l` would print them in octal: 0700, 1777. */
const octal = (mode: number) => (mode & 0o7777).toString(8).padStart(4, '0');

function ours(uid: number): boolean {
  return uid === 0 || uid === (process.geteuid?.() ?? 0);
}

function describe(st: fs.Stats): string {
  return `owned by uid ${st.uid} with mode ${octal(st.mode)}`;
}

/** Why a directory's owner or mode is not acceptable, or undefined. */
function dirProblem(st: fs.Stats, mountRoot: boolean): string | undefined {
  if (!ours(st.uid)) return `not owned by root`;
  if (st.mode & 0o022) {
    if (mountRoot && st.mode & 0o1000) return undefined; // sticky: others cannot rename or remove what is ours
    return 'writable by group or others';
  }
  return undefined;
}

function lstatOrUndefined(p: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export interface PinDirCheck {
  /** The directories checked, from the mount root down. */
  checked: string[];
  /** The directories that were repaired (owner and mode reset), with what they were. */
  repaired: Array<{ path: string; was: string }>;
}

/**
 * Checks (and creates, when missing) a directory that is not the mount root.
 * Repairs an empty one with a wrong owner or mode; throws for anything else.
 */
function checkDir(dir: string, log: Logger, result: PinDirCheck): void {
  let st = lstatOrUndefined(dir);
  if (!st) {
    try {
      fs.mkdirSync(dir, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    st = fs.lstatSync(dir);
  }
  if (st.isSymbolicLink())
    throw new PinDirOwnershipError(`bpffs: ${dir} is a symbolic link (${describe(st)}); refusing to use it: a pin directory must be a real directory`);
  if (!st.isDirectory()) throw new PinDirOwnershipError(`bpffs: ${dir} is not a directory (${describe(st)}); refusing to use it`);
  const parentSt = fs.statSync(path.dirname(dir));
  // A bpffs mounted here is a mount root: created by whoever could mount, mode 1777 by default.
  const problem = dirProblem(st, st.dev !== parentSt.dev);
  result.checked.push(dir);
  if (!problem) return;
  const entries = fs.readdirSync(dir);
  if (entries.length > 0) {
    throw new PinDirOwnershipError(
      `bpffs: ${dir} is ${describe(st)} (${problem}) and holds ${entries.length} ${entries.length === 1 ? 'entry' : 'entries'} (${entries.slice(0, 3).join(', ')}${entries.length > 3 ? ', …' : ''}) that another user could have planted; refusing to use it. Remove it (or chown it to root and chmod it 0700 after checking what it holds) and restart`,
    );
  }
  // Empty: take it over through a descriptor (no symlink followed), then check it is still empty and still the same directory.
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  try {
    fs.fchownSync(fd, process.geteuid?.() ?? 0, process.getegid?.() ?? 0);
    fs.fchmodSync(fd, 0o700);
    const after = fs.fstatSync(fd);
    const now = fs.lstatSync(dir);
    if (now.ino !== after.ino || now.dev !== after.dev || fs.readdirSync(dir).length > 0) {
      throw new PinDirOwnershipError(`bpffs: ${dir} changed while it was being repaired (it was ${describe(st)}); refusing to use it`);
    }
  } finally {
    fs.closeSync(fd);
  }
  const was = describe(st);
  result.repaired.push({ path: dir, was });
  log.warn('bpffs directory had a wrong owner or mode; it was empty, so it was repaired (chown root, chmod 0700)', { path: dir, was, problem });
}

/** Checks every pin (and sub-directory) below `dir`, which checkDir has accepted. */
function checkPinsUnder(dir: string, log: Logger, result: PinDirCheck): void {
  for (const name of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    const st = fs.lstatSync(p);
    if (st.isDirectory()) {
      checkDir(p, log, result);
      checkPinsUnder(p, log, result);
      continue;
    }
    if (st.isSymbolicLink()) throw new PinDirOwnershipError(`bpffs: ${p} is a symbolic link (${describe(st)}); refusing to reuse it as a pin`);
    if (!ours(st.uid) || st.mode & 0o022) {
      throw new PinDirOwnershipError(
        `bpffs: pin ${p} is ${describe(st)} (${!ours(st.uid) ? 'not owned by root' : 'writable by group or others'}); refusing to reuse it: another user could have planted it. Remove it and restart`,
      );
    }
  }
}

/**
 * Checks the bpffs mount `root`, every directory from it down to `bpffsDir`,
 * and bpffsDir's maps/, rings/ and links/ (created when missing) and staging/
 * (when there) with their pins.
 * `bpffsDir` must exist (ensureBpffs) and be inside `root`.
 */
export function checkPinDirs(bpffsDir: string, root: string, log: Logger): PinDirCheck {
  const absRoot = path.resolve(root);
  const abs = path.resolve(bpffsDir);
  const result: PinDirCheck = { checked: [], repaired: [] };
  const rootSt = fs.lstatSync(absRoot);
  if (!rootSt.isDirectory()) throw new PinDirOwnershipError(`bpffs: the mount root ${absRoot} is not a directory (${describe(rootSt)})`);
  const rootProblem = dirProblem(rootSt, true);
  if (rootProblem) throw new PinDirOwnershipError(`bpffs: the mount root ${absRoot} is ${describe(rootSt)} (${rootProblem}); refusing to pin below it`);
  result.checked.push(absRoot);
  const rel = path.relative(absRoot, abs);
  if (rel.startsWith('..') || path.isAbsolute(rel)) throw new PinDirOwnershipError(`bpffs: ${abs} is not inside the bpf filesystem root ${absRoot}`);
  let dir = absRoot;
  for (const part of rel ? rel.split(path.sep) : []) {
    dir = path.join(dir, part);
    checkDir(dir, log, result);
  }
  // staging/ (a migration's new set, agent/datapath/migration.ts) only when there is one.
  const staging = mapStagingDir(abs);
  for (const sub of [mapPinDir(abs), ringPinDir(abs), linkPinDir(abs), ...(fs.existsSync(staging) ? [staging] : [])]) {
    checkDir(sub, log, result);
    checkPinsUnder(sub, log, result);
  }
  return result;
}
