/**
 * The agent's configuration: command-line flags with kube-proxy-like names,
 * defaults resolved from the host (cgroup v2 mount, hostname).
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { findCgroup2Mount } from './cgroup.js';
import { levelFromVerbosity, type LogLevel } from './log.js';
import { defaultBpfObject } from './paths.js';

export interface AgentConfig {
  kubeconfig?: string;
  nodeName: string;
  cgroupPath: string;
  bpffsDir: string;
  bpfObject: string;
  logLevel: LogLevel;
  /** Full resync (drift repair) interval, as kube-proxy's syncPeriod. */
  syncPeriodMs: number;
  /** Shortest gap between two syncs; changes arriving meanwhile are coalesced. */
  minSyncPeriodMs: number;
}

export const DEFAULT_BPFFS_DIR = '/sys/fs/bpf/kpr';

export const USAGE = `Usage: kpr-agent [flags]
  --kubeconfig PATH        kubeconfig file (default: in-cluster config, then ~/.kube/config)
  --node-name NAME         this node's name (default: $NODE_NAME, then the hostname)
  --cgroup-path PATH       cgroup v2 directory the socket hooks attach to (default: the cgroup2 mount)
  --bpffs PATH             directory in the BPF filesystem for kpr's pins (default: ${DEFAULT_BPFFS_DIR})
  --bpf-object PATH        compiled datapath object (default: build/kpr_sock.bpf.o)
  --sync-period DURATION   full resync interval (default: 30s)
  --min-sync-period DUR    coalescing window between syncs (default: 0s)
  --log-level LEVEL        error|warn|info|debug|trace (default: info)
  -v N                     klog-style verbosity (2 = debug, 4 = trace)
  -h, --help`;

/** Parses "30s", "500ms", "1m" or a bare number of seconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new Error(`invalid duration "${text}" (use e.g. 500ms, 30s, 1m)`);
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  return n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[unit]!;
}

const LEVELS: LogLevel[] = ['error', 'warn', 'info', 'debug', 'trace'];

export function parseAgentArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): AgentConfig | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: 'string' },
      'node-name': { type: 'string' },
      'cgroup-path': { type: 'string' },
      bpffs: { type: 'string' },
      'bpf-object': { type: 'string' },
      'sync-period': { type: 'string', default: '30s' },
      'min-sync-period': { type: 'string', default: '0s' },
      'log-level': { type: 'string' },
      v: { type: 'string', short: 'v' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return 'help';
  let logLevel: LogLevel = 'info';
  if (values.v !== undefined) logLevel = levelFromVerbosity(Number(values.v));
  if (values['log-level'] !== undefined) {
    if (!LEVELS.includes(values['log-level'] as LogLevel)) throw new Error(`invalid --log-level "${values['log-level']}" (one of ${LEVELS.join(', ')})`);
    logLevel = values['log-level'] as LogLevel;
  }
  const nodeName = values['node-name'] ?? env.NODE_NAME ?? os.hostname();
  return {
    kubeconfig: values.kubeconfig ?? env.KUBECONFIG,
    nodeName,
    cgroupPath: values['cgroup-path'] ?? findCgroup2Mount(),
    bpffsDir: values.bpffs ?? DEFAULT_BPFFS_DIR,
    bpfObject: values['bpf-object'] ?? defaultBpfObject(),
    logLevel,
    syncPeriodMs: parseDuration(values['sync-period']!),
    minSyncPeriodMs: parseDuration(values['min-sync-period']!),
  };
}
