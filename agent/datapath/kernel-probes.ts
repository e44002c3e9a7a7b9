/**
 * The probes behind the kernel feature registry (kernel-features.ts): each
 * asks the running kernel directly, never its version. Run once at agent
 * start and by `kpr preflight`, so both report the same.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import {
  BPF_ATTACH_TYPE,
  BPF_MAP_TYPE,
  BpfIterator,
  BpfObject,
  currentNetnsCookie,
  setLibbpfLogger,
  probeBatchLookup,
  probeCgroupAttachType,
  probeMapType,
  tcxSupported,
} from '../../native/index.js';
import { DISABLE_ENV, FAIL_ENV, KernelFeatures, parseFeatureList, type KernelFeature, type ProbeResult } from './kernel-features.js';

export const BTF_PATH = '/sys/kernel/btf/vmlinux';
export const SOCK_TERM_OBJECT = 'kpr_sock_term.bpf.o';

export interface ProbeOptions {
  /** The cgroup the socket hooks attach to (attach types are queried on it). */
  cgroupPath: string;
  /** The datapath object; kpr_sock_term.bpf.o is found beside it. */
  bpfObject: string;
  /** Trial-load kpr_sock_term.bpf.o (preflight); the agent's loader probes it by loading it for real. */
  trialLoadSockTerm?: boolean;
  env?: NodeJS.ProcessEnv;
  btfPath?: string;
}

function both(a: ProbeResult, b: ProbeResult): ProbeResult {
  return a.present && b.present ? { present: true, detail: `${a.detail}; ${b.detail}` } : { present: false, detail: a.present ? b.detail : a.detail };
}

/** SO_NETNS_COOKIE: answered on 5.14+, ENOPROTOOPT before. */
export function probeNetnsCookieSockopt(): ProbeResult {
  try {
    currentNetnsCookie();
    return { present: true, detail: 'getsockopt SO_NETNS_COOKIE answered' };
  } catch (err) {
    return { present: false, detail: (err as Error).message };
  }
}

/**
 * Loads kpr_sock_term.bpf.o (maps not pinned) and attaches its UDP iterator,
 * then closes both. libbpf's messages meanwhile are kept for the detail (the
 * unresolved kfunc says more than EINVAL); the libbpf logger is left unset.
 */
export function trialLoadSockTerm(file: string): ProbeResult {
  if (!existsSync(file)) return { present: false, detail: `${file} not found` };
  let obj: BpfObject | undefined;
  const warnings: string[] = [];
  setLibbpfLogger((level, msg) => {
    if (level === 'warn') warnings.push(msg.trim());
  });
  try {
    obj = BpfObject.open(file);
    obj.load();
    BpfIterator.attach(obj.program('kpr_sock_term')).close();
    return { present: true, detail: `${path.basename(file)} loads (bpf_sock_destroy resolved)` };
  } catch (err) {
    const why = warnings.find((w) => /extern|ksym|kfunc/.test(w));
    return { present: false, detail: `${path.basename(file)} does not load: ${(err as Error).message}${why ? ` (libbpf: ${why})` : ''}` };
  } finally {
    obj?.close();
    setLibbpfLogger(null);
  }
}

const PROBES: Record<Exclude<KernelFeature, 'bpf-sock-destroy'>, (o: ProbeOptions) => ProbeResult> = {
  'netns-cookie-sockopt': () => probeNetnsCookieSockopt(),
  tcx: () => {
    try {
      return tcxSupported()
        ? { present: true, detail: 'tcx ingress of lo can be queried' }
        : { present: false, detail: 'bpf_prog_query tcx ingress of lo refused (no tcx attach type)' };
    } catch (err) {
      return { present: false, detail: (err as Error).message };
    }
  },
  'batch-map-ops': () => probeBatchLookup(),
  'cgroup-recvmsg': (o) =>
    both(
      probeCgroupAttachType(o.cgroupPath, BPF_ATTACH_TYPE.CGROUP_UDP4_RECVMSG, 'recvmsg4'),
      probeCgroupAttachType(o.cgroupPath, BPF_ATTACH_TYPE.CGROUP_UDP6_RECVMSG, 'recvmsg6'),
    ),
  'cgroup-getpeername': (o) =>
    both(
      probeCgroupAttachType(o.cgroupPath, BPF_ATTACH_TYPE.CGROUP_INET4_GETPEERNAME, 'getpeername4'),
      probeCgroupAttachType(o.cgroupPath, BPF_ATTACH_TYPE.CGROUP_INET6_GETPEERNAME, 'getpeername6'),
    ),
  'lru-hash': () => probeMapType(BPF_MAP_TYPE.LRU_HASH, 'LRU hash'),
  btf: (o) => {
    const p = o.btfPath ?? BTF_PATH;
    return existsSync(p) ? { present: true, detail: `${p} present` } : { present: false, detail: `${p} missing` };
  },
};

export interface ProbedFeatures {
  features: KernelFeatures;
  /** Names in the environment variables that are no feature (worth a warning). */
  unknownNames: string[];
}

/**
 * Probes every feature once. Features named in KPR_DISABLE_KERNEL_FEATURES
 * are reported absent without probing; bpf_sock_destroy is left "not probed"
 * unless `trialLoadSockTerm` (the loader records it when it loads the object).
 */
export function probeKernelFeatures(opts: ProbeOptions): ProbedFeatures {
  const env = opts.env ?? process.env;
  const disabled = parseFeatureList(env[DISABLE_ENV]);
  const failing = parseFeatureList(env[FAIL_ENV]);
  const results: Partial<Record<KernelFeature, ProbeResult>> = {};
  const off: ProbeResult = { present: false, detail: `disabled by ${DISABLE_ENV}` };
  for (const [name, probe] of Object.entries(PROBES) as Array<[KernelFeature, (o: ProbeOptions) => ProbeResult]>) {
    results[name] = disabled.features.has(name) ? off : probe(opts);
  }
  if (disabled.features.has('bpf-sock-destroy')) results['bpf-sock-destroy'] = off;
  else if (opts.trialLoadSockTerm) results['bpf-sock-destroy'] = trialLoadSockTerm(path.join(path.dirname(opts.bpfObject), SOCK_TERM_OBJECT));
  return { features: new KernelFeatures(results, failing.features), unknownNames: [...disabled.unknown, ...failing.unknown] };
}
