/** kpr's version: package.json's, as kpr_build_info and `kpr version` report it. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { findRepoRoot } from '../runtime/paths.js';

export function kprVersion(): string {
  try {
    return (JSON.parse(readFileSync(path.join(findRepoRoot(), 'package.json'), 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}
