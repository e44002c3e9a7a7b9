/**
 * Reads a file that a user named (`--config`, `kpr plan -f`) without letting
 * it hang or exhaust the process: only regular files (a FIFO, a device, a
 * socket or a directory is an error naming the path and what it is), and at
 * most `maxBytes` (an error naming the path and the limit).
 *
 * The file is opened with O_NONBLOCK, so opening a FIFO with no writer returns
 * at once instead of waiting; the type is then checked on the open descriptor
 * (fstat), so what is read is what was checked. Reads stop at maxBytes + 1
 * whatever st_size says (a /proc file reports 0, a growing file more).
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';

/** `path: reason`; callers that name the path themselves use `reason`. */
export class InputFileError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}

const MiB = 1024 * 1024;

/** "64 MiB", "1 MiB", "512 KiB", "100 bytes". */
export function formatBytes(n: number): string {
  if (n >= MiB && n % MiB === 0) return `${n / MiB} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}

/** What a non-regular file is, for messages. */
export function fileKind(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  if (st.isSymbolicLink()) return 'a symbolic link';
  return 'not a regular file';
}

/**
 * The contents of `file` as UTF-8. Throws InputFileError (naming `file`) for a
 * missing or unreadable file, a file that is not regular, or one larger than
 * `maxBytes`.
 */
export function readRegularFile(file: string, maxBytes: number): string {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    // open(2) of a Unix socket fails with ENXIO.
    if (e.code === 'ENXIO') throw new InputFileError(file, 'not a regular file (a socket, or a device with nothing behind it)');
    throw new InputFileError(file, e.message);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new InputFileError(file, `not a regular file (${fileKind(st)})`);
    const limit = formatBytes(maxBytes);
    if (st.size > maxBytes) throw new InputFileError(file, `too large: ${st.size} bytes, the limit is ${limit}`);
    const chunks: Buffer[] = [];
    let total = 0;
    // First read sized by st_size (+1 to see the end), later ones 64 KiB, never past maxBytes + 1.
    let want = Math.min(st.size + 1, maxBytes + 1);
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.max(1, want));
      let n: number;
      try {
        n = readSync(fd, chunk, 0, chunk.length, null);
      } catch (err) {
        throw new InputFileError(file, `cannot read: ${(err as Error).message}`);
      }
      if (n === 0) break;
      chunks.push(chunk.subarray(0, n));
      total += n;
      if (total > maxBytes) throw new InputFileError(file, `too large: more than the limit of ${limit}`);
      want = Math.min(64 * 1024, maxBytes + 1 - total);
    }
    return Buffer.concat(chunks, total).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
