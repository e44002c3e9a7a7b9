import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The installation root: the nearest directory above this module holding package.json. */
export function findRepoRoot(from: string = path.dirname(fileURLToPath(import.meta.url))): string {
  let dir = from;
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${from}`);
    dir = up;
  }
  return dir;
}

/** The datapath object the build produces (make bpf). */
export function defaultBpfObject(): string {
  return path.join(findRepoRoot(), 'build', 'kpr_sock.bpf.o');
}
