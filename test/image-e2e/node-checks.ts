/**
 * What the image test observes of a container from the node, without the
 * container's help: a process's capabilities, privileges and namespaces
 * (/proc/<pid>/status, /proc/<pid>/ns), its mounts (/proc/<pid>/mountinfo),
 * kpr's pins on the host's bpffs, and kpr's programs on the host's root
 * cgroup and interfaces. Each check throws with what it saw.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { BpfMap, listInterfaces, queryCgroupPrograms } from '../../native/index.js';
import { MAP_BY_NAME } from '../../agent/maps/registry.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { anyIngressPrograms } from '../support/tc-modes.js';
import type { ContainerPlan } from '../image/pod-to-podman.js';

/** Linux capability numbers (include/uapi/linux/capability.h). */
export const CAPS: Record<string, number> = {
  CHOWN: 0,
  DAC_OVERRIDE: 1,
  DAC_READ_SEARCH: 2,
  FOWNER: 3,
  FSETID: 4,
  KILL: 5,
  SETGID: 6,
  SETUID: 7,
  SETPCAP: 8,
  LINUX_IMMUTABLE: 9,
  NET_BIND_SERVICE: 10,
  NET_BROADCAST: 11,
  NET_ADMIN: 12,
  NET_RAW: 13,
  IPC_LOCK: 14,
  IPC_OWNER: 15,
  SYS_MODULE: 16,
  SYS_RAWIO: 17,
  SYS_CHROOT: 18,
  SYS_PTRACE: 19,
  SYS_PACCT: 20,
  SYS_ADMIN: 21,
  SYS_BOOT: 22,
  SYS_NICE: 23,
  SYS_RESOURCE: 24,
  SYS_TIME: 25,
  SYS_TTY_CONFIG: 26,
  MKNOD: 27,
  LEASE: 28,
  AUDIT_WRITE: 29,
  AUDIT_CONTROL: 30,
  SETFCAP: 31,
  MAC_OVERRIDE: 32,
  MAC_ADMIN: 33,
  SYSLOG: 34,
  WAKE_ALARM: 35,
  BLOCK_SUSPEND: 36,
  AUDIT_READ: 37,
  PERFMON: 38,
  BPF: 39,
  CHECKPOINT_RESTORE: 40,
};

/** A capability mask from /proc/<pid>/status → the names in it. */
export function capNames(hexMask: string): string[] {
  const mask = BigInt(`0x${hexMask}`);
  return Object.entries(CAPS)
    .filter(([, n]) => (mask >> BigInt(n)) & 1n)
    .map(([name]) => name)
    .sort();
}

export interface ProcessView {
  pid: number;
  capEff: string[];
  capPrm: string[];
  capBnd: string[];
  capInh: string[];
  capAmb: string[];
  noNewPrivs: boolean;
  uid: number;
  gid: number;
  hostNetwork: boolean;
  hostPID: boolean;
}

export function processView(pid: number): ProcessView {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (k: string) => {
    const m = new RegExp(`^${k}:\\s*(.*)$`, 'm').exec(status);
    assert.ok(m, `/proc/${pid}/status has no ${k}`);
    return m[1].trim();
  };
  const ns = (kind: string, p: number | string) => readlinkSync(`/proc/${p}/ns/${kind}`);
  return {
    pid,
    capEff: capNames(field('CapEff')),
    capPrm: capNames(field('CapPrm')),
    capBnd: capNames(field('CapBnd')),
    capInh: capNames(field('CapInh')),
    capAmb: capNames(field('CapAmb')),
    noNewPrivs: field('NoNewPrivs') === '1',
    uid: Number(field('Uid').split(/\s+/)[1]),
    gid: Number(field('Gid').split(/\s+/)[1]),
    hostNetwork: ns('net', pid) === ns('net', 1),
    hostPID: ns('pid', pid) === ns('pid', 1),
  };
}

