/**
 * `kpr preflight`: does this node have what kpr needs? Each check reads one
 * fact from the node and says what is missing and how to get it. Required
 * checks failing make the command exit non-zero; advisory ones only warn.
 * Kernel features are probed (agent/datapath/kernel-probes.ts, the same
 * probes the agent runs at start) and printed with the agent's words; their
 * kernel versions are explanations, never the test.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BatchWriter, BpfObject, DEFAULT_BPFFS_ROOT, isBpffs, setLibbpfLogger } from '../../native/index.js';
import { batchWriterPath } from '../datapath/loader.js';
import { KERNEL_FEATURES, formatFeature, recordDatapathFallbacks, type FeatureStatus, type KernelFeatures } from '../datapath/kernel-features.js';
import { probeKernelFeatures } from '../datapath/kernel-probes.js';
import { NETNS_COOKIE_FALLBACK, NETNS_PROBE_OBJECT, netnsCookieBySocketProbe } from '../datapath/netns-cookie.js';
import { probeSockDiagDestroy } from '../datapath/udp-terminator.js';
import { libbpf } from '../../native/libbpf.js';
import { findCgroup2Mount } from '../runtime/cgroup.js';
import { pinnedMapStats, type MapStats } from '../metrics/map-stats.js';
import { MAP_BY_NAME } from '../maps/registry.js';
import { snatPortsCheck } from '../snat-ports/check.js';
import { readSnatPortFacts, SNAT_RANGE } from '../snat-ports/proc-sys.js';
import { scanMapPins } from '../datapath/pin-scan.js';
import type { FoundPin } from '../datapath/migration-plan.js';

export type Severity = 'required' | 'advisory';

export interface CheckResult {
  name: string;
  ok: boolean;
  severity: Severity;
  /** What was found. */
  detail: string;
  /** When not ok: what to do about it. */
  fix?: string;
}

export interface PreflightOptions {
  bpffsDir: string;
  /** Explicit cgroup (as the agent's --cgroup-path); default: the cgroup2 mount. */
  cgroupPath?: string;
  bpfObject: string;
  /** max_entries by map name, as the agent would load them (agent/datapath/map-sizes.ts); the trial load uses them. */
  mapSizes?: Readonly<Record<string, number>>;
  /** The node's network namespace (a path) for the snat-ports row; default: this process's. */
  netns?: string;
  /** Facts, injectable for tests. */
  procRoot?: string;
  kernelRelease?: string;
  btfPath?: string;
}

export interface PreflightReport {
  ok: boolean;
  facts: {
    kernelRelease: string;
    btf: boolean;
    cgroup2Mount: string | null;
    cgroupPath: string | null;
    bpffsRoot: string;
    bpffsMounted: boolean;
    uid: number;
    capabilities: string[];
    bpfObject: string;
  };
  checks: CheckResult[];
  /** Every kernel feature with its state, as the agent would log it (empty when it could not probe). */
  features: FeatureStatus[];
  /** What runs degraded: the optional features that are not active, in words. */
  degraded: string[];
  /** The configured size of each run-time sized map and, where pinned under --bpffs, its size in use and fill. */
  mapSizes: Array<{ map: string; configured: number; pinned?: number; entries?: number }>;
}

export const MIN_KERNEL: [number, number] = [5, 10];

