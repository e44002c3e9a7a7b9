/**
 * `kpr version`: what is installed and what runs. The CLI's version
 * (package.json), the git commit it was built from, the SHA-256 of each BPF
 * object the agent would load from this installation (the datapath object
 * and the objects found beside it, as the agent finds them), and the running
 * agent's version from its metrics endpoint (kpr_build_info), when it answers.
 */
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { SOCK_TERM_OBJECT } from '../datapath/kernel-probes.js';
import { NETNS_PROBE_OBJECT } from '../datapath/netns-cookie.js';
import { kprVersion } from '../metrics/kpr-version.js';
import { findRepoRoot, defaultBpfObject } from '../runtime/paths.js';
import { table } from './map-commands.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';
import { DEFAULT_AGENT_TIMEOUT_MS, agentTimeoutMs, fetchAgentText, parsePromText } from './agent-http.js';

/** Where `make build` records the commit it built (beside the bundles, copied into the image). */
export const BUILD_INFO_FILE = path.join('dist', 'build-info.json');

export interface BpfObjectDigest {
  path: string;
  /** Hex SHA-256; absent when the file is not there. */
  sha256?: string;
  error?: string;
}

export interface VersionReport {
  version: string;
  commit: string;
  /** Where the commit came from: the build's record, the repository, or nowhere. */
  commitSource: 'build' | 'git' | 'unknown';
  node: string;
  bpfObjects: BpfObjectDigest[];
  agent: { address: string; version?: string; nodeVersion?: string; error?: string };
}

/** The commit: dist/build-info.json (written by make build; "unknown" when it built without git), else `git rev-parse HEAD` in the installation, else unknown. */
export function buildCommit(root: string = findRepoRoot()): { commit: string; source: VersionReport['commitSource'] } {
  try {
    const info = JSON.parse(readFileSync(path.join(root, BUILD_INFO_FILE), 'utf8')) as { commit?: unknown };
    if (typeof info.commit === 'string' && /^[0-9a-f]{7,64}$/.test(info.commit)) return { commit: info.commit, source: 'build' };
  } catch {
    /* no record: ask git */
  }
  if (existsSync(path.join(root, '.git'))) {
    const r = spawnSync('git', ['-C', root, 'rev-parse', 'HEAD'], { encoding: 'utf8', timeout: 2000 });
    const commit = r.status === 0 ? r.stdout.trim() : '';
    if (/^[0-9a-f]{40,64}$/.test(commit)) return { commit, source: 'git' };
  }
  return { commit: 'unknown', source: 'unknown' };
}

/** The objects the agent loads for --bpf-object `main`: it, kpr_tc and kpr_sock_term beside it, and the netns probe. */
export function agentBpfObjects(main: string): string[] {
  const dir = path.dirname(main);
  return [main, path.join(dir, 'kpr_tc.bpf.o'), path.join(dir, SOCK_TERM_OBJECT), path.join(dir, NETNS_PROBE_OBJECT)];
}

function digest(file: string): BpfObjectDigest {
  try {
    return { path: file, sha256: createHash('sha256').update(readFileSync(file)).digest('hex') };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { path: file, error: code === 'ENOENT' ? 'not found' : (err as Error).message };
  }
}

async function agentVersion(address: string, timeoutMs: number): Promise<VersionReport['agent']> {
  const r = await fetchAgentText(address, '/metrics', '--metrics-address', timeoutMs);
  if (r.error !== undefined) return { address, error: r.error };
  if (r.status !== 200) return { address, error: `/metrics answered ${r.status}` };
  const info = parsePromText(r.text).find((s) => s.name === 'kpr_build_info');
  if (!info) return { address, error: 'no kpr_build_info in /metrics (not a kpr agent?)' };
  return { address, version: info.labels.version ?? 'unknown', ...(info.labels.node_version ? { nodeVersion: info.labels.node_version } : {}) };
}

export async function versionReport(bpfObject: string, metricsAddress: string, timeoutMs = DEFAULT_AGENT_TIMEOUT_MS): Promise<VersionReport> {
  const { commit, source } = buildCommit();
  return {
    version: kprVersion(),
    commit,
    commitSource: source,
    node: process.version,
    bpfObjects: agentBpfObjects(bpfObject).map(digest),
    agent: await agentVersion(metricsAddress, timeoutMs),
  };
}

export function formatVersion(r: VersionReport): string {
  const agent =
    r.agent.version !== undefined
      ? `${r.agent.version}${r.agent.nodeVersion ? ` (Node.js ${r.agent.nodeVersion})` : ''}, from ${r.agent.address}`
      : `not reachable at ${r.agent.address} (${r.agent.error})`;
  return (
    [
      `kpr CLI   ${r.version}`,
      `commit    ${r.commit}${r.commitSource === 'git' ? ' (from the repository)' : ''}`,
      `node      ${r.node}`,
      `agent     ${agent}`,
      '',
      table(
        ['BPF OBJECT', 'SHA-256'],
        r.bpfObjects.map((o) => [o.path, o.sha256 ?? `(${o.error})`]),
      ).trimEnd(),
    ].join('\n') + '\n'
  );
}

export async function versionCommand(argv: string[]): Promise<string> {
  const { values } = parseCommand(commandSpec('version'), argv);
  const r = await versionReport(
    (values['bpf-object'] as string | undefined) ?? defaultBpfObject(),
    values['metrics-address'] as string,
    agentTimeoutMs(values.timeout as string),
  );
  return values.output === 'json' ? JSON.stringify(r, null, 2) + '\n' : formatVersion(r);
}