/** The process has exactly what the container's securityContext asks for. */
export function assertSecurityContext(v: ProcessView, plan: ContainerPlan, what: string): void {
  const want = plan.expect;
  if (!want.privileged) {
    assert.ok(want.capDropAll, `${what}: the chart drops every capability (capabilities.drop: [ALL])`);
    const caps = [...want.capAdd].sort();
    assert.deepEqual(v.capEff, caps, `${what}: effective capabilities are exactly the chart's`);
    assert.deepEqual(v.capPrm, caps, `${what}: permitted capabilities are exactly the chart's`);
    assert.deepEqual(v.capBnd, caps, `${what}: the bounding set is exactly the chart's`);
    assert.deepEqual(v.capAmb, [], `${what}: no ambient capabilities`);
  }
  assert.equal(v.noNewPrivs, want.noNewPrivs, `${what}: no_new_privs (allowPrivilegeEscalation: false)`);
  if (want.user !== undefined) assert.equal(v.uid, want.user, `${what}: runs as the chart's runAsUser`);
  if (want.group !== undefined) assert.equal(v.gid, want.group, `${what}: runs as the chart's runAsGroup`);
}

export interface MountView {
  mountPoint: string;
  fsType: string;
  options: string[];
  /** Propagation: shared:N, master:N (a slave), or none (private). */
  optional: string[];
}

/** /proc/<pid>/mountinfo, the last mount of each mount point (the visible one). */
export function mountsOf(pid: number): Map<string, MountView> {
  const out = new Map<string, MountView>();
  for (const line of readFileSync(`/proc/${pid}/mountinfo`, 'utf8').split('\n').filter(Boolean)) {
    const [pre, post] = line.split(' - ');
    const f = pre.split(' ');
    const [fsType] = post.split(' ');
    out.set(f[4], { mountPoint: f[4], fsType, options: f[5].split(','), optional: f.slice(6) });
  }
  return out;
}

/** The container's root is read-only: mountinfo says ro, and a write into it fails with EROFS. */
export function assertReadOnlyRoot(pid: number, what: string): void {
  const root = mountsOf(pid).get('/');
  assert.ok(root, `${what}: no / in /proc/${pid}/mountinfo`);
  assert.ok(root.options.includes('ro'), `${what}: / is mounted ${root.options.join(',')}, not ro`);
  let err = '';
  try {
    execFileSync('nsenter', ['--target', String(pid), '--mount', 'touch', '/kpr-image-test-write'], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    err = String((e as { stderr?: Buffer }).stderr ?? e);
  }
  assert.match(err, /Read-only file system/, `${what}: a write to / in the container's mount namespace must fail with EROFS`);
}

/** Is a BPF filesystem mounted at `p` (statfs f_type BPF_FS_MAGIC)? */
export function isBpffsAt(p: string): boolean {
  return execFileSync('stat', ['-f', '-c', '%t', p], { encoding: 'utf8' }).trim() === 'cafe4a11';
}

/**
 * kpr's map pins on the host's bpffs: name → map id. Throws when the host
 * has no bpffs at the root or the pins are not there: then the agent pinned
 * into a bpffs only its container sees, and the pins die with it.
 */
export function hostPins(bpffsRoot: string, kprDir: string): Map<string, number> {
  assert.ok(isBpffsAt(bpffsRoot), `the host has no bpffs at ${bpffsRoot}: the agent's pins live in a bpffs only its container sees, and die with it`);
  const out = new Map<string, number>();
  for (const spec of MAP_BY_NAME.values()) {
    const p = mapPinPath(kprDir, spec.name);
    assert.ok(existsSync(p), `${p} is not pinned on the host`);
    const m = BpfMap.openPinned(p);
    try {
      out.set(spec.name, m.id);
    } finally {
      m.close();
    }
  }
  return out;
}

/** connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6 (enum bpf_attach_type). */
const SOCK_ATTACH_TYPES = [10, 11, 14, 15, 19, 20, 29, 30];

/** Programs on the cgroup's socket hooks. */
export function cgroupSocketPrograms(cgroup: string): number[] {
  return SOCK_ATTACH_TYPES.flatMap((t) => queryCgroupPrograms(cgroup, t));
}

/** tc ingress programs of either mode on the node's interfaces: interface → program ids. */
export function tcPrograms(): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const i of listInterfaces()) {
    const p = anyIngressPrograms(i.name);
    const ids = [...p.tcx, ...p.tc];
    if (ids.length) out[i.name] = ids;
  }
  return out;
}