/** "6.1.0-18-amd64" → [6, 1]. */
export function kernelVersion(release: string): [number, number] | undefined {
  const m = /^(\d+)\.(\d+)/.exec(release);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

function atLeast(v: [number, number], min: [number, number]): boolean {
  return v[0] > min[0] || (v[0] === min[0] && v[1] >= min[1]);
}

/** Capability numbers (linux/capability.h) kpr cares about. */
export const CAPS = { CAP_NET_ADMIN: 12, CAP_SYS_ADMIN: 21, CAP_SYS_RESOURCE: 24, CAP_PERFMON: 38, CAP_BPF: 39 } as const;

/** The effective capability names of this process, from /proc/self/status CapEff. */
export function effectiveCapabilities(status: string): string[] {
  const m = /^CapEff:\s*([0-9a-fA-F]+)$/m.exec(status);
  if (!m) return [];
  const mask = BigInt('0x' + m[1]);
  return Object.entries(CAPS)
    .filter(([, bit]) => (mask >> BigInt(bit)) & 1n)
    .map(([name]) => name);
}

/** The filesystem type of the mount holding `p` (longest mount-point prefix in /proc/mounts). */
export function mountTypeOf(p: string, mounts: string): { mountPoint: string; fsType: string } | undefined {
  let best: { mountPoint: string; fsType: string } | undefined;
  const abs = path.resolve(p);
  for (const line of mounts.split('\n')) {
    const [, mp, fsType] = line.split(' ');
    if (!mp || !fsType) continue;
    const mountPoint = mp.replace(/\\040/g, ' ');
    const inside = abs === mountPoint || abs.startsWith(mountPoint === '/' ? '/' : mountPoint + '/');
    if (inside && (!best || mountPoint.length >= best.mountPoint.length)) best = { mountPoint, fsType };
  }
  return best;
}

export function runPreflight(opts: PreflightOptions): PreflightReport {
  const procRoot = opts.procRoot ?? '/proc';
  const release = opts.kernelRelease ?? os.release();
  const mounts = readFileSync(path.join(procRoot, 'mounts'), 'utf8');
  const checks: CheckResult[] = [];
  const add = (c: CheckResult) => checks.push(c);

  // Kernel version.
  const kv = kernelVersion(release);
  add({
    name: 'kernel',
    severity: 'required',
    ok: kv !== undefined && atLeast(kv, MIN_KERNEL),
    detail: `running ${release}; kpr's cgroup socket hooks, bpf_link attachments and batch map operations need ${MIN_KERNEL.join('.')} or newer`,
    fix: `upgrade the node's kernel to ${MIN_KERNEL.join('.')}+`,
  });
  // BTF.
  const btfPath = opts.btfPath ?? '/sys/kernel/btf/vmlinux';
  const btf = existsSync(btfPath);
  add({
    name: 'btf',
    severity: 'required',
    ok: btf,
    detail: btf ? `${btfPath} present` : `${btfPath} missing`,
    fix: 'use a kernel built with CONFIG_DEBUG_INFO_BTF=y (most distribution kernels are)',
  });

  // cgroup v2.
  let cgroup2Mount: string | null = null;
  try {
    cgroup2Mount = findCgroup2Mount(mounts);
  } catch {
    /* reported below */
  }
  const cgroupPath = opts.cgroupPath ?? cgroup2Mount;
  if (!cgroupPath) {
    add({
      name: 'cgroup2',
      severity: 'required',
      ok: false,
      detail: 'no cgroup2 filesystem in /proc/mounts',
      fix: 'boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or mount it: mount -t cgroup2 none /sys/fs/cgroup',
    });
  } else {
    const mt = mountTypeOf(cgroupPath, mounts);
    const isDir = existsSync(cgroupPath) && statSync(cgroupPath).isDirectory();
    const ok = isDir && mt?.fsType === 'cgroup2';
    add({
      name: 'cgroup2',
      severity: 'required',
      ok,
      detail: !isDir
        ? `cgroup path ${cgroupPath} does not exist`
        : `cgroup path ${cgroupPath} is on ${mt ? `${mt.fsType} (mounted at ${mt.mountPoint})` : 'an unknown filesystem'}${cgroup2Mount ? `; cgroup2 is mounted at ${cgroup2Mount}` : ''}`,
      fix: cgroup2Mount ? `pass --cgroup-path inside the cgroup2 mount ${cgroup2Mount}` : 'mount cgroup v2 (mount -t cgroup2 none /sys/fs/cgroup)',
    });
  }

  // Capabilities.
  const caps = effectiveCapabilities(readFileSync(path.join(procRoot, 'self', 'status'), 'utf8'));
  const uid = process.getuid?.() ?? -1;
  const missing = ['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_SYS_ADMIN'].filter((c) => !caps.includes(c));
  add({
    name: 'capabilities',
    severity: 'required',
    ok: missing.length === 0,
    detail:
      missing.length === 0
        ? `uid ${uid}; effective: ${caps.join(', ')}`
        : `uid ${uid}; missing ${missing.join(', ')} (effective: ${caps.join(', ') || 'none'})`,
    fix: 'run as root, or with CAP_BPF (load programs, create maps), CAP_NET_ADMIN (cgroup socket programs) and CAP_SYS_ADMIN (cgroup attach, mounting bpffs)',
  });

  // bpffs.
  const bpffsRoot = DEFAULT_BPFFS_ROOT;
  const dir = path.resolve(opts.bpffsDir);
  let bpffsMounted = false;
  try {
    bpffsMounted = existsSync(bpffsRoot) && isBpffs(bpffsRoot);
  } catch {
    /* reported below */
  }
  const inside = dir.startsWith(bpffsRoot + '/');
  const bpfKnown = /\tbpf$/m.test(readFileSync(path.join(procRoot, 'filesystems'), 'utf8'));
  const mountable = !bpffsMounted && bpfKnown && caps.includes('CAP_SYS_ADMIN');
  add({
    name: 'bpffs',
    severity: 'required',
    ok: inside && (bpffsMounted || mountable),
    detail: !inside
      ? `--bpffs ${dir} is not inside the BPF filesystem ${bpffsRoot}`
      : bpffsMounted
        ? `${bpffsRoot} is a mounted bpf filesystem; kpr pins under ${dir}`
        : mountable
          ? `${bpffsRoot} is not mounted; the agent mounts it (bpf is in /proc/filesystems)`
          : `${bpffsRoot} is not a bpf filesystem and cannot be mounted here (${bpfKnown ? 'no CAP_SYS_ADMIN' : 'bpf missing from /proc/filesystems'})`,
    fix: `mount it (mount -t bpf bpf ${bpffsRoot}); in a pod, mount the host's ${bpffsRoot} with Bidirectional propagation; keep --bpffs below ${bpffsRoot}`,
  });

  // libbpf.
  let libbpfOk = false;
  let libbpfDetail: string;
  try {
    libbpf();
    libbpfOk = true;
    libbpfDetail = 'libbpf.so.1 loaded';
  } catch (err) {
    libbpfDetail = `libbpf.so.1 not loadable: ${(err as Error).message.split('\n')[0]}`;
  }
  add({ name: 'libbpf', severity: 'required', ok: libbpfOk, detail: libbpfDetail, fix: 'install libbpf 1.x (Debian/Ubuntu: apt-get install libbpf1)' });

  // A trial load of the datapath object: open, load, close — nothing attached or pinned.
  const objExists = existsSync(opts.bpfObject);
  let loadDetail: string;
  let loadOk = false;
  if (!objExists) {
    loadDetail = `${opts.bpfObject} not found`;
  } else if (!libbpfOk || missing.length > 0) {
    loadDetail = `${opts.bpfObject} present; trial load skipped (${!libbpfOk ? 'libbpf' : 'capabilities'} missing, see above)`;
  } else {
    const warnings: string[] = [];
    setLibbpfLogger((level, msg) => {
      if (level === 'warn') warnings.push(msg.trim());
    });
    try {
      const obj = BpfObject.open(opts.bpfObject, opts.mapSizes ? { maxEntries: opts.mapSizes } : {});
      try {
        obj.load();
        loadDetail = `${opts.bpfObject}: ${obj.programNames().length} programs and ${obj.mapNames().length} maps load${opts.mapSizes ? ' at the configured map sizes' : ''} (then closed; nothing attached)`;
        loadOk = true;
      } finally {
        obj.close();
      }
    } catch (err) {
      loadDetail = `${opts.bpfObject} does not load: ${(err as Error).message.split('\n')[0]}${warnings.length ? ` (libbpf: ${warnings.slice(-3).join(' | ')})` : ''}`;
    } finally {
      setLibbpfLogger(null);
    }
  }
  add({
    name: 'bpf-object',
    severity: 'required',
    ok: loadOk,
    detail: loadDetail,
    fix: 'build it (make bpf) or pass --bpf-object; a verifier error means this kernel lacks a feature kpr uses; a map creation error (ENOMEM, E2BIG) means a --map-size-* too large for this node',
  });

  // Map sizes: configured, and what the pins under --bpffs hold (one at another size is migrated at start: agent/datapath/migration.ts).
  const mapSizes = mapSizeRows(opts.mapSizes ?? {}, opts.bpffsDir);
  const mismatched = mapSizes.filter((m) => m.pinned !== undefined && m.pinned !== m.configured);
  add({
    name: 'map-sizes',
    severity: 'advisory',
    ok: !mapSizes.pinError,
    detail: [
      `configured: ${mapSizes.map((m) => `${m.map} ${m.configured}`).join(', ')}`,
      mapSizes.pinError
        ? `pins under ${dir}: ${mapSizes.pinError}`
        : mapSizes.some((m) => m.pinned !== undefined)
          ? `pinned: ${mapSizes
              .filter((m) => m.pinned !== undefined)
              .map((m) => `${m.map} ${m.entries}/${m.pinned} (${((100 * m.entries!) / m.pinned!).toFixed(1)}%)`)
              .join(', ')}`
          : `nothing pinned under ${dir} yet`,
      ...(mismatched.length
        ? [
            `pinned at another size: ${mismatched.map((m) => `${m.map} ${m.pinned}, not ${m.configured}`).join(', ')}: the agent migrates the maps to a new set of the configured sizes at start, live`,
          ]
        : []),
    ].join('; '),
    fix: `the pinned maps under ${dir} cannot be read`,
  });

  // Layout versions of the pins (agent/datapath/migration-plan.ts): older ones are migrated at start, a newer one stops the agent.
  add(mapLayoutCheck(opts.bpffsDir));

  // Kernel features: the agent's probes, and the fallbacks it would use.
  let features: KernelFeatures | undefined;
  if (libbpfOk && missing.length === 0) {
    features = probeKernelFeatures({ cgroupPath: cgroupPath ?? '/', bpfObject: opts.bpfObject, trialLoadSockTerm: true, btfPath }).features;
    if (!features.present('netns-cookie-sockopt')) {
      try {
        if (!cgroupPath) throw new Error('no cgroup to run it under');
        netnsCookieBySocketProbe({ probeObject: path.join(path.dirname(opts.bpfObject), NETNS_PROBE_OBJECT), cgroupParent: cgroupPath });
        features.useFallback('netns-cookie-sockopt', NETNS_COOKIE_FALLBACK);
      } catch (err) {
        features.turnOff('netns-cookie-sockopt', `${NETNS_COOKIE_FALLBACK} failed: ${(err as Error).message}`);
      }
    }
    // The fallbacks the agent would use with its defaults (--tc-attach auto, --udp-termination auto).
    recordDatapathFallbacks(features, {
      tcAttach: 'auto',
      sockDestroyNetlink: probeSockDiagDestroy,
      tcxDetail: 'a clsact qdisc with a direct-action cls_bpf filter (--tc-attach auto)',
      sockDestroyDetail: 'sock_diag SOCK_DESTROY works here (--udp-termination auto)',
    });
    for (const f of features.list()) {
      add({
        name: `feature:${f.feature}`,
        severity: f.required ? 'required' : 'advisory',
        ok: f.state === 'active',
        detail: formatFeature(f),
        fix:
          f.state === 'fallback'
            ? `served through ${f.fallback}; kernel ${KERNEL_FEATURES[f.feature].since}+ has it directly`
            : `${f.required ? 'kpr needs it' : 'optional'}; kernel ${KERNEL_FEATURES[f.feature].since}+ has it`,
      });
    }
  } else {
    add({
      name: 'kernel-features',
      severity: 'required',
      ok: false,
      detail: `not probed (${!libbpfOk ? 'libbpf' : 'capabilities'} missing, see above)`,
      fix: 'fix the rows above, then run again',
    });
  }

  // The writer thread for large syncs: without it the agent works, its full syncs are slower.
  const writerLib = batchWriterPath(opts.bpfObject);
  let writerOk = false;
  let writerDetail: string;
  try {
    BatchWriter.open(writerLib).close();
    writerOk = true;
    writerDetail = `${writerLib} loads and starts its thread`;
  } catch (err) {
    writerDetail = `${(err as Error).message.split('\n')[0]}; large map batches will be written synchronously (slower full syncs)`;
  }
  add({
    name: 'batch-writer',
    severity: 'advisory',
    ok: writerOk,
    detail: writerDetail,
    fix: 'build it (make build) next to the BPF objects; it needs libbpf.so.1',
  });

  add(snatPortsCheck(readSnatPortFacts({ netns: opts.netns }), SNAT_RANGE));

  for (const c of checks) if (c.ok) delete c.fix;
  const list = features?.list() ?? [];
  return {
    ok: checks.every((c) => c.ok || c.severity === 'advisory'),
    features: list,
    degraded: checks.filter((c) => !c.ok && c.severity === 'advisory').map((c) => c.detail),
    mapSizes: mapSizes.map(({ map, configured, pinned, entries }) => ({ map, configured, ...(pinned !== undefined ? { pinned, entries } : {}) })),
    facts: {
      kernelRelease: release,
      btf,
      cgroup2Mount,
      cgroupPath,
      bpffsRoot,
      bpffsMounted,
      uid,
      capabilities: caps,
      bpfObject: opts.bpfObject,
    },
    checks,
  };
}

/** Each configured map with, when pinned under bpffsDir, its max_entries and entries. */
function mapLayoutCheck(bpffsDir: string): CheckResult {
  let found: FoundPin[];
  try {
    found = scanMapPins(bpffsDir).filter((p) => MAP_BY_NAME.has(p.name));
  } catch (err) {
    return {
      name: 'map-layouts',
      severity: 'required',
      ok: false,
      detail: `pins under ${bpffsDir}: ${(err as Error).message.split('\n')[0]}`,
      fix: 'run as root, with --bpffs the agent uses',
    };
  }
  const version = (p: FoundPin) => MAP_BY_NAME.get(p.name)!.version;
  const newer = found.filter((p) => p.version > version(p));
  const older = found.filter((p) => p.version < version(p));
  const detail = [
    found.length ? `${found.length} map pins under ${bpffsDir}` : `nothing pinned under ${bpffsDir} yet`,
    ...older.map((p) => `${p.name} at layout v${p.version}: the agent migrates it to v${version(p)} at start, live`),
    ...newer.map((p) => `${p.name} at layout v${p.version} (${p.dir}/${p.file}), newer than this release's v${version(p)}: the agent refuses to start`),
  ].join('; ');
  return {
    name: 'map-layouts',
    severity: 'required',
    ok: newer.length === 0,
    detail,
    fix: 'a newer kpr release pinned these maps: run that release, or stop the agent and remove the pins (kpr cleanup; conntrack and affinity state are lost) to go back',
  };
}

function mapSizeRows(
  configured: Readonly<Record<string, number>>,
  bpffsDir: string,
): Array<{ map: string; configured: number; pinned?: number; entries?: number }> & { pinError?: string } {
  let pinned: MapStats[] = [];
  let pinError: string | undefined;
  try {
    pinned = pinnedMapStats(bpffsDir);
  } catch (err) {
    pinError = (err as Error).message.split('\n')[0];
  }
  const rows: Array<{ map: string; configured: number; pinned?: number; entries?: number }> & { pinError?: string } = Object.entries(configured).map(
    ([map, n]) => {
      const p = pinned.find((s) => s.name === map);
      return { map, configured: n, ...(p ? { pinned: p.capacity, entries: p.entries ?? 0 } : {}) };
    },
  );
  if (pinError !== undefined) rows.pinError = pinError;
  return rows;
}

export function formatPreflight(report: PreflightReport): string {
  const lines = report.checks.map((c) => {
    const mark = c.ok ? 'ok  ' : c.severity === 'required' ? 'FAIL' : 'warn';
    return `${mark}  ${c.name.padEnd(24)} ${c.detail}${c.fix ? `\n      → ${c.fix}` : ''}`;
  });
  const failed = report.checks.filter((c) => !c.ok && c.severity === 'required').map((c) => c.name);
  const degraded = report.checks.filter((c) => !c.ok && c.severity === 'advisory').map((c) => c.name.replace(/^feature:/, ''));
  if (!report.ok) lines.push(`preflight: missing: ${failed.join(', ')}${degraded.length ? `; also degraded: ${degraded.join(', ')}` : ''}`);
  else if (degraded.length) lines.push(`preflight: this node can run kpr, degraded: ${degraded.join(', ')} (see the warn rows: what falls back, what is lost)`);
  else lines.push('preflight: this node can run kpr; every kernel feature is active');
  return lines.join('\n') + '\n';
}
