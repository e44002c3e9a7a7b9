/**
 * Running the node tools the clean-up commands use (iptables-save/-restore,
 * nft, ip, ipvsadm, ipset). Only the CLI's clean-up path shells out; the
 * agent's hot path never does.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

const SYSTEM_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/** The absolute path of an executable on $PATH (or the usual sbin dirs), or undefined. */
export function findExecutable(name: string, envPath = process.env.PATH ?? ''): string | undefined {
  const dirs = [...envPath.split(':').filter(Boolean), ...SYSTEM_DIRS];
  for (const dir of dirs) {
    const p = path.join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      /* not here */
    }
  }
  return undefined;
}

/** Runs a tool, returning stdout; a failure throws with the command and its stderr. */
export function runTool(cmd: string, args: string[], input?: string): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'], maxBuffer: 1 << 30 });
  } catch (err) {
    const e = err as Error & { stderr?: string; status?: number };
    const stderr = (e.stderr ?? '').toString().trim();
    throw new Error(`${path.basename(cmd)} ${args.join(' ')} failed (exit ${e.status ?? '?'}): ${stderr || e.message}`);
  }
}
