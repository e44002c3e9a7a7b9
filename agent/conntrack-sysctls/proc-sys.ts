/**
 * The conntrack sysctls on the node, through their files: /proc/sys/net/netfilter/*
 * (per network namespace: the caller's) and /sys/module/nf_conntrack/parameters/hashsize
 * (global). Reads what plan.ts needs, and writes its steps; no shelling out.
 * A write the kernel refuses is a result with the reason, never a throw.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { CONNTRACK_SYSCTLS, HASHSIZE, type ConntrackFacts, type SysctlName, type SysctlStep } from './plan.js';

/** The file of a sysctl ("net.netfilter.nf_conntrack_max" → /proc/sys/net/netfilter/nf_conntrack_max). */
export function sysctlFile(name: SysctlName): string {
  return name === HASHSIZE ? '/sys/module/nf_conntrack/parameters/hashsize' : `/proc/sys/${name.replaceAll('.', '/')}`;
}

function readNumber(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(n) ? n : undefined;
  } catch {
    return undefined; // missing: nf_conntrack not loaded (or a kernel without this sysctl)
  }
}

/** The current values, and whether nf_conntrack_max is writable in this network namespace. */
export function readConntrackFacts(cpus: number): ConntrackFacts {
  const current: ConntrackFacts['current'] = {};
  for (const name of [...Object.values(CONNTRACK_SYSCTLS), HASHSIZE] as SysctlName[]) {
    const v = readNumber(sysctlFile(name));
    if (v !== undefined) current[name] = v;
  }
  let maxWritable = false;
  try {
    maxWritable = (statSync(sysctlFile(CONNTRACK_SYSCTLS.max)).mode & 0o200) !== 0;
  } catch {
    /* missing */
  }
  return { cpus, current, maxWritable };
}

export interface StepResult {
  step: SysctlStep;
  /** For a write: "written" (read back equal), or why not. */
  outcome?: string;
  ok: boolean;
}

const REASONS: Record<string, string> = {
  EACCES: "permission denied (read-only here: a network namespace other than the host's?)",
  EPERM: 'not permitted (needs CAP_NET_ADMIN/CAP_SYS_ADMIN in the host: a privileged container)',
  EROFS: "read-only file system (a container's /proc/sys and /sys are read-only unless it is privileged)",
  EOPNOTSUPP: "not supported from this network namespace (the kernel takes it only from the host's)",
  EINVAL: 'the kernel refused the value',
  ENOENT: 'no such file (nf_conntrack not loaded)',
};

/** Writes the steps whose action is write, in order; a step `after` another is written only if that one was. */
export function applyConntrackSteps(steps: readonly SysctlStep[]): StepResult[] {
  const written = new Set<SysctlName>();
  return steps.map((step) => {
    if (step.action !== 'write') return { step, ok: true };
    if (step.after && !written.has(step.after)) return { step, ok: false, outcome: `not written: ${step.after} was not` };
    const file = sysctlFile(step.name);
    try {
      writeFileSync(file, `${step.want}\n`, { flag: 'r+' });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      return { step, ok: false, outcome: `not written: ${REASONS[code] ?? (err as Error).message}${code && REASONS[code] ? ` [${code}]` : ''}` };
    }
    const back = readNumber(file);
    if (back !== step.want) return { step, ok: false, outcome: `written, but it reads back ${back ?? 'nothing'}` };
    written.add(step.name);
    return { step, ok: true, outcome: 'written' };
  });
}
